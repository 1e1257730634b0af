//! The gateway's dashboard while its board is slow or away (issue 37): `/healthz`, `/metrics` and the board page
//! asked in turn while an outside writer holds the SQLite board's write lock for 6 s, or while the PostgreSQL server
//! (a private cluster the bench starts, its postmaster and backends) is frozen with SIGSTOP for 6 s, beside the same
//! requests with the board free, in alternating rounds. The outage is made as `tests/src/slow_board.rs` makes it.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::figures_dashboard::{dashboard_up, free_port, get, terminate};
use super::figures_pg_cluster::Cluster;
use super::{Figure, berth, median, ms, percentile};

const PATHS: [&str; 3] = ["/healthz", "/metrics", "/"];
const HOLD: Duration = Duration::from_secs(6);
/// The pace of the requests: the three paths in turn, then this pause (as the test asks them).
const PACE: Duration = Duration::from_millis(100);

/// Each path's answers: times (ms) and the statuses seen.
#[derive(Default)]
struct Answers {
    times: [Vec<f64>; 3],
    statuses: [BTreeSet<u16>; 3],
    /// Each span's slowest answer per path, in the order the spans ran.
    span_max: Vec<[f64; 3]>,
}

impl Answers {
    /// Asks every path in turn, each on a fresh connection, until `until`.
    fn ask_until(&mut self, base: &str, token: &str, until: Instant) {
        let mut span_max = [0.0f64; 3];
        while Instant::now() < until {
            for (i, path) in PATHS.iter().enumerate() {
                let start = Instant::now();
                let (status, _) = get(base, path, token);
                let took = ms(start.elapsed());
                self.times[i].push(took);
                span_max[i] = span_max[i].max(took);
                self.statuses[i].insert(status);
            }
            std::thread::sleep(PACE); // scenario: the requests' pace
        }
        self.span_max.push(span_max);
    }
}

/// How the board is made slow or away for [`HOLD`].
enum Outage<'a> {
    /// An outside connection holds `BEGIN EXCLUSIVE` on this board file.
    SqliteLock(&'a Path),
    /// The private server's processes are stopped (SIGSTOP), then continued.
    PgFrozen(&'a Cluster),
}

impl Outage<'_> {
    /// Asks the paths for [`HOLD`] while the board is held.
    fn during(&self, base: &str, token: &str, answers: &mut Answers) {
        match self {
            Outage::SqliteLock(board) => {
                let board = board.to_path_buf();
                let (locked_tx, locked) = std::sync::mpsc::channel();
                let holder = std::thread::spawn(move || {
                    let conn = rusqlite::Connection::open(board).unwrap();
                    conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
                    conn.execute("CREATE TABLE IF NOT EXISTS held_by_the_bench (x)", []).unwrap();
                    locked_tx.send(()).unwrap();
                    std::thread::sleep(HOLD); // scenario: the outside writer's hold
                    conn.execute_batch("ROLLBACK").unwrap();
                });
                locked.recv().unwrap();
                answers.ask_until(base, token, Instant::now() + HOLD);
                holder.join().unwrap();
            }
            Outage::PgFrozen(cluster) => {
                let pids = cluster.pids();
                assert!(pids.len() > 1, "the server and its backends: {pids:?}");
                let signal = |sig| {
                    for pid in &pids {
                        if let Some(p) = rustix::process::Pid::from_raw(*pid) {
                            let _ = rustix::process::kill_process(p, sig);
                        }
                    }
                };
                signal(Signal::STOP);
                answers.ask_until(base, token, Instant::now() + HOLD);
                signal(Signal::CONT);
            }
        }
    }
}

/// The machine's load average over the last minute, as `/proc/loadavg` gives it.
pub(super) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().next().unwrap_or("?").to_owned()
}

