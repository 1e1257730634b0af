//! The board credential hand-off of a `kanban.worker_command` on a PostgreSQL board.
//!
//! The worker (`berth worker run`) keeps the board's URL; the command it runs gets the URL without its password
//! (and no SQLite path that is not the board). The command's own `berth kanban complete|block|heartbeat` on its
//! task reach the board through the worker: it listens on a unix socket in a 0700 directory of the home
//! (`BERTH_WORKER_SOCKET`), takes requests about its own task only, and performs them on its own connection
//! (opened at the first request, kept for the run), guarded by its run and waiting out an outage as the command's
//! own writes did. Without the socket (none given, or gone) a command talks to the board itself, as before.
//!
//! The socket is in Linux's abstract namespace (`@berth-worker/<uid>/<128 random bits>`): no file is made and
//! removed per run, which on a busy host is the costliest part of a worker's start (the filesystem's inode
//! allocation). A name there has no file permissions, so each connection's peer must be this worker's own user (the
//! kernel's word, `SO_PEERCRED`), and the name is drawn at random, so no other user can take it first; a sandbox
//! runs in a network namespace of its own and cannot reach it. When no socket can be made the command still gets
//! the board without its password: it then has no access to the board at all.

use std::io::{BufRead, BufReader, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::edge::context::Ctx;
use crate::edge::error::{Exit, Failure};
use crate::edge::open::Board;
use crate::edge::socket_line;

/// The variable naming the worker's socket in its command's environment.
pub const SOCKET_VAR: &str = "BERTH_WORKER_SOCKET";

/// What a worker's command asks its worker: one line of JSON.
#[derive(Serialize, Deserialize)]
struct Request {
    /// `complete`, `block` (`block:KIND` with a kind) or `heartbeat`.
    op: String,
    /// The task as the command named it (its id or a unique prefix).
    id: String,
    /// The result, the reason or the note.
    text: Option<String>,
    /// Whether the answer carries the whole task (`--json` prints it); without, a completion recorded with others
    /// is answered by the task's id and assignee, the task not read again. An older command's request is answered
    /// in full.
    #[serde(default = "whole")]
    full: bool,
}

fn whole() -> bool {
    true
}

/// The worker's answer: the task as it is after, or the one-line refusal with the command's exit code. `released`:
/// a completed task's sandbox is taken care of (the gateway removes it), not the command's to remove.
#[derive(Serialize, Deserialize, Default)]
struct Reply {
    task: Option<Value>,
    error: Option<String>,
    code: Option<u8>,
    #[serde(default)]
    released: bool,
}

/// A worker's listening socket (abstract: nothing to remove).
pub(super) struct Server {
    listener: UnixListener,
    /// Its name in the abstract namespace, without the leading NUL.
    name: String,
    stop: AtomicBool,
}

/// The address `@name` (abstract) or a socket file's path.
fn address(socket: &str) -> std::io::Result<SocketAddr> {
    match socket.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None => SocketAddr::from_pathname(socket),
    }
}

impl Server {
    /// Listens for the command of this worker, on a PostgreSQL board only; `None` (the command then has no access
    /// to the board) when the socket cannot be made.
    pub(super) fn open(ctx: &Ctx) -> Option<Self> {
        ctx.database_url()?;
        let uid = rustix::process::geteuid().as_raw();
        let drawn = crate::edge::random::hex128();
        let name = format!("berth-worker/{uid}/{}", drawn.as_deref().unwrap_or("?"));
        match drawn.and_then(|_| address(&format!("@{name}"))).and_then(|a| UnixListener::bind_addr(&a)) {
            Ok(listener) => Some(Self { listener, name, stop: AtomicBool::new(false) }),
            Err(e) => {
                tracing::warn!("no worker socket @{name} ({e}): the command gets no board access");
                None
            }
        }
    }

    /// The socket's address as the command is given it (`BERTH_WORKER_SOCKET`).
    pub(super) fn address(&self) -> String {
        format!("@{}", self.name)
    }

    /// Answers the command's requests until [`Server::close`]: one request a connection, one at a time. Only a
    /// process below `root` (the command's process, or the worker that runs it) is answered: the socket's name is
    /// in `/proc/net/unix` for any process to see, and another task's command is of the same user.
    pub(super) fn serve(&self, ctx: &Ctx, task: &str, run: i64, root: u32) {
        let mut store: Option<Board> = None;
        self.serve_with(task, root, |op, text, _| perform(ctx, task, run, &mut store, op, text));
    }

