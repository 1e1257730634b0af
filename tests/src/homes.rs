//! Trust, second round (issue 23): two homes on one engine keep to their own sandboxes, a sandbox with a command
//! running is never recreated for drift, the home and what berth writes in it are private, and forwarded secrets a
//! task prints are masked in everything berth stores.

use std::io::Read;
use std::process::{Child, Output, Stdio};
use std::time::Duration;

use crate::support::{Home, require_docker, wait_until};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A second home running the same profile name as `first`.
fn twin(first: &Home) -> Home {
    let mut second = Home::new();
    second.profile = first.profile.clone();
    std::fs::create_dir_all(second.path().join("profiles").join(&second.profile)).unwrap();
    second
}

/// Starts `berth run --task TASK` of a command that waits for `/tmp/go` and prints `done`; returns it once it runs
/// inside its sandbox, with the sandbox's id.
fn start_waiting(home: &Home, task: &str) -> (Child, String) {
    let script = "until [ -e /tmp/go ]; do sleep 0.1; done; echo done";
    let child = home
        .cmd()
        .args(["run", "--task", task, "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut id = String::new();
    wait_until("the first command runs in its sandbox", Duration::from_secs(60), || {
        let Some(c) = home.containers().into_iter().next() else { return false };
        let top = home.docker(&["top", &c]);
        id = c;
        String::from_utf8_lossy(&top.stdout).contains("until")
    });
    (child, id)
}

/// Lets the waiting command finish and returns its exit code and stdout.
fn finish(home: &Home, mut child: Child, id: &str) -> (Option<i32>, String) {
    home.docker(&["exec", id, "touch", "/tmp/go"]);
    let status = child.wait().unwrap();
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    (status.code(), out)
}

fn listed_ids(home: &Home) -> Vec<String> {
    let v = home.json(&["sandbox", "ls"]);
    let rows = v.as_array().cloned().or_else(|| v["sandboxes"].as_array().cloned()).unwrap_or_default();
    rows.iter().filter_map(|r| r["id"].as_str().map(str::to_owned)).collect()
}

#[test]
fn two_homes_on_one_engine_never_touch_each_others_sandboxes() {
    require_docker();
    let a = Home::new();
    let b = twin(&a);
    let (child, id_a) = start_waiting(&a, "shared");
    // The same profile and task from another home, with other settings: its own sandbox, the first one untouched.
    let out = b.cmd().args(["run", "--task", "shared", "-c", "terminal.container_memory=300", "--", "true"]).output();
    let out = out.unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("config changed"), "the second home blamed drift: {}", stderr(&out));
    let (code, printed) = finish(&a, child, &id_a);
    assert_eq!((code, printed.trim()), (Some(0), "done"), "the first home's command was disturbed");
    let (in_a, in_b) = (listed_ids(&a), listed_ids(&b));
    assert_eq!(in_a.len(), 1, "home a lists {in_a:?}");
    assert_eq!(in_b.len(), 1, "home b lists {in_b:?}");
    assert!(id_a.starts_with(&in_a[0]) || in_a[0].starts_with(&id_a), "{in_a:?} vs {id_a}");
    assert_ne!(in_a, in_b);
    // Removing the task's sandbox in one home leaves the other's.
    b.ok(&["sandbox", "rm", "--task", "shared"]);
    assert_eq!(a.inspect(&id_a, "{{.State.Running}}"), "true");
}

#[test]
fn a_sandbox_with_a_command_running_is_not_recreated_for_drift() {
    require_docker();
    let home = Home::new();
    let (child, id) = start_waiting(&home, "busy");
    let out = home.cmd().args(["run", "--task", "busy", "-c", "terminal.container_memory=300", "--", "true"]).output();
    let out = out.unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("has a command running") && err.contains("memory_bytes"), "{err}");
    assert_eq!(err.trim().lines().filter(|l| l.starts_with("berth: ")).count(), 1, "{err}");
    let (code, printed) = finish(&home, child, &id);
    assert_eq!((code, printed.trim()), (Some(0), "done"));
    // Once it is idle, the drift is applied.
    let out = home.cmd().args(["run", "--task", "busy", "-c", "terminal.container_memory=300", "--", "true"]).output();
    let out = out.unwrap();
    assert!(out.status.success() && stderr(&out).contains("config changed"), "{}", stderr(&out));
}

