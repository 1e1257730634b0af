//! The runner: one long-lived process a home (`berth worker runner`) that runs the tasks of `kanban.worker_command`,
//! so such a task costs its command's processes and no berth process of its own.
//!
//! A dispatcher's launcher (`launcher.rs: RunnerClient`) connects at its tick's first such task (starting the runner
//! when none answers), says what the tick's tasks share ([`Hello`]), and asks for every task's start ([`Start`]) before
//! it reads the first answer (`RunnerClient::start_all`). The runner starts each task's *worker* as its start
//! arrives: a small `sh` script in its own process group, its output the runner's pipes, its stdin one end of a
//! socket pair. Its pid and start time are what the run records, as a `berth worker run`'s are. The script waits at
//! the gate (a line on the socket) until the tick recorded its workers; then the
//! runner says `go` (or, when the tick did not confirm the run promptly, confirms it itself on the board first and
//! says nothing when that fails: the script ends and nothing ran). Then:
//! - with `kanban.worker_exit_outcome`, the script enters the task's folder, runs the command with stdin from
//!   `/dev/null`, closes its own output, reports `exit N` on the socket and waits for the runner's `ok`: it stays
//!   alive, and its task's run looks alive to every tick, until the runner recorded the outcome (on the runner's one
//!   kept connection to the board, guarded by the run);
//! - without (hermes's protocol: the command records its own outcome with `kanban complete|block`), the script
//!   becomes the command (`exec`): the command is the run's worker, its end the worker's end, and a command that
//!   ended without an outcome is judged crashed by the next tick, as a `berth worker run`'s is. Its own `kanban
//!   complete|block|heartbeat` go to the runner's kept connection (PostgreSQL) in the same batches.
//!
//! So:
//! - a gateway or dispatcher killed at any moment loses no outcome (the runner is not its child in any way that
//!   matters: it records on its own connection);
//! - a runner killed is the kill of every task's worker it held: each script sees its socket close and ends, and the
//!   board's crash verdict takes each run that was not recorded, as for a killed `berth worker run`;
//! - a script killed is its own task's worker killed: its command goes with it at the crash verdict (same group).
//!
//! The runner takes requests from its own user only (the socket's folder is 0700), runs tasks of its own board only
//! (the dispatcher's board must be the one the runner was started for), and exits after [`IDLE`] with no task and no
//! connection. Anything a launcher cannot have from a runner (no runner can start, another board's, an answer that
//! does not come) falls back to `berth worker run` for that task.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::edge::open::Board;
use crate::edge::process;

use super::external::WorkerCommand;
use super::log_sink::LogSink;
use super::script::script;

mod recorder;
mod task_log;
pub(super) mod wire;

use task_log::{pump, say, set_up};

/// How long a runner with no task and no connection stays.
const IDLE: Duration = Duration::from_secs(10);

/// The first line on a launcher's connection: what every task of its tick shares.
#[derive(Serialize, Deserialize)]
pub(super) struct Hello {
    /// The board's identity ([`board_identity`]): a runner runs tasks of its own board only.
    pub board: String,
    /// `kanban.worker_command`, rendered for each task.
    pub template: String,
    /// The environment a `berth worker run` of this dispatch would have: the dispatcher's own with every resolved
    /// setting, the home and the board over it. The runner takes its tasks' settings (masking, caps, patience) and
    /// their commands' environment from it, never from its own start: a changed setting or variable reaches the
    /// next dispatch's tasks.
    pub env: Vec<(String, String)>,
    /// The failure limit the outcomes are recorded through.
    pub failure_limit: u32,
}

/// A task to start.
#[derive(Serialize, Deserialize)]
pub(super) struct Start {
    pub task: String,
    pub run: i64,
    pub assignee: String,
    pub board: String,
    pub log: PathBuf,
    pub workdir: PathBuf,
    /// The variables naming the run (`worker::task_vars`).
    pub env: Vec<(String, String)>,
}

/// The last line on a launcher's connection: the tick recorded its workers (and confirmed their runs, or not).
#[derive(Serialize, Deserialize)]
pub(super) struct Release {
    pub confirmed: bool,
}

/// One message from a launcher: its answer to the runner's challenge ([`wire::Proof`], first), its [`Start`]s, then a
/// [`Release`].
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Message {
    Release(Release),
    Proof(wire::Proof),
    Start(Start),
}

