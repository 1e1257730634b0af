//! The hermes user's path and the operator's hold on a running gateway (issue 41): a profile's own `config.yaml`,
//! settings that reach a running gateway, a dashboard token that outlives a restart, an operator's stop that is no
//! failure of the task, one run number everywhere, did-you-mean, and a healthy idle gateway's host.

use std::time::Duration;

use crate::support::{Home, require_docker, wait_until};

fn status_of(home: &Home, id: &str) -> String {
    home.json(&["kanban", "show", id])["task"]["status"].as_str().unwrap_or_default().to_owned()
}

fn worker_log(home: &Home, id: &str) -> String {
    std::fs::read_to_string(home.path().join("kanban").join("logs").join(format!("{id}.log"))).unwrap_or_default()
}

fn create(home: &Home, assignee: &str, command: &str) -> String {
    home.json(&["kanban", "create", "t", "--assignee", assignee, "--command", command])["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A second profile of `home` (its containers removed at the end, by their exact profile label).
struct OtherProfile<'a> {
    home: &'a Home,
    name: String,
}

impl<'a> OtherProfile<'a> {
    fn new(home: &'a Home) -> Self {
        let name = format!("{}o", home.profile);
        home.ok(&["profile", "create", &name]);
        Self { home, name }
    }
}

impl Drop for OtherProfile<'_> {
    fn drop(&mut self) {
        let label = format!("label=hermes-profile={}", self.name);
        let ids = crate::support::ids(&self.home.docker(&["ps", "-aq", "--no-trunc", "--filter", &label]));
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f"];
            args.extend(ids.iter().map(String::as_str));
            self.home.docker(&args);
        }
    }
}

