//! The dashboard's figures: the board page at 10 000 tasks, a gateway draining 120 tasks with 20 live clients on
//! its event stream beside the same drain with none (interleaved rounds), and an idle gateway's resident memory with
//! the dashboard on beside it off. Every request is plain HTTP/1.1 over loopback with the token as a bearer.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{Figure, berth, berth_bin, board_home, median, ms};

/// One request on a fresh connection: the status and the body's length.
pub(crate) fn get(base: &str, path: &str, token: &str) -> (u16, usize) {
    let host = base.strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").map_or(raw.len(), |p| p + 4);
    let status = String::from_utf8_lossy(&raw[..head_end.min(raw.len())])
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, raw.len() - head_end)
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub(crate) fn terminate(child: &mut Child) {
    if let Some(pid) = i32::try_from(child.id()).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    child.wait().unwrap();
}

/// Waits until the dashboard at `port` answers with the token the home holds; the token.
pub(crate) fn dashboard_up(home: &Path, port: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(token) = std::fs::read_to_string(home.join("dashboard.token"))
            && get(&format!("http://127.0.0.1:{port}"), "/healthz", &token).0 == 200
        {
            return token;
        }
        assert!(Instant::now() < deadline, "the dashboard did not come up on port {port}");
        std::thread::sleep(Duration::from_millis(50)); // polling for the server to listen
    }
}

/// The board page (`GET /`, what a browser loads) at 10 000 tasks spread over four columns, `reps` times, with
/// `/api/board` beside it.
pub(crate) fn bench_board_page(dir: &Path, reps: usize) -> Figure {
    let home = dir.join("home-dashboard-10000");
    if !home.exists() {
        let from = board_home(dir, 10_000);
        std::fs::create_dir_all(home.join("profiles")).unwrap();
        for i in 0..100 {
            std::fs::create_dir_all(home.join("profiles").join(format!("p{i}"))).unwrap();
        }
        std::fs::copy(from.join(kanban_store::BOARD_FILE), home.join(kanban_store::BOARD_FILE)).unwrap();
        let conn = rusqlite::Connection::open(home.join(kanban_store::BOARD_FILE)).unwrap();
        conn.execute_batch(
            "UPDATE tasks SET status = 'blocked' WHERE rowid % 4 = 1;
             UPDATE tasks SET status = 'done', completed_at = created_at + 1000 WHERE rowid % 4 = 2;
             UPDATE tasks SET status = 'todo' WHERE rowid % 4 = 3;",
        )
        .unwrap();
    }
    let port = free_port();
    let mut child = berth(&home)
        .args(["dashboard", "--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let token = dashboard_up(&home, port);
    let base = format!("http://127.0.0.1:{port}");
    let time = |path: &str| -> (f64, usize) {
        let start = Instant::now();
        let (status, bytes) = get(&base, path, &token);
        assert_eq!(status, 200, "{path}");
        (ms(start.elapsed()), bytes)
    };
    time("/");
    time("/api/board");
    let (mut page, mut api) = (Vec::new(), Vec::new());
    let (mut page_bytes, mut api_bytes) = (0, 0);
    for _ in 0..reps {
        let (t, b) = time("/");
        page.push(t);
        page_bytes = b;
        let (t, b) = time("/api/board");
        api.push(t);
        api_bytes = b;
    }
    terminate(&mut child);
    let (p90, api_med) = (super::percentile(&mut page.clone(), 0.9), median(&mut api));
    let med = median(&mut page);
    Figure {
        name: "the dashboard's board page, 10 000 tasks (2 500 each ready, blocked, done, todo)".into(),
        berth: med,
        baseline: None,
        baseline_source: "",
        unit: "ms (median)",
        ratio: None,
        target: "≤ 300 ms".into(),
        met: med <= 300.0,
        detail: format!(
            "`berth dashboard` (release), {reps} requests alternating with `/api/board`, each on a fresh loopback \
             connection, timed from the request to the last byte (so the server's time and then some); p90 {p90:.1} \
             ms; the page {:.0} KiB (200 cards shown per column, the rest counted); `/api/board` (every task) \
             {api_med:.1} ms median, {:.1} MiB",
            page_bytes as f64 / 1024.0,
            api_bytes as f64 / 1_048_576.0
        ),
    }
}

/// Reads `/metrics` and returns the tick histogram's (sum in seconds, count).
fn tick_sum_count(base: &str, token: &str) -> (f64, f64) {
    let host = base.strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(host).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let field = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("{name} missing from /metrics"))
    };
    (field("berth_tick_duration_seconds_sum "), field("berth_tick_duration_seconds_count "))
}

