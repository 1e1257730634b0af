//! The gateway as a real process with a 1 s interval: dispatching, caps over time, warnings, one gateway per home,
//! a quarantined board, and clean shutdown; with an hour's interval, waking on events (on SQLite and on PostgreSQL).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::{Gateway, Home, require_docker, wait_until};

/// The ticks the running gateway has done, from `gateway status`.
fn ticks(home: &Home) -> u64 {
    home.gateway_status()["ticks"].as_u64().unwrap_or(0)
}

fn statuses(home: &Home) -> Vec<String> {
    home.json(&["kanban", "ls"]).as_array().unwrap().iter().map(|t| t["status"].as_str().unwrap().to_owned()).collect()
}

fn kill_workers(home: &Home) {
    for t in home.json(&["kanban", "ls"]).as_array().unwrap() {
        if let Some(pid) = t["worker_pid"].as_i64() {
            crate::support::signal_group(home, pid, rustix::process::Signal::KILL);
        }
    }
}

#[test]
fn idle_gateway_exits_cleanly_on_sigterm() {
    let home = Home::new();
    let gw = Gateway::start(&home, &[]);
    wait_until("a first tick", Duration::from_secs(10), || ticks(&home) >= 1);
    let (code, took, _) = gw.stop();
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(2), "took {took:?}");
    let st = home.gateway_status();
    assert_eq!(st["running"], false);
    assert!(st["stopped_at"].is_string());
}

#[test]
fn tasks_created_while_it_runs_are_dispatched_and_a_second_gateway_stays_out() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    let gw = Gateway::start(&home, &["-c", "kanban.worker_command=sleep 30"]);
    let second = home.run(&["-c", "kanban.dispatch_interval_seconds=1", "gateway", "run"]);
    assert_eq!(second.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&second.stderr).contains("already dispatching"));
    let id = home.json(&["kanban", "create", "late", "--assignee", "alpha", "--command", "true"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_until("the task to start", Duration::from_secs(10), || statuses(&home) == ["running"]);
    let show = home.json(&["kanban", "show", &id]);
    assert_eq!(show["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "claimed").count(), 1);
    let st = home.gateway_status();
    assert!(st["ticks"].as_u64().unwrap() >= 1);
    kill_workers(&home);
    let (code, _, _) = gw.stop();
    assert_eq!(code, Some(0));
}

#[test]
fn a_per_profile_cap_below_one_warns_and_means_no_cap_and_one_not_a_number_refuses_to_start() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    for _ in 0..3 {
        home.json(&["kanban", "create", "t", "--assignee", "alpha", "--command", "true"]);
    }
    // A cap that is not a number is never taken for "no cap": the gateway does not start.
    std::fs::write(home.path().join("config.yaml"), "kanban:\n  max_in_progress_per_profile: abc\n").unwrap();
    let out = home.run(&["gateway", "run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("kanban.max_in_progress_per_profile") && err.contains("\"abc\""), "{err}");
    // Below 1 is hermes-agent's "no cap": the file's value warns instead of failing.
    std::fs::write(home.path().join("config.yaml"), "kanban:\n  max_in_progress_per_profile: 0\n").unwrap();
    let gw = Gateway::start(&home, &["-c", "kanban.worker_command=sleep 30"]);
    wait_until("all three to start", Duration::from_secs(10), || statuses(&home).iter().all(|s| s == "running"));
    kill_workers(&home);
    let (_, _, err) = gw.stop();
    assert!(
        err.contains("kanban.max_in_progress_per_profile") && err.contains("\"0\"") && err.contains("no cap"),
        "{err}"
    );
}

#[test]
fn dispatch_in_gateway_false_leaves_the_board_alone() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    home.json(&["kanban", "create", "t", "--assignee", "alpha", "--command", "true"]);
    let gw = Gateway::start(&home, &["-c", "kanban.dispatch_in_gateway=false", "-c", "kanban.worker_command=sleep 30"]);
    // The gateway logs this line where it takes the idle branch, which has no dispatch in it: from here on the
    // board cannot change, however long one waits.
    wait_until("the idle line", Duration::from_secs(10), || gw.stderr().contains("dispatch_in_gateway=false"));
    assert_eq!(statuses(&home), ["ready"]);
    assert_eq!(ticks(&home), 0, "an idle gateway never ticks");
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0));
    assert!(err.contains("dispatch_in_gateway=false"), "{err}");
}