    /// Answers as [`Server::serve`] does, each request about the task performed by `write` (its op, its text,
    /// masked, and whether the whole task is asked for): the runner's, on the connection it keeps for all its tasks.
    pub(super) fn serve_with(
        &self,
        task: &str,
        root: u32,
        mut write: impl FnMut(&str, Option<&str>, bool) -> Result<(Value, bool), Failure>,
    ) {
        for conn in self.listener.incoming() {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let Ok(mut conn) = conn else { continue };
            // No file permission guards an abstract name: only this user's processes are answered.
            let Ok(peer) = rustix::net::sockopt::socket_peercred(&conn) else { continue };
            if peer.uid != rustix::process::geteuid() {
                continue;
            }
            // The command writes its one line at once: a connection that does not is not held for long. Read
            // before any refusal, so the refused peer gets its answer rather than a broken pipe.
            let Some(line) = socket_line::read(&conn) else { continue };
            let peer_pid = u32::try_from(peer.pid.as_raw_nonzero().get()).unwrap_or(0);
            if !crate::edge::process::descends_from(peer_pid, root) {
                let refusal = format!(
                    "the worker of {task} answers its own command only, not process {peer_pid}; nothing was changed"
                );
                let reply = Reply { error: Some(refusal), code: Some(Exit::USAGE), ..Reply::default() };
                let _ = writeln!(conn, "{}", serde_json::to_string(&reply).unwrap_or_default());
                continue;
            }
            let answer = match serde_json::from_str::<Request>(&line) {
                Ok(req) if !own(task, &req.id) => Err(Failure::usage(format!(
                    "the worker of {task} takes requests about its own task only, not {}; nothing was changed",
                    req.id
                ))),
                Ok(req) => {
                    let text = req.text.as_deref().map(crate::edge::redact::redact);
                    write(&req.op, text.as_deref(), req.full)
                }
                Err(e) => Err(Failure::usage(format!("a request the worker cannot read: {e}"))),
            };
            let reply = match answer {
                Ok((task, released)) => Reply { task: Some(task), released, ..Reply::default() },
                Err(f) => Reply { error: Some(f.message), code: Some(f.code), ..Reply::default() },
            };
            let _ = writeln!(conn, "{}", serde_json::to_string(&reply).unwrap_or_default());
        }
    }

    /// Ends [`Server::serve`] (woken by a connection of its own).
    pub(super) fn close(&self) {
        self.stop.store(true, Ordering::Release);
        if let Ok(a) = address(&format!("@{}", self.name)) {
            let _ = UnixStream::connect_addr(&a);
        }
    }
}

/// The environment changes of a worker command on a PostgreSQL board: the board URL without its password, no
/// SQLite path (the board is not a file), no other variable holding the password, and the worker's socket when
/// there is one (without it the command has no access to the board).
pub(super) fn command_env(ctx: &Ctx, server: Option<&Server>) -> Vec<(String, Option<String>)> {
    let url = ctx.database_url().unwrap_or_default();
    let secrets = kanban_postgres::url_secrets(url);
    let mut env: Vec<(String, Option<String>)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
        .filter(|(_, v)| secrets.iter().any(|s| v.contains(s.as_str())))
        .map(|(k, _)| (k, None))
        .collect();
    // The descriptor this worker got the URL on is not the command's.
    for k in ["BERTH_KANBAN_DB", "HERMES_KANBAN_DB", crate::edge::handover::VAR] {
        env.push((k.into(), None));
    }
    env.push((config_bridge::env_var_for("kanban.database_url"), Some(kanban_postgres::without_password(url))));
    env.push((SOCKET_VAR.into(), server.map(Server::address)));
    env
}

/// The one task a request may name: the worker's own, by its id or a unique prefix of it.
fn own(task: &str, asked: &str) -> bool {
    let bare = asked.strip_prefix("t_").unwrap_or(asked);
    asked == task
        || (bare.len() >= super::prefix::MIN_PREFIX && task.strip_prefix("t_").unwrap_or(task).starts_with(bare))
}

