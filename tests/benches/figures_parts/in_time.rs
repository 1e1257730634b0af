//! Tasks in time (issue 39): the dry tick over a board of which half the tasks are scheduled in the future, beside the
//! same board all ready (alternately, one run), and how soon a running gateway claims a task once it is due.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use domain::ids::BoardSlug;
use kanban_store::SqliteKanbanStore;

use super::{Figure, berth, board_file, median, ms, now, tick_cfg, tick_request};

/// The dry tick at 100 000 tasks, half of them scheduled an hour ahead, against 100 000 ready (alternating rounds).
pub fn bench_scheduled_tick(dir: &Path, rounds: usize) -> Figure {
    let ready = board_file(dir, 100_000);
    let half = dir.join("board-100000-half-scheduled.db");
    std::fs::copy(&ready, &half).unwrap();
    {
        let conn = rusqlite::Connection::open(&half).unwrap();
        // Every other run of 100 ids: half of each profile's tasks (profiles go round by id).
        let later = now().as_millis() + 3_600_000;
        let n = conn.execute("UPDATE tasks SET not_before = ?1 WHERE (rowid / 100) % 2 = 0", [later]).unwrap();
        assert_eq!(n, 50_000);
        conn.pragma_update(None, "wal_checkpoint", "TRUNCATE").unwrap();
    }
    let board = BoardSlug::default_board();
    let cfg = tick_cfg();
    let tick = |path: &Path| -> f64 {
        let store = SqliteKanbanStore::open_read_only(path).unwrap();
        let req = tick_request(&board, &cfg);
        let start = Instant::now();
        let plan = domain::dispatcher::plan(&store, &req).unwrap();
        let took = ms(start.elapsed());
        assert_eq!(plan.spawns().count(), 300, "100 profiles at cap 3 either way");
        took
    };
    let (mut all_ready, mut scheduled) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        all_ready.push(tick(&ready));
        scheduled.push(tick(&half));
    }
    let (r, s) = (median(&mut all_ready), median(&mut scheduled));
    Figure {
        name: "dispatch dry run, 100 000 tasks of which 50 000 are scheduled an hour ahead".into(),
        berth: s,
        baseline: Some(r),
        baseline_source: "the same board with all 100 000 ready, measured alternately in this run",
        unit: "ms (median)",
        ratio: Some(s / r),
        target: "no more than the all-ready tick (ratio ≤ 1.1, noise)".into(),
        met: s / r <= 1.1,
        detail: format!("{rounds} alternating ticks each (snapshot read + plan, 300 spawns planned on both boards)"),
    }
}

/// Due → claimed: a gateway ticking once a minute claims a task created `--in 2s` when it is due; the time from its
/// `not_before` to its `claimed` event, read from the board file (SQLite), over `samples` tasks one at a time (the
/// first after the gateway's start, so its first tick is not what is measured).
pub fn bench_wake(samples: usize) -> Figure {
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = berth_cmd(home.path()).args(args).output().unwrap();
        assert!(out.status.success(), "berth {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(&["profile", "create", "wake"]);
    run(&["config", "set", "kanban.dispatch_interval_seconds", "60"]);
    run(&["config", "set", "kanban.worker_command", "true"]);
    run(&["config", "set", "kanban.worker_exit_outcome", "true"]);
    let mut gateway = Gateway(berth_cmd(home.path()).args(["gateway", "run"]).stderr(Stdio::null()).spawn().unwrap());
    let db = home.path().join(kanban_store::BOARD_FILE);
    // A first task claimed at the gateway's first tick: the samples begin with the gateway up and waiting.
    let out = run(&["--json", "kanban", "create", "warm", "--assignee", "wake"]);
    let warm = serde_json::from_str::<serde_json::Value>(&out).unwrap()["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    while claimed_at(&db, &warm).is_none() {
        assert!(Instant::now() < deadline, "the gateway did not claim a ready task within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut late = Vec::new();
    for i in 0..samples {
        let out = run(&["--json", "kanban", "create", &format!("wake {i}"), "--assignee", "wake", "--in", "2s"]);
        let id = serde_json::from_str::<serde_json::Value>(&out).unwrap()["id"].as_str().unwrap().to_owned();
        // Read while it waits: a claim clears the task's `not_before`.
        let due = not_before(&db, &id).expect("a task created --in 2s has its time");
        let deadline = Instant::now() + Duration::from_secs(30);
        let gap = loop {
            if let Some(claimed) = claimed_at(&db, &id) {
                break claimed - due;
            }
            assert!(Instant::now() < deadline, "task {id} was not claimed within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        };
        late.push(gap as f64);
    }
    gateway.0.kill().ok();
    let mut sorted = late.clone();
    let m = median(&mut late);
    sorted.sort_by(f64::total_cmp);
    Figure {
        name: "a scheduled task's wake: due → claimed by a gateway ticking once a minute (SQLite)".into(),
        berth: m,
        baseline: None,
        baseline_source: "",
        unit: "ms (median)",
        ratio: None,
        target: "≤ 1 000 ms".into(),
        met: m <= 1000.0,
        detail: format!(
            "{samples} tasks created `--in 2s` one at a time; max {:.0} ms; the time from `not_before` to the `claimed` event on the board",
            sorted.last().copied().unwrap_or_default()
        ),
    }
}

/// The task's `not_before` (epoch milliseconds).
fn not_before(db: &Path, id: &str) -> Option<i64> {
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    conn.query_row("SELECT not_before FROM tasks WHERE id = ?1", [id], |r| r.get(0)).ok()
}

/// When the task was first claimed (its `claimed` event), once it was.
pub(super) fn claimed_at(db: &Path, id: &str) -> Option<i64> {
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    conn.query_row(
        "SELECT created_at FROM task_events WHERE task_id = ?1 AND kind = 'claimed' ORDER BY id LIMIT 1",
        [id],
        |r| r.get(0),
    )
    .ok()
}

fn berth_cmd(home: &Path) -> Command {
    let mut c = berth(home);
    c.env("BERTH_PROFILE", "wake");
    c
}

/// The bench's gateway, stopped when the figure is done or the bench panics.
pub(super) struct Gateway(pub(super) Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
