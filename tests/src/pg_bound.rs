//! Every round trip to a PostgreSQL board is bounded (`kanban.database_timeout_seconds`, issue 23 item 5): a server
//! that accepts the connection and never answers, and one that goes silent mid-session while its sockets stay open
//! (the kernel still acknowledging, so no keepalive notices), cost a command the bound and one line, never a hang,
//! and the board is left as it was; a gateway reports the board unavailable within the bound and connects anew once
//! the server answers again.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::{Gateway, Home, wait_until};

/// The bound the tests set (`KANBAN_DATABASE_TIMEOUT_SECONDS`), well under the 10 s connect timeout berth had.
const BOUND: u64 = 2;
/// What a command may take beyond the bound: starting the process, connecting, one more round trip.
const MARGIN: Duration = Duration::from_secs(3);

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Starts `berth kanban ls` and `berth kanban create` at once against `url` with the bound set, and checks that each
/// fails within the bound and the margin, with one line saying the server did not answer (no password in it).
fn both_fail_within_the_bound(home: &Home, url: &str, password: Option<&str>) {
    let spawn = |args: &[&str]| -> Child {
        home.cmd()
            .env("KANBAN_DATABASE_URL", url)
            .env("KANBAN_DATABASE_TIMEOUT_SECONDS", BOUND.to_string())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let started = Instant::now();
    let children = [
        ("ls", spawn(&["kanban", "ls"])),
        ("create", spawn(&["kanban", "create", "x", "--assignee", &home.profile, "--command", "true"])),
    ];
    for (what, mut child) in children {
        let exited = crate::support::wait_exit(&mut child, Duration::from_secs(40));
        let took = started.elapsed();
        assert!(exited.is_some(), "kanban {what} still waited after {took:?} (killed)");
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        eprintln!("kanban {what}: {took:?}: {}", err.trim());
        assert!(took < Duration::from_secs(BOUND) + MARGIN, "kanban {what} took {took:?}: {err}");
        assert_ne!(out.status.code(), Some(0), "{what}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{what}: one line expected: {err}");
        assert!(err.contains(&format!("did not answer within {BOUND}s")), "{what}: {err}");
        if let Some(p) = password {
            assert!(!err.contains(p), "{what}: the password reached the message: {err}");
        }
    }
}

/// `kanban ls` and `kanban create` against a server that accepts connections and never reads or writes end within
/// the bound with one line; no board was made in the home instead. Before, they took the fixed 10 s connect timeout
/// whatever was set.
#[test]
fn a_server_that_never_answers_costs_a_command_the_bound() {
    let port = crate::support::silent_server();
    let home = Home::new();
    let password = "pw-b0und";
    both_fail_within_the_bound(&home, &format!("postgres://berth:{password}@127.0.0.1:{port}/board"), Some(password));
    assert!(!home.path().join("berth-kanban.db").exists(), "no SQLite board was made in its place");
}

/// A session that goes silent after its first query: `kanban ls` and `kanban create` through a proxy that forwards
/// the start-up and the first query to the real server, then swallows everything the client sends (sockets kept
/// open), fail within the bound with one line; the board, read directly, holds what it held. Before, both hung
/// (every call after the connect was unbounded).
#[test]
fn a_server_silent_mid_session_costs_a_command_the_bound_and_changes_nothing() {
    let Some(home) = Home::on_postgres() else { return };
    let direct = home.board_url.clone().unwrap();
    let id = home.json(&["kanban", "create", "before", "--assignee", &home.profile, "--command", "true"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let proxy = silent_after_first_query(&direct);
    both_fail_within_the_bound(&home, &proxy, None);
    let tasks = home.json(&["kanban", "ls"]);
    let ids: Vec<&str> = tasks.as_array().unwrap().iter().filter_map(|t| t["id"].as_str()).collect();
    assert_eq!(ids, [id.as_str()], "the board holds exactly the task made before: {tasks}");
}

/// A gateway whose board server goes silent mid-session (a proxy that stops forwarding both ways, sockets kept
/// open) reports the board unavailable within the bound and its interval, keeps running, its listener notices too,
/// and once the server answers again it connects anew, listens again and dispatches the task created meanwhile.
/// Before, its tick hung on the silent connection for good.
#[test]
fn a_gateway_whose_server_goes_silent_reports_it_within_the_bound_and_recovers() {
    let Some(home) = Home::on_postgres() else { return };
    home.ok(&["profile", "create", "alpha"]);
    home.ok(&["kanban", "ls"]); // the schema made directly, not through the proxy
    let (proxy, silent) = switchable(home.board_url.as_deref().unwrap());
    let gw =
        Gateway::start_with(
            &home,
            home.cmd()
                .env("KANBAN_DATABASE_URL", &proxy)
                .env("KANBAN_DATABASE_TIMEOUT_SECONDS", BOUND.to_string())
                .args(["-v", "-c", "kanban.dispatch_interval_seconds=1", "-c", "kanban.worker_command=true"]),
        );
    wait_until("the gateway to listen", Duration::from_secs(30), || {
        gw.stderr().contains("listening for board changes")
    });
    // A first tick behind it: its board connection is open and kept, so the silence comes mid-session.
    wait_until("a first tick", Duration::from_secs(30), || home.gateway_status()["ticks"].as_u64().unwrap_or(0) >= 1);
    silent.store(true, Ordering::SeqCst);
    let went_silent = Instant::now();
    let said = format!("did not answer within {BOUND}s");
    wait_until("the gateway to report the silent board", Duration::from_secs(40), || gw.stderr().contains(&said));
    let took = went_silent.elapsed();
    eprintln!("the gateway reported the silent board after {took:?}");
    assert!(took < Duration::from_secs(BOUND + 1) + MARGIN, "reported after {took:?}:\n{}", gw.stderr());
    assert!(home.gateway_status()["running"].as_bool().unwrap_or(false), "the gateway still runs");
    // Its listener, quiet meanwhile, asks the server whether it still answers (after 30 s of quiet) and, past the
    // bound, says it no longer listens instead of staying deaf.
    wait_until("the listener to notice the silence", Duration::from_secs(30 + BOUND + 10), || {
        gw.stderr().contains("cannot listen for board changes")
    });

    // The server answers again: the task created meanwhile (directly) is dispatched over a new connection.
    let id = home.json(&["kanban", "create", "after", "--assignee", "alpha", "--command", "true"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    silent.store(false, Ordering::SeqCst);
    wait_until("the task to be dispatched after the silence", Duration::from_secs(30), || {
        home.json(&["kanban", "show", &id])["task"]["status"].as_str() != Some("ready")
    });
    wait_until("the listener to listen again", Duration::from_secs(40), || {
        gw.stderr().contains("listening for board changes on host=127.0.0.1") && gw.stderr().contains(" again")
    });
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0), "{err}");
    eprintln!("{}", err.lines().filter(|l| l.contains("board") && !l.contains("DEBUG")).collect::<Vec<_>>().join("\n"));
}

/// Copies `from` to `to`, dropping what comes while `silent` is set.
fn pump_unless_silent(from: &mut dyn Read, to: &mut dyn Write, silent: &AtomicBool) {
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        // scenario: while silent, the bytes go nowhere and the sockets stay open
        if n == 0 || (!silent.load(Ordering::SeqCst) && to.write_all(&buf[..n]).is_err()) {
            return;
        }
    }
}

/// A TCP proxy to the server of `url` that forwards both ways until `silent` is set, then drops whatever either end
/// sends (each socket kept open) until it is cleared; returns a key-value connection string through it.
fn switchable(url: &str) -> (String, Arc<AtomicBool>) {
    let silent = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&silent);
    let target = url.to_owned();
    let through = proxy(url, move |client| {
        let (mut up_read, mut up_write) = Upstream::connect(&target).split();
        let (mut down_read, mut down_write) = (client.try_clone().unwrap(), client);
        let (back, forth) = (Arc::clone(&flag), Arc::clone(&flag));
        std::thread::spawn(move || pump_unless_silent(&mut up_read, &mut down_write, &back));
        std::thread::spawn(move || pump_unless_silent(&mut down_read, &mut up_write, &forth));
    });
    (through, silent)
}

/// Either end of the proxy's upstream.
enum Upstream {
    Tcp(TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl Upstream {
    fn connect(url: &str) -> Self {
        use postgres::config::Host;
        let config: postgres::Config = url.parse().unwrap();
        let port = config.get_ports().first().copied().unwrap_or(5432);
        match config.get_hosts().first() {
            Some(Host::Tcp(h)) => Self::Tcp(TcpStream::connect((h.as_str(), port)).unwrap()),
            Some(Host::Unix(dir)) => {
                Self::Unix(std::os::unix::net::UnixStream::connect(dir.join(format!(".s.PGSQL.{port}"))).unwrap())
            }
            None => Self::Tcp(TcpStream::connect(("localhost", port)).unwrap()),
        }
    }

    fn split(self) -> (Box<dyn Read + Send>, Box<dyn Write + Send>) {
        match self {
            Self::Tcp(s) => (Box::new(s.try_clone().unwrap()), Box::new(s)),
            Self::Unix(s) => (Box::new(s.try_clone().unwrap()), Box::new(s)),
        }
    }
}

/// A TCP proxy to the server of `url` that forwards each connection's start-up and first simple query (the one every
/// berth connection makes), then forwards nothing more the client sends, holding both sockets open; returns a
/// key-value connection string through it (same user, database and password).
fn silent_after_first_query(url: &str) -> String {
    let target = url.to_owned();
    proxy(url, move |client| {
        let (mut up_read, up_write) = Upstream::connect(&target).split();
        let mut down = client.try_clone().unwrap();
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut up_read, &mut down);
        });
        std::thread::spawn(move || pump_until_second_query(client, up_write));
    })
}

