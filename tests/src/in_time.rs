//! Tasks in time (issue 39), through the binary on SQLite and PostgreSQL: a scheduled task starts at its time and
//! not before, `kanban schedule` moves it, a bad time is refused in one line; a failing task is retried after a
//! doubling backoff and `show --json` names the next try; a command that exits 75 is snoozed without a failure.
//!
//! Each home's worker is `kanban.worker_command` under the home's runner (`kanban.worker_exit_outcome`): a script
//! that appends the time it ran to a file, then exits as the test says. A gateway runs with an hour's interval, so
//! only the wake for the due task can start it in time.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::{Gateway, Home, wait_until};

fn now_secs() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// A home with profile `alpha` and a worker script that records each run's time in `runs` and then runs `tail`.
fn home_with_worker(home: Home, tail: &str) -> (Home, PathBuf) {
    home.ok(&["profile", "create", "alpha"]);
    let runs = home.path().join("runs");
    let script = home.path().join("worker.sh");
    let text = format!("date +%s.%N >> '{}'\n{tail}\n", runs.display());
    std::fs::write(&script, text).unwrap();
    home.ok(&["config", "set", "kanban.worker_command", &format!("sh {}", script.display())]);
    home.ok(&["config", "set", "kanban.worker_exit_outcome", "true"]);
    (home, runs)
}

