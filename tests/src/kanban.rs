//! The board through the real binary: the dispatch report (upstream's eleven keys and text), caps, dry runs,
//! concurrent dispatchers, crashed workers, corrupt databases, and the built-in worker on real sandboxes.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::Duration;

use crate::support::{Home, require_docker, wait_until};

const ELEVEN: [&str; 11] = [
    "reclaimed",
    "crashed",
    "timed_out",
    "stale",
    "auto_blocked",
    "promoted",
    "spawned",
    "skipped_unassigned",
    "skipped_nonspawnable",
    "skipped_per_profile_capped",
    "auto_assigned_default",
];

/// Creates a task; one without `--command` gets `true` (the built-in worker refuses a command-less task at create,
/// and these tests dispatch with an external `kanban.worker_command` or not at all).
fn create(home: &Home, args: &[&str]) -> String {
    let mut all = vec!["kanban", "create"];
    all.extend_from_slice(args);
    if !args.contains(&"--command") {
        all.extend(["--command", "true"]);
    }
    home.json(&all)["id"].as_str().unwrap().to_owned()
}

fn profiles(home: &Home, names: &[&str]) {
    for n in names {
        home.ok(&["profile", "create", n]);
    }
}

fn status(home: &Home, id: &str) -> String {
    home.json(&["kanban", "show", id])["task"]["status"].as_str().unwrap().to_owned()
}

#[test]
fn dispatch_json_keeps_the_eleven_upstream_keys_in_order() {
    let home = Home::new();
    let v = home.json(&["kanban", "dispatch", "--dry-run"]);
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(&keys[..11], ELEVEN);
    assert!(v["reclaimed"].is_u64() && v["promoted"].is_u64() && v["spawned"].is_array());
}

#[test]
fn seed_example_five_alpha_three_beta_cap_two() {
    seed_example_five_alpha_three_beta_cap_two_on(Home::new());
}

fn seed_example_five_alpha_three_beta_cap_two_on(home: Home) {
    profiles(&home, &["alpha", "beta"]);
    for _ in 0..5 {
        create(&home, &["a", "--assignee", "alpha"]);
    }
    for _ in 0..3 {
        create(&home, &["b", "--assignee", "beta"]);
    }
    let v = home.json(&["-c", "kanban.max_in_progress_per_profile=2", "kanban", "dispatch", "--dry-run"]);
    let count = |key: &str, who: &str| v[key].as_array().unwrap().iter().filter(|e| e["assignee"] == who).count();
    assert_eq!((count("spawned", "alpha"), count("spawned", "beta")), (2, 2));
    assert_eq!((count("skipped_per_profile_capped", "alpha"), count("skipped_per_profile_capped", "beta")), (3, 1));
    assert_eq!(v["spawned"][0]["workspace"], "");
    let text = home.ok(&["-c", "kanban.max_in_progress_per_profile=2", "kanban", "dispatch", "--dry-run"]);
    // Worded as what a tick would do: nothing ran.
    assert!(text.starts_with("Dry run: nothing was written, started or signalled"), "{text}");
    assert!(text.contains("\nReclaimed:    0\nCrashed:      0\n"), "{text}");
    assert!(text.contains("Would spawn:  4\n  - t_"), "{text}");
    assert!(!text.contains("Spawned") && !text.contains("(dry)"), "{text}");
    assert!(text.contains("Deferred (alpha at per-profile cap, 2 running): t_"), "{text}");
    let v = home.json(&["kanban", "dispatch", "--dry-run"]);
    assert_eq!(v["spawned"].as_array().unwrap().len(), 8, "no cap: all eight");
}

#[test]
fn default_assignee_unassigned_and_nonspawnable() {
    default_assignee_unassigned_and_nonspawnable_on(Home::new());
}

