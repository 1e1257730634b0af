//! The gateway's relay of its workers' board writes, on a PostgreSQL board.
//!
//! A worker command's `kanban complete|block|heartbeat` reaches its worker through the hand-off socket
//! (`handoff.rs`); the worker would then open a connection of its own for that one write, a fresh server backend per
//! task. While a gateway runs, it listens on `<home>/kanban/sockets/gateway.sock` and performs such a write on one
//! connection it keeps, for the worker it is asked by: the peer's pid (from the kernel, not from the request) must be
//! the worker the task's current run records, and the board must be the gateway's own. Anything else — no gateway,
//! another board, a run no longer current, the board away, no answer — and the worker performs the write itself
//! as before. Every write is guarded by its run either way, so a write that was relayed and then performed again
//! (an answer lost) changes nothing the second time.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use domain::board::{RunEnding, RunRecorded, StoreError, Task, record_run_end};
use domain::ports::Clock;

use crate::edge::context::{Ctx, SystemClock};
use crate::edge::open::{Board, open_board};

use super::release::Removal;

/// How long a worker waits for the gateway's answer before it performs the write itself.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// One write a worker asks the gateway to perform: one line of JSON.
#[derive(Serialize, Deserialize)]
struct Request {
    /// The board's identity (a digest of its URL without the password): the gateway performs writes on its own only.
    board: String,
    op: String,
    task: String,
    run: i64,
    text: Option<String>,
    host: String,
}

/// The gateway's answer: the task after the write, or nothing (not done: the worker does it, and meets any refusal
/// of the board itself, as it would have). `released`: a completed task's sandbox is the gateway's to remove (its
/// releaser lists the engine once for a batch of completions), not the command's.
#[derive(Serialize, Deserialize, Default)]
struct Reply {
    task: Option<serde_json::Value>,
    #[serde(default)]
    released: bool,
}

fn socket_path(ctx: &Ctx) -> PathBuf {
    ctx.home.join("kanban").join("sockets").join("gateway.sock")
}

pub(super) fn board_identity(ctx: &Ctx) -> Option<String> {
    let url = kanban_postgres::without_password(ctx.database_url()?);
    Some(domain::sha256::hex_digest(url.as_bytes()))
}

/// The op that carries a block of `kind` to a worker or the gateway: `block`, or `block:KIND`.
pub(super) fn block_op(kind: Option<domain::board::BlockKind>) -> &'static str {
    use domain::board::BlockKind as K;
    match kind {
        None => "block",
        Some(K::Dependency) => "block:dependency",
        Some(K::NeedsInput) => "block:needs-input",
        Some(K::Capability) => "block:capability",
        Some(K::Transient) => "block:transient",
    }
}

/// The write `op` of a worker's command on task `task`'s run `run`, on `b`: the task after it.
///
/// # Errors
/// The board's error or refusal.
pub(super) fn apply(
    b: &mut Board,
    op: &str,
    task: &str,
    run: i64,
    text: Option<&str>,
    host: &str,
) -> Result<Task, StoreError> {
    let now = SystemClock.now();
    match op {
        "complete" => {
            let ending = RunEnding::Completed { result: text, exit_code: None };
            match record_run_end(&mut **b, task, Some(run), &ending, domain::board::Breaker::at_once(1), now)? {
                RunRecorded::Done(t) => Ok(*t),
                _ => b.task(task),
            }
        }
        op if op == "block" || op.starts_with("block:") => {
            let kind = op.strip_prefix("block:").map(str::parse).transpose().map_err(StoreError::Invalid)?;
            b.block(task, kind, text, now).and_then(|_| b.task(task))
        }
        "heartbeat" => {
            b.heartbeat(task, text, now)?;
            b.renew_host(host, now)?;
            b.task(task)
        }
        other => Err(StoreError::Backend(format!("unknown request {other:?}"))),
    }
}

/// The gateway's listening relay; stops and removes its socket when dropped.
pub struct Relay {
    path: PathBuf,
    stop: Arc<AtomicBool>,
}