/// hermes keeps a profile's settings in `profiles/<name>/config.yaml`: berth reads it between the home's file and the
/// environment, says where a value came from, and a task of that profile gets its sandbox from it whoever dispatches;
/// another profile's task on the same dispatch does not.
#[test]
fn a_profiles_own_config_yaml_drives_its_sandbox_and_no_other_profiles() {
    require_docker();
    let home = Home::new();
    let other = OtherProfile::new(&home);
    let file = home.path().join("profiles").join(&home.profile).join("config.yaml");
    std::fs::write(&file, "terminal:\n  docker_network: false\n  docker_env:\n    LOCKED: 'by-profile'\n").unwrap();
    home.ok(&["config", "set", "terminal.docker_env", r#"{"LOCKED":"by-home"}"#]);

    let got = home.json(&["config", "get", "terminal.docker_network"]);
    assert_eq!(got["value"], false, "{got}");
    assert_eq!(got["source"], "file", "{got}");
    assert_eq!(got["source_detail"], file.display().to_string(), "{got}");
    let theirs = home.json(&["-p", &other.name, "config", "get", "terminal.docker_network"]);
    assert_eq!((theirs["value"].clone(), theirs["source"].clone()), (true.into(), "default".into()), "{theirs}");
    let listed = home.ok(&["config", "ls"]);
    assert!(listed.contains(&format!("file {}", file.display())), "{listed}");
    // `config set` writes the home's file, and says the profile's own wins for this profile.
    let out = home.run(&["config", "set", "terminal.docker_network", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("wins over the home's file"), "{err}");

    // One dispatch, as the locked profile, starts both tasks.
    let probe = "ls /sys/class/net | tr '\\n' ' '; echo; echo LOCKED=$LOCKED";
    let mine = create(&home, &home.profile, probe);
    let theirs = create(&home, &other.name, probe);
    home.ok(&["kanban", "dispatch"]);
    for id in [&mine, &theirs] {
        wait_until(&format!("{id} to finish"), Duration::from_secs(60), || {
            let s = status_of(&home, id);
            (s != "running" && s != "ready").then_some(s)
        });
        assert_eq!(status_of(&home, id), "done", "{}", worker_log(&home, id));
    }
    let (locked, open) = (worker_log(&home, &mine), worker_log(&home, &theirs));
    assert!(locked.contains("LOCKED=by-profile") && !locked.contains("eth0"), "{locked}");
    assert!(open.contains("LOCKED=by-home") && open.contains("eth0"), "{open}");

    // A profile file that cannot be read fails its tasks' starts with the reason; it never runs on the home's.
    std::fs::write(&file, "terminal: [unclosed\n").unwrap();
    let out = home.run(&["config", "get", "terminal.docker_network"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&file.display().to_string()));
    let blocked = create_as(&home, &other.name, &home.profile, "true");
    let report = home.json(&["-p", &other.name, "kanban", "dispatch"]);
    assert!(report.to_string().contains(&file.display().to_string()), "{report}");
    assert_ne!(status_of_as(&home, &other.name, &blocked), "done");
}

fn create_as(home: &Home, profile: &str, assignee: &str, command: &str) -> String {
    home.json(&["-p", profile, "kanban", "create", "t", "--assignee", assignee, "--command", command])["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn status_of_as(home: &Home, profile: &str, id: &str) -> String {
    home.json(&["-p", profile, "kanban", "show", id])["task"]["status"].as_str().unwrap_or_default().to_owned()
}

fn running(home: &Home) -> usize {
    home.json(&["kanban", "ls", "--status", "running"]).as_array().map_or(0, Vec::len)
}

/// `config set kanban.max_in_progress` reaches a running gateway within a few seconds, said in its log and in
/// `gateway status`; a config file that stops reading keeps the settings it had, said in one line.
#[test]
fn config_set_reaches_a_running_gateway_and_a_bad_file_keeps_the_old_settings() {
    let home = Home::new();
    home.ok(&["config", "set", "kanban.max_in_progress", "1"]);
    home.ok(&["config", "set", "kanban.worker_command", "sleep 60"]);
    let gw = crate::support::Gateway::start(&home, &["-c", "kanban.dispatch_interval_seconds=3600"]);
    let read_at = home.gateway_status()["settings_read_at"].clone();
    assert!(read_at.is_string(), "{}", home.gateway_status());
    let ids: Vec<String> = (0..4).map(|_| create(&home, &home.profile, "")).collect();
    wait_until("one task running under the cap of 1", Duration::from_secs(10), || running(&home) == 1);

    let set = std::time::Instant::now();
    home.ok(&["config", "set", "kanban.max_in_progress", "3"]);
    wait_until("three running under the new cap of 3", Duration::from_secs(5), || running(&home) == 3);
    let took = set.elapsed();
    assert!(took < Duration::from_secs(5), "{took:?}");
    let log = gw.stderr();
    assert!(log.contains("kanban.max_in_progress 1 -> 3"), "{log}");
    let status = home.gateway_status();
    assert_ne!(status["settings_read_at"], read_at, "{status}");
    assert!(status["settings_error"].is_null(), "{status}");
    let text = home.ok(&["gateway", "status"]);
    assert!(text.contains("settings:     read at"), "{text}");

    // A file that no longer reads: the old settings stay (cap 3: the fourth task waits), said once.
    let config = home.path().join("config.yaml");
    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{good}kanban: [unclosed\n")).unwrap();
    wait_until("the refusal in the log", Duration::from_secs(5), || gw.stderr().contains("settings not applied"));
    let status = home.gateway_status();
    let why = status["settings_error"].as_str().unwrap_or_default().to_owned();
    assert!(why.contains("config.yaml"), "{status}");
    let text = home.ok(&["gateway", "status"]);
    assert!(text.contains("not applied:"), "{text}");
    let refusals: Vec<String> =
        gw.stderr().lines().filter(|l| l.contains("settings not applied")).map(String::from).collect();
    assert_eq!(refusals.len(), 1, "one line: {refusals:?}");
    assert!(refusals[0].contains("keeping those read at"), "{refusals:?}");

    // Fixed again, to a lower cap: nothing more starts, nothing is stopped, and the error is gone.
    std::fs::write(&config, good.replace("max_in_progress: 3", "max_in_progress: 2")).unwrap();
    wait_until("the fixed file applied", Duration::from_secs(5), || home.gateway_status()["settings_error"].is_null());
    assert!(gw.stderr().contains("kanban.max_in_progress 3 -> 2"), "{}", gw.stderr());
    // The tick after the bad change ran on the settings kept (cap 3): the fourth task never started.
    assert_eq!(running(&home), 3);
    let waiting: Vec<&String> = ids.iter().filter(|id| status_of(&home, id) == "ready").collect();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(home.json(&["kanban", "show", waiting[0]])["runs"].as_array().map(Vec::len), Some(0));
    for id in &ids {
        if status_of(&home, id) == "running" {
            home.ok(&["kanban", "complete", id]);
        }
    }
    drop(gw);
}

/// The dashboard's token is kept in the home across gateway restarts (0600), and replaced only on request.
#[test]
fn the_dashboard_token_outlives_a_gateway_restart_and_rotates_on_request() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let dash = format!("kanban.dashboard_port={port}");
    let base = format!("http://127.0.0.1:{port}");
    let get = |token: &str| {
        crate::dashboard::http(&base, "GET", "/api/profiles", &[("authorization", &format!("Bearer {token}"))], "").0
    };
    let gw = crate::support::Gateway::start(&home, &["-c", &dash]);
    let file = home.path().join("dashboard.token");
    let token = std::fs::read_to_string(&file).unwrap();
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    // A first read past its deadline on a loaded machine is a 503 (`bounded.rs`); the next one waits longer.
    wait_until("the dashboard", Duration::from_secs(10), || get(&token) == 200);
    assert_eq!(home.ok(&["gateway", "token"]).trim(), token);
    let (code, _, log) = gw.stop();
    assert_eq!(code, Some(0), "{log}");

    let gw = crate::support::Gateway::start(&home, &["-c", &dash]);
    wait_until("the dashboard again", Duration::from_secs(10), || get(&token) == 200);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), token, "the same token after the restart");
    assert!(gw.stderr().contains(&format!("?token={token}")), "{}", gw.stderr());

    let rotated = home.json(&["gateway", "token", "--rotate"]);
    let new = rotated["token"].as_str().unwrap().to_owned();
    assert_ne!(new, token);
    assert_eq!(rotated["rotated"], true);
    wait_until("the old token refused", Duration::from_secs(5), || get(&token) == 401);
    wait_until("the new token taken", Duration::from_secs(10), || get(&new) == 200);
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    drop(gw);
}

/// An operator's stop of a running task's sandbox (`berth sandbox stop`, then `docker stop`) counts no failure and
/// does not block the task: each run ends `sandbox_stopped`, the task goes back to ready, and its next run starts
/// the sandbox again and finishes.
#[test]
fn an_operators_stop_of_a_running_tasks_sandbox_counts_no_failure() {
    require_docker();
    let home = Home::new();
    home.ok(&["config", "set", "kanban.failure_limit", "1"]);
    let gw = crate::support::Gateway::start(&home, &[]);
    // The command prints `go2` (the log shows the command itself as `go$((1+1))`).
    let id = create(&home, &home.profile, "echo go$((1+1)); [ -f /workspace/twice ] && exit 0; sleep 60");
    let run_started = |n: usize| {
        wait_until(&format!("run {n} started"), Duration::from_secs(60), || {
            status_of(&home, &id) == "running" && worker_log(&home, &id).matches("go2\n").count() >= n
        });
    };
    run_started(1);
    home.ok(&["sandbox", "stop", "--task", &id]);
    run_started(2);
    let show = home.json(&["kanban", "show", &id]);
    assert_eq!(show["runs"][0]["outcome"], "sandbox_stopped", "{show}");
    assert_eq!(show["task"]["consecutive_failures"], 0, "{show}");

    // Stopped from outside berth; the next run finds the mark and finishes.
    let container = home.containers().first().cloned().expect("the task's sandbox");
    let workspace = home.json(&["kanban", "show", &id])["workspace"].as_str().expect("its workspace").to_owned();
    std::fs::write(std::path::Path::new(&workspace).join("twice"), "").unwrap();
    assert!(home.docker(&["stop", &container]).status.success());
    wait_until("the task done", Duration::from_secs(60), || status_of(&home, &id) == "done");
    let show = home.json(&["kanban", "show", &id]);
    let outcomes: Vec<String> =
        show["runs"].as_array().unwrap().iter().map(|r| r["outcome"].as_str().unwrap_or_default().to_owned()).collect();
    assert_eq!(outcomes, ["sandbox_stopped", "sandbox_stopped", "completed"], "{show}");
    assert_eq!(show["task"]["consecutive_failures"], 0, "{show}");
    let events = show.to_string();
    assert!(!events.contains("\"gave_up\"") && !events.contains("\"kind\":\"failed\""), "{show}");
    assert!(worker_log(&home, &id).contains("sandbox_stopped:"), "{}", worker_log(&home, &id));
    drop(gw);
}

/// One run number everywhere: `kanban logs --run` takes the id `kanban show` prints. A mistyped profile, board or
/// settings value gets the nearest name.
#[test]
fn a_typo_gets_did_you_mean_for_profiles_boards_and_values() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    home.ok(&["kanban", "board", "create", "ops"]);
    let refused = |args: &[&str], want: &str| {
        let out = home.run(args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    };
    refused(&["kanban", "create", "t", "--assignee", "alpah", "--command", "true"], "(did you mean alpha?)");
    refused(&["-p", "alpah", "run", "--", "true"], "(did you mean alpha?)");
    refused(&["kanban", "ls", "--board", "osp"], "(did you mean ops?)");
    refused(&["config", "set", "terminal.docker_network", "ture"], "(did you mean true?)");
    assert!(!std::fs::read_to_string(home.path().join("config.yaml")).unwrap_or_default().contains("ture"));
}

/// A healthy idle gateway's host stays alive well past the host timeout on every store: a gateway that ticks is
/// alive, whether or not its board needs heartbeats.
fn an_idle_gateways_host_stays_alive(home: Home) {
    home.ok(&["config", "set", "kanban.host_timeout_seconds", "2"]);
    home.ok(&["config", "set", "kanban.worker_command", "true"]);
    home.ok(&["config", "set", "kanban.worker_exit_outcome", "true"]);
    let gw = crate::support::Gateway::start(&home, &[]);
    let id = create(&home, &home.profile, "");
    wait_until("the task done", Duration::from_secs(20), || status_of(&home, &id) == "done");
    let idle_since = std::time::Instant::now();
    // Ten host timeouts of idleness, looked at all along.
    while idle_since.elapsed() < Duration::from_secs(20) {
        let v = home.json(&["status"]);
        let hosts = v["hosts"]["hosts"].as_array().cloned().unwrap_or_default();
        let this = v["hosts"]["this_host"].clone();
        let me: Vec<_> = hosts.iter().filter(|h| h["id"] == this).collect();
        assert_eq!(me.len(), 1, "{v}");
        assert_eq!(me[0]["alive"], true, "after {:?}: {v}", idle_since.elapsed());
        // scenario: the gateway stays idle, looked at once every host timeout
        std::thread::sleep(Duration::from_secs(2));
    }
    drop(gw);
}

on_both_stores!(an_idle_gateways_host_stays_alive);