/// One store's rows: a gateway with its dashboard on a home (on `cluster`'s server, else SQLite), `rounds` holds of
/// 6 s beside as many 6 s spans with the board free, the order alternating.
fn measure(store: &str, cluster: Option<&Cluster>, rounds: usize) -> Vec<Figure> {
    let home = tempfile::tempdir().unwrap();
    let url = cluster.map(Cluster::url);
    let url = url.as_deref();
    let cmd = || {
        let mut c = berth(home.path());
        if let Some(url) = url {
            c.env("KANBAN_DATABASE_URL", url);
        }
        c
    };
    let run = |args: &[&str]| {
        let out = cmd().args(args).output().unwrap();
        assert!(out.status.success(), "berth {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    // As the test sets it up: a profile, an external worker (`true`, its exit its outcome) and one task.
    run(&["profile", "create", "alpha"]);
    run(&["config", "set", "kanban.worker_command", "true"]);
    run(&["config", "set", "kanban.worker_exit_outcome", "true"]);
    run(&["kanban", "create", "before", "--assignee", "alpha"]);
    let port = free_port();
    let mut gateway = cmd()
        .args(["-c", &format!("kanban.dashboard_port={port}"), "gateway", "run"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let token = dashboard_up(home.path(), port);
    let base = format!("http://127.0.0.1:{port}");
    let ticks = || -> u64 {
        let out = cmd().args(["gateway", "status", "--json"]).output().unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout).map_or(0, |v| v["ticks"].as_u64().unwrap_or(0))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while ticks() < 2 {
        assert!(Instant::now() < deadline, "{store}: the gateway did not tick twice within 30 s");
        std::thread::sleep(Duration::from_millis(100)); // polling the gateway's status
    }
    for path in PATHS {
        assert_eq!(get(&base, path, &token).0, 200, "{store}: {path} before the rounds");
    }
    let board = home.path().join(kanban_store::BOARD_FILE);
    let outage = match cluster {
        Some(c) => Outage::PgFrozen(c),
        None => Outage::SqliteLock(&board),
    };
    let (mut held, mut free) = (Answers::default(), Answers::default());
    let load_before = loadavg();
    // The spans in the order they ran: held (true) or free, and their index in their `Answers`.
    let mut spans: Vec<(bool, usize)> = Vec::new();
    for r in 0..rounds {
        let free_first = r % 2 == 1;
        if free_first {
            spans.push((false, free.span_max.len()));
            free.ask_until(&base, &token, Instant::now() + HOLD);
        }
        spans.push((true, held.span_max.len()));
        outage.during(&base, &token, &mut held);
        // The board back: the gateway reads it again before the free span starts.
        let deadline = Instant::now() + Duration::from_secs(30);
        while get(&base, "/healthz", &token).0 != 200 {
            assert!(Instant::now() < deadline, "{store}: /healthz not 200 within 30 s of the hold's end");
            std::thread::sleep(PACE);
        }
        if !free_first {
            spans.push((false, free.span_max.len()));
            free.ask_until(&base, &token, Instant::now() + HOLD);
        }
    }
    let load_after = loadavg();
    terminate(&mut gateway);
    let what = match url {
        Some(_) => "the PostgreSQL server is frozen (SIGSTOP of its postmaster and backends)",
        None => "an outside writer holds the SQLite board's write lock (BEGIN EXCLUSIVE)",
    };
    PATHS
        .iter()
        .enumerate()
        .map(|(i, path)| {
            let (h, f) = (&mut held.times[i].clone(), &mut free.times[i].clone());
            let (h_med, h90, h_max) = (median(h), percentile(h, 0.9), h.iter().copied().fold(0.0, f64::max));
            let (f_med, f90, f_max) = (median(f), percentile(f, 0.9), f.iter().copied().fold(0.0, f64::max));
            let order: Vec<String> = spans
                .iter()
                .map(|&(h, j)| {
                    let max = if h { held.span_max[j][i] } else { free.span_max[j][i] };
                    format!("{} {max:.0}", if h { "held" } else { "free" })
                })
                .collect();
            let page = if *path == "/" { "the board page (`/`)".to_owned() } else { format!("`{path}`") };
            Figure {
                name: format!("{store}: {page} while {what} for 6 s"),
                berth: h_med,
                baseline: Some(f_med),
                baseline_source: "the same requests to the same gateway with the board free, alternating 6 s spans",
                unit: "ms (median)",
                ratio: Some(h_med / f_med),
                target: "answers in milliseconds: p90 ≤ 200 ms, max < 1 s (3.6–4.6 s before issue 37)".into(),
                met: h90 <= 200.0 && h_max < 1000.0,
                detail: format!(
                    "held: {} requests in {rounds} holds, p90 {h90:.1} ms, max {h_max:.1} ms, statuses {:?}; free: {} \
                     requests, p90 {f90:.1} ms, max {f_max:.1} ms, statuses {:?}; `gateway run` with the dashboard on \
                     (one profile, an external worker `true`), `/healthz`, `/metrics`, `/` in turn every 100 ms, each \
                     on a fresh loopback connection, timed to the last byte; the spans in order with each one's max \
                     (ms): {}; load average {load_before} before, {load_after} after",
                    held.times[i].len(),
                    held.statuses[i],
                    free.times[i].len(),
                    free.statuses[i],
                    order.join(", ")
                ),
            }
        })
        .collect()
}

/// The rows of both stores: SQLite, then PostgreSQL on a private cluster the bench starts (never a shared server:
/// it is frozen); PostgreSQL's are left out, said on stderr, without the server's programs.
pub fn bench_slow_board(quick: bool) -> Vec<Figure> {
    let rounds = if quick { 1 } else { 3 };
    let mut figures = measure("SQLite", None, rounds);
    match super::figures_pg_cluster::server_bin() {
        Some(bin) => {
            let cluster = Cluster::start_with(bin);
            figures.extend(measure("PostgreSQL", Some(&cluster), rounds));
        }
        None => {
            eprintln!("bench: no PostgreSQL server programs (/usr/lib/postgresql/*/bin): its slow-board rows left out")
        }
    }
    figures
}