/// The runner's answer to a [`Hello`] (a refusal, or its challenge) and to a [`Start`] (the worker's pid and start).
#[derive(Serialize, Deserialize, Default)]
pub(super) struct Answer {
    /// The challenge a launcher answers to have its word on confirmed runs taken (`wire.rs`); in the hello's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    pub pid: Option<u32>,
    pub start: Option<u64>,
    pub error: Option<String>,
}

pub(super) fn socket_path(ctx: &Ctx) -> PathBuf {
    ctx.home.join("kanban").join("sockets").join("runner.sock")
}

/// The board's identity: a digest of its URL without the password, or of the SQLite file's path.
pub(super) fn board_identity(ctx: &Ctx) -> String {
    super::relay::board_identity(ctx)
        .unwrap_or_else(|| domain::sha256::hex_digest(ctx.db_path().display().to_string().as_bytes()))
}

/// The pid of the home's runner while one serves it (it holds `kanban/runner.lock`, which names it).
pub fn serving(home: &Path) -> Option<u32> {
    use std::io::Read;
    let mut lock = lock_file(home, false).ok()?;
    if process::try_lock(&lock) {
        process::unlock(&lock);
        return None;
    }
    let mut pid = String::new();
    (&mut lock).take(32).read_to_string(&mut pid).ok()?;
    pid.trim().parse().ok()
}

/// The runner's lock, opened without waiting (something other than a regular file there, a FIFO say, is an error,
/// never a hang), for writing (created) or reading.
fn lock_file(home: &Path, write: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = home.join("kanban").join("runner.lock");
    let file = std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .create(write)
        .truncate(false)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits().cast_signed())
        .open(&path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other(format!("{} is not a regular file", path.display())));
    }
    Ok(file)
}

/// Whether this context's tasks go to the runner: those of a `kanban.worker_command` (the built-in worker's need a
/// `berth worker run` each).
pub(super) fn wanted(ctx: &Ctx) -> bool {
    !ctx.settings.kanban.worker_command.trim().is_empty()
}

/// What the runner's threads share.
struct Shared {
    /// The home, and the inode of the lock file the runner holds in it: a home deleted under the runner is seen by
    /// its lock file gone or replaced.
    home: PathBuf,
    lock_inode: Option<u64>,
    board: String,
    /// The challenge's key (`wire::key`), and the board's URL with its password, which launchers do not send.
    key: String,
    url: Option<String>,
    /// Launchers' connections open now, at most [`CONNECTIONS_MAX`].
    conns: AtomicUsize,
    /// The runner's one connection to the board: confirmations and outcomes, one at a time.
    store: Mutex<Option<Board>>,
    /// Connections and tasks in hand; the runner exits after [`IDLE`] at zero.
    busy: AtomicUsize,
    idle_since: Mutex<Instant>,
    removals: Mutex<Sender<super::release::Removal>>,
    /// The sandboxes of tasks their commands completed (`kanban complete`): the command's answer waits for its
    /// sandbox's removal, as the gateway's relay answers (a batch of what queued meanwhile, no pace).
    answered_removals: Mutex<Sender<super::release::Removal>>,
    /// Completions for the recorder ([`Shared::recorder`]), which writes those that arrive together in one
    /// transaction.
    completions: Mutex<Sender<Completion>>,
}

/// A completion waiting for the recorder, and where its answer goes.
struct Completion {
    ctx: Arc<Ctx>,
    task: String,
    run: i64,
    failure_limit: u32,
    assignee: String,
    result: Option<String>,
    exit_code: Option<i64>,
    asker: Asker,
}

/// Who waits for a completion: the command's exit 0 (`kanban.worker_exit_outcome`: what to log, and whether the
/// task is finished) or the command's own `kanban complete` (the task after it, or the board's refusal).
enum Asker {
    Exit(Sender<Result<(String, bool), Failure>>),
    /// The answer, and whether it is the whole task (else the task's id and assignee, when written with others).
    Command(Sender<Result<serde_json::Value, Failure>>, bool),
}

/// The most completions the recorder writes in one transaction.
const BATCH: usize = 64;