#[test]
fn a_broken_board_is_quarantined_and_the_others_go_on() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    home.ok(&["kanban", "board", "create", "broken"]);
    home.json(&["kanban", "create", "bad", "--assignee", "alpha", "--command", "true", "--board", "broken"]);
    {
        // Damage the broken board's row: an assignee that is a blob no reader can decode.
        let conn = rusqlite::Connection::open(home.path().join("berth-kanban.db")).unwrap();
        conn.execute("UPDATE tasks SET assignee = X'00ff' WHERE board = 'broken'", []).unwrap();
    }
    let gw = Gateway::start(&home, &["-c", "kanban.worker_command=sleep 30"]);
    let good = home.json(&["kanban", "create", "good", "--assignee", "alpha", "--command", "true"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_until("the good board's task to start", Duration::from_secs(10), || {
        home.json(&["kanban", "show", &good])["task"]["status"] == "running"
    });
    // The task runs from inside the tick; the tick's state is written when it ends.
    wait_until("the tick's state", Duration::from_secs(10), || home.gateway_status()["last_tick"].is_object());
    let st = home.gateway_status();
    assert_eq!(st["last_tick"]["boards"]["broken"]["quarantined"], true, "{st}");
    kill_workers(&home);
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0));
    assert!(err.contains("[broken]") && err.contains("quarantined"), "{err}");
}

#[test]
fn eight_tasks_two_profiles_cap_two_all_finish_never_more_than_two_each() {
    require_docker();
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    home.ok(&["profile", "create", "beta"]);
    let _cleanup = crate::kanban::ProfileContainers::new(&["alpha", "beta"], home.path());
    for i in 0..8 {
        home.json(&["kanban", "create", "job", "--assignee", ["alpha", "beta"][i % 2], "--command", "sleep 2"]);
    }
    let gw = Gateway::start(&home, &["-c", "kanban.max_in_progress_per_profile=2"]);
    let mut max_seen: BTreeMap<String, usize> = BTreeMap::new();
    wait_until("all eight to finish", Duration::from_secs(90), || {
        let tasks = home.json(&["kanban", "ls"]);
        let mut running: BTreeMap<String, usize> = BTreeMap::new();
        for t in tasks.as_array().unwrap().iter().filter(|t| t["status"] == "running") {
            *running.entry(t["assignee"].as_str().unwrap().to_owned()).or_default() += 1;
        }
        for (who, n) in running {
            let m = max_seen.entry(who).or_default();
            *m = (*m).max(n);
        }
        tasks.as_array().unwrap().iter().all(|t| t["status"] == "done")
    });
    assert!(max_seen.values().all(|n| *n <= 2), "{max_seen:?}");
    assert_eq!(max_seen.get("alpha"), Some(&2), "the cap was used: {max_seen:?}");
    let (code, took, _) = gw.stop();
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(2));
}

#[test]
fn stuck_work_gives_the_stuck_warning() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    home.json(&["kanban", "create", "t", "--assignee", "alpha", "--command", "true"]);
    // Every spawn fails (the log directory is a file), and the failure limit is high: work sits, nothing starts.
    std::fs::create_dir_all(home.path().join("kanban")).unwrap();
    std::fs::write(home.path().join("kanban/logs"), b"not a directory").unwrap();
    // No pause between tries: a task waiting out its backoff is not stuck.
    let gw = Gateway::start(&home, &["-c", "kanban.failure_limit=1000", "-c", "kanban.retry_backoff_seconds=0"]);
    wait_until("six bad ticks", Duration::from_secs(20), || home.gateway_status()["ticks"].as_u64().unwrap_or(0) >= 7);
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0));
    assert!(err.contains("kanban dispatcher stuck"), "{err}");
    assert_eq!(err.matches("kanban dispatcher stuck").count(), 1, "at most one warning per 300 s");
}

