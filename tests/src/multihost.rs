//! Several hosts, one board: three gateways with their own homes and host ids dispatch one PostgreSQL board; the
//! caps hold over all of them together, every task is done exactly once, and when one host dies (its gateway and
//! its workers SIGKILLed) the others finish its tasks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use domain::ids::BoardSlug;
use domain::time::Timestamp;
use kanban_store::{BoardStore, NewTask};

use crate::pg::TestDb;
use crate::support::{Gateway, Home, berth_bin};

const TASKS: usize = 300;
const PROFILES: usize = 5;
const PER_PROFILE_CAP: i64 = 2;
const GLOBAL_CAP: i64 = 6;

/// The most running tasks seen at any sample, per assignee and in total (read from the database).
#[derive(Default)]
struct Peaks {
    per_profile: BTreeMap<String, i64>,
    total: i64,
    samples: u64,
}

/// Samples the running counts from the database every few milliseconds until `stop`.
fn sampler(url: String, stop: Arc<AtomicBool>, peaks: Arc<Mutex<Peaks>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("sampler connects");
        while !stop.load(Ordering::SeqCst) {
            let rows = client
                .query("SELECT assignee, count(*) FROM berth.tasks WHERE status = 'running' GROUP BY assignee", &[])
                .expect("sample");
            let mut p = peaks.lock().unwrap();
            let mut total = 0;
            for r in rows {
                let (who, n): (Option<String>, i64) = (r.get(0), r.get(1));
                total += n;
                let e = p.per_profile.entry(who.unwrap_or_default()).or_default();
                *e = (*e).max(n);
            }
            p.total = p.total.max(total);
            p.samples += 1;
            drop(p);
            std::thread::sleep(Duration::from_millis(5)); // scenario: the sampling period of the peaks
        }
    })
}

/// Every process whose environment names `home` as its berth home (the gateway of that home and its workers).
fn processes_of(home: &Home) -> Vec<i32> {
    let want = format!("BERTH_HOME={}", home.path().display());
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|entry| entry == want.as_bytes()))
        })
        .collect()
}