/// The gateway's idle stop covers every profile of its home, each with its override, and neither another home's
/// sandbox nor an unlabelled (hermes-made) one of a profile this home does not have.
#[test]
fn idle_stop_covers_every_profile_of_the_home_with_its_override_and_no_other_home() {
    require_docker();
    let home = Home::new();
    let other = format!("{}q", home.profile);
    std::fs::create_dir_all(home.path().join("profiles").join(&other)).unwrap();
    let mut elsewhere = twin(&home);
    elsewhere.profile.clone_from(&other);
    std::fs::create_dir_all(elsewhere.path().join("profiles").join(&other)).unwrap();
    let ensure = |h: &Home, profile: &str, task: &str| {
        let v = h.json(&["-p", profile, "sandbox", "ensure", "--task", task]);
        v["id"].as_str().unwrap().to_owned()
    };
    let own = ensure(&home, &home.profile, "idle");
    let assignee = ensure(&home, &other, "idle");
    // Another task, so this test shows idle stop's reach whatever two homes did to one task's sandbox before.
    let foreign = ensure(&elsewhere, &other, "idle2");
    let stray_profile = format!("{}z", home.profile);
    let stray = plant_hermes_sandbox(&stray_profile);
    let _cleanup = RemoveOnDrop(vec![assignee.clone(), foreign.clone(), stray.clone()]);
    // Idle stop after 2 s for every profile but the gateway's own, whose override makes it an hour.
    let overrides = format!("terminal.docker_idle_stop_seconds_overrides={{\"{}\": 3600}}", home.profile);
    let settings =
        ["-c", "kanban.dispatch_in_gateway=false", "-c", "terminal.docker_idle_stop_seconds=2", "-c", &overrides];
    let gw = crate::support::Gateway::start(&home, &settings);
    let running = |id: &str| home.inspect(id, "{{.State.Running}}") == "true";
    wait_until("the other profile's idle sandbox to stop", Duration::from_secs(20), || !running(&assignee));
    let (_, _, log) = gw.stop();
    assert_eq!(home.inspect(&assignee, "{{.State.Status}}"), "exited", "stopped, not removed");
    assert!(running(&own), "the override of the gateway's own profile was ignored: {log}");
    assert!(running(&foreign), "another home's sandbox was stopped: {log}");
    assert!(running(&stray), "a hermes sandbox of a profile this home does not have was stopped: {log}");
}