/// Counts one connection or task as in hand while it lives.
struct Busy(Arc<Shared>);

impl Busy {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.busy.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(shared))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.busy.fetch_sub(1, Ordering::SeqCst) == 1 {
            *self.0.idle_since.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
        }
    }
}

/// `berth worker runner`: serves this home's launchers until idle for [`IDLE`]. Another runner of the home already
/// serving is no error: this one exits at once.
///
/// # Errors
/// A one-line reason when the socket cannot be made.
pub fn serve(ctx: &Ctx) -> Result<u8, Failure> {
    let kanban = ctx.home.join("kanban");
    crate::edge::private_files::ensure_dir(&kanban).map_err(|e| Failure::other(e.to_string()))?;
    let lock = lock_file(&ctx.home, true).map_err(|e| Failure::other(format!("cannot open the runner's lock: {e}")))?;
    // A runner that is leaving (idle) holds the lock a moment longer than its socket: wait that out, briefly.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !process::try_lock(&lock) {
        if Instant::now() > deadline || UnixStream::connect(socket_path(ctx)).is_ok() {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(10)); // the leaving runner's exit, not synchronisation
    }
    // The lock names its holder (`gateway status` shows the runner).
    let _ = lock.set_len(0).and_then(|()| (&lock).write_all(format!("{}\n", std::process::id()).as_bytes()));
    let path = socket_path(ctx);
    if let Some(dir) = path.parent() {
        use std::os::unix::fs::PermissionsExt;
        crate::edge::private_files::ensure_dir(dir)
            .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
            .map_err(|e| Failure::other(format!("cannot make {}: {e}", dir.display())))?;
    }
    // The lock is held: a socket left here is a dead runner's.
    let _ = std::fs::remove_file(&path);
    let listener =
        UnixListener::bind(&path).map_err(|e| Failure::other(format!("cannot listen at {}: {e}", path.display())))?;
    // Each task holds a few descriptors (its log, pipes, gate, socket): as many as the hard limit allows.
    process::raise_open_files_limit();
    // Its environment holds the board's URL: not readable by its commands through /proc (`main` made every berth
    // process non-dumpable).
    tracing::info!("runner: serving {} as pid {}", path.display(), std::process::id());
    let (completions, queue) = std::sync::mpsc::channel();
    let shared = Arc::new(Shared {
        home: ctx.home.clone(),
        lock_inode: lock.metadata().map(|m| std::os::unix::fs::MetadataExt::ino(&m)).ok(),
        board: board_identity(ctx),
        key: wire::key(ctx),
        url: ctx.database_url().map(str::to_owned),
        conns: AtomicUsize::new(0),
        store: Mutex::new(None),
        busy: AtomicUsize::new(0),
        idle_since: Mutex::new(Instant::now()),
        // Nothing waits for these removals: one listing of the engine a second at most.
        removals: Mutex::new(super::release::remover(ctx, Duration::from_secs(1))),
        answered_removals: Mutex::new(super::release::remover(ctx, Duration::ZERO)),
        completions: Mutex::new(completions),
    });
    let recorder = Arc::clone(&shared);
    std::thread::spawn(move || recorder.recorder(&queue));
    let watch = Arc::clone(&shared);
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(1)); // the idle check's period
            watch.stop_if_home_gone();
            let idle = watch.idle_since.lock().unwrap_or_else(PoisonError::into_inner).elapsed();
            if watch.busy.load(Ordering::SeqCst) == 0 && idle >= IDLE {
                // The socket first: a launcher that finds none starts a new runner, which waits for this lock.
                let _ = std::fs::remove_file(&path);
                tracing::info!("runner: idle for {}s; exiting", IDLE.as_secs());
                std::process::exit(0);
            }
        }
    });
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        // The folder is 0700; the kernel's word on the peer besides.
        if rustix::net::sockopt::socket_peercred(&conn).map(|c| c.uid) != Ok(rustix::process::geteuid()) {
            continue;
        }
        // A thread a connection: a bounded number (a launcher makes one a tick; more are no launcher's).
        if shared.conns.fetch_add(1, Ordering::SeqCst) >= CONNECTIONS_MAX {
            shared.conns.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let busy = Busy::new(&shared);
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || {
            connection(&shared, conn, busy);
            shared.conns.fetch_sub(1, Ordering::SeqCst);
        });
    }
    Ok(0)
}