#[test]
fn a_gateway_with_an_hour_interval_wakes_on_new_tasks_and_on_finished_workers() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    let worker = format!("{} kanban complete {{task_id}}", crate::support::berth_bin().display());
    let worker_setting = format!("kanban.worker_command={worker}");
    let gw = Gateway::start(
        &home,
        &[
            "-c",
            "kanban.dispatch_interval_seconds=3600",
            "-c",
            "kanban.max_in_progress_per_profile=1",
            "-c",
            &worker_setting,
        ],
    );
    // Cap 1: each task can only be claimed after the one before it finished, so without waking on events the
    // second would wait an hour for the next tick.
    for i in 0..4 {
        home.json(&["kanban", "create", &format!("job {i}"), "--assignee", "alpha", "--command", "true"]);
    }
    wait_until("all four to finish one after another", Duration::from_secs(30), || {
        home.json(&["kanban", "ls"]).as_array().unwrap().iter().all(|t| t["status"] == "done")
    });
    // Idle, it stops ticking: a board nobody changes wakes nothing.
    let settled = ticks(&home);
    std::thread::sleep(Duration::from_millis(1500)); // scenario: the idle window in which no tick may come
    let later = ticks(&home);
    assert!(later <= settled + 1, "an idle gateway kept ticking: {settled} then {later}");
    let (code, _, _) = gw.stop();
    assert_eq!(code, Some(0));
}

