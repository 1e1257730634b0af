//! The second trust round (issue 23), infrastructure against the task: a dead container engine is never the task's
//! failure and the gateway backs off instead of retrying at once; a lapsed spawn lease of a task that never ran
//! counts nothing.

use std::time::{Duration, Instant};

use crate::support::{Engine, Gateway, Home};

/// A home whose berth commands (the gateway, its workers) talk to an engine endpoint nothing listens on.
fn home_on_a_dead_engine() -> Home {
    let dead = Engine { name: "dead", endpoint: "unix:///nonexistent-berth-engine.sock".to_owned() };
    let mut home = Home::new();
    home.engine = Some(dead);
    home
}

/// Every run of `id`, as `kanban show --json` lists them.
fn runs(home: &Home, id: &str) -> Vec<serde_json::Value> {
    home.json(&["kanban", "show", id])["runs"].as_array().cloned().unwrap_or_default()
}

/// With the engine unreachable, a gateway's workers record `infra_unavailable` (not counted toward
/// `kanban.failure_limit`), so over ten seconds no task ends blocked, also one made ready meanwhile; and the
/// gateway backs off (1 s, 2 s, 4 s, …) instead of retrying each task as soon as its worker exits.
#[test]
fn a_dead_engine_blocks_no_task_and_the_gateway_backs_off() {
    let home = home_on_a_dead_engine();
    let create = |title: &str| {
        home.json(&["kanban", "create", title, "--assignee", &home.profile, "--command", "true"])["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let mut ids = vec![create("a"), create("b")];
    let gw = Gateway::start(&home, &["-c", "kanban.failure_limit=2"]);
    let started = Instant::now();
    wait_until_runs(&home, &ids[0], 1);
    ids.push(create("made ready meanwhile"));
    // Sampled for ten seconds: no task is ever blocked.
    while started.elapsed() < Duration::from_secs(10) {
        let ls = home.json(&["kanban", "ls"]);
        let blocked: Vec<_> =
            ls.as_array().unwrap().iter().filter(|t| t["status"] == "blocked").map(|t| t["id"].clone()).collect();
        assert!(blocked.is_empty(), "blocked over an engine outage: {blocked:?}\n{}", gw.stderr());
        std::thread::sleep(Duration::from_millis(250)); // scenario: the sampling interval of the ten seconds watched
    }
    let (_, _, err) = gw.stop();
    for id in &ids {
        let runs = runs(&home, id);
        assert!(!runs.is_empty(), "{id} was never tried:\n{err}");
        for r in &runs {
            assert!(r["outcome"] == "infra_unavailable" || r["outcome"].is_null(), "{id}: {r}");
        }
        // Back-off: tries at about 0, 1, 3 and 7 s, one a wave (a task whose worker requeued it is not claimed again
        // before the gateway reaped that worker and saw its exit code: the board's change wakes the gateway first);
        // a hot retry makes dozens.
        assert!(runs.len() <= 5, "{id} was tried {} times in 10 s:\n{err}", runs.len());
        let show = home.json(&["kanban", "show", id]);
        assert_eq!(show["task"]["consecutive_failures"], 0, "{id}: {show}");
    }
    assert!(err.contains("container engine unreachable"), "{err}");
}

fn wait_until_runs(home: &Home, id: &str, n: usize) {
    crate::support::wait_until("a run", Duration::from_secs(10), || runs(home, id).len() >= n);
}

/// A dispatcher that died after committing its claim and before starting a worker leaves a claim whose spawn lease
/// lapses; the task never ran, so the next tick requeues it as `lease_expired` without counting a failure: with
/// `kanban.failure_limit=1` it is ready again, not blocked, and then runs.
#[test]
fn a_lapsed_spawn_lease_of_a_task_that_never_ran_counts_no_failure() {
    use domain::board::KanbanStore;
    let home = Home::new();
    home.ok(&["config", "set", "kanban.worker_command", "true"]);
    let id = home.json(&["kanban", "create", "t", "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    // The crashed dispatcher: its tick (claim and run row, a 1 s spawn lease) committed, no worker started.
    let mut store = kanban_store::SqliteKanbanStore::open(&home.path().join("berth-kanban.db")).unwrap();
    let board = domain::ids::BoardSlug::default_board();
    let cfg = domain::board::TickConfig {
        profiles: [home.profile.clone()].into_iter().collect(),
        failure_limit: 1,
        ..domain::board::TickConfig::default()
    };
    let probe = domain::test_util::FakeProcessProbe::default();
    let now = domain::time::Timestamp::from_millis(
        i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap(),
    );
    let req = domain::board::TickRequest {
        board: &board,
        cfg: &cfg,
        now,
        probe: &probe,
        claimer: "crashed:1",
        claim_ttl: Duration::from_secs(900),
        spawn_lease: Duration::from_secs(1),
    };
    let out = store.tick(&req, &|snap| domain::policy::dispatch::plan_tick(now, snap, &cfg)).unwrap();
    assert_eq!(out.plan.spawns().count(), 1);
    drop(store);
    std::thread::sleep(Duration::from_millis(1100)); // scenario: the 1 s spawn lease lapses
    let report = home.json(&["-c", "kanban.failure_limit=1", "kanban", "dispatch"]);
    let show = home.json(&["kanban", "show", &id]);
    assert_ne!(show["task"]["status"], "blocked", "a task that never ran was blocked: {report}\n{show}");
    assert_eq!(show["task"]["consecutive_failures"], 0, "{show}");
    assert_eq!(show["runs"][0]["outcome"], "lease_expired", "{show}");
}

/// A NUL byte in a task's last output line reaches neither store: the built-in worker completes the task on SQLite
/// and on PostgreSQL (whose text holds no NUL) alike, the result without it.
fn a_nul_in_the_last_output_line_completes_the_task(home: Home) {
    crate::support::require_docker();
    let cmd = r"printf 'done\000here\n'";
    let id = home.json(&["kanban", "create", "nul", "--assignee", &home.profile, "--command", cmd])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    home.ok(&["kanban", "dispatch"]);
    crate::support::wait_until("the task to end", Duration::from_secs(60), || {
        let status = home.json(&["kanban", "show", &id])["task"]["status"].clone();
        status != "running" && status != "ready"
    });
    let show = home.json(&["kanban", "show", &id]);
    assert_eq!(show["task"]["status"], "done", "{show}");
    assert_eq!(show["task"]["result"], "donehere", "{show}");
    assert_eq!(show["runs"].as_array().map(Vec::len), Some(1), "{show}");
}

#[test]
fn a_nul_in_the_last_output_line_completes_the_task_on_sqlite() {
    a_nul_in_the_last_output_line_completes_the_task(Home::new());
}

#[test]
fn a_nul_in_the_last_output_line_completes_the_task_on_postgres() {
    if let Some(home) = Home::on_postgres() {
        a_nul_in_the_last_output_line_completes_the_task(home);
    }
}

/// The gateway holds back a task whose worker it has not reaped yet; a worker it stopped itself (a timed-out run:
/// the stop reaps it) holds nothing back, so the same gateway tries that task again.
#[test]
fn a_task_whose_worker_the_gateway_stopped_is_tried_again_by_that_gateway() {
    let home = Home::new();
    home.ok(&["config", "set", "kanban.worker_command", "sleep 60"]);
    let id = home.json(&["kanban", "create", "slow", "--assignee", &home.profile, "--max-runtime", "1"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let gw = Gateway::start(&home, &["-c", "kanban.failure_limit=5"]);
    let tried = crate::support::wait_until("a second run after the timeout", Duration::from_secs(20), || {
        let runs = runs(&home, &id);
        (runs.len() >= 2).then_some(runs)
    });
    let (_, _, err) = gw.stop();
    assert_eq!(tried[0]["outcome"], "timed_out", "{:?}\n{err}", tried);
}