/// A running container as hermes-agent makes one (its three labels, no berth label) under `profile`.
fn plant_hermes_sandbox(profile: &str) -> String {
    let labels = ["hermes-agent=1", "hermes-task-id=idle", &format!("hermes-profile={profile}")];
    let mut args = vec!["run", "-d", "--init"];
    for l in &labels {
        args.extend_from_slice(&["--label", l]);
    }
    args.extend_from_slice(&["berth-sandbox:latest", "sleep", "infinity"]);
    let out = crate::support::docker(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Removes the containers a test made under profiles its `Home`s do not clean up, however the test ends.
struct RemoveOnDrop(Vec<String>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let mut args = vec!["rm", "-f"];
        args.extend(self.0.iter().map(String::as_str));
        crate::support::docker(&args);
    }
}

/// Engine facts in `<home>/cache/` that were not recorded for this very engine are asked again (issue 23 item 10): a
/// "no cgroup limits" from another engine at the same endpoint must not make a sandbox without limits, a "storage-opt
/// supported" must not fail every create.
#[test]
fn cached_engine_facts_are_keyed_by_the_engine_not_the_endpoint() {
    require_docker();
    let home = Home::new();
    home.ok(&["sandbox", "ensure", "--task", "facts"]);
    home.ok(&["sandbox", "rm", "--task", "facts"]);
    let cache = home.path().join("cache");
    let cgroup = std::fs::read_dir(&cache)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("cgroup-limits-"))
        .expect("the cgroup answer is cached");
    let suffix = cgroup.trim_start_matches("cgroup-limits-");
    // What a berth that keyed by endpoint alone kept from an engine that once answered otherwise.
    std::fs::write(cache.join(&cgroup), "no").unwrap();
    std::fs::write(cache.join(format!("storage-opt-{suffix}")), "yes").unwrap();
    let id = home.json(&["sandbox", "ensure", "--task", "facts"])["id"].as_str().unwrap().to_owned();
    assert_eq!(home.inspect(&id, "{{.HostConfig.Memory}}"), (256 * 1024 * 1024).to_string(), "limits were dropped");
    assert_ne!(home.inspect(&id, "{{.HostConfig.PidsLimit}}"), "<no value>");
    // An answer recorded for this very engine is trusted while fresh, and asked again once older than an hour.
    home.ok(&["sandbox", "rm", "--task", "facts"]);
    let recorded = std::fs::read_to_string(cache.join(&cgroup)).unwrap();
    let (engine, answer) = recorded.trim().rsplit_once(' ').expect("`<engine> yes|no`");
    assert_eq!(answer, "yes", "{recorded}");
    std::fs::write(cache.join(&cgroup), format!("{engine} no")).unwrap();
    let id = home.json(&["sandbox", "ensure", "--task", "facts"])["id"].as_str().unwrap().to_owned();
    assert_eq!(home.inspect(&id, "{{.HostConfig.Memory}}"), "0", "a fresh answer for this engine is used");
    home.ok(&["sandbox", "rm", "--task", "facts"]);
    let old = std::time::SystemTime::now() - Duration::from_secs(2 * 3600);
    std::fs::File::options().write(true).open(cache.join(&cgroup)).unwrap().set_modified(old).unwrap();
    let id = home.json(&["sandbox", "ensure", "--task", "facts"])["id"].as_str().unwrap().to_owned();
    assert_eq!(home.inspect(&id, "{{.HostConfig.Memory}}"), (256 * 1024 * 1024).to_string(), "an old answer was used");
    let xfs = crate::support::docker(&["info", "--format", "{{.DriverStatus}}"]);
    if !String::from_utf8_lossy(&xfs.stdout).contains("xfs") {
        let out = home.run(&["-c", "terminal.container_disk=512", "sandbox", "ensure", "--task", "disk"]);
        assert!(out.status.success(), "a stale storage-opt answer failed the create: {}", stderr(&out));
    }
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

/// A forwarded secret a task prints is masked in its worker log, the board's result and `kanban show`; the home is
/// made private (an older berth's 0755 home included) and every file berth writes in it is 0600.
#[test]
fn printed_secrets_are_masked_and_the_home_is_private() {
    require_docker();
    let home = Home::new();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let secret = "pr1nted-s3cret-value";
    let command = "echo \"token=$MY_SECRET\"; echo \"$MY_SECRET\" >&2; echo \"last $MY_SECRET\"";
    let made = home.json(&["kanban", "create", "sec", "--assignee", &home.profile, "--command", command]);
    let id = made["id"].as_str().unwrap().to_owned();
    let out = home
        .cmd()
        .env("MY_SECRET", secret)
        .env("TERMINAL_DOCKER_FORWARD_ENV", "[\"MY_SECRET\"]")
        .args(["kanban", "dispatch", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    wait_until("the task to finish", Duration::from_secs(120), || {
        home.json(&["kanban", "show", &id])["task"]["status"].as_str() == Some("done")
    });
    let log_path = home.path().join("kanban").join("logs").join(format!("{id}.log"));
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("token=***") && !log.contains(secret), "the worker log:\n{log}");
    let shown = home.json(&["kanban", "show", &id]);
    assert_eq!(shown["task"]["result"].as_str(), Some("last ***"), "{shown}");
    let text = home.ok(&["kanban", "show", &id]);
    assert!(!text.contains(secret), "kanban show:\n{text}");
    assert_eq!(mode(home.path()), 0o700, "the home");
    assert_eq!(mode(log_path.parent().unwrap()), 0o700, "the log folder");
    for file in [log_path, home.path().join("berth-kanban.db")] {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    for entry in std::fs::read_dir(home.path().join("cache")).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode(&path), 0o600, "{}", path.display());
    }
}
