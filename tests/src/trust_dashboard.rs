//! The third trust round (issue 38), the dashboard from outside: a task id in a URL that names another file, and a
//! flood of idle connections (before any token is checked) that took the gateway's descriptors and stopped its
//! dispatching. The cookie handed to other loopback ports is the browser's test (`browser.rs`).

use std::io::Read;
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use crate::dashboard::{Served, http};
use crate::support::{Gateway, Home, berth_bin, wait_until};

/// `GET /api/tasks/..%2F..%2Fsecret/log` read `<home>/secret.log` (the log is `<home>/kanban/logs/<id>.log`, the id
/// decoded from the path): now an id that names a path is no task's, 404, and nothing of the file is answered.
#[test]
fn a_task_id_that_names_another_file_reads_nothing() {
    let home = Home::new();
    let id = home.json(&["kanban", "create", "x", "--command", "true"])["id"].as_str().unwrap().to_owned();
    std::fs::write(home.path().join("secret.log"), "the-secret-line\n").unwrap();
    // The logs' folder, as once a worker ran (the path is resolved through it).
    std::fs::create_dir_all(home.path().join("kanban/logs")).unwrap();
    let d = Served::start(&home, &[]);
    for id in ["..%2F..%2Fsecret", "%2E%2E%2F%2E%2E%2Fsecret", "..%2f..%2fsecret", "..%5C..%5Csecret"] {
        let (status, body) = d.get(&format!("/api/tasks/{id}/log"));
        assert!(!body.contains("the-secret-line"), "{id}: the file was read: {body}");
        assert_eq!(status, 404, "{id}: {body}");
        assert_eq!(body.lines().count(), 1, "{id}: one line: {body}");
    }
    // A real task's log is still served.
    assert_eq!(d.get(&format!("/api/tasks/{id}/log")).0, 200);
}

/// Hundreds of idle connections to the gateway's dashboard (none sends a byte, so no token is ever checked), under a
/// soft open-file limit of 256 as a service manager may give: before, they took every descriptor and the gateway
/// stopped dispatching. Now the gateway raises its soft limit to the hard one, caps its open connections, and closes
/// a connection whose request head is not in within its head timeout (idle, or a byte at a time): tasks are
/// dispatched and `/healthz` answers.
#[test]
fn idle_connections_to_the_dashboard_do_not_stop_dispatching() {
    let home = Home::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let worker = format!("{} kanban complete {{task_id}} --result done-anyway", berth_bin().display());
    home.ok(&["config", "set", "kanban.worker_command", &worker]);
    let mut cmd = Command::new("prlimit");
    cmd.arg("--nofile=256:8192").arg("--").arg(berth_bin());
    for (k, v) in home.cmd().get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.args(["-c", "kanban.dispatch_interval_seconds=1", "-c", &format!("kanban.dashboard_port={port}")]);
    let gw = Gateway::start_with(&home, &mut cmd);
    let base = format!("http://127.0.0.1:{port}");
    wait_until("the dashboard to listen", Duration::from_secs(10), || TcpStream::connect(("127.0.0.1", port)).is_ok());
    // A connection the gateway no longer accepts (its backlog full) waits in connect: the flood stops there.
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let (mut idle, mut refused) = (Vec::new(), 0);
    while idle.len() < 600 && refused < 5 {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(c) => idle.push(c),
            Err(_) => refused += 1,
        }
    }
    assert!(idle.len() >= 300, "{} connections opened", idle.len());
    let id =
        home.json(&["kanban", "create", "under load", "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    wait_until("the task dispatched and done", Duration::from_secs(60), || {
        home.json(&["kanban", "show", &id])["task"]["status"] == "done"
    });
    // An idle connection is closed by the server (end of stream or reset), not held forever.
    let mut first = idle.into_iter().next().unwrap();
    first.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = [0_u8; 16];
    match first.read(&mut buf) {
        Ok(n) => assert_eq!(n, 0, "the server sent something to a connection that asked nothing"),
        Err(e) => assert!(
            !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
            "an idle connection was still open after 30 s: {e}"
        ),
    }
    // A slow client (slowloris): a request head a byte every 200 ms is cut off at the head timeout, not served.
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    std::io::Write::write_all(&mut slow, b"GET /healthz HTTP/1.1\r\nhost: x\r\n").unwrap();
    let started = std::time::Instant::now();
    let closed = loop {
        assert!(started.elapsed() < Duration::from_secs(40), "a slow request head was held for 40 s");
        if std::io::Write::write_all(&mut slow, b"x").is_err() {
            break true;
        }
        match slow.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => break false,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break true,
        }
    };
    assert!(closed, "the server answered a request whose head never ended");
    let token = std::fs::read_to_string(home.path().join("dashboard.token")).unwrap();
    let bearer = format!("Bearer {token}");
    wait_until("/healthz to answer", Duration::from_secs(30), || {
        http(&base, "GET", "/healthz", &[("authorization", &bearer)], "").0 == 200
    });
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", gw.pid())).unwrap();
    let files = limits.lines().find(|l| l.starts_with("Max open files")).unwrap().to_owned();
    let cols: Vec<&str> = files.split_whitespace().collect();
    assert_eq!((cols[3], cols[4]), ("8192", "8192"), "the soft limit raised to the hard one: {files}");
    drop(gw);
}