fn run_times(runs: &Path) -> Vec<f64> {
    std::fs::read_to_string(runs).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn gateway(home: &Home) -> Gateway {
    Gateway::start(home, &["-c", "kanban.dispatch_interval_seconds=3600"])
}

fn task(home: &Home, id: &str) -> serde_json::Value {
    home.json(&["kanban", "show", id])["task"].clone()
}

fn a_task_due_in_five_seconds_starts_between_five_and_six_and_a_half(home: Home) {
    let (home, runs) = home_with_worker(home, "exit 0");
    let gw = gateway(&home);
    let created = now_secs();
    let id = home.json(&["kanban", "create", "later", "--assignee", "alpha", "--in", "5s"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = task(&home, &id);
    assert!(t["not_before"].is_string(), "show --json names its time: {t}");
    wait_until("the task done", Duration::from_secs(20), || task(&home, &id)["status"] == "done");
    let started = run_times(&runs)[0] - created;
    eprintln!("due in 5 s: started after {started:.3} s");
    assert!((5.0..=6.5).contains(&started), "started {started:.3} s after its creation");
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0), "{err}");
}

fn kanban_schedule_moves_a_waiting_task_and_a_bad_time_is_refused(home: Home) {
    let (home, runs) = home_with_worker(home, "exit 0");
    let gw = gateway(&home);
    let id = home.json(&["kanban", "create", "much later", "--assignee", "alpha", "--in", "1h"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let moved = now_secs();
    home.ok(&["kanban", "schedule", &id, "--in", "2s"]);
    wait_until("the moved task done", Duration::from_secs(20), || task(&home, &id)["status"] == "done");
    let started = run_times(&runs)[0] - moved;
    assert!((2.0..=3.5).contains(&started), "started {started:.3} s after the move");
    for bad in [["--at", "tomorrow"], ["--at", "2026-12-01T03:00:00"], ["--in", "5 parsecs"]] {
        let out = home.run(&["kanban", "create", "bad", "--assignee", "alpha", bad[0], bad[1]]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    let out = home.run(&["kanban", "schedule", &id, "--in", "5s"]);
    assert_eq!(out.status.code(), Some(2), "a done task has no time to move: {}", String::from_utf8_lossy(&out.stderr));
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0), "{err}");
}

fn a_failing_task_is_retried_after_a_doubling_backoff_then_blocked(home: Home) {
    let (home, runs) = home_with_worker(home, "exit 1");
    home.ok(&["config", "set", "kanban.retry_backoff_seconds", "3"]);
    let gw = gateway(&home);
    let id = home.json(&["kanban", "create", "flaky", "--assignee", "alpha", "--max-retries", "3"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_until("the first failure", Duration::from_secs(20), || run_times(&runs).len() == 1);
    let waiting = wait_until("the retry's time on the task", Duration::from_secs(10), || {
        let t = task(&home, &id);
        (t["status"] == "ready" && t["not_before"].is_string()).then_some(t)
    });
    eprintln!("waiting for its retry: {waiting}");
    wait_until("blocked after three runs", Duration::from_secs(40), || task(&home, &id)["status"] == "blocked");
    let times = run_times(&runs);
    assert_eq!(times.len(), 3, "three runs: {times:?}");
    let gaps = [times[1] - times[0], times[2] - times[1]];
    eprintln!("gaps between tries: {gaps:?}");
    assert!(gaps[0] >= 1.5 && gaps[1] >= 3.0, "growing gaps of at least half the backoff: {gaps:?}");
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0), "{err}");
}

fn a_command_that_exits_75_is_snoozed_without_a_failure(home: Home) {
    let marker = home.path().join("snoozed-once");
    let tail = format!("if [ -e '{m}' ]; then exit 0; fi; touch '{m}'; exit 75", m = marker.display());
    let (home, runs) = home_with_worker(home, &tail);
    home.ok(&["config", "set", "kanban.tempfail_cooldown_seconds", "2"]);
    let gw = gateway(&home);
    let id = home.json(&["kanban", "create", "rate limited", "--assignee", "alpha"])["id"].as_str().unwrap().to_owned();
    wait_until("the task done", Duration::from_secs(30), || task(&home, &id)["status"] == "done");
    let t = task(&home, &id);
    assert_eq!(t["consecutive_failures"], 0, "{t}");
    let times = run_times(&runs);
    assert_eq!(times.len(), 2, "{times:?}");
    assert!(times[1] - times[0] >= 2.0, "the second run waited the cooldown: {times:?}");
    let kinds: Vec<String> = home.json(&["kanban", "show", &id])["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(kinds.contains(&"snoozed".to_owned()) && !kinds.contains(&"failed".to_owned()), "{kinds:?}");
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0), "{err}");
}

/// The pause a task's first failure set: its `failed` event's `retry_at` less the event's time, in seconds.
fn first_backoff(home: &Home, id: &str) -> i64 {
    let shown = home.json(&["kanban", "show", id]);
    let failed = shown["events"].as_array().unwrap().iter().find(|e| e["kind"] == "failed").cloned().unwrap();
    let at = |v: &serde_json::Value| domain::time::Timestamp::parse_docker(v.as_str().unwrap()).unwrap().as_secs();
    at(&failed["payload"]["retry_at"]) - at(&failed["created_at"])
}

fn a_profiles_backoff_overrides_replace_the_defaults_for_its_tasks(home: Home) {
    let (home, _runs) = home_with_worker(home, "exit 1");
    home.ok(&["profile", "create", "beta"]);
    home.ok(&["config", "set", "kanban.retry_backoff_seconds", "30"]);
    home.ok(&["config", "set", "kanban.retry_backoff_seconds_overrides", r#"{"alpha": 1}"#]);
    let out = home.run(&["config", "set", "kanban.retry_backoff_seconds_overrides", r#"{"alpha": -1}"#]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let gw = gateway(&home);
    let create = |assignee: &str| {
        home.json(&["kanban", "create", assignee, "--assignee", assignee, "--max-retries", "3"])["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (a, b) = (create("alpha"), create("beta"));
    wait_until("both failed once", Duration::from_secs(20), || {
        [&a, &b].iter().all(|id| task(&home, id)["consecutive_failures"].as_i64() >= Some(1))
    });
    // alpha: its own base of 1 s (drawn within its upper half); beta: the default base of 30 s (15 to 30 s).
    let (pause_a, pause_b) = (first_backoff(&home, &a), first_backoff(&home, &b));
    eprintln!("first pauses: alpha {pause_a} s, beta {pause_b} s");
    assert!((0..=2).contains(&pause_a), "alpha's override: {pause_a} s");
    assert!((14..=31).contains(&pause_b), "beta's default: {pause_b} s");
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0), "{err}");
}

on_both_stores!(
    a_profiles_backoff_overrides_replace_the_defaults_for_its_tasks,
    a_task_due_in_five_seconds_starts_between_five_and_six_and_a_half,
    kanban_schedule_moves_a_waiting_task_and_a_bad_time_is_refused,
    a_failing_task_is_retried_after_a_doubling_backoff_then_blocked,
    a_command_that_exits_75_is_snoozed_without_a_failure,
);
