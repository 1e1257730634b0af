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
