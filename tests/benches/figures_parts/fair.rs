//! Fair share and start-rate limits (issue 40): the dry tick at 10 000 and 100 000 ready tasks with a binding global
//! cap (the fair-share order decides who gets the slots), a board-wide start rate with starts already in its window,
//! and ten profiles at their own start rate, beside today's tick on the same board (per-profile cap only), measured
//! alternately.

use std::path::Path;
use std::time::Instant;

use domain::board::TickConfig;
use domain::ids::BoardSlug;
use kanban_store::SqliteKanbanStore;

use super::{Figure, board_file, median, ms, now, tick_cfg, tick_request};

/// Runs started in the rate window, written into a copy of the board: the tick counts them.
const RECENT_STARTS: usize = 150;

/// Today's configuration plus the limits: `kanban.max_in_progress` 200 (below the 300 the per-profile caps allow, so
/// it binds and fair share picks), `kanban.rate_limit_per_minute` 400, and p0..p9 at 5 starts a minute each.
fn limited_cfg() -> TickConfig {
    let mut cfg = tick_cfg();
    cfg.caps.max_in_progress = Some(200);
    cfg.caps.rate_per_minute = Some(400);
    cfg.caps.rate_overrides = (0..10).map(|i| (format!("p{i}"), 5)).collect();
    cfg
}

/// The board of `n` ready tasks with [`RECENT_STARTS`] runs started 30 s ago (of its first tasks, by their profiles).
fn board_with_starts(dir: &Path, n: usize) -> std::path::PathBuf {
    let ready = board_file(dir, n);
    let path = dir.join(format!("board-{n}-recent-starts.db"));
    std::fs::copy(&ready, &path).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let at = now().as_millis() - 30_000;
    let added = conn
        .execute(
            "INSERT INTO task_runs (task_id, status, assignee, started_at, ended_at, outcome) \
             SELECT id, 'done', assignee, ?1, ?1, 'completed' FROM tasks ORDER BY rowid LIMIT ?2",
            rusqlite::params![at, RECENT_STARTS as i64],
        )
        .unwrap();
    assert_eq!(added, RECENT_STARTS);
    conn.pragma_update(None, "wal_checkpoint", "TRUNCATE").unwrap();
    path
}

/// The dry tick with the limits on against today's (alternating rounds), at 10 000 and 100 000 ready tasks.
pub fn bench_fair_tick(dir: &Path, rounds: usize) -> Vec<Figure> {
    let board = BoardSlug::default_board();
    let (today, limited) = (tick_cfg(), limited_cfg());
    let tick = |path: &Path, cfg: &TickConfig, spawns: usize| -> f64 {
        let store = SqliteKanbanStore::open_read_only(path).unwrap();
        let req = tick_request(&board, cfg);
        let start = Instant::now();
        let plan = domain::dispatcher::plan(&store, &req).unwrap();
        let took = ms(start.elapsed());
        assert_eq!(plan.spawns().count(), spawns);
        took
    };
    [10_000, 100_000]
        .into_iter()
        .map(|n| {
            let plain = board_file(dir, n);
            let started = board_with_starts(dir, n);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                // 100 profiles at cap 3: 300 today; 200 with the global cap binding.
                a.push(tick(&plain, &today, 300));
                b.push(tick(&started, &limited, 200));
            }
            let (t, f) = (median(&mut a), median(&mut b));
            Figure {
                name: format!(
                    "dispatch dry run, {n} ready tasks, fair share and start-rate limits on (global cap 200 binding, board 400/min with {RECENT_STARTS} starts in the window, 10 profiles at 5/min)"
                ),
                berth: f,
                baseline: Some(t),
                baseline_source: "today's dry tick on the same board (100 profiles, cap 3, no global limit), measured alternately in this run",
                unit: "ms (median)",
                ratio: Some(f / t),
                target: "ratio ≤ 1.5".into(),
                met: f / t <= 1.5,
                detail: format!(
                    "{rounds} alternating ticks each (snapshot read + plan, streamed); 200 spawns chosen in the fair order among 300 candidates, beside 300"
                ),
            }
        })
        .collect()
}