fn default_assignee_unassigned_and_nonspawnable_on(home: Home) {
    let t = create(&home, &["unassigned"]);
    let lane = create(&home, &["lane", "--assignee", "orion-cc", "--allow-unknown-assignee"]);
    let v = home.json(&["kanban", "dispatch", "--dry-run"]);
    assert_eq!(v["skipped_unassigned"], serde_json::json!([t]));
    assert_eq!(v["skipped_nonspawnable"], serde_json::json!([lane]));
    let text = home.ok(&["kanban", "dispatch", "--dry-run"]);
    assert!(text.contains(&format!("Skipped (unassigned): {t}")));
    assert!(text.contains(&format!(
        "Skipped (assignee is no profile: a lane for someone else, or `berth profile create NAME`): {lane}"
    )));
    // A default assignee that is a profile routes the task; dry run writes nothing.
    let c = "kanban.default_assignee=default";
    let v = home.json(&["-c", c, "kanban", "dispatch", "--dry-run"]);
    assert_eq!(v["auto_assigned_default"], serde_json::json!([t]));
    assert_eq!(home.json(&["kanban", "show", &t])["task"]["assignee"], serde_json::Value::Null);
    let v = home.json(&["-c", c, "-c", "kanban.worker_command=sleep 30", "kanban", "dispatch"]);
    assert_eq!(v["auto_assigned_default"], serde_json::json!([t]));
    let show = home.json(&["kanban", "show", &t]);
    assert_eq!(show["task"]["assignee"], "default");
    let assigned: Vec<_> = show["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "assigned").collect();
    assert_eq!(assigned.len(), 1);
    assert_eq!(assigned[0]["payload"], serde_json::json!({"assignee": "default", "source": "kanban.default_assignee"}));
    stop_workers(&home);
}

/// Kills every worker pid a test started (external `sleep` workers).
fn stop_workers(home: &Home) {
    let tasks = home.json(&["kanban", "ls"]);
    for t in tasks.as_array().unwrap() {
        if let Some(pid) = t["worker_pid"].as_i64() {
            crate::support::signal_group(home, pid, rustix::process::Signal::KILL);
        }
    }
}

#[test]
fn explain_and_exact_task_dispatch() {
    explain_and_exact_task_dispatch_on(Home::new());
}

fn explain_and_exact_task_dispatch_on(home: Home) {
    profiles(&home, &["alpha"]);
    let a = create(&home, &["a", "--assignee", "alpha"]);
    let b = create(&home, &["b", "--assignee", "alpha"]);
    let blocked = create(&home, &["c", "--assignee", "alpha"]);
    home.ok(&["kanban", "block", &blocked]);
    let v = home.json(&["-c", "kanban.max_in_progress_per_profile=1", "kanban", "dispatch", "--dry-run", "--explain"]);
    let codes: BTreeMap<String, String> = v["explain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["task_id"].as_str().unwrap().into(), e["code"].as_str().unwrap().into()))
        .collect();
    assert_eq!(codes[&a], "spawn");
    assert_eq!(codes[&b], "skipped_per_profile_capped");
    let v = home.json(&["kanban", "dispatch", "--dry-run", "--task", &b]);
    assert_eq!(v["spawned"].as_array().unwrap().len(), 1);
    assert_eq!(v["spawned"][0]["task_id"], b.as_str());
    let v = home.json(&["kanban", "dispatch", "--dry-run", "--task", &blocked]);
    assert!(v["spawned"].as_array().unwrap().is_empty());
    assert_eq!(v["explain"][0]["code"], "not_ready");
    // The reason's text is as before the dispatcher moved into `domain` (byte-compatible report).
    assert_eq!(v["explain"][0]["detail"], "not_ready: the task is blocked");
    assert_eq!(home.run(&["kanban", "dispatch", "--task", "t_nope"]).status.code(), Some(2));
    home.ok(&["kanban", "board", "create", "other"]);
    let out = home.run(&["kanban", "dispatch", "--task", &b, "--board", "other"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("berth: task {b} is on board \"default\", not \"other\"")), "{err}");
    let text = home.ok(&["-c", "kanban.max_in_progress_per_profile=1", "kanban", "dispatch", "--dry-run", "--explain"]);
    assert!(text.contains("TASK") && text.contains("skipped_per_profile_capped"));
}

#[test]
fn dry_run_leaves_the_database_byte_identical() {
    let home = Home::new();
    profiles(&home, &["alpha"]);
    for _ in 0..3 {
        create(&home, &["a", "--assignee", "alpha"]);
    }
    create(&home, &["u"]);
    let db = home.path().join("berth-kanban.db");
    let digest = || {
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(home.path())
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name().to_string_lossy().starts_with("berth-kanban.db")
                    && !e.file_name().to_string_lossy().ends_with("-shm")
            })
            .map(|e| (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap()))
            .filter(|(_, b)| !b.is_empty())
            .collect();
        files.sort();
        files.into_iter().map(|(n, b)| format!("{n}:{}", domain::sha256::hex_digest(&b))).collect::<Vec<_>>()
    };
    let before = digest();
    assert!(db.exists());
    home.json(&[
        "-c",
        "kanban.default_assignee=alpha",
        "-c",
        "kanban.max_in_progress_per_profile=1",
        "kanban",
        "dispatch",
        "--dry-run",
        "--explain",
    ]);
    home.ok(&["kanban", "dispatch", "--dry-run"]);
    assert_eq!(digest(), before);
}

#[test]
fn a_crashed_worker_is_requeued_then_blocked_at_the_failure_limit() {
    a_crashed_worker_is_requeued_then_blocked_at_the_failure_limit_on(Home::new());
}

fn a_crashed_worker_is_requeued_then_blocked_at_the_failure_limit_on(home: Home) {
    profiles(&home, &["alpha"]);
    let id = create(&home, &["crashy", "--assignee", "alpha"]);
    let c = ["-c", "kanban.worker_command=sleep 300"];
    // SIGKILL the worker's group until it is gone (or only a zombie): a worker caught between two execs (berth
    // execs `sh`, which execs the command) shows no environment for an instant, and `signal_group` then sends
    // nothing, so one signal is not enough.
    let kill_worker = |home: &Home| {
        let pid = home.json(&["kanban", "show", &id])["task"]["worker_pid"].as_i64().expect("a worker pid");
        let running = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| !s.contains(") Z ") && !s.contains(") X "))
        };
        crate::support::wait_until("the killed worker to exit", Duration::from_secs(10), || {
            crate::support::signal_group(home, pid, rustix::process::Signal::KILL);
            !running()
        });
    };
    let first = home.json(&[c[0], c[1], "kanban", "dispatch"]);
    assert_eq!(first["spawned"][0]["task_id"], id.as_str());
    kill_worker(&home);
    // Crash 1 of 2: requeued; with capacity free the same tick starts it again.
    let second = home.json(&[c[0], c[1], "kanban", "dispatch"]);
    assert_eq!(second["crashed"], serde_json::json!([id]));
    assert!(second["auto_blocked"].as_array().unwrap().is_empty());
    assert_eq!(home.json(&["kanban", "show", &id])["task"]["consecutive_failures"], 1);
    kill_worker(&home);
    let third = home.json(&[c[0], c[1], "kanban", "dispatch"]);
    assert_eq!(third["crashed"], serde_json::json!([id]));
    assert_eq!(third["auto_blocked"], serde_json::json!([id]));
    assert_eq!(status(&home, &id), "blocked");
    let kinds: Vec<String> = home.json(&["kanban", "show", &id])["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(kinds.ends_with(&["crashed".into(), "gave_up".into()]), "{kinds:?}");
}

