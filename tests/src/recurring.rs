//! Recurring tasks (issue 39, `kanban cron`), through the binary: a 2-second schedule makes one task per slot (no
//! slot twice, none skipped while a gateway runs), the slots missed while no gateway ran make one task on return,
//! `cron rm` stops it, each task names its schedule, and a bad expression is refused in one line; on SQLite and
//! PostgreSQL with one gateway, and on one PostgreSQL board with two gateways of two "hosts".

use std::collections::BTreeSet;
use std::thread::sleep;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::{Gateway, Home, wait_until};

fn now_ms() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// The slot (epoch milliseconds) of each task schedule `name` made on the board, in the order of the tasks.
fn slots(home: &Home, name: &str) -> Vec<i64> {
    let tasks = home.json(&["kanban", "ls"]);
    let mut slots: Vec<i64> = tasks
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["schedule"] == name)
        .map(|t| {
            let key = t["idempotency_key"].as_str().unwrap();
            let at = key.strip_prefix(&format!("cron:{name}:")).unwrap_or_else(|| panic!("a slot's key: {key}"));
            domain::time::Timestamp::parse_docker(at).unwrap().as_millis()
        })
        .collect();
    slots.sort_unstable();
    slots
}

/// Every slot once: no two tasks of one slot.
fn assert_once_each(slots: &[i64]) {
    let distinct: BTreeSet<i64> = slots.iter().copied().collect();
    assert_eq!(distinct.len(), slots.len(), "a slot made twice: {slots:?}");
}

/// Consecutive 2-second slots from the first to the last: none skipped.
fn assert_contiguous(slots: &[i64]) {
    for pair in slots.windows(2) {
        assert_eq!(pair[1] - pair[0], 2_000, "slots 2 s apart with none skipped: {slots:?}");
    }
}

fn gateway(home: &Home) -> Gateway {
    Gateway::start(home, &["-c", "kanban.dispatch_interval_seconds=3600"])
}

fn a_two_second_schedule_makes_one_task_per_slot_and_cron_rm_stops_it(home: Home) {
    home.ok(&["profile", "create", "alpha"]);
    home.ok(&["config", "set", "kanban.worker_command", "true"]);
    home.ok(&["config", "set", "kanban.worker_exit_outcome", "true"]);
    let added =
        home.json(&["kanban", "cron", "add", "tick", "--every", "2s", "--assignee", "alpha", "--command", "true"]);
    assert_eq!(added["every_seconds"], 2, "{added}");
    assert!(added["next_slot"].is_string(), "{added}");
    // A bad expression is refused in one line, and nothing is added.
    for bad in ["61 * * * *", "* * * *", "0 0 31 feb *", "*/0 * * * *"] {
        let out =
            home.run(&["kanban", "cron", "add", "bad", "--cron", bad, "--assignee", "alpha", "--command", "true"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(err.contains("cron expression"), "{err}");
    }
    let out = home.run(&["kanban", "cron", "add", "tick", "--every", "5s", "--assignee", "alpha", "--command", "x"]);
    assert_eq!(out.status.code(), Some(2), "a second schedule of one name: {}", String::from_utf8_lossy(&out.stderr));
    let listed = home.json(&["kanban", "cron", "ls"]);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");

    let gw = gateway(&home);
    let started = now_ms();
    // scenario: the gateway runs its schedule for 11 s.
    sleep(Duration::from_secs(11));
    let made = slots(&home, "tick");
    eprintln!("slots made in 11 s: {made:?}");
    assert!((4..=7).contains(&made.len()), "about one task per 2 s in 11 s: {made:?}");
    assert_once_each(&made);
    assert_contiguous(&made);
    assert!(made.iter().all(|s| *s > started - 2_000), "no slot from before the gateway: {made:?}");
    // Each task says which schedule made it, and runs.
    let first = home.json(&["kanban", "ls"]).as_array().unwrap().iter().find(|t| t["schedule"] == "tick").cloned();
    let id = first.unwrap()["id"].as_str().unwrap().to_owned();
    let shown = home.json(&["kanban", "show", &id]);
    assert_eq!(shown["task"]["schedule"], "tick", "{shown}");
    assert!(home.ok(&["kanban", "show", &id]).contains("schedule:  tick"));
    let page = crate::dashboard::Served::start(&home, &[]).get(&format!("/tasks/{id}"));
    assert_eq!(page.0, 200, "{}", page.1);
    assert!(page.1.contains("tick (kanban cron)"), "the dashboard's task page names its schedule: {}", page.1);
    wait_until("a schedule's task done", Duration::from_secs(20), || {
        home.json(&["kanban", "show", &id])["task"]["status"] == "done"
    });
    let ls = home.json(&["kanban", "cron", "ls"]);
    assert!(ls[0]["last_slot"].is_string(), "{ls}");

    // Stopped for 5 s (two or three slots missed): on return one task, for the latest slot only.
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0), "{err}");
    let before = slots(&home, "tick");
    let last = *before.last().unwrap();
    // scenario: no gateway runs for 5 s (two or three slots go by).
    sleep(Duration::from_secs(5));
    let gw = gateway(&home);
    // A change to the board wakes the gateway at once (its first tick would come some seconds after its start).
    home.ok(&["kanban", "create", "wake", "--assignee", "nobody", "--allow-unknown-assignee", "--command", "true"]);
    let (seen, after) = wait_until("a task made on return", Duration::from_secs(10), || {
        let seen = now_ms();
        let after = slots(&home, "tick");
        (after.len() > before.len()).then_some((seen, after))
    });
    let made: Vec<i64> = after.iter().copied().filter(|s| *s > last).collect();
    eprintln!("last slot before the stop {last}; on return at {seen}: {made:?}");
    assert!(made[0] - last >= 4_000, "two slots or more were missed: {made:?} after {last}");
    assert_eq!(made.len(), 1, "one task for the slots missed while no gateway ran, not one each: {after:?}");
    assert!(seen - made[0] < 2_000, "the latest slot: {made:?} (seen at {seen})");
    assert_once_each(&after);

    // `cron rm` stops it: no task after it, whatever the gateway does.
    let removed = home.json(&["kanban", "cron", "rm", "tick"]);
    assert_eq!(removed["name"], "tick", "{removed}");
    // scenario: a tick that read the schedule before its removal ends.
    sleep(Duration::from_millis(500));
    let at_rm = slots(&home, "tick").len();
    // scenario: 5 s (two slots) after the removal.
    sleep(Duration::from_secs(5));
    assert_eq!(slots(&home, "tick").len(), at_rm, "a removed schedule made a task");
    assert_eq!(home.json(&["kanban", "cron", "ls"]), serde_json::json!([]));
    let out = home.run(&["kanban", "cron", "rm", "tick"]);
    assert_eq!(out.status.code(), Some(2), "no such schedule: {}", String::from_utf8_lossy(&out.stderr));
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0), "{err}");
}