/// Performs one request (its op, its masked text) on the worker's connection; the task as it is after, and whether
/// its sandbox is taken care of.
fn perform(
    ctx: &Ctx,
    task: &str,
    run: i64,
    store: &mut Option<Board>,
    op: &str,
    text: Option<&str>,
) -> Result<(Value, bool), Failure> {
    let host = ctx.host_id();
    // The gateway's kept connection when it takes the write (`relay.rs`): no backend of the server's for it.
    if let Some(done) = super::relay::send(ctx, op, task, run, text, &host) {
        super::log_sink::log_line(&format!("the command's {op} recorded through the gateway"));
        return Ok(done);
    }
    // As the command's own write would have: through an outage of the board for `kanban.board_retry_seconds`.
    let what = format!("record the command's {op}");
    let t = super::outage::retrying_blocking(ctx, &what, super::outage::patience(ctx), store, |b| {
        super::relay::apply(b, op, task, run, text, &host)
    })?;
    serde_json::to_value(&t).map(|t| (t, false)).map_err(|e| Failure::other(e.to_string()))
}

/// `kanban complete|block|heartbeat ID [TEXT]` in a worker's command with a socket: sent to the worker, whose answer
/// is printed; `None` when there is no socket to reach (the command then goes to the board itself). A completed
/// task's `(id, assignee)` unless the gateway removes its sandbox: it is the caller's to remove, as the command's
/// own completion did.
///
/// # Errors
/// The worker's refusal or the board's error, as the command would have had it.
pub fn request(ctx: &Ctx, op: &str, id: &str, text: Option<&str>) -> Option<Result<Option<(String, String)>, Failure>> {
    request_at(ctx.env.get(SOCKET_VAR)?, ctx.json, op, id, text)
}

/// [`request`] to the worker at `socket`, its answer printed as JSON with `json`.
pub fn request_at(
    socket: &str,
    json: bool,
    op: &str,
    id: &str,
    text: Option<&str>,
) -> Option<Result<Option<(String, String)>, Failure>> {
    let mut conn = address(socket).and_then(|a| UnixStream::connect_addr(&a)).ok()?;
    let req = Request { op: op.to_owned(), id: id.to_owned(), text: text.map(str::to_owned), full: json };
    let sent = writeln!(conn, "{}", serde_json::to_string(&req).unwrap_or_default());
    let mut line = String::new();
    let read = sent.and_then(|()| BufReader::new(&conn).read_line(&mut line)).map_err(|e| e.to_string());
    let reply = match read.and_then(|_| serde_json::from_str::<Reply>(&line).map_err(|e| e.to_string())) {
        Ok(r) => r,
        Err(e) => {
            return Some(Err(Failure::other(format!("the worker did not answer ({e}); the {op} may not be recorded"))));
        }
    };
    if let Some(message) = reply.error {
        return Some(Err(Failure { code: reply.code.unwrap_or(Exit::FAILURE), message, transient: false }));
    }
    let task = reply.task.unwrap_or_default();
    let full = task["id"].as_str().unwrap_or(id).to_owned();
    if json {
        crate::edge::output::json(&task);
    } else {
        crate::edge::output::line(&match op {
            "complete" => format!("completed {full}"),
            op if op.starts_with("block") => format!("blocked {full} ({})", task["status"].as_str().unwrap_or("?")),
            _ => format!("heartbeat recorded for {full}"),
        });
    }
    let assignee = task["assignee"].as_str().filter(|_| op == "complete" && !reply.released).map(str::to_owned);
    Some(Ok(assignee.map(|a| (full, a))))
}

/// A worker's command's request in its plainest forms, read without the whole command line (`berth` costs a
/// command's every `kanban complete` its start, hermes's protocol a process a task): `kanban complete ID [--result
/// TEXT]`, `kanban block ID [REASON | --reason TEXT]`, `kanban heartbeat ID [--note TEXT]`, as `(op, id, text)`.
/// Anything else (another flag, a value that looks like one, `--`) is `None`, for the whole command line to read: so
/// each form read here means what it means there.
pub fn plain_request(args: &[String]) -> Option<(&'static str, &str, Option<&str>)> {
    let [kanban, op, id, rest @ ..] = args else { return None };
    let op = match (kanban.as_str(), op.as_str()) {
        ("kanban", "complete") => "complete",
        ("kanban", "block") => "block",
        ("kanban", "heartbeat") => "heartbeat",
        _ => return None,
    };
    let flag = match op {
        "complete" => "--result",
        "block" => "--reason",
        _ => "--note",
    };
    let plain = |v: &String| !v.is_empty() && !v.starts_with('-');
    let text = match rest {
        [] => None,
        [f, v] if f == flag && plain(v) => Some(v.as_str()),
        [v] if op == "block" && plain(v) => Some(v.as_str()),
        [f] => Some(f.strip_prefix(flag)?.strip_prefix('=').filter(|v| !v.is_empty())?),
        _ => return None,
    };
    plain(id).then_some((op, id.as_str(), text))
}