/// The raw head of one GET (the status line and headers, lower-cased).
fn head_of(base: &str, path: &str, headers: &[(&str, &str)]) -> String {
    let host = base.strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    std::io::Write::write_all(&mut s, req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).to_lowercase();
    text.split("\r\n\r\n").next().unwrap_or_default().to_owned()
}

/// A page on another port of the same host framed the dashboard (Chromium shares the origin's storage across ports
/// of 127.0.0.1 for the frame, so it found its token) and clicked its buttons: every answer, the board, the 401 shell
/// and a refusal, now forbids framing (`X-Frame-Options: DENY`, CSP `frame-ancestors 'none'`).
#[test]
fn no_answer_of_the_dashboard_may_be_framed() {
    let home = Home::new();
    let d = Served::start(&home, &[]);
    let bearer = format!("Bearer {}", d.token);
    let answers = [
        ("the board", head_of(&d.base, "/", &[("authorization", &bearer)])),
        ("the shell", head_of(&d.base, "/", &[("accept", "text/html"), ("sec-fetch-mode", "navigate")])),
        ("a refusal", head_of(&d.base, "/api/boards", &[])),
    ];
    for (what, head) in answers {
        assert!(head.contains("x-frame-options: deny"), "{what}: {head}");
        assert!(head.contains("content-security-policy: frame-ancestors 'none'"), "{what}: {head}");
    }
}

/// `GET /healthz` on a fresh connection with a deadline: the status, 0 when the connection was closed or timed out.
fn healthz_within(addr: std::net::SocketAddr, bearer: &str, deadline: Duration) -> u16 {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, deadline) else { return 0 };
    let _ = s.set_read_timeout(Some(deadline));
    let req = format!("GET /healthz HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\nauthorization: {bearer}\r\n\r\n");
    if std::io::Write::write_all(&mut s, req.as_bytes()).is_err() {
        return 0;
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw).split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// A re-attack of issue 38 (F7): one peer holds 1000 idle connections to the gateway's dashboard and opens a new one
/// whenever the server closes one, as an attacker would. Before, the first 256 took every slot until their head
/// timeout and each one after was closed at once, so `/healthz` (and the dashboard) stayed down as long as the
/// flood went on. Now a new connection takes the place of the oldest idle one: `/healthz` answers throughout.
#[test]
fn a_flood_of_idle_connections_does_not_keep_healthz_down() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let hard = getrlimit(Resource::Nofile).maximum;
    let _ = setrlimit(Resource::Nofile, Rlimit { current: hard, maximum: hard });
    let home = Home::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let gw = Gateway::start(&home, &["-c", &format!("kanban.dashboard_port={port}")]);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    wait_until("the dashboard to listen", Duration::from_secs(10), || TcpStream::connect(addr).is_ok());
    let token = std::fs::read_to_string(home.path().join("dashboard.token")).unwrap();
    let bearer = format!("Bearer {token}");
    assert_eq!(healthz_within(addr, &bearer, Duration::from_secs(5)), 200, "before the flood");
    let connect = || TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok();
    let mut flood: Vec<TcpStream> = (0..1000).filter_map(|_| connect()).collect();
    assert!(flood.len() >= 900, "{} connections opened", flood.len());
    let (started, mut answers, mut reopened) = (std::time::Instant::now(), Vec::new(), 0);
    // Past the head timeout (10 s), so the flood's first connections were closed and opened again meanwhile.
    while started.elapsed() < Duration::from_secs(14) {
        for c in &mut flood {
            let _ = c.set_nonblocking(true);
            let closed = match c.read(&mut [0_u8; 1]) {
                Ok(_) => true,
                Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
            };
            if closed && let Some(fresh) = connect() {
                *c = fresh;
                reopened += 1;
            }
        }
        answers.push(healthz_within(addr, &bearer, Duration::from_secs(3)));
    }
    eprintln!("the flood reopened {reopened} connections; /healthz answered {answers:?}");
    assert!(answers.len() >= 3, "{answers:?}");
    assert!(answers.iter().all(|s| *s == 200), "/healthz was down during the flood: {answers:?}");
    drop(flood);
    drop(gw);
}
