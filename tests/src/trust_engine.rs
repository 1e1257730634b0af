//! The second trust round (issue 23), an engine that answers its ping and then fails: server errors are the
//! engine's fault, never the task's, and a hung engine fails a command within seconds, in one line; and `berth run`
//! whose reader goes away (`berth run -- yes | head`) ends like a shell pipeline, its command stopped.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::{Engine, Gateway, Home};

/// How a [`FakeEngine`] answers everything but its ping.
#[derive(Clone, Copy)]
enum Fault {
    /// HTTP 500 with a JSON message, as Docker answers when its storage or containerd fails.
    ServerError,
    /// Never: the request is read and the connection held open.
    Hang,
}

/// An engine on a unix socket that answers `/_ping` (API 1.41) and fails every other call the way `fault` says.
struct FakeEngine {
    _dir: tempfile::TempDir,
    socket: PathBuf,
}

impl FakeEngine {
    fn start(fault: Fault) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("engine.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                std::thread::spawn(move || answer(conn, fault));
            }
        });
        Self { _dir: dir, socket }
    }

    fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// A home whose berth commands (and their workers) talk to this engine.
    fn home(&self) -> Home {
        let mut home = Home::new();
        home.engine = Some(Engine { name: "fake", endpoint: self.endpoint() });
        home
    }
}