impl Relay {
    /// Starts the relay of a gateway on a PostgreSQL board; `None` on SQLite (a worker's write there opens a file,
    /// not a server backend) or when the socket cannot be made (workers then write themselves).
    pub fn start(ctx: &Ctx) -> Option<Self> {
        let board = board_identity(ctx)?;
        let path = socket_path(ctx);
        let dir = path.parent()?;
        let made = std::fs::create_dir_all(dir).and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        });
        // One gateway a home (its lock is held): a socket left here is a dead gateway's.
        let _ = std::fs::remove_file(&path);
        let listener = match made.and_then(|()| UnixListener::bind(&path)) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("no relay socket at {} ({e}): workers write to the board themselves", path.display());
                return None;
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let (ctx, flag) = (ctx.clone(), Arc::clone(&stop));
        // A completion's answer waits for its sandbox's removal, batched with the others queued meanwhile. A gateway
        // killed before that answers nobody: the worker then records the completion itself (changing nothing the
        // second time) and its command removes the sandbox, as without a gateway.
        let finished = super::release::remover(&ctx, Duration::ZERO);
        std::thread::spawn(move || serve(&ctx, &listener, &board, &flag, &finished));
        Some(Self { path, stop })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = UnixStream::connect(&self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}

fn answer(conn: &mut UnixStream, reply: &Reply) {
    let _ = writeln!(conn, "{}", serde_json::to_string(reply).unwrap_or_default());
}

/// Answers requests one at a time on one kept connection until stopped; a completion's answer waits for its
/// sandbox's removal (`release::remover`).
fn serve(ctx: &Ctx, listener: &UnixListener, board: &str, stop: &AtomicBool, finished: &Sender<Removal>) {
    let mut store: Option<Board> = None;
    for conn in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(mut conn) = conn else { continue };
        let peer = rustix::net::sockopt::socket_peercred(&conn).ok().map(|c| i64::from(c.pid.as_raw_nonzero().get()));
        let Some(line) = crate::edge::socket_line::read(&conn) else { continue };
        let (reply, release) = match (serde_json::from_str::<Request>(&line), peer) {
            (Ok(req), Some(pid)) if req.board == board => perform(ctx, &mut store, &req, pid),
            _ => (Reply::default(), None),
        };
        match release {
            Some(task) => {
                let then = move |released| answer(&mut conn, &Reply { released, ..reply });
                if let Err(std::sync::mpsc::SendError((_, then))) = finished.send((task, Box::new(then))) {
                    then(false);
                }
            }
            None => answer(&mut conn, &reply),
        }
    }
}

/// Performs `req` for the worker `pid` when the task's current run is that worker's; nothing otherwise. A completed
/// task's `(id, assignee)` beside the answer: its sandbox goes before the worker is answered.
fn perform(ctx: &Ctx, store: &mut Option<Board>, req: &Request, pid: i64) -> (Reply, Option<(String, String)>) {
    if store.is_none() {
        *store = open_board(ctx).ok();
    }
    let Some(b) = store.as_mut() else { return (Reply::default(), None) };
    let res = b.current_worker(&req.task).and_then(|(run, worker)| {
        if run != Some(req.run) || worker != Some(pid) {
            return Ok(None);
        }
        apply(b, &req.op, &req.task, req.run, req.text.as_deref(), &req.host).map(Some)
    });
    match res {
        Ok(Some(task)) => {
            let release = task.assignee.clone().filter(|_| req.op == "complete").map(|a| (task.id.clone(), a));
            (Reply { task: serde_json::to_value(task).ok(), released: false }, release)
        }
        Ok(None) => (Reply::default(), None),
        Err(e) => {
            // The board away: the worker waits it out on its own connection, as it would have.
            if e.is_transient() {
                *store = None;
            }
            (Reply::default(), None)
        }
    }
}

/// Asks this home's gateway to perform the write: the task after it and whether the gateway removes its sandbox, or
/// `None` when the gateway did not (see the module's doc).
pub(super) fn send(
    ctx: &Ctx,
    op: &str,
    task: &str,
    run: i64,
    text: Option<&str>,
    host: &str,
) -> Option<(serde_json::Value, bool)> {
    let board = board_identity(ctx)?;
    let mut conn = UnixStream::connect(socket_path(ctx)).ok()?;
    let _ = conn.set_read_timeout(Some(ANSWER_WAIT));
    let _ = conn.set_write_timeout(Some(ANSWER_WAIT));
    let req = Request {
        board,
        op: op.to_owned(),
        task: task.to_owned(),
        run,
        text: text.map(str::to_owned),
        host: host.to_owned(),
    };
    writeln!(conn, "{}", serde_json::to_string(&req).ok()?).ok()?;
    let mut line = String::new();
    BufReader::new(&conn).read_line(&mut line).ok()?;
    let reply = serde_json::from_str::<Reply>(&line).ok()?;
    Some((reply.task?, reply.released))
}