fn answer(conn: &mut UnixStream, a: &Answer) -> bool {
    writeln!(conn, "{}", serde_json::to_string(a).unwrap_or_default()).is_ok()
}

/// How many launchers' connections a runner serves at once.
const CONNECTIONS_MAX: usize = 64;

/// How long a connection may say nothing: a tick records its workers between its last start and its release, which
/// a board that is away may hold up (an end without a release leaves each run to be confirmed on the board).
const QUIET_MAX: Duration = Duration::from_secs(600);

/// One launcher's tick: its hello, answered with the challenge; the proof, its starts, its release (or its end,
/// which releases unconfirmed).
fn connection(shared: &Arc<Shared>, mut conn: UnixStream, _busy: Busy) {
    let Ok(read) = conn.try_clone() else { return };
    let nonce = crate::edge::random::hex128().unwrap_or_default();
    if nonce.is_empty() || conn.set_read_timeout(Some(QUIET_MAX)).is_err() {
        return;
    }
    let mut reader = BufReader::new(read);
    let mut next_line = || wire::read_line(&mut reader, None).ok().flatten();
    let Some(hello) = next_line().and_then(|l| serde_json::from_str::<Hello>(&l).ok()) else { return };
    if hello.board != shared.board {
        let error = "this home's runner serves another board (it leaves when idle)".to_owned();
        answer(&mut conn, &Answer { error: Some(error), ..Answer::default() });
        return;
    }
    // The dispatch's settings, as its `berth worker run` would resolve them from the same environment, with the
    // board's URL as this runner has it (a launcher sends it without the password).
    let mut env: std::collections::HashMap<String, String> = hello.env.iter().cloned().collect();
    if let Some(url) = &shared.url {
        env.insert(config_bridge::env_var_for("kanban.database_url"), url.clone());
    }
    let env = config_bridge::EnvMap(env.into_iter().collect());
    let ctx = match Ctx::resolve(env, None, None, &[], false, false) {
        Ok(c) => Arc::new(c),
        Err(f) => {
            answer(&mut conn, &Answer { error: Some(f.message), ..Answer::default() });
            return;
        }
    };
    // Its forwarded secrets are masked in its tasks' logs and results (and stay masked: a value once a secret is one).
    crate::edge::redact::add_secrets(&crate::edge::redact::secrets_of(&ctx));
    // Every task's environment but the variables naming its run, made once (on a PostgreSQL board without the
    // board's password: `handoff.rs`).
    let base = base_env(&ctx, &hello.env);
    if !answer(&mut conn, &Answer { nonce: Some(nonce.clone()), ..Answer::default() }) {
        return;
    }
    // The dispatcher's word that it confirmed the runs is taken only from berth holding the board's password
    // (`wire.rs`): another process of the user (a task's command) could claim any run confirmed and have its own
    // command recorded as that task's. Its starts are confirmed on the board instead, where a run another worker
    // holds is refused.
    let mut proved = false;
    let mut gates: Vec<Sender<bool>> = Vec::new();
    let confirmed = loop {
        let Some(line) = next_line() else { break false };
        match serde_json::from_str::<Message>(&line) {
            Ok(Message::Release(r)) => break r.confirmed,
            // Only before the first start (no answer: the launcher writes its starts right after).
            Ok(Message::Proof(p)) => {
                proved = gates.is_empty() && p.proof == wire::proof(&shared.key, &nonce, std::process::id())
            }
            Ok(Message::Start(s)) => {
                let a = match start_task(shared, &ctx, &hello, &base, s) {
                    Ok((pid, start, gate)) => {
                        gates.push(gate);
                        Answer { pid: Some(pid), start, ..Answer::default() }
                    }
                    Err(e) => Answer { error: Some(e), ..Answer::default() },
                };
                if !answer(&mut conn, &a) {
                    break false;
                }
            }
            Err(e) => {
                answer(
                    &mut conn,
                    &Answer { error: Some(format!("a request the runner cannot read: {e}")), ..Answer::default() },
                );
            }
        }
    };
    let trusted = proved && peer_runs_this_binary(&conn);
    for gate in gates {
        let _ = gate.send(confirmed && trusted);
    }
}