/// Answers one connection: its first request, then the connection closes (or, hanging, stays open until the client
/// goes).
fn answer(mut conn: std::os::unix::net::UnixStream, fault: Fault) {
    let mut head = Vec::new();
    let mut buf = [0u8; 8192];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let ping = head.starts_with(b"GET /_ping") || head.starts_with(b"HEAD /_ping");
    let (status, body) = match (ping, fault) {
        (true, _) => ("200 OK", "OK"),
        (false, Fault::ServerError) => ("500 Internal Server Error", r#"{"message":"engine storage failed"}"#),
        (false, Fault::Hang) => {
            while conn.read(&mut buf).is_ok_and(|n| n > 0) {}
            return;
        }
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\nApi-Version: 1.41\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
}

/// Every run of `id`, as `kanban show --json` lists them.
fn runs(home: &Home, id: &str) -> Vec<serde_json::Value> {
    home.json(&["kanban", "show", id])["runs"].as_array().cloned().unwrap_or_default()
}

/// An engine that answers its ping and HTTP 500 to everything else: every run ends as `infra_unavailable`, no task
/// is blocked (`kanban.failure_limit=2`) or counts a failure, and the gateway backs off instead of retrying each task
/// as soon as its worker exits.
#[test]
fn server_errors_of_the_engine_block_no_task_and_the_gateway_backs_off() {
    // Plain sandboxes, and sandboxes behind the egress proxy (whose route is set up before the sandbox: its engine
    // errors once counted as the task's).
    for extra in [&[][..], &["-c", "terminal.docker_egress=example.com"][..]] {
        server_errors_block_no_task(extra);
    }
}

fn server_errors_block_no_task(extra: &[&str]) {
    let engine = FakeEngine::start(Fault::ServerError);
    let home = engine.home();
    let ids: Vec<String> = ["a", "b"]
        .iter()
        .map(|t| {
            let v = home.json(&["kanban", "create", t, "--assignee", &home.profile, "--command", "true"]);
            v["id"].as_str().unwrap().to_owned()
        })
        .collect();
    let mut args = vec!["-c", "kanban.failure_limit=2"];
    args.extend_from_slice(extra);
    let gw = Gateway::start(&home, &args);
    let started = Instant::now();
    crate::support::wait_until("a run", Duration::from_secs(10), || runs(&home, &ids[0]).len() >= 2);
    // Sampled for eight seconds: no task is ever blocked.
    while started.elapsed() < Duration::from_secs(8) {
        let ls = home.json(&["kanban", "ls"]);
        let blocked: Vec<_> =
            ls.as_array().unwrap().iter().filter(|t| t["status"] == "blocked").map(|t| t["id"].clone()).collect();
        assert!(blocked.is_empty(), "{extra:?}: blocked by the engine's 500s: {blocked:?}\n{}", gw.stderr());
        std::thread::sleep(Duration::from_millis(250)); // scenario: the sampling interval of the eight seconds watched
    }
    let (_, _, err) = gw.stop();
    for id in &ids {
        let runs = runs(&home, id);
        assert!(!runs.is_empty(), "{id} was never tried:\n{err}");
        for r in runs.iter().filter(|r| !r["outcome"].is_null()) {
            assert_eq!(r["outcome"], "infra_unavailable", "{extra:?} {id}: {r}");
            assert!(r["error"].as_str().is_some_and(|e| e.contains("500")), "{id}: {r}");
        }
        // Back-off: tries at about 0, 1, 3 and 7 s (one more when a worker's exit and the board change race); a hot
        // retry makes dozens.
        assert!(runs.len() <= 6, "{id} was tried {} times in 8 s:\n{err}", runs.len());
        let show = home.json(&["kanban", "show", id]);
        assert_eq!(show["task"]["consecutive_failures"], 0, "{id}: {show}");
    }
    assert!(err.contains("claiming nothing for"), "the gateway backed off: {err}");
}

/// An engine that answers its ping and hangs on every other call: `berth run` (which once took 151 s) and `sandbox
/// ensure` fail within seconds with one line that names the endpoint and the call that hung, exit 125.
#[test]
fn an_engine_that_hangs_after_its_ping_fails_a_command_within_seconds_in_one_line() {
    let engine = FakeEngine::start(Fault::Hang);
    // Not the home's engine: its clean-up asks the engine with the docker CLI, which would hang too.
    let home = Home::new();
    for args in [
        &["run", "--task", "t", "--", "true"][..],
        &["run", "-i", "--task", "t", "--", "true"],
        &["sandbox", "ensure", "--task", "t"],
    ] {
        let start = Instant::now();
        let out = home.cmd().env("DOCKER_HOST", engine.endpoint()).args(args).output().unwrap();
        let took = start.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        // The ping's bound for the first call, and for both engine facts at once.
        assert!(took < Duration::from_secs(12), "{args:?} took {took:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(&engine.socket.display().to_string()), "{args:?} names the endpoint: {err}");
        assert!(err.contains("no answer within"), "{args:?}: {err}");
        assert!(!err.contains("  "), "{args:?}: no double space: {err}");
    }
}

/// `berth run -- yes | head -c 10` ends as a shell's pipeline does: once stdout's reader is gone, berth stops the
/// command in the sandbox and exits 141 (128 + SIGPIPE) at once, not at the timeout; no `yes` is left running.
#[test]
fn a_run_whose_stdout_reader_goes_away_stops_its_command_and_exits_141() {
    crate::support::require_docker();
    let home = Home::new();
    home.ok(&["run", "--task", "pipe", "--", "true"]);
    let berth = home.cmd();
    let mut bash = std::process::Command::new("bash");
    for (k, v) in berth.get_envs() {
        match v {
            Some(v) => bash.env(k, v),
            None => bash.env_remove(k),
        };
    }
    let script = r#""$0" run --timeout 60 --task pipe -- yes | head -c 10 >/dev/null; echo "${PIPESTATUS[0]}""#;
    let start = Instant::now();
    let out = bash.args(["-c", script]).arg(berth.get_program()).output().unwrap();
    let took = start.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "141", "berth's exit code in the pipeline: {err}");
    assert!(took < Duration::from_secs(3), "the pipeline took {took:?}: {err}");
    let ids = home.containers();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let top = home.docker(&["top", &ids[0]]);
    let top = String::from_utf8_lossy(&top.stdout);
    assert!(top.lines().count() >= 2, "docker top listed the sandbox's processes: {top}");
    assert!(!top.lines().any(|l| l.trim_end().ends_with(" yes")), "yes is left in the sandbox:\n{top}");
}

/// A proxy on a unix socket in front of the real engine that can be taken down (every live connection cut, the
/// socket gone, so a new connection is refused) and brought back up at the same path: an engine hiccup.
struct EngineProxy {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    upstream: PathBuf,
    live: std::sync::Arc<std::sync::Mutex<Vec<std::os::unix::net::UnixStream>>>,
    accepting: Option<(std::sync::Arc<std::sync::atomic::AtomicBool>, std::thread::JoinHandle<()>)>,
}

impl EngineProxy {
    fn start(engine: &Engine) -> Self {
        let upstream = PathBuf::from(engine.endpoint.strip_prefix("unix://").expect("a unix socket engine"));
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("engine.sock");
        let mut proxy = Self { _dir: dir, socket, upstream, live: Default::default(), accepting: None };
        proxy.up();
        proxy
    }

    fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Listens again at the same path, forwarding each connection both ways to the engine.
    fn up(&mut self) {
        use std::os::unix::net::{UnixListener, UnixStream};
        let listener = UnixListener::bind(&self.socket).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, live, upstream) = (stop.clone(), self.live.clone(), self.upstream.clone());
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let (Ok(client), Ok(engine)) = (conn, UnixStream::connect(&upstream)) else { continue };
                let pipe = |mut from: UnixStream, mut to: UnixStream| {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    })
                };
                let mut held = live.lock().unwrap();
                held.push(client.try_clone().unwrap());
                held.push(engine.try_clone().unwrap());
                pipe(client.try_clone().unwrap(), engine.try_clone().unwrap());
                pipe(engine, client);
            }
        });
        self.accepting = Some((stop, accept));
    }

    /// Cuts every connection and removes the socket: calls in flight fail, new ones find no engine.
    fn down(&mut self) {
        let Some((stop, accept)) = self.accepting.take() else { return };
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::os::unix::net::UnixStream::connect(&self.socket); // wakes the accept loop, which ends
        accept.join().unwrap();
        std::fs::remove_file(&self.socket).unwrap();
        for s in self.live.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The lines of the trace file the task's command appends to.
fn trace_lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// How many processes of `container` run `sleep 12` (the task's command), as the engine lists them.
fn sleeps_in(container: &str) -> usize {
    let top = crate::support::docker(&["top", container]);
    String::from_utf8_lossy(&top.stdout).lines().filter(|l| l.trim_end().ends_with("sleep 12")).count()
}

/// Issue 38 item 11: the engine connection breaks mid-exec (the engine away for 6 s). The worker requeues its task
/// as the engine's fault, but only once the first command is gone: it kills it by its marker when the engine is back,
/// so the retry never runs beside it (`start start end end` before).
#[test]
fn an_engine_hiccup_mid_command_never_runs_the_command_twice_at_once() {
    let engine = Engine::docker();
    let mut proxy = EngineProxy::start(&engine);
    let mut home = Home::new();
    home.engine = Some(Engine { name: "proxied", endpoint: proxy.endpoint() });
    let trace = tempfile::tempdir().unwrap();
    let trace_file = trace.path().join("trace");
    let volumes = format!("terminal.docker_volumes=[\"{}:/trace\"]", trace.path().display());
    let command = "echo start >> /trace/trace; sleep 12; echo end >> /trace/trace";
    let v = home.json(&["kanban", "create", "hiccup", "--assignee", &home.profile, "--command", command]);
    let id = v["id"].as_str().unwrap().to_owned();
    let gw = Gateway::start(&home, &["-c", &volumes]);
    crate::support::wait_until("the first run's start", Duration::from_secs(30), || {
        !trace_lines(&trace_file).is_empty()
    });
    let container = crate::support::wait_until("the sandbox", Duration::from_secs(5), || home.containers().pop());
    proxy.down();
    std::thread::sleep(Duration::from_secs(6)); // scenario: the engine away for 6 s
    proxy.up();
    // Sampled until the task is done: never two of its commands at once in the sandbox.
    let mut most = 0;
    crate::support::wait_until("the task done", Duration::from_secs(90), || {
        most = most.max(sleeps_in(&container));
        let show = home.json(&["kanban", "show", &id]);
        (show["task"]["status"] == "done").then_some(()).ok_or(show["task"]["status"].clone())
    });
    let (_, _, err) = gw.stop();
    let lines = trace_lines(&trace_file);
    let log = std::fs::read_to_string(home.path().join("kanban/logs").join(format!("{id}.log"))).unwrap_or_default();
    assert!(most <= 1, "{most} commands at once: {lines:?}\n{log}\n{err}");
    assert_eq!(
        lines.iter().filter(|l| *l == "end").count(),
        1,
        "the interrupted command finished too: {lines:?}\n{log}"
    );
    let runs = runs(&home, &id);
    assert!(runs.iter().any(|r| r["outcome"] == "infra_unavailable"), "{runs:?}");
    assert_eq!(home.json(&["kanban", "show", &id])["task"]["consecutive_failures"], 0);
}