on_both_stores!(a_two_second_schedule_makes_one_task_per_slot_and_cron_rm_stops_it);

#[test]
fn two_gateways_on_one_postgres_board_make_one_task_per_slot() {
    let Some(db) = crate::pg::TestDb::create() else { return };
    let homes: Vec<Home> = (0..2)
        .map(|_| {
            let mut h = Home::new();
            h.board_url = Some(db.url.clone());
            h
        })
        .collect();
    // Its tasks wait for a profile no host has: this test is about who makes them, not who runs them.
    homes[0].ok(&[
        "kanban",
        "cron",
        "add",
        "pair",
        "--every",
        "2s",
        "--assignee",
        "nobody",
        "--allow-unknown-assignee",
        "--command",
        "true",
    ]);
    let gateways: Vec<Gateway> = homes
        .iter()
        .enumerate()
        .map(|(i, home)| {
            let mut cmd = home.cmd();
            cmd.env("KANBAN_HOST_ID", format!("host{i}")).env("KANBAN_DISPATCH_INTERVAL_SECONDS", "3600");
            Gateway::start_with(home, &mut cmd)
        })
        .collect();
    // scenario: both gateways run the schedule for 11 s.
    sleep(Duration::from_secs(11));
    let made = slots(&homes[1], "pair");
    eprintln!("two gateways, slots made in 11 s: {made:?}");
    assert!((4..=7).contains(&made.len()), "about one task per 2 s in 11 s: {made:?}");
    assert_once_each(&made);
    assert_contiguous(&made);
    // The board itself holds one task per slot (each slot is raced by both gateways: one wins it).
    let mut client = db.client();
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT idempotency_key) FROM berth.tasks WHERE idempotency_key LIKE 'cron:pair:%'",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), row.get::<_, i64>(1), "a slot made twice on the board");
    homes[1].ok(&["kanban", "cron", "rm", "pair"]);
    // scenario: a tick that read the schedule before its removal ends.
    sleep(Duration::from_millis(500));
    let at_rm = slots(&homes[0], "pair").len();
    // scenario: 5 s (two slots) after the removal.
    sleep(Duration::from_secs(5));
    assert_eq!(slots(&homes[0], "pair").len(), at_rm, "a removed schedule made a task");
    for gw in gateways {
        let (code, _, err) = gw.stop();
        assert_eq!(code, Some(0), "{err}");
    }
}