/// The workers of one tick wait at the launcher's gate until the tick recorded them: every worker's confirmation
/// comes after its `spawned` event, with the pid the dispatcher recorded; each worker made its own log and folder.
#[test]
fn workers_start_only_once_their_tick_recorded_them() {
    let home = Home::new();
    profiles(&home, &["alpha", "beta", "gamma"]);
    let ids: Vec<String> =
        (0..30).map(|i| create(&home, &["t", "--assignee", ["alpha", "beta", "gamma"][i % 3]])).collect();
    let v = home.json(&[
        "-c",
        "kanban.worker_command=true",
        "-c",
        "kanban.max_in_progress_per_profile=10",
        "kanban",
        "dispatch",
    ]);
    assert_eq!(v["spawned"].as_array().unwrap().len(), 30, "{v}");
    for id in &ids {
        let mut events = Vec::new();
        crate::support::wait_until("the worker's confirmation", Duration::from_secs(30), || {
            events = home.json(&["kanban", "show", id])["events"].as_array().unwrap().clone();
            events.iter().any(|e| e["kind"] == "confirmed")
        });
        let at =
            |kind: &str| events.iter().position(|e| e["kind"] == kind).unwrap_or_else(|| panic!("{kind}: {events:?}"));
        assert!(at("spawned") < at("confirmed"), "{id} confirmed before its tick recorded it: {events:?}");
        assert_eq!(events[at("spawned")]["payload"]["pid"], events[at("confirmed")]["payload"]["pid"], "{events:?}");
        // The dispatcher's record confirms the run, so the worker may still be starting: wait for its log.
        let log = home.path().join(format!("kanban/logs/{id}.log"));
        crate::support::wait_until(&format!("{id}'s worker making its log"), Duration::from_secs(30), || log.is_file());
    }
}

/// `kanban.worker_exit_outcome`: any program is a worker. Exit 0 completes its task with the last line of output as
/// the result; another code fails it (counted, requeued below the limit); a command that recorded its own outcome
/// first keeps it, whatever it exits with. Off (the default), a command that exits 0 without completing is a crash.
#[test]
fn with_worker_exit_outcome_a_commands_exit_status_is_its_tasks_outcome() {
    let home = Home::new();
    profiles(&home, &["alpha"]);
    let run = |on: bool, command: &str| -> (String, serde_json::Value) {
        let id = create(&home, &["t", "--assignee", "alpha"]);
        let on = format!("kanban.worker_exit_outcome={on}");
        let command = format!("kanban.worker_command={command}");
        let v = home.json(&["-c", &on, "-c", &command, "kanban", "dispatch"]);
        assert_eq!(v["spawned"][0]["task_id"], id.as_str(), "{v}");
        // The worker records the outcome before it exits.
        wait_until("the worker to exit", Duration::from_secs(30), || {
            let pid = home.json(&["kanban", "show", &id])["task"]["worker_pid"].as_i64();
            pid.is_none_or(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).map_or(true, |s| s.contains(") Z ")))
        });
        let shown = home.json(&["kanban", "show", &id]);
        (id, shown)
    };
    let runs = |v: &serde_json::Value| v["runs"].as_array().unwrap().clone();

    // The last line, whatever pieces it was written in.
    let (_, v) = run(true, "printf 'first\\nthe-'; sleep 0.3; printf 'result\\n'");
    assert_eq!(v["task"]["status"], "done", "{v}");
    assert_eq!(v["task"]["result"], "the-result", "{v}");
    assert_eq!(runs(&v)[0]["outcome"], "completed", "{v}");

    let bin = crate::support::berth_bin();
    let (id, v) = run(true, &format!("{} kanban complete {{task_id}} --result own; exit 1", bin.display()));
    assert_eq!((&v["task"]["status"], &v["task"]["result"]), (&"done".into(), &"own".into()), "{v}");
    assert_eq!(runs(&v).len(), 1, "{v}");
    let log = home.ok(&["kanban", "logs", &id]);
    assert!(log.contains("the command's exit is not the outcome"), "{log}");

    let (id, v) = run(true, "echo bad; exit 3");
    assert_eq!(v["task"]["status"], "ready", "failed once, below the limit: {v}");
    assert_eq!(v["task"]["consecutive_failures"], 1, "{v}");
    let last = runs(&v)[0].clone();
    assert_eq!((&last["outcome"], &last["exit_code"]), (&"failed".into(), &3.into()), "{v}");
    assert_eq!(last["error"], "command exited with 3", "{v}");
    home.ok(&["kanban", "archive", &id]);

    // A dispatch's `--failure-limit` is its workers' limit too: one failure blocks.
    let id = create(&home, &["t", "--assignee", "alpha"]);
    home.ok(&[
        "-c",
        "kanban.worker_exit_outcome=true",
        "-c",
        "kanban.worker_command=false",
        "kanban",
        "dispatch",
        "--failure-limit",
        "1",
    ]);
    wait_until("the failure blocking the task", Duration::from_secs(30), || status(&home, &id) == "blocked");

    let (id, v) = run(false, "true");
    assert_eq!(v["task"]["status"], "running", "off, the exit is not an outcome: {v}");
    // The next tick finds the worker gone without an outcome: a crash (at a limit of one, the task gives up).
    home.ok(&["-c", "kanban.failure_limit=1", "kanban", "dispatch"]);
    let v = home.json(&["kanban", "show", &id]);
    assert_eq!((&v["task"]["status"], &runs(&v)[0]["outcome"]), (&"blocked".into(), &"crashed".into()), "{v}");
}

/// A home with profile `alpha` whose tasks run under the runner: `kanban.worker_exit_outcome` on, the worker command
/// made from the home's path; the home and that path.
fn runner_home(command: impl FnOnce(&str) -> String) -> (Home, String) {
    let home = Home::new();
    profiles(&home, &["alpha"]);
    let dir = home.path().display().to_string();
    home.ok(&["config", "set", "kanban.worker_exit_outcome", "true"]);
    home.ok(&["config", "set", "kanban.worker_command", &command(&dir)]);
    (home, dir)
}