/// The kanban command a worker's command sends to its worker, if it is one: `(op, id, text)`.
pub fn handed_off(cmd: &crate::cli::Command) -> Option<(&'static str, &str, Option<&str>)> {
    use crate::cli::{Command, KanbanCmd};
    match cmd {
        Command::Kanban(KanbanCmd::Complete { id, result }) => Some(("complete", id, result.as_deref())),
        Command::Kanban(KanbanCmd::Block { id, why, reason, kind }) => {
            Some((super::relay::block_op(*kind), id, reason.as_deref().or(why.as_deref())))
        }
        Command::Kanban(KanbanCmd::Heartbeat { id, note }) => Some(("heartbeat", id, note.as_deref())),
        _ => None,
    }
}

/// Runs `command` (the worker command of task `task`'s run `run`) with the hand-off: the socket served on a
/// thread while the command runs, the command's environment without the board's password. On a SQLite board, or
/// when no socket can be made, the command runs as before.
pub(super) fn run_command(
    ctx: &Ctx,
    task: &str,
    run: Option<i64>,
    command: &super::external::WorkerCommand,
    sink: &mut (dyn domain::ports::OutputSink + Send),
) -> Result<u8, Failure> {
    if ctx.database_url().is_none() {
        return super::external::run(command, &[], sink);
    }
    let server = run.and_then(|_| Server::open(ctx));
    // This process's environment holds the URL: not readable by the command through /proc, since `main` made every
    // berth process non-dumpable (`edge::process::keep_memory_private`).
    let env = command_env(ctx, server.as_ref());
    let Some(server) = server else { return super::external::run(command, &env, sink) };
    let run = run.unwrap_or_default();
    std::thread::scope(|s| {
        // The command is this worker's child: its processes are below this one.
        s.spawn(|| server.serve(ctx, task, run, std::process::id()));
        let code = super::external::run(command, &env, sink);
        server.close();
        code
    })
}

#[cfg(test)]
mod tests {
    use super::{own, plain_request};

    #[test]
    fn only_the_plainest_requests_are_read_without_the_command_line() {
        let read = |line: &str| {
            let args: Vec<String> = line.split(' ').map(str::to_owned).collect();
            plain_request(&args).map(|(op, id, text)| (op, id.to_owned(), text.map(str::to_owned)))
        };
        let some = |op, id: &str, text: Option<&str>| Some((op, id.to_owned(), text.map(str::to_owned)));
        assert_eq!(read("kanban complete t_1"), some("complete", "t_1", None));
        assert_eq!(read("kanban complete t_1 --result ok"), some("complete", "t_1", Some("ok")));
        assert_eq!(read("kanban complete t_1 --result=a=b"), some("complete", "t_1", Some("a=b")));
        assert_eq!(read("kanban block t_1 stuck"), some("block", "t_1", Some("stuck")));
        assert_eq!(read("kanban block t_1 --reason stuck"), some("block", "t_1", Some("stuck")));
        assert_eq!(read("kanban heartbeat t_1 --note half"), some("heartbeat", "t_1", Some("half")));
        // Left to the whole command line: other flags, values that look like flags, empty values, extra words.
        for other in [
            "kanban complete t_1 --json",
            "--json kanban complete t_1",
            "kanban complete -- t_1",
            "kanban complete -t_1",
            "kanban complete t_1 --result -x",
            "kanban complete t_1 --result=",
            "kanban complete t_1 --result",
            "kanban complete t_1 ok",
            "kanban complete t_1 --note x",
            "kanban block t_1 --kind transient",
            "kanban block t_1 why more",
            "kanban heartbeat t_1 half",
            "kanban show t_1",
            "kanban complete",
        ] {
            assert_eq!(read(other), None, "{other}");
        }
    }

    #[test]
    fn a_request_names_the_workers_own_task_or_nothing() {
        assert!(own("t_00aa11bb22cc", "t_00aa11bb22cc"));
        assert!(own("t_00aa11bb22cc", "t_00aa") && own("t_00aa11bb22cc", "00aa11"));
        assert!(!own("t_00aa11bb22cc", "00a"), "a prefix shorter than a prefix command takes");
        assert!(!own("t_00aa11bb22cc", "t_00aa11bb22cd") && !own("t_00aa11bb22cc", "") && !own("t_00aa11bb22cc", "t_"));
    }
}