/// Whether the process at the other end of `conn` runs the same executable file as this one (the kernel's word on
/// its pid, then the file's identity: a berth at another path, or a replaced binary, is not taken for it).
fn peer_runs_this_binary(conn: &UnixStream) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(peer) = rustix::net::sockopt::socket_peercred(conn) else { return false };
    let id = |path: &str| std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
    let theirs = id(&format!("/proc/{}/exe", peer.pid.as_raw_nonzero()));
    theirs.is_some() && theirs == id("/proc/self/exe")
}

/// A task the runner started: what its thread needs.
struct TaskRun {
    task: String,
    run: i64,
    assignee: String,
    log: PathBuf,
    workdir: PathBuf,
    failure_limit: u32,
    started: Instant,
    start: Option<u64>,
}

/// A started worker: its run, the worker (its script), the runner's end of its gate, the launcher's word, the
/// command's socket.
struct Worker {
    run: TaskRun,
    /// The dispatch's settings (its `Hello`).
    ctx: Arc<Ctx>,
    child: Child,
    gate: UnixStream,
    opened: Receiver<bool>,
    server: Option<super::handoff::Server>,
    _busy: Busy,
}

/// Every task's environment but the variables naming its run: the dispatch's, without the board's password.
fn base_env(ctx: &Ctx, dispatch: &[(String, String)]) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env: std::collections::BTreeMap<std::ffi::OsString, std::ffi::OsString> =
        dispatch.iter().map(|(k, v)| (k.into(), v.into())).collect();
    if let Some(url) = ctx.database_url() {
        // No variable holding the board's password, the dispatch's included.
        let secrets = kanban_postgres::url_secrets(url);
        env.retain(|_, v| !secrets.iter().any(|s| v.to_string_lossy().contains(s.as_str())));
        for (k, v) in super::handoff::command_env(ctx, None) {
            match v {
                Some(v) => env.insert(k.into(), v.into()),
                None => env.remove(std::ffi::OsStr::new(&k)),
            };
        }
    }
    env.into_iter().collect()
}

/// Starts a task's worker behind its gate and the thread that sees it through.
fn start_task(
    shared: &Arc<Shared>,
    ctx: &Arc<Ctx>,
    hello: &Hello,
    base: &[(std::ffi::OsString, std::ffi::OsString)],
    s: Start,
) -> Result<(u32, Option<u64>, Sender<bool>), String> {
    // Only the spawn is on the launcher's clock: the log and the working directory are made by the task's thread
    // once the tick has recorded its workers (the script enters the directory behind the gate).
    let command = WorkerCommand::of(&hello.template, &s.task, &s.assignee, &s.board);
    let (ours, theirs) = UnixStream::pair().map_err(|e| e.to_string())?;
    // On a PostgreSQL board the command's own `kanban complete|block|heartbeat` reach the board through the runner.
    let server = super::handoff::Server::open(ctx);
    // A path, not a name looked up in the command's own PATH: only so does the spawn take `posix_spawn` (the
    // kernel's vfork, no copy of the runner's page tables) instead of a fork of the whole runner.
    let mut cmd = Command::new("/bin/sh");
    let reports = ctx.settings.kanban.worker_exit_outcome;
    cmd.arg("-c").arg(script(&command, &s.workdir, reports)).arg("sh").arg(&command.rendered);
    cmd.env_clear().envs(base.iter().map(|(k, v)| (k, v))).envs(s.env.iter().map(|(k, v)| (k, v)));
    if let Some(server) = &server {
        cmd.env(super::handoff::SOCKET_VAR, server.address());
    }
    cmd.stdin(Stdio::from(OwnedFd::from(theirs))).stdout(Stdio::piped()).stderr(Stdio::piped());
    let (child, start) = process::spawn_detached(&mut cmd).map_err(|e| format!("cannot start the worker: {e}"))?;
    let pid = child.id();
    let (gate, opened) = std::sync::mpsc::channel();
    let run = TaskRun {
        task: s.task,
        run: s.run,
        assignee: s.assignee,
        log: s.log,
        workdir: s.workdir,
        failure_limit: hello.failure_limit,
        started: Instant::now(),
        start,
    };
    let w = Worker { run, ctx: Arc::clone(ctx), child, gate: ours, opened, server, _busy: Busy::new(shared) };
    let shared = Arc::clone(shared);
    std::thread::spawn(move || run_task(&shared, w));
    Ok((pid, start, gate))
}