/// The home's runner (`berth worker runner`) runs `kanban.worker_exit_outcome` commands without a berth process per
/// task. It outlives a killed gateway and records what finishes meanwhile (nothing runs twice); a runner killed is
/// the kill of every task's worker it held: such a task's run crashes and runs again; a runner with nothing to do
/// leaves.
#[test]
fn the_runner_outlives_its_gateway_and_its_own_kill_is_its_tasks_workers_kill() {
    use rustix::process::Signal;
    // Each execution counts itself, then waits for its go file, then prints its result line.
    let (home, dir) = runner_home(|dir| {
        format!(
            "sh -c 'echo x >> {dir}/count-$0; while [ ! -e {dir}/go-$0 ]; do sleep 0.05; done; echo done-$0' {{task_id}}"
        )
    });
    let (a, b) = (create(&home, &["a", "--assignee", "alpha"]), create(&home, &["b", "--assignee", "alpha"]));
    let count = |id: &str| std::fs::read_to_string(format!("{dir}/count-{id}")).map_or(0, |s| s.lines().count());
    let go = |id: &str| std::fs::write(format!("{dir}/go-{id}"), "").unwrap();
    let runner = || crate::support::runner_of(&home);
    let gw = crate::support::Gateway::start(&home, &[]);
    wait_until("both commands running", Duration::from_secs(30), || count(&a) == 1 && count(&b) == 1);
    let first = runner().expect("a runner serves the home");
    let st = home.gateway_status();
    assert_eq!(st["runner_pid"], first, "gateway status names the runner: {st}");
    // No berth process a task: each run's worker is the runner's child (its script), not a `berth worker run`.
    for id in [&a, &b] {
        let pid = home.json(&["kanban", "show", id])["task"]["worker_pid"].as_i64().unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let parent: u32 = stat.rsplit_once(')').unwrap().1.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert_eq!(parent, first, "{id}'s worker {pid}: {stat}");
    }

    // The gateway dies; the runner records what finishes meanwhile, and it ran once.
    crate::support::signal(gw.pid(), Signal::KILL);
    drop(gw);
    go(&a);
    wait_until("a done with no gateway", Duration::from_secs(30), || status(&home, &a) == "done");
    let v = home.json(&["kanban", "show", &a]);
    assert_eq!((&v["task"]["result"], count(&a)), (&format!("done-{a}").into(), 1), "{v}");

    // The runner dies holding b: b's worker is gone once its command ends, and b runs again under a new runner.
    crate::support::signal(first, Signal::KILL);
    let gw = crate::support::Gateway::start(&home, &[]);
    go(&b);
    wait_until("b done again", Duration::from_secs(60), || status(&home, &b) == "done");
    let v = home.json(&["kanban", "show", &b]);
    let outcomes: Vec<_> = v["runs"].as_array().unwrap().iter().map(|r| r["outcome"].clone()).collect();
    assert_eq!(outcomes, ["crashed", "completed"], "{v}");
    assert_eq!((count(&b), count(&a)), (2, 1), "{v}");
    assert_ne!(runner(), Some(first));

    // Nothing left to do: the runner leaves (after 10 s idle).
    drop(gw);
    wait_until("the idle runner leaving", Duration::from_secs(30), || runner().is_none());
    let st = home.gateway_status();
    assert!(st["runner_pid"].is_null(), "no runner serves the home: {st}");
}

/// A gateway with nothing to dispatch never starts (or connects to) the home's runner, however many ticks it makes;
/// its first task does.
#[test]
fn an_idle_gateway_starts_no_runner() {
    let (home, _) = runner_home(|_| "true".to_owned());
    let socket = home.path().join("kanban/sockets/runner.sock");
    home.ok(&["kanban", "dispatch"]);
    let gw = crate::support::Gateway::start(&home, &["-c", "kanban.dispatch_interval_seconds=1"]);
    wait_until("three idle ticks", Duration::from_secs(30), || home.gateway_status()["ticks"].as_u64() >= Some(3));
    assert_eq!(crate::support::runner_of(&home), None, "an idle gateway started a runner");
    assert!(!socket.exists(), "an idle gateway made the runner's socket");
    // The same home's first task is the runner's: the check above could have seen one.
    let id = create(&home, &["a", "--assignee", "alpha"]);
    wait_until("the task done", Duration::from_secs(30), || status(&home, &id) == "done");
    assert!(socket.exists(), "the task's dispatch went through the runner");
    drop(gw);
}