/// One client as the page is: on each `change` from `/events` it fetches the board's columns again, one fetch at a
/// time, and one more when changes came meanwhile. Returns when `stop` is set; counts its fetches.
fn client(base: String, token: String, stop: Arc<AtomicBool>, fetches: Arc<AtomicUsize>) {
    let host = base.strip_prefix("http://").unwrap().to_owned();
    let mut s = TcpStream::connect(&host).unwrap();
    write!(s, "GET /events?token={token} HTTP/1.1\r\nhost: {host}\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    while !stop.load(Ordering::Relaxed) {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) => return,
            Ok(_) if line.contains("event: change") => {
                get(&base, "/?fragment=1", &token);
                fetches.fetch_add(1, Ordering::Relaxed);
                // Changes that came during the fetch: one more fetch for all of them.
                r.get_ref().set_read_timeout(Some(Duration::from_millis(1))).unwrap();
                let mut more = false;
                loop {
                    line.clear();
                    match r.read_line(&mut line) {
                        Ok(n) if n > 0 => more |= line.contains("event: change"),
                        _ => break,
                    }
                }
                r.get_ref().set_read_timeout(Some(Duration::from_millis(100))).unwrap();
                if more {
                    get(&base, "/?fragment=1", &token);
                    fetches.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => {}
        }
    }
}

/// What one drain measured.
struct Drain {
    per_sec: f64,
    tick_ms: f64,
    ticks: f64,
    fetches: usize,
}

/// A gateway (dashboard on) drains `n` tasks whose worker command completes its own task, with `clients` live
/// clients on the event stream; the tasks are made (one `kanban create --from`) once the clients are connected.
fn drain(n: usize, clients: usize) -> Drain {
    let home = tempfile::tempdir().unwrap();
    let profiles = ["dasha", "dashb"];
    for p in profiles {
        std::fs::create_dir_all(home.path().join("profiles").join(p)).unwrap();
    }
    let port = free_port();
    let worker = format!("kanban.worker_command={} kanban complete {{task_id}}", berth_bin().display());
    let mut gw = berth(home.path())
        .args(["-c", &format!("kanban.dashboard_port={port}"), "-c", &worker])
        .args(["-c", "kanban.max_in_progress_per_profile=4", "-c", "kanban.dispatch_interval_seconds=1"])
        .args(["gateway", "run"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let token = dashboard_up(home.path(), port);
    let base = format!("http://127.0.0.1:{port}");
    let stop = Arc::new(AtomicBool::new(false));
    let fetches = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (b, t, s, f) = (base.clone(), token.clone(), Arc::clone(&stop), Arc::clone(&fetches));
            std::thread::spawn(move || client(b, t, s, f))
        })
        .collect();
    let file = home.path().join("tasks.jsonl");
    let lines: Vec<String> =
        (0..n).map(|i| format!(r#"{{"title":"job {i}","command":"true","assignee":"{}"}}"#, profiles[i % 2])).collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let before = tick_sum_count(&base, &token);
    let out = berth(home.path()).args(["kanban", "create", "--from"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "bulk create: {}", String::from_utf8_lossy(&out.stderr));
    let db = home.path().join(kanban_store::BOARD_FILE);
    let done = || -> usize {
        rusqlite::Connection::open(&db)
            .and_then(|c| c.query_row("SELECT COUNT(*) FROM tasks WHERE status = 'done'", [], |r| r.get::<_, i64>(0)))
            .map_or(0, |n| usize::try_from(n).unwrap_or(0))
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    while done() < n {
        assert!(Instant::now() < deadline, "the drain did not finish in 300 s");
        std::thread::sleep(Duration::from_millis(100)); // polling the board for the end of the drain
    }
    let after = tick_sum_count(&base, &token);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    terminate(&mut gw);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (first, last): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT min(created_at) FROM task_events WHERE kind = 'claimed'), \
             (SELECT max(created_at) FROM task_events WHERE kind = 'completed')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let ticks = after.1 - before.1;
    Drain {
        per_sec: n as f64 * 1000.0 / (last - first).max(1) as f64,
        tick_ms: (after.0 - before.0) * 1000.0 / ticks.max(1.0),
        ticks,
        fetches: fetches.load(Ordering::Relaxed),
    }
}

/// `rounds` rounds, each a drain with no client and one with `clients`, their order alternating round to round.
pub(crate) fn bench_live_clients(rounds: usize, n: usize, clients: usize) -> Vec<Figure> {
    let (mut none, mut live) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for with in if round % 2 == 0 { [false, true] } else { [true, false] } {
            let d = drain(n, if with { clients } else { 0 });
            eprintln!(
                "bench: dashboard drain round {round}, {} clients: {:.1} tasks/s, mean tick {:.1} ms over {} ticks, \
                 {} fetches",
                if with { clients } else { 0 },
                d.per_sec,
                d.tick_ms,
                d.ticks,
                d.fetches
            );
            if with { live.push(d) } else { none.push(d) }
        }
    }
    let list =
        |v: &[Drain], f: fn(&Drain) -> f64| v.iter().map(|d| format!("{:.1}", f(d))).collect::<Vec<_>>().join(", ");
    let med = |v: &[Drain], f: fn(&Drain) -> f64| median(&mut v.iter().map(f).collect::<Vec<_>>());
    let (rate_none, rate_live) = (med(&none, |d| d.per_sec), med(&live, |d| d.per_sec));
    let (tick_none, tick_live) = (med(&none, |d| d.tick_ms), med(&live, |d| d.tick_ms));
    let fetches: Vec<String> = live.iter().map(|d| d.fetches.to_string()).collect();
    let how = format!(
        "{rounds} round(s), each a drain with no client and one with {clients}, order alternating; a gateway with \
         the dashboard on (cap 4 × 2 profiles, `kanban.worker_command` completing its task at once), tasks made \
         once the clients listen; each client on `/events` fetches `/?fragment=1` on every change, as the page does \
         ({} fetches per drain)",
        fetches.join(", ")
    );
    let rate_ratio = rate_live / rate_none;
    let tick_ratio = tick_live / tick_none;
    vec![
        Figure {
            name: format!("a gateway draining {n} tasks with {clients} live dashboard clients: throughput"),
            berth: rate_live,
            baseline: Some(rate_none),
            baseline_source: "the same drain with no client, interleaved rounds",
            unit: "tasks/s (median)",
            ratio: Some(rate_ratio),
            target: "within noise of no clients (ratio ≥ 0.8)".into(),
            met: rate_ratio >= 0.8,
            detail: format!(
                "first claim to last completion, from the board's events; with clients {}, without {}; {how}",
                list(&live, |d| d.per_sec),
                list(&none, |d| d.per_sec)
            ),
        },
        Figure {
            name: format!("a gateway draining {n} tasks with {clients} live dashboard clients: tick duration"),
            berth: tick_live,
            baseline: Some(tick_none),
            baseline_source: "the same drain with no client, interleaved rounds",
            unit: "ms (median of each drain's mean tick)",
            ratio: Some(tick_ratio),
            target: "within noise of no clients (ratio ≤ 1.25)".into(),
            met: tick_ratio <= 1.25,
            detail: format!(
                "each drain's mean tick from `berth_tick_duration_seconds` (sum and count, read before the tasks \
                 were made and after the last finished); with clients {}, without {}",
                list(&live, |d| d.tick_ms),
                list(&none, |d| d.tick_ms)
            ),
        },
    ]
}

/// VmRSS and VmHWM (MiB) of a process.
fn rss(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// An idle gateway with the dashboard on, after 6 s and a few pages and a scrape, beside one with it off.
pub(crate) fn bench_idle_memory() -> Figure {
    let measure = |dashboard: bool| -> (f64, f64) {
        let home = tempfile::tempdir().unwrap();
        // A board with a few tasks, so the pages have something to read; their profile does not exist, so they wait.
        for i in 0..20 {
            let args = ["--command", "true", "--assignee", "nobody-yet", "--allow-unknown-assignee"];
            let out = berth(home.path()).args(["kanban", "create", &format!("idle {i}")]).args(args).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        let port = free_port();
        let mut cmd = berth(home.path());
        if dashboard {
            cmd.args(["-c", &format!("kanban.dashboard_port={port}")]);
        }
        let mut child = cmd
            .args(["-c", "kanban.dispatch_interval_seconds=1", "gateway", "run"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_secs(6)); // idle: five ticks
        if dashboard {
            let (base, token) = (format!("http://127.0.0.1:{port}"), dashboard_up(home.path(), port));
            for path in ["/", "/api/board", "/profiles", "/diagnostics", "/metrics", "/"] {
                assert_eq!(get(&base, path, &token).0, 200, "{path}");
            }
            std::thread::sleep(Duration::from_secs(1)); // a tick after the pages
        }
        let m = rss(child.id());
        terminate(&mut child);
        m
    };
    let (off, _) = measure(false);
    let (on, hwm) = measure(true);
    Figure {
        name: "idle gateway resident memory with the dashboard on".into(),
        berth: on,
        baseline: Some(off),
        baseline_source: "the same idle gateway with the dashboard off, same run",
        unit: "MiB (VmRSS)",
        ratio: Some(on / off),
        target: "≤ 20 MiB".into(),
        met: on <= 20.0,
        detail: format!(
            "after 6 s idle (20 tasks on the board), then the board page twice, `/api/board`, profiles, diagnostics \
             and a `/metrics` scrape, and one more tick; peak (VmHWM) {hwm:.1} MiB"
        ),
    }
}