/// A listener on a free local port whose connections `serve` takes; returns a key-value connection string to it with
/// the user, database and password of `url`.
fn proxy(url: &str, serve: impl Fn(TcpStream) + Send + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            serve(client);
        }
    });
    let config: postgres::Config = url.parse().unwrap();
    let mut kv = format!(
        "host=127.0.0.1 port={port} user={} dbname={}",
        config.get_user().unwrap_or("postgres"),
        config.get_dbname().unwrap_or("postgres")
    );
    if let Some(p) = config.get_password() {
        kv.push_str(&format!(" password='{}'", String::from_utf8_lossy(p).replace('\\', "\\\\").replace('\'', "\\'")));
    }
    kv
}

/// Client to server: the start-up (after an SSL or GSS request, if any), then typed messages up to and including the
/// first simple query ('Q'); everything after is read and dropped, the sockets kept open.
fn pump_until_second_query(mut client: TcpStream, mut up: Box<dyn Write + Send>) {
    let read_exact = |s: &mut TcpStream, n: usize| -> Option<Vec<u8>> {
        let mut buf = vec![0u8; n];
        s.read_exact(&mut buf).ok().map(|()| buf)
    };
    loop {
        let Some(len) = read_exact(&mut client, 4) else { return };
        let n = u32::from_be_bytes(len[..4].try_into().unwrap()) as usize;
        let Some(body) = read_exact(&mut client, n.saturating_sub(4)) else { return };
        if up.write_all(&len).and_then(|()| up.write_all(&body)).is_err() {
            return;
        }
        let code = body.get(..4).map(|c| u32::from_be_bytes(c.try_into().unwrap()));
        if !matches!(code, Some(80_877_103 | 80_877_104)) {
            break; // the start-up message itself
        }
    }
    let mut queried = false;
    loop {
        let Some(head) = read_exact(&mut client, 5) else { return };
        let n = u32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
        let Some(body) = read_exact(&mut client, n.saturating_sub(4)) else { return };
        if queried {
            continue; // scenario: the server has gone silent; the client's bytes go nowhere
        }
        if up.write_all(&head).and_then(|()| up.write_all(&body)).is_err() {
            return;
        }
        queried = head[0] == b'Q';
    }
}