/// A busy runner serves each dispatch with that dispatch's settings and environment, not those it started with: a
/// variable changed since reaches the command, a secret forwarded since is masked in the log and the result; and
/// its own lines start below a command's last line that has no newline (where `kanban logs --run` finds them).
#[test]
fn a_busy_runner_gives_each_dispatch_its_own_settings_and_environment() {
    let (home, _) = runner_home(|dir| {
        format!(
            "sh -c 'printf \"v=%s tok=%s\" \"$MYVAR\" \"$TOK\"; while [ ! -e {dir}/go-$0 ]; do sleep 0.05; done' {{task_id}}"
        )
    });
    let dispatch = |vars: &[(&str, &str)], extra: &[&str]| {
        let mut cmd = home.cmd();
        cmd.env_remove("TOK");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let out = cmd.args(extra).args(["kanban", "dispatch"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    // The first dispatch starts the runner and keeps it busy.
    let a = create(&home, &["a", "--assignee", "alpha"]);
    dispatch(&[("MYVAR", "one")], &[]);
    let log = |id: &str| std::fs::read_to_string(home.path().join(format!("kanban/logs/{id}.log"))).unwrap_or_default();
    wait_until("a's command running", Duration::from_secs(30), || log(&a).contains("v=one"));
    let runner = crate::support::runner_of(&home).expect("a runner");
    let b = create(&home, &["b", "--assignee", "alpha"]);
    dispatch(&[("MYVAR", "two"), ("TOK", "hunter2-secret")], &["-c", "terminal.docker_forward_env=[\"TOK\"]"]);
    for id in [&a, &b] {
        std::fs::write(home.path().join(format!("go-{id}")), "").unwrap();
        wait_until("the task done", Duration::from_secs(30), || status(&home, id) == "done");
    }
    assert_eq!(crate::support::runner_of(&home), Some(runner), "one runner served both dispatches");
    let v = home.json(&["kanban", "show", &b]);
    assert_eq!(v["task"]["result"], "v=two tok=***", "{v}");
    let text = log(&b);
    assert!(!text.contains("hunter2") && text.contains("v=two tok=***\n[berth worker "), "{text}");
    let first = v["runs"][0]["id"].to_string();
    let run = home.ok(&["kanban", "logs", &b, "--run", &first]);
    assert!(run.contains("v=two tok=***"), "{run}");
}

#[test]
fn spawn_failures_count_toward_the_failure_limit() {
    spawn_failures_count_toward_the_failure_limit_on(Home::new());
}

fn spawn_failures_count_toward_the_failure_limit_on(home: Home) {
    profiles(&home, &["alpha"]);
    // The second dispatch retries at once (no backoff between tries).
    home.ok(&["config", "set", "kanban.retry_backoff_seconds", "0"]);
    let id = create(&home, &["x", "--assignee", "alpha"]);
    // A home that cannot hold logs makes every spawn fail.
    std::fs::create_dir_all(home.path().join("kanban")).unwrap();
    std::fs::write(home.path().join("kanban/logs"), b"not a directory").unwrap();
    let v = home.json(&["kanban", "dispatch"]);
    assert_eq!(v["spawn_failed"][0]["task_id"], id.as_str());
    assert_eq!(status(&home, &id), "ready");
    let v = home.json(&["kanban", "dispatch"]);
    assert_eq!(v["auto_blocked"], serde_json::json!([id]));
    assert_eq!(status(&home, &id), "blocked");
}

/// A worker that cannot open its own log (a directory in its place) or make its working folder still confirms its
/// run and fails it with the reason, on the board, where `kanban show` gives it.
#[test]
fn a_worker_that_cannot_set_up_fails_its_run_with_the_reason() {
    a_worker_that_cannot_set_up_fails_its_run_with_the_reason_with(&[]);
}

/// The same for a task of the home's runner (`kanban.worker_exit_outcome`): its command never starts.
#[test]
fn a_runner_task_that_cannot_set_up_fails_its_run_with_the_reason() {
    a_worker_that_cannot_set_up_fails_its_run_with_the_reason_with(&[
        "-c",
        "kanban.worker_exit_outcome=true",
        "-c",
        "kanban.worker_command=touch started",
    ]);
}

/// Something other than a file at the runner's lock (a FIFO, whose open would wait for a writer) is an error to the
/// runner, which then does not start (the task falls back to `berth worker run` and is done), and no runner to
/// `gateway status`, which answers at once.
#[test]
fn a_runner_lock_that_is_not_a_file_hangs_nothing() {
    let (home, _) = runner_home(|_| "true".to_owned());
    std::fs::create_dir_all(home.path().join("kanban")).unwrap();
    let fifo = home.path().join("kanban/runner.lock");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let mut probe = home.cmd().args(["gateway", "status", "--json"]).stdout(Stdio::piped()).spawn().unwrap();
    let answered = crate::support::wait_exit(&mut probe, Duration::from_secs(10));
    assert!(answered.is_some(), "gateway status hung at a FIFO lock");
    let v: serde_json::Value = serde_json::from_reader(probe.stdout.take().unwrap()).unwrap();
    assert!(v["runner_pid"].is_null(), "{v}");
    let id = create(&home, &["x", "--assignee", "alpha"]);
    home.json(&["kanban", "dispatch"]);
    wait_until("the task done", Duration::from_secs(30), || status(&home, &id) == "done");
    assert_eq!(crate::support::runner_of(&home), None, "no runner is left waiting at the lock");
    let log = std::fs::read_to_string(home.path().join("kanban/logs/runner.log")).unwrap_or_default();
    assert!(log.contains("cannot open the runner's lock"), "{log}");
}

/// A process standing in for the runner's socket that never finishes a line but sends a byte a second holds a
/// dispatch for one answer's wait (5 s), not for as long as it drips (third attack, F5): the task then gets a
/// `berth worker run` and is done.
#[test]
fn a_runner_that_drips_bytes_holds_a_dispatch_for_one_answers_wait() {
    use std::io::Write;
    let (home, _) = runner_home(|_| "true".to_owned());
    let sock = home.path().join("kanban/sockets/runner.sock");
    std::fs::create_dir_all(sock.parent().unwrap()).unwrap();
    let fake = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dripping = std::sync::Arc::clone(&stop);
    let drip = std::thread::spawn(move || {
        let (mut conn, _) = fake.accept().unwrap();
        while !dripping.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = conn.write_all(b" ");
            // scenario: the drip, a byte a second, for up to 30 s.
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    let id = create(&home, &["x", "--assignee", "alpha"]);
    let mut dispatch = home.cmd().args(["kanban", "dispatch"]).stdout(Stdio::null()).spawn().unwrap();
    let ended = crate::support::wait_exit(&mut dispatch, Duration::from_secs(15));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    drip.join().unwrap();
    assert!(ended.is_some_and(|s| s.success()), "the dispatch waited on the drip: {ended:?}");
    wait_until("the task done", Duration::from_secs(30), || status(&home, &id) == "done");
}

/// A runner's command the shell reads oddly still ends in a reported exit, never in a script that died before its
/// report (which the board's crash check could take first): a lone reserved word is a name not found (127), a
/// syntax error is the shell's 2 before anything ran, each said on line 1 as `sh -c` says it.
#[test]
fn a_runner_command_the_shell_cannot_read_ends_with_the_shells_code() {
    let home = Home::new();
    profiles(&home, &["alpha"]);
    for (command, code, said) in [("fi", 127, "sh: 1: fi: not found"), ("echo hi )", 2, "Syntax error")] {
        let id = create(&home, &[command, "--assignee", "alpha"]);
        let template = format!("kanban.worker_command={command}");
        let settings = ["-c", "kanban.worker_exit_outcome=true", "-c", "kanban.failure_limit=1", "-c", &template];
        home.json(&[&settings[..], &["kanban", "dispatch"]].concat());
        crate::support::wait_until("the task blocked", Duration::from_secs(30), || status(&home, &id) == "blocked");
        let v = home.json(&["kanban", "show", &id]);
        let runs: Vec<_> =
            v["runs"].as_array().unwrap().iter().map(|r| (r["outcome"].clone(), r["exit_code"].clone())).collect();
        assert_eq!(runs, [("failed".into(), code.into())], "{command}: {v}");
        let log = home.ok(&["kanban", "logs", &id]);
        assert!(log.contains(said) && !log.lines().any(|l| l == "hi"), "{command}: {log}");
    }
    assert!(crate::support::runner_of(&home).is_some(), "the runner had the tasks");
}

fn a_worker_that_cannot_set_up_fails_its_run_with_the_reason_with(settings: &[&str]) {
    let home = Home::new();
    profiles(&home, &["alpha"]);
    let id = create(&home, &["x", "--assignee", "alpha"]);
    std::fs::create_dir_all(home.path().join(format!("kanban/logs/{id}.log"))).unwrap();
    home.json(&[settings, &["kanban", "dispatch"]].concat());
    let mut task = serde_json::Value::Null;
    crate::support::wait_until("the run's failure", Duration::from_secs(30), || {
        task = home.json(&["kanban", "show", &id]);
        task["task"]["consecutive_failures"] == 1
    });
    let events = task["events"].as_array().unwrap();
    let failed = events.iter().rev().find(|e| e["kind"] == "failed").unwrap_or_else(|| panic!("{events:?}"));
    let error = failed["payload"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("cannot open the worker log") && error.contains(&format!("{id}.log")), "{failed}");
    let ran = walk(home.path()).into_iter().any(|p| p.file_name().is_some_and(|n| n == "started"));
    assert!(!ran, "the command ran though its run failed to set up");
    if !settings.is_empty() {
        assert!(crate::support::runner_of(&home).is_some(), "the runner had the task");
    }
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn concurrent_dispatchers_claim_each_task_once_and_hold_the_caps() {
    concurrent_dispatchers_claim_each_task_once_and_hold_the_caps_on(Home::new());
}

fn concurrent_dispatchers_claim_each_task_once_and_hold_the_caps_on(home: Home) {
    profiles(&home, &["alpha", "beta"]);
    let mut ids = Vec::new();
    for i in 0..24 {
        ids.push(create(&home, &["t", "--assignee", ["alpha", "beta"][i % 2]]));
    }
    let dispatchers: Vec<_> = (0..10)
        .map(|_| {
            home.cmd()
                .args([
                    "-c",
                    "kanban.worker_command=sleep 60",
                    "-c",
                    "kanban.max_in_progress_per_profile=3",
                    "kanban",
                    "dispatch",
                    "--json",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut spawned = Vec::new();
    for d in dispatchers {
        let out = d.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        spawned.extend(v["spawned"].as_array().unwrap().iter().map(|s| s["task_id"].as_str().unwrap().to_owned()));
    }
    let unique: BTreeSet<&String> = spawned.iter().collect();
    assert_eq!(unique.len(), spawned.len(), "a task was spawned twice");
    assert_eq!(spawned.len(), 6, "3 alpha + 3 beta");
    let tasks = home.json(&["kanban", "ls", "--status", "running"]);
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for t in tasks.as_array().unwrap() {
        *per.entry(t["assignee"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    assert_eq!(per, BTreeMap::from([("alpha".into(), 3), ("beta".into(), 3)]));
    for id in &unique {
        let claims = home.json(&["kanban", "show", id])["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "claimed")
            .count();
        assert_eq!(claims, 1);
    }
    stop_workers(&home);
}

#[test]
fn task_lifecycle_commands_and_bad_input() {
    task_lifecycle_commands_and_bad_input_on(Home::new());
}

fn task_lifecycle_commands_and_bad_input_on(home: Home) {
    profiles(&home, &["alpha"]);
    let parent = create(&home, &["parent", "--assignee", "alpha"]);
    let child = create(&home, &["child", "--parent", &parent, "--priority", "5"]);
    assert_eq!(status(&home, &child), "todo");
    home.ok(&["kanban", "complete", &parent, "--result", "ok"]);
    assert_eq!(status(&home, &child), "ready");
    home.ok(&["kanban", "assign", &child, "beta", "--allow-unknown-assignee"]);
    home.ok(&["kanban", "block", &child, "--reason", "wait"]);
    home.ok(&["kanban", "unblock", &child]);
    home.ok(&["kanban", "archive", &child]);
    assert_eq!(status(&home, &child), "archived");
    for args in [
        &["kanban", "create", "x", "--command", "true", "--parent", "t_missing"][..],
        &["kanban", "create", "", "--command", "true"][..],
        &["kanban", "create", "x", "--command", "true", "--assignee", "a/b"][..],
        &["kanban", "create", "x", "--command", "true", "--board", "Not A Slug!"][..],
        &["kanban", "create", "x", "--command", "true", "--board", "nosuchboard"][..],
        &["kanban", "ls", "--status", "sideways"][..],
        &["kanban", "complete", &child][..],
        &["kanban", "reclaim", &parent][..],
        &["kanban", "show", "t_missing"][..],
    ] {
        let out = home.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    home.ok(&["kanban", "board", "create", "side"]);
    create(&home, &["on side", "--board", "side"]);
    assert_eq!(home.json(&["kanban", "ls", "--board", "side"]).as_array().unwrap().len(), 1);
    let boards = home.json(&["kanban", "board", "ls"]);
    assert_eq!(boards[0]["slug"], "default");
    let tail = home.ok(&["kanban", "tail", &parent]);
    assert!(tail.contains("created") && tail.contains("completed"));
}

#[test]
fn eight_real_tasks_in_sandboxes_with_a_cap_of_two() {
    require_docker();
    let home = Home::new();
    profiles(&home, &["alpha", "beta"]);
    // The tasks run under profiles alpha/beta; clean their containers up too.
    let _cleanup = ProfileContainers::new(&["alpha", "beta"], home.path());
    let mut ids = Vec::new();
    for i in 0..8 {
        ids.push(create(
            &home,
            &["job", "--assignee", ["alpha", "beta"][i % 2], "--command", "sleep 2; echo finished"],
        ));
    }
    let c = ["-c", "kanban.max_in_progress_per_profile=2"];
    let first = home.json(&[c[0], c[1], "kanban", "dispatch"]);
    assert_eq!(first["spawned"].as_array().unwrap().len(), 4);
    let started: BTreeSet<String> =
        first["spawned"].as_array().unwrap().iter().map(|s| s["task_id"].as_str().unwrap().to_owned()).collect();
    // Each running task gets its own sandbox.
    wait_until("the first wave to finish", Duration::from_secs(60), || {
        !started.iter().any(|id| status(&home, id) == "running")
    });
    for id in &started {
        let show = home.json(&["kanban", "show", id]);
        assert_eq!(show["task"]["status"], "done", "{show}");
        assert_eq!(show["task"]["result"], "finished");
        let kinds: Vec<&str> = show["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
        // The worker confirms its own run; the dispatcher's spawn record may land before or after that.
        let (spawned, confirmed) =
            (kinds.iter().position(|k| *k == "spawned"), kinds.iter().position(|k| *k == "confirmed"));
        assert!(spawned.is_some() && confirmed.is_some(), "{kinds:?}");
        let mut order: Vec<&str> = kinds.clone();
        order.retain(|k| *k != "spawned");
        assert_eq!(order, ["created", "claimed", "confirmed", "completed"]);
        assert_eq!(show["runs"][0]["outcome"], "completed");
    }
    let second = home.json(&[c[0], c[1], "kanban", "dispatch"]);
    assert_eq!(second["spawned"].as_array().unwrap().len(), 4);
    wait_until("the second wave to finish", Duration::from_secs(60), || {
        ids.iter().all(|id| status(&home, id) == "done")
    });
}

/// Removes, on drop, the containers of shared profile labels (alpha, beta) whose sandbox directories live under one
/// test's home, so a test cleans up what its workers made and nothing else.
pub struct ProfileContainers(Vec<String>, std::path::PathBuf);

impl ProfileContainers {
    pub fn new(profiles: &[&str], home: &std::path::Path) -> Self {
        Self(profiles.iter().map(|p| (*p).to_owned()).collect(), home.to_path_buf())
    }
}

impl Drop for ProfileContainers {
    fn drop(&mut self) {
        for profile in &self.0 {
            let out = crate::support::docker(&[
                "ps",
                "-aq",
                "--no-trunc",
                "--filter",
                &format!("label=hermes-profile={profile}"),
            ]);
            for id in crate::support::ids(&out) {
                let mounts = crate::support::inspect(&id, "{{range .Mounts}}{{.Source}} {{end}}");
                if mounts.contains(&self.1.display().to_string()) {
                    crate::support::docker(&["rm", "-f", &id]);
                }
            }
        }
    }
}

#[test]
fn archiving_a_running_task_stops_its_worker_and_removes_its_sandbox() {
    require_docker();
    let home = Home::new();
    profiles(&home, &["alpha"]);
    let _cleanup = ProfileContainers::new(&["alpha"], home.path());
    let id = create(&home, &["long", "--assignee", "alpha", "--command", "sleep 300"]);
    home.json(&["kanban", "dispatch"]);
    let sandbox_of = || {
        let out = crate::support::docker(&[
            "ps",
            "-aq",
            "--filter",
            "label=hermes-profile=alpha",
            "--filter",
            &format!("label=hermes-task-id={id}"),
        ]);
        crate::support::ids(&out)
    };
    wait_until("the sandbox to appear", Duration::from_secs(30), || !sandbox_of().is_empty());
    let pid = home.json(&["kanban", "show", &id])["task"]["worker_pid"].as_i64().unwrap();
    home.ok(&["kanban", "archive", &id]);
    assert_eq!(status(&home, &id), "archived");
    assert!(sandbox_of().is_empty(), "the archived task's sandbox was removed");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}/stat")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap().contains(") Z"),
        "worker stopped"
    );
}

/// `berth kanban create --from - EXTRA…` with `input` on its stdin.
fn create_from(home: &Home, input: &str, extra: &[&str]) -> std::process::Output {
    use std::io::Write;
    let mut child = home
        .cmd()
        .args(["kanban", "create", "--from", "-"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn bulk_create_is_all_or_none_and_names_the_bad_line() {
    bulk_create_is_all_or_none_and_names_the_bad_line_on(Home::new());
}

fn bulk_create_is_all_or_none_and_names_the_bad_line_on(home: Home) {
    profiles(&home, &["alpha"]);
    let parent = create(&home, &["parent"]);
    let count = || home.json(&["kanban", "ls"]).as_array().unwrap().len();
    // Each bad line is the third of four (a blank line counts): the batch is refused with its number, nothing made.
    let good = r#"{"title":"ok","command":"true"}"#;
    for (bad, says) in [
        (r#"{"title":"x","command":"true","assignee":"nobody"}"#, "line 3: no profile \"nobody\""),
        (r#"{"title":"x"}"#, "line 3: a task for the built-in worker needs a command"),
        (r#"{"title":"x","command":"true","parents":["t_000000000000"]}"#, "line 3: no task t_000000000000"),
        (r#"{"title":"x","command":"true""#, "line 3, column"),
        (r#"{"title":"x","command":"true","prio":1}"#, "line 3, column 36: unknown field `prio`"),
        (r#"{"title":" ","command":"true"}"#, "line 3: a task needs a non-empty title"),
        (r#"{"title":"x\ny","command":"true"}"#, "line 3: invalid task data: a title is one line"),
        (r#"{"title":"x","command":"true","max_retries":0}"#, "line 3: max_retries must be at least 1"),
    ] {
        let out = create_from(&home, &format!("{good}\n\n{bad}\n{good}\n"), &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(err.starts_with(&format!("berth: {says}")), "{bad}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert_eq!(count(), 1, "nothing of a refused batch is written ({bad})");
    }
    // A good file (a path, not stdin): its tasks in one go, the ids printed in the file's order, statuses by the
    // new-task rule, every field as the flags would set it.
    let file = home.path().join("tasks.jsonl");
    let lines = [
        format!(r#"{{"title":"child","command":"true","assignee":"alpha","parents":["{parent}"]}}"#),
        r#"{"title":"triaged","command":"true","triage":true}"#.to_owned(),
        r#"{"title":"urgent","command":"sleep 1","body":"why","priority":2,"max_runtime_seconds":60,"max_retries":3}"#
            .to_owned(),
        r#"{"title":"plain","command":"true"}"#.to_owned(),
    ];
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let ids: Vec<String> = home
        .json(&["kanban", "create", "--from", file.to_str().unwrap()])
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 4);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "a batch's ids sort in its order: {ids:?}");
    let show = |id: &str| home.json(&["kanban", "show", id]);
    let statuses: Vec<String> = ids.iter().map(|id| show(id)["task"]["status"].as_str().unwrap().to_owned()).collect();
    assert_eq!(statuses, ["todo", "triage", "ready", "ready"]);
    let child = show(&ids[0]);
    assert_eq!(child["task"]["parents"], serde_json::json!([parent]));
    assert_eq!(child["task"]["assignee"], "alpha");
    assert_eq!(child["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "created").count(), 1);
    let urgent = show(&ids[2]);
    assert_eq!((urgent["task"]["body"].as_str(), urgent["task"]["priority"].as_i64()), (Some("why"), Some(2)));
    assert_eq!(
        (urgent["task"]["max_runtime_seconds"].as_i64(), urgent["task"]["max_retries"].as_i64()),
        (Some(60), Some(3))
    );
    assert_eq!(count(), 5);
    // The flags' escape hatch covers every line; text output is a line per task.
    let out =
        create_from(&home, r#"{"title":"later","command":"true","assignee":"someday"}"#, &["--allow-unknown-assignee"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).ends_with("  ready  later\n"));
    // The flags of one task do not mix with a file.
    assert_eq!(home.run(&["kanban", "create", "--from", "-", "--command", "true"]).status.code(), Some(2));
}

/// The same CLI scenarios with the board on PostgreSQL (`kanban.database_url`), each in a fresh database.
mod on_postgres {
    use crate::support::Home;

    macro_rules! on_postgres {
        ($($name:ident => $body:ident),* $(,)?) => {
            $( #[test] fn $name() { if let Some(home) = Home::on_postgres() { super::$body(home); } } )*
        };
    }

    on_postgres!(
        promote_takes_a_task_out_of_triage_and_block_takes_a_positional_reason => promote_takes_a_task_out_of_triage_and_block_takes_a_positional_reason_on,
        seed_example_five_alpha_three_beta_cap_two => seed_example_five_alpha_three_beta_cap_two_on,
        default_assignee_unassigned_and_nonspawnable => default_assignee_unassigned_and_nonspawnable_on,
        explain_and_exact_task_dispatch => explain_and_exact_task_dispatch_on,
        a_crashed_worker_is_requeued_then_blocked_at_the_failure_limit => a_crashed_worker_is_requeued_then_blocked_at_the_failure_limit_on,
        spawn_failures_count_toward_the_failure_limit => spawn_failures_count_toward_the_failure_limit_on,
        concurrent_dispatchers_claim_each_task_once_and_hold_the_caps => concurrent_dispatchers_claim_each_task_once_and_hold_the_caps_on,
        task_lifecycle_commands_and_bad_input => task_lifecycle_commands_and_bad_input_on,
        bulk_create_is_all_or_none_and_names_the_bad_line => bulk_create_is_all_or_none_and_names_the_bad_line_on,
    );
}

/// A task created in triage leaves it by `kanban promote` (a new user found it could not: `unblock` refused it):
/// ready, or todo while a parent is unfinished; anything not in triage is refused in one line. `kanban block ID
/// REASON` takes the reason as hermes passes it, positionally.
#[test]
fn promote_takes_a_task_out_of_triage_and_block_takes_a_positional_reason() {
    promote_takes_a_task_out_of_triage_and_block_takes_a_positional_reason_on(Home::new());
}

fn promote_takes_a_task_out_of_triage_and_block_takes_a_positional_reason_on(home: Home) {
    profiles(&home, &["alpha"]);
    let t = create(&home, &["looked at", "--assignee", "alpha", "--triage"]);
    assert_eq!(status(&home, &t), "triage");
    let v = home.json(&["kanban", "promote", &t]);
    assert_eq!(v["status"], "ready", "{v}");
    let parent = create(&home, &["first", "--assignee", "alpha"]);
    let child = create(&home, &["then", "--assignee", "alpha", "--triage", "--parent", &parent]);
    assert_eq!(home.json(&["kanban", "promote", &child])["status"], "todo");
    let out = home.run(&["kanban", "promote", &t]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!((out.status.code(), err.trim().lines().count()), (Some(2), 1), "a ready task: {err}");
    home.ok(&["kanban", "block", &parent, "waits for a human"]);
    let events = home.json(&["kanban", "show", &parent])["events"].clone();
    let blocked = events.as_array().unwrap().iter().find(|e| e["kind"] == "blocked").cloned().unwrap();
    assert_eq!(blocked["payload"]["reason"], "waits for a human", "{events}");
}