/// A FIFO put in place of the home's `config.yaml` (third attack, F6) held the gateway at its settings' reload for
/// good, while `gateway status` said it ran. The file is opened without waiting and refused as no regular file: a
/// command says so in one line, and the gateway keeps its settings and dispatches once the file is back.
#[test]
fn a_fifo_for_a_config_file_hangs_neither_a_command_nor_the_gateway() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    home.ok(&["config", "set", "kanban.dispatch_interval_seconds", "1"]);
    let config = home.path().join("config.yaml");
    let kept = std::fs::read_to_string(&config).unwrap();
    let gw = Gateway::start(&home, &[]);
    std::fs::remove_file(&config).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(&config).status().unwrap().success());
    let mut ls = home.cmd().args(["kanban", "ls"]).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let ended = crate::support::wait_exit(&mut ls, Duration::from_secs(10)).expect("kanban ls hung at a FIFO config");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut ls.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!ended.success() && err.contains("not a regular file") && err.lines().count() == 1, "{err}");
    // scenario: the gateway's reload looks at its config files every second; it meets the FIFO.
    std::thread::sleep(Duration::from_millis(2500));
    std::fs::remove_file(&config).unwrap();
    std::fs::write(&config, kept).unwrap();
    let id = home.json(&["kanban", "create", "after", "--assignee", "alpha", "--command", "true"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_until("the task done: the gateway still dispatches", Duration::from_secs(30), || {
        status_of(&home, &id) == "done"
    });
    let (code, _, _) = gw.stop();
    assert_eq!(code, Some(0));
}

/// The ticks once none came for a second (bounded): the gateway has done what its last wake-up asked.
fn settled_ticks(home: &Home) -> u64 {
    let mut seen = ticks(home);
    let mut settled = false;
    wait_until("the gateway to settle", Duration::from_secs(30), || {
        std::thread::sleep(Duration::from_secs(1)); // scenario: the quiet period that defines "settled"
        let now = ticks(home);
        settled = now == seen;
        seen = now;
        settled
    });
    seen
}

fn status_of(home: &Home, id: &str) -> String {
    home.json(&["kanban", "show", id])["task"]["status"].as_str().unwrap_or_default().to_owned()
}

/// On a PostgreSQL board, with an hour's interval: a task another process creates is claimed at once (the gateway
/// listens for the board's notifications), a heartbeat wakes nothing, and with every connection to the database cut
/// (its listener's and the board connection it keeps) the next task is still claimed at once.
#[test]
fn a_gateway_on_postgres_wakes_on_board_changes_not_on_heartbeats_and_survives_cut_connections() {
    let Some(home) = Home::on_postgres() else { return };
    home.ok(&["profile", "create", "alpha"]);
    let gw = Gateway::start(
        &home,
        &["-v", "-c", "kanban.dispatch_interval_seconds=3600", "-c", "kanban.worker_command=sleep 120"],
    );
    wait_until("the gateway to listen", Duration::from_secs(30), || {
        gw.stderr().contains("listening for board changes")
    });
    // Its first tick is behind it, so the next one the clock asks for is an hour away.
    wait_until("a first tick", Duration::from_secs(30), || ticks(&home) >= 1);
    let create = |title: &str| {
        let v = home.json(&["kanban", "create", title, "--assignee", "alpha", "--command", "true"]);
        (v["id"].as_str().unwrap().to_owned(), Instant::now())
    };
    let (first, created) = create("first");
    wait_until("the new task to be claimed at once", Duration::from_secs(5), || status_of(&home, &first) == "running");
    eprintln!("claimed {:?} after its creation returned", created.elapsed());

    // Heartbeats (with and without a note) wake nothing: a wake-up would be a tick within milliseconds.
    let settled = settled_ticks(&home);
    home.ok(&["kanban", "heartbeat", &first]);
    home.ok(&["kanban", "heartbeat", &first, "--note", "half way"]);
    std::thread::sleep(Duration::from_millis(1500)); // scenario: the window in which a wake-up must not come
    assert_eq!(ticks(&home), settled, "a heartbeat woke the gateway:\n{}", gw.stderr());

    // Every other connection to the database cut: the gateway listens again and connects again, and misses nothing.
    let mut admin = home.board_db.as_ref().unwrap().client();
    let cut: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(cut >= 2, "the gateway's listener and board connection were cut ({cut})");
    let (second, _) = create("second");
    wait_until("the task after the cut to be claimed", Duration::from_secs(10), || {
        status_of(&home, &second) == "running"
    });
    let (_, _, err) = gw.stop();
    kill_workers(&home);
    assert!(err.contains("listening for board changes") && err.contains("again"), "{err}");
    assert!(err.contains("the board connection failed"), "the kept connection was replaced:\n{err}");
}

/// A one-machine home (SQLite, no `kanban.host_id`): its idle gateway's host stays alive past the host timeout,
/// in `berth status` as on the dashboard, though nothing heartbeats on such a board (issue 41: it showed `lost`).
#[test]
fn a_healthy_idle_gateways_host_stays_alive_on_a_one_machine_home() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    home.ok(&["config", "set", "kanban.worker_command", "true"]);
    home.ok(&["config", "set", "kanban.worker_exit_outcome", "true"]);
    home.ok(&["config", "set", "kanban.host_timeout_seconds", "2"]);
    let id = home.json(&["kanban", "create", "once", "--assignee", "alpha"])["id"].as_str().unwrap().to_owned();
    let gw = Gateway::start(&home, &[]);
    wait_until("the task done", Duration::from_secs(20), || status_of(&home, &id) == "done");
    std::thread::sleep(Duration::from_secs(4)); // scenario: idle twice the host timeout
    let hosts = home.json(&["status"])["hosts"]["hosts"].clone();
    let rows = hosts.as_array().unwrap_or_else(|| panic!("hosts: {hosts}"));
    assert!(!rows.is_empty(), "this host is listed: {hosts}");
    for h in rows {
        assert_eq!(h["alive"], true, "{hosts}");
    }
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0), "{err}");
    // Without a gateway, the same host goes silent as before.
    let hosts = home.json(&["status"])["hosts"]["hosts"].clone();
    assert!(hosts.as_array().unwrap().iter().all(|h| h["alive"] == false), "{hosts}");
}