/// The end of each gateway's log, for a failure message.
fn logs(gateways: &[Gateway]) -> String {
    gateways
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let log = g.stderr();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            format!("--- host{i}:\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Polls `done` until it holds; past `timeout` fails with the gateways' logs.
fn wait_logged(gateways: &[Gateway], what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    if crate::support::poll(timeout, &mut done).is_err() {
        panic!("timed out waiting for {what}\n{}", logs(gateways));
    }
}

#[test]
fn three_gateways_share_one_board_hold_the_caps_and_survive_a_dead_host() {
    let Some(db) = TestDb::create() else { return };
    let tag = format!("pg{}", std::process::id());
    let profiles: Vec<String> = (0..PROFILES).map(|i| format!("{tag}p{i}")).collect();
    let homes: Vec<Home> = (0..3)
        .map(|_| {
            let mut h = Home::new();
            h.board_url = Some(db.url.clone());
            for p in &profiles {
                std::fs::create_dir_all(h.path().join("profiles").join(p)).unwrap();
            }
            h
        })
        .collect();
    // The board, with 300 tasks over the five profiles, written straight through the store.
    {
        let mut store = kanban_postgres::PgKanbanStore::open(&db.url, "setup").unwrap();
        let board = BoardSlug::default_board();
        for i in 0..TASKS {
            let new = NewTask {
                title: format!("task {i}"),
                assignee: Some(profiles[i % PROFILES].clone()),
                ..NewTask::default()
            };
            store
                .create_task(&board, &format!("t_{i:012x}"), &new, Timestamp::from_millis(1_700_000_000_000 + i as i64))
                .unwrap();
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let peaks = Arc::new(Mutex::new(Peaks::default()));
    let sampling = sampler(db.url.clone(), stop.clone(), peaks.clone());

    // Each worker waits a little, then completes its own task through the board.
    let worker = format!("sleep 0.3 && {} kanban complete {{task_id}} --result ok", berth_bin().display());
    let mut gateways = Vec::new();
    for (i, home) in homes.iter().enumerate() {
        let mut cmd = home.cmd();
        cmd.env("KANBAN_HOST_ID", format!("host{i}"))
            .env("KANBAN_MAX_IN_PROGRESS", GLOBAL_CAP.to_string())
            .env("KANBAN_MAX_IN_PROGRESS_PER_PROFILE", PER_PROFILE_CAP.to_string())
            .env("KANBAN_DISPATCH_INTERVAL_SECONDS", "1")
            .env("KANBAN_CLAIM_TTL_SECONDS", "3")
            .env("KANBAN_SPAWN_LEASE_SECONDS", "10")
            .env("KANBAN_WORKER_COMMAND", &worker)
            .env("BERTH_LOG", "debug");
        gateways.push(Gateway::start_with(home, &mut cmd));
    }
    let mut client = db.client();
    let count = |client: &mut postgres::Client, sql: &str| -> i64 { client.query_one(sql, &[]).unwrap().get(0) };

    // Mid-run: host0 dies. Its gateway and workers are frozen first (SIGSTOP, swept until no new process appears),
    // so the tasks it holds at that moment are known, then all of them are SIGKILLed.
    wait_logged(&gateways, "a quarter of the tasks done", Duration::from_secs(180), || {
        count(&mut client, "SELECT count(*) FROM berth.tasks WHERE status = 'done'") >= (TASKS / 4) as i64
    });
    let signal_all = |sig| {
        let mut seen = BTreeSet::new();
        loop {
            let now: BTreeSet<i32> = processes_of(&homes[0]).into_iter().collect();
            if now.is_subset(&seen) {
                return seen;
            }
            for pid in now.difference(&seen) {
                if let Some(p) = rustix::process::Pid::from_raw(*pid) {
                    let _ = rustix::process::kill_process(p, sig);
                }
            }
            seen.extend(now);
        }
    };
    let freeze_deadline = std::time::Instant::now() + Duration::from_secs(60);
    let orphaned: BTreeSet<String> = loop {
        assert!(
            std::time::Instant::now() < freeze_deadline,
            "host0 never held a task when frozen\n{}",
            logs(&gateways)
        );
        signal_all(rustix::process::Signal::STOP);
        let held: BTreeSet<String> = client
            .query("SELECT id FROM berth.tasks WHERE status = 'running' AND claim_lock LIKE 'host0:%'", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        if !held.is_empty() {
            break held;
        }
        signal_all(rustix::process::Signal::CONT);
        std::thread::sleep(Duration::from_millis(100)); // scenario: host0 runs 100 ms before the next freeze
    };
    let killed = signal_all(rustix::process::Signal::KILL);
    assert!(!killed.is_empty());

    wait_logged(&gateways, "every task done", Duration::from_secs(300), || {
        count(&mut client, "SELECT count(*) FROM berth.tasks WHERE status = 'done'") == TASKS as i64
    });
    stop.store(true, Ordering::SeqCst);
    sampling.join().unwrap();
    drop(gateways);

    let peaks = peaks.lock().unwrap();
    assert!(peaks.samples > 100, "the sampler ran ({} samples)", peaks.samples);
    assert!(peaks.total <= GLOBAL_CAP, "global cap exceeded: {} running at once", peaks.total);
    assert_eq!(peaks.total, GLOBAL_CAP, "the global cap was reached, so it was what held");
    for (who, n) in &peaks.per_profile {
        assert!(*n <= PER_PROFILE_CAP, "{who}: {n} running at once");
    }
    // Done exactly once: one `completed` event per task, and no two confirmed runs of a task overlapping.
    let completed: Vec<(String, i64)> = client
        .query("SELECT task_id, count(*) FROM berth.task_events WHERE kind = 'completed' GROUP BY task_id", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(completed.len(), TASKS);
    assert!(completed.iter().all(|(_, n)| *n == 1), "a task completed twice");
    let overlapping = count(
        &mut client,
        "SELECT count(*) FROM berth.task_runs a JOIN berth.task_runs b ON a.task_id = b.task_id AND a.id < b.id \
         WHERE a.confirmed_at IS NOT NULL AND b.confirmed_at IS NOT NULL AND b.confirmed_at < coalesce(a.ended_at, 0)",
    );
    assert_eq!(overlapping, 0, "a task ran twice at once");
    // The dead host's tasks were finished by the others.
    for id in &orphaned {
        let host: Option<String> = client
            .query_one(
                "SELECT worker_host FROM berth.task_runs WHERE task_id = $1 AND outcome = 'completed' ORDER BY id DESC LIMIT 1",
                &[id],
            )
            .unwrap()
            .get(0);
        assert!(matches!(host.as_deref(), Some("host1" | "host2")), "{id} finished on {host:?}");
    }
    let hosts: BTreeSet<String> = client
        .query("SELECT DISTINCT worker_host FROM berth.task_runs WHERE worker_host IS NOT NULL", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(hosts, BTreeSet::from(["host0".to_owned(), "host1".to_owned(), "host2".to_owned()]));
}

/// Fair share and start-rate limits over three hosts of one PostgreSQL board: the global cap of 3 binds, alpha's 10
/// tasks are older than beta's 4 and gamma's 6; gamma may run 1 at a time and start 3 a minute, the board 12 a
/// minute. Sampled while the three gateways dispatch: never more than 3 running (gamma 1); the board's runs started
/// within a minute never exceed 12 (gamma's 3), counted from the board as every host counts them; beta is not
/// starved (at least 2 of the first 8 starts, where oldest-first gave it none); no task completes twice.
#[test]
fn three_gateways_share_the_slots_fairly_and_hold_the_start_rate() {
    let Some(db) = TestDb::create() else { return };
    let tag = format!("fr{}", std::process::id());
    let [alpha, beta, gamma] = ["a", "b", "g"].map(|p| format!("{tag}{p}"));
    let homes: Vec<Home> = (0..3)
        .map(|_| {
            let mut h = Home::new();
            h.board_url = Some(db.url.clone());
            for p in [&alpha, &beta, &gamma] {
                std::fs::create_dir_all(h.path().join("profiles").join(p)).unwrap();
            }
            h
        })
        .collect();
    {
        let mut store = kanban_postgres::PgKanbanStore::open(&db.url, "setup").unwrap();
        let board = BoardSlug::default_board();
        let lanes = [(&alpha, 10, 1_000), (&beta, 4, 2_000), (&gamma, 6, 3_000)];
        for (who, n, from) in lanes {
            for i in 0..n {
                let new = NewTask { title: format!("{who} {i}"), assignee: Some(who.clone()), ..NewTask::default() };
                let at = Timestamp::from_millis(1_700_000_000_000 + from + i);
                store.create_task(&board, &format!("t_{who}_{i:02}"), &new, at).unwrap();
            }
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let peaks = Arc::new(Mutex::new(Peaks::default()));
    let sampling = sampler(db.url.clone(), stop.clone(), peaks.clone());
    let worker = format!("sleep 0.3 && {} kanban complete {{task_id}} --result ok", berth_bin().display());
    let mut gateways = Vec::new();
    for (i, home) in homes.iter().enumerate() {
        let mut cmd = home.cmd();
        cmd.env("KANBAN_HOST_ID", format!("host{i}"))
            .env("KANBAN_MAX_IN_PROGRESS", "3")
            .env("KANBAN_MAX_IN_PROGRESS_PER_PROFILE_OVERRIDES", format!(r#"{{"{gamma}": 1}}"#))
            .env("KANBAN_RATE_LIMIT_PER_MINUTE", "12")
            .env("KANBAN_RATE_LIMIT_PER_MINUTE_OVERRIDES", format!(r#"{{"{gamma}": 3}}"#))
            .env("KANBAN_DISPATCH_INTERVAL_SECONDS", "1")
            .env("KANBAN_WORKER_COMMAND", &worker)
            .env("BERTH_LOG", "debug");
        gateways.push(Gateway::start_with(home, &mut cmd));
    }
    let mut client = db.client();
    let count = |client: &mut postgres::Client, sql: &str| -> i64 { client.query_one(sql, &[]).unwrap().get(0) };
    wait_logged(&gateways, "twelve starts", Duration::from_secs(60), || {
        count(&mut client, "SELECT count(*) FROM berth.task_runs") >= 12
    });
    // The limit holds: for a while after the twelfth start, no host starts another (every tick of every host sees
    // the board's twelve starts of the last minute). All twelve finish meanwhile.
    let first_start: i64 = count(&mut client, "SELECT min(started_at) FROM berth.task_runs");
    wait_logged(&gateways, "the twelve done", Duration::from_secs(30), || {
        count(&mut client, "SELECT count(*) FROM berth.tasks WHERE status = 'done'") >= 12
    });
    std::thread::sleep(Duration::from_secs(5)); // scenario: five more seconds of ticks on three hosts
    let now_ms = count(&mut client, "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint");
    stop.store(true, Ordering::SeqCst);
    sampling.join().unwrap();
    drop(gateways);
    assert!(now_ms - first_start < 55_000, "the sample stayed within one minute of the first start");

    let peaks = peaks.lock().unwrap();
    assert!(peaks.samples > 100, "the sampler ran ({} samples)", peaks.samples);
    assert!(peaks.total <= 3, "global cap exceeded: {} running at once", peaks.total);
    assert!(peaks.per_profile.get(&gamma).copied().unwrap_or(0) <= 1, "gamma's cap: {:?}", peaks.per_profile);
    let runs: Vec<(String, String)> = client
        .query("SELECT task_id, assignee FROM berth.task_runs ORDER BY started_at, id", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(runs.len(), 12, "the board's 12 a minute, over three hosts: {runs:?}");
    let of = |who: &str, runs: &[(String, String)]| runs.iter().filter(|(_, a)| a == who).count();
    assert!((1..=3).contains(&of(&gamma, &runs)), "gamma's 3 a minute: {runs:?}");
    assert!(of(&beta, &runs[..8]) >= 2, "beta starved: {runs:?}");
    let completed: Vec<i64> = client
        .query("SELECT count(*) FROM berth.task_events WHERE kind = 'completed' GROUP BY task_id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(completed.len() == 12 && completed.iter().all(|n| *n == 1), "each started task done once: {completed:?}");
}
