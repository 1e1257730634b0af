//! The gateway's dashboard while its board is slow or away (issue 37): an outside writer holding the SQLite board's
//! write lock for 6 s, or the PostgreSQL server frozen (SIGSTOP) for 6 s. Ticks wait for the board on their own
//! thread; `/healthz`, `/metrics` and the board page answer at once all the while (the board page and `/metrics` as
//! they last were, marked stale, where the board cannot be read), and the gateway dispatches again once the board
//! is back.

use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::dashboard::http;
use crate::pg::Cluster;
use crate::support::{Gateway, Home, wait_until};

const PATHS: &[&str] = &["/healthz", "/metrics", "/"];
const HOLD: Duration = Duration::from_secs(6);

/// Every path of [`PATHS`] asked in turn while `held` is true; each answer's path, status and time.
fn ask_while(base: &str, token: &str, held: &dyn Fn() -> bool) -> Vec<(&'static str, u16, Duration)> {
    let auth = format!("Bearer {token}");
    let mut seen = Vec::new();
    while held() {
        for path in PATHS {
            let started = Instant::now();
            let (status, _) = http(base, "GET", path, &[("authorization", &auth)], "");
            seen.push((*path, status, started.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(100)); // scenario: the requests' pace
    }
    seen
}

/// The answers' times: none near the seconds a blocked runtime cost, nine in ten within 200 ms.
fn check(seen: &[(&str, u16, Duration)], what: &str) {
    let mut times: Vec<Duration> = seen.iter().map(|s| s.2).collect();
    times.sort();
    assert!(times.len() >= 15, "{what}: too few requests made: {seen:?}");
    let p90 = times[times.len() * 9 / 10];
    let max = *times.last().unwrap();
    eprintln!(
        "{what}: {} requests, median {:?}, p90 {p90:?}, max {max:?}; statuses {:?}",
        times.len(),
        times[times.len() / 2],
        seen.iter().map(|s| s.1).collect::<std::collections::BTreeSet<_>>()
    );
    assert!(p90 <= Duration::from_millis(200), "{what}: p90 {p90:?}: {seen:?}");
    assert!(max < Duration::from_secs(1), "{what}: max {max:?}: {seen:?}");
    for (path, status, _) in seen {
        assert!(matches!(status, 200 | 503), "{what}: {path} answered {status}");
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A gateway with its dashboard, past two ticks, every path of [`PATHS`] answered once (so the pages are kept).
fn gateway_with_dashboard(home: &Home) -> (Gateway, String, String) {
    let port = free_port();
    let gw = Gateway::start(home, &["-c", &format!("kanban.dashboard_port={port}")]);
    let token = wait_until("the dashboard's token", Duration::from_secs(10), || {
        std::fs::read_to_string(home.path().join("dashboard.token")).ok()
    });
    wait_until("two ticks", Duration::from_secs(15), || home.gateway_status()["ticks"].as_u64().unwrap_or(0) >= 2);
    let base = format!("http://127.0.0.1:{port}");
    for path in PATHS {
        let (status, body) = http(&base, "GET", path, &[("authorization", &format!("Bearer {token}"))], "");
        assert_eq!(status, 200, "{path}: {body}");
    }
    (gw, base, token)
}

/// A profile and an external worker (`true`, its exit its outcome, under the home's runner), and one task.
fn set_up(home: &Home) {
    home.ok(&["profile", "create", "alpha"]);
    home.ok(&["config", "set", "kanban.worker_command", "true"]);
    home.ok(&["config", "set", "kanban.worker_exit_outcome", "true"]);
    home.json(&["kanban", "create", "before", "--assignee", "alpha"]);
}

/// A task created now ends done: the gateway dispatches.
fn dispatches(home: &Home, what: &str) {
    let id = home.json(&["kanban", "create", what, "--assignee", "alpha"])["id"].as_str().unwrap().to_owned();
    wait_until(&format!("{what} done"), Duration::from_secs(20), || {
        home.json(&["kanban", "show", &id])["task"]["status"] == "done"
    });
}

#[test]
fn the_dashboard_answers_at_once_while_an_outside_writer_holds_the_sqlite_board() {
    let home = Home::new();
    set_up(&home);
    let (gw, base, token) = gateway_with_dashboard(&home);
    let board = home.path().join(kanban_store::BOARD_FILE);
    assert!(board.exists(), "the board file at {}", board.display());
    let until = Instant::now() + HOLD;
    let holder = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(board).unwrap();
        conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
        conn.execute("CREATE TABLE IF NOT EXISTS held_by_the_test (x)", []).unwrap();
        std::thread::sleep(HOLD); // scenario: the outside writer's hold
        conn.execute_batch("ROLLBACK").unwrap();
    });
    let seen = ask_while(&base, &token, &|| Instant::now() < until);
    holder.join().unwrap();
    check(&seen, "SQLite write lock held");
    dispatches(&home, "after the lock");
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0), "{err}");
}

/// The third attack (F3): a process holding the WAL's read locks (bytes 123–127 of the `-shm` file, as a stuck
/// reader or a recovering writer does) made the gateway's board watch wait on the runtime that serves the dashboard.
#[test]
fn the_dashboard_answers_at_once_while_an_outside_process_holds_the_wals_read_locks() {
    let home = Home::new();
    set_up(&home);
    let (gw, base, token) = gateway_with_dashboard(&home);
    let shm = home.path().join(format!("{}-shm", kanban_store::BOARD_FILE));
    assert!(shm.exists(), "the WAL index at {}", shm.display());
    let hold = "import fcntl, sys, time\nf = open(sys.argv[1], 'r+b')\nfcntl.lockf(f, fcntl.LOCK_EX, 5, 123)\n\
                print('held', flush=True)\n\
                time.sleep(float(sys.argv[2]))  # // scenario: the holder keeps the locks for HOLD\n";
    let mut holder = std::process::Command::new("python3")
        .args(["-c", hold, &shm.display().to_string(), &HOLD.as_secs_f64().to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(holder.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "held");
    let until = Instant::now() + HOLD;
    let seen = ask_while(&base, &token, &|| Instant::now() < until);
    assert!(holder.wait().unwrap().success());
    check(&seen, "the WAL's read locks held");
    dispatches(&home, "after the locks");
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn the_dashboard_answers_at_once_while_the_postgresql_server_is_frozen() {
    let Some(cluster) = Cluster::start() else { return };
    let mut home = Home::new();
    home.board_url = Some(cluster.url());
    set_up(&home);
    let (gw, base, token) = gateway_with_dashboard(&home);
    let pids = cluster.pids();
    assert!(pids.len() > 1, "the server and its backends: {pids:?}");
    let frozen = |sig| {
        for pid in &pids {
            crate::support::signal(*pid as u32, sig);
        }
    };
    frozen(Signal::STOP);
    let until = Instant::now() + HOLD;
    let seen = ask_while(&base, &token, &|| Instant::now() < until);
    frozen(Signal::CONT);
    check(&seen, "PostgreSQL server frozen");
    let healthz: Vec<u16> = seen.iter().filter(|s| s.0 == "/healthz").map(|s| s.1).collect();
    assert!(healthz.contains(&503), "/healthz said the board was unavailable: {healthz:?}");
    dispatches(&home, "after the freeze");
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0), "{err}");
}