/// Sees one task through: the gate, the command's output into its log, its exit recorded, the worker let go.
fn run_task(shared: &Arc<Shared>, w: Worker) {
    let Worker { run: t, ctx: dispatch, mut child, mut gate, opened, server, _busy } = w;
    let ctx = &*dispatch;
    let pid = child.id();
    let confirmed = opened.recv().unwrap_or(false);
    // The log and the folder are made once the tick has recorded its workers, not while it starts them.
    let (mut log, setup) = set_up(ctx, &t);
    // The dispatcher's confirmation holds without asking the board when it came promptly (`worker::Gate`).
    let k = &ctx.settings.kanban;
    let window = k.host_timeout_seconds.duration().min(k.claim_ttl_seconds.duration()) / 3;
    let go = (confirmed && t.started.elapsed() < window) || shared.confirm(ctx, &t, pid);
    if !go {
        say(&mut log, &format!("run {} of {} was not confirmed: its command did not start", t.run, t.task));
        drop(gate);
        let _ = child.wait();
        return;
    }
    say(&mut log, &format!("confirmed run {} of {} as pid {pid}", t.run, t.task));
    // A worker that cannot set up fails its run with the reason, where `kanban show` gives it; nothing runs.
    if let Err(reason) = setup {
        say(&mut log, &reason);
        let _ = shared.record(ctx, &t, &Err(Failure::other(reason)), "");
        drop(gate);
        let _ = child.wait();
        return;
    }
    let _ = gate.write_all(b"go\n");
    let mut sink = LogSink::to_file(ctx, log.take(), t.log.clone());
    std::thread::scope(|s| {
        // The command's own `kanban complete|block|heartbeat` (PostgreSQL), answered while it runs.
        if let Some(server) = &server {
            s.spawn(|| {
                server.serve_with(&t.task, pid, |op, text, full| {
                    let done = shared.command_write(&dispatch, &t, op, text, full)?;
                    let mut log = std::fs::OpenOptions::new().append(true).read(true).open(&t.log).ok();
                    say(&mut log, &format!("the command's {op} recorded through the runner"));
                    Ok(done)
                });
            });
        }
        pump(&mut child, &mut sink);
        if let Some(server) = &server {
            server.close();
        }
    });
    sink.finish();
    if !ctx.settings.kanban.worker_exit_outcome {
        // The command was the worker (hermes's protocol): it recorded its outcome itself, or the crash verdict will.
        let said = match child.wait().map(|s| (s.code(), std::os::unix::process::ExitStatusExt::signal(&s))) {
            Ok((Some(code), _)) => format!("the command exited {code}"),
            Ok((_, Some(signal))) => format!("the command was killed by signal {signal}"),
            _ => "the command's end was not seen".to_owned(),
        };
        say(sink.file(), &said);
        return;
    }
    let mut line = String::new();
    let reported = BufReader::new(&gate)
        .read_line(&mut line)
        .ok()
        .and_then(|_| line.trim().strip_prefix("exit ")?.parse::<u8>().ok());
    let code = match reported {
        Some(code) => code,
        // The worker ended without a report: killed (the board's crash verdict has its run), or the shell could not
        // read the command (its code is the outcome).
        None => match child.wait().ok().and_then(|s| s.code()) {
            Some(code) => u8::try_from(code).unwrap_or(1),
            None => {
                say(sink.file(), "the worker was killed before it reported the command's exit");
                return;
            }
        },
    };
    let recorded = if code == 0 {
        shared.complete(&dispatch, &t, &sink.last_line)
    } else {
        shared.record(ctx, &t, &Ok(code), &sink.last_line)
    };
    match &recorded {
        Ok((said, _)) => say(sink.file(), said),
        Err(f) => say(sink.file(), &format!("the outcome could not be recorded: {}", f.message)),
    }
    let _ = gate.write_all(b"ok\n");
    let _ = child.wait();
    if let Ok((_, true)) = recorded {
        let removals = shared.removals.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let _ = removals.send(((t.task.clone(), t.assignee.clone()), Box::new(|_| ())));
    }
}
