//! Workers: how the dispatcher starts one (detached, logged, with the resolved settings in its environment), how
//! it stops one, and the built-in worker `berth worker run` that runs a task's command in the task's sandbox.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use domain::board::{Claimed, FailureOutcome, TaskStatus};
use domain::board::{Confirmation, EX_TEMPFAIL, Task};
use domain::ids::BoardSlug;
use domain::policy::cleanup::ReleaseMode;
use domain::ports::{Clock, ExecOutcome, ExecSpec};
use domain::sandbox::SandboxIdentity;
use domain::service;

use crate::edge::open::Board;

pub use super::gate::Gate;
use super::log_sink::{LogSink, log_line};
use super::profile_env::{ProfileEnv, Profiles};
use super::run_outcome::Outcome;
use crate::edge::context::{Ctx, SystemClock};
use crate::edge::error::{Exit, Failure};
use crate::edge::handover::Slot;
use crate::sandbox::fault::SandboxFault;
use crate::{board::outage, edge::process, sandbox};

/// A started worker.
pub struct Spawned {
    pub pid: u32,
    /// The start fingerprint read right after the spawn (what every later stop verifies).
    pub start: Option<u64>,
    pub log: PathBuf,
    /// The sandbox the worker runs in (persist mode: its deterministic container name).
    pub sandbox: String,
}

/// The workers' logs: `<home>/kanban/logs`.
fn log_dir(ctx: &Ctx) -> PathBuf {
    ctx.home.join("kanban").join("logs")
}

/// A task's worker log: `<home>/kanban/logs/<task>.log`.
pub fn log_path(ctx: &Ctx, task: &str) -> PathBuf {
    log_dir(ctx).join(format!("{task}.log"))
}

/// Rotates `log` when it is larger than `max_bytes`, keeping `backups` old copies (`.1` newest).
pub(super) fn rotate(log: &Path, max_bytes: u64, backups: u32) {
    let Ok(meta) = std::fs::metadata(log) else { return };
    if meta.len() <= max_bytes || backups == 0 {
        return;
    }
    let name = |i: u32| PathBuf::from(format!("{}.{i}", log.display()));
    for i in (1..backups).rev() {
        let _ = std::fs::rename(name(i), name(i + 1));
    }
    let _ = std::fs::rename(log, name(1));
}

/// A worker's working directory (the worker creates it): its task's own sandbox folder
/// (`<sandbox_dir>/docker/…/workspace`), never the home, so `terminal.docker_mount_cwd_to_workspace` gives the
/// sandbox only what it has anyway. `identity` is the task's sandbox's under its assignee ([`ProfileEnv`]), whose
/// `terminal.sandbox_dir` was checked once for the dispatch.
pub(super) fn workdir(profile: &ProfileEnv, identity: &SandboxIdentity) -> Result<PathBuf, String> {
    profile.sandbox_dir.clone()?;
    Ok(PathBuf::from(identity.host_dir(&profile.ctx.settings.terminal.sandbox_dir)).join("workspace"))
}

/// Starts the worker of a claimed task: `kanban.worker_command` (a template) or the built-in `berth worker run`.
///
/// The worker runs in its own process group, its stdin the launcher's gate (it starts once that closes), and
/// receives the task, board, database, profile and every resolved setting (the sandbox's as its assignee resolves
/// them: [`ProfileEnv`]). It creates its own log (`<home>/kanban/logs/<task>.log`, given as `--log`) and working
/// directory (`--workdir`) as its first acts: the dispatcher creates no file per worker, so 300 spawns cost 300
/// process starts and nothing more.
///
/// # Errors
/// A one-line reason when the process cannot be started.
pub fn spawn(ctx: &Ctx, env: &WorkerEnv, board: &BoardSlug, task: &Claimed) -> Result<Spawned, String> {
    let assignee = task.assignee.clone().ok_or("the task has no assignee")?;
    let profile = env.profile(ctx, &assignee)?;
    let log = log_path(ctx, &task.task_id);
    let identity = profile.identity(&task.task_id)?;
    let dir = workdir(&profile, &identity)?;
    // Always `berth worker run`, even for a `kanban.worker_command`: it confirms the run first and then replaces
    // itself with that command (same pid, same start time), so every worker confirms its own run.
    let mut cmd = Command::new(&env.exe);
    cmd.args(["worker", "run", &task.task_id, "--board", board.as_str()]);
    cmd.arg("--log").arg(&log).arg("--workdir").arg(&dir).arg("--after-stdin-closes");
    cmd.envs(env.vars.iter().map(|(k, v)| (k, v)));
    cmd.envs(profile.vars.iter().map(|(k, v)| (k, v)));
    cmd.envs(task_vars(board, task, &assignee));
    let gate = env.gate.try_clone().map_err(|e| format!("cannot pass the workers' gate: {e}"))?;
    // The board's password never in the worker's environment: on its stdout, which it replaces with its log.
    let url = ctx.database_url().map(|url| crate::edge::handover::hand_over(&mut cmd, url, Slot::Stdout));
    let out = url.transpose().map_err(|e| format!("cannot hand the board's URL to the worker: {e}"))?.flatten();
    cmd.stdin(gate).stdout(out.unwrap_or_else(Stdio::null)).stderr(Stdio::null());
    let (child, start) = process::spawn_detached(&mut cmd).map_err(|e| format!("cannot start worker: {e}"))?;
    let sandbox = identity.persistent_name();
    // The child is not waited for here: it outlives a one-shot dispatch (and the gateway reaps exited children).
    Ok(Spawned { pid: child.id(), start, log, sandbox })
}

/// The variables naming a worker's run, beside the dispatch's shared ones ([`WorkerEnv`]), and the reviewer's note
/// when changes were requested.
pub(super) fn task_vars(board: &BoardSlug, task: &Claimed, assignee: &str) -> Vec<(String, String)> {
    let run = task.run_id.to_string();
    [
        ("BERTH_PROFILE", assignee),
        ("BERTH_KANBAN_TASK", &task.task_id),
        ("BERTH_KANBAN_BOARD", board.as_str()),
        ("BERTH_KANBAN_RUN_ID", &run),
        // The names hermes-agent workers read, so an external worker command works unchanged.
        ("HERMES_KANBAN_TASK", &task.task_id),
        ("HERMES_KANBAN_BOARD", board.as_str()),
        ("HERMES_PROFILE", assignee),
    ]
    .into_iter()
    .chain(task.review_note.as_deref().map(|note| (REVIEW_NOTE_VAR, note)))
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// The variable holding the note of the task's last `kanban request-changes`, in each later run's environment.
pub const REVIEW_NOTE_VAR: &str = "BERTH_REVIEW_NOTE";

/// What every worker of one dispatch shares, worked out once: the executable and the environment (every resolved
/// setting, the home, the board's database).
pub struct WorkerEnv {
    pub(super) exe: PathBuf,
    pub(super) vars: Vec<(String, String)>,
    /// The read end of the launcher's gate: each worker's stdin, at end of file once the tick recorded them all.
    gate: std::io::PipeReader,
    /// Each assignee's own settings, worked out at its first task of the dispatch.
    profiles: Profiles,
}

impl WorkerEnv {
    /// # Errors
    /// A one-line reason when the berth executable cannot be found or the log directory cannot be made.
    pub fn new(ctx: &Ctx, gate: std::io::PipeReader, failure_limit: Option<u32>) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find the berth executable: {e}"))?;
        // The log directory is every worker's: made (or found unusable, failing every spawn) once per tick.
        let logs = log_dir(ctx);
        crate::edge::private_files::ensure_dir(&logs).map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
        let mut vars = ctx.resolved.worker_env();
        // A limit given to this dispatch (`--failure-limit`) replaces the setting's.
        if let Some(n) = failure_limit {
            let var = config_bridge::env_var_for("kanban.failure_limit");
            vars.retain(|(k, _)| *k != var);
            vars.push((var, n.to_string()));
        }
        let db = ctx.db_path().display().to_string();
        vars.push(("BERTH_HOME".into(), ctx.home.display().to_string()));
        // The SQLite file's path only when it is the board (a worker's command on a PostgreSQL board gets neither).
        if ctx.database_url().is_none() {
            vars.push(("BERTH_KANBAN_DB".into(), db.clone()));
            vars.push(("HERMES_KANBAN_DB".into(), db));
        }
        Ok(Self { exe, vars, gate, profiles: Profiles::default() })
    }

    /// The settings of `assignee`'s workers, resolved at its first task of this dispatch.
    ///
    /// # Errors
    /// A one-line reason when its profile file cannot be read.
    pub(super) fn profile(&self, ctx: &Ctx, assignee: &str) -> Result<Arc<ProfileEnv>, String> {
        self.profiles.get(ctx, assignee)
    }
}

/// A worker's first acts, before anything that can fail or print: its output goes to its log (rotated past
/// `kanban.worker_log_rotate_bytes`, created when missing), then it enters its working directory (created when
/// missing). A worker that cannot do either confirms its run all the same and fails it with the reason.
///
/// # Errors
/// A one-line reason (also written to the log when it could be opened).
pub fn enter(ctx: &Ctx, log: Option<&Path>, workdir: Option<&Path>) -> Result<(), Failure> {
    if let Some(log) = log {
        let k = &ctx.settings.kanban;
        rotate(log, k.worker_log_rotate_bytes, k.worker_log_backup_count.get());
        redirect_output(log)?;
    }
    if let Some(dir) = workdir {
        crate::edge::private_files::ensure_dir(dir)
            .and_then(|()| std::env::set_current_dir(dir))
            .map_err(|e| Failure::other(format!("cannot enter the working directory {}: {e}", dir.display())))?;
    }
    Ok(())
}

/// Appends this process's stdout and stderr to `log` (its directory and the file created when missing).
///
/// # Errors
/// A one-line reason when the log cannot be opened.
pub fn redirect_output(log: &Path) -> Result<(), Failure> {
    let open = || {
        if let Some(dir) = log.parent() {
            crate::edge::private_files::ensure_dir(dir)?;
        }
        OpenOptions::new().create(true).append(true).open(log)
    };
    let file = open().map_err(|e| Failure::other(format!("cannot open the worker log {}: {e}", log.display())))?;
    rustix::stdio::dup2_stdout(&file)
        .and_then(|()| rustix::stdio::dup2_stderr(&file))
        .map_err(|e| Failure::other(format!("cannot write to the worker log {}: {e}", log.display())))?;
    Ok(())
}

/// Stops a task's worker, given the task row's `worker_pid` and `worker_start`, through the one verified stop:
/// nothing is signalled unless the pid still carries that start, or when the caller is that worker itself.
pub async fn stop(pid: Option<i64>, start: Option<i64>) -> Option<process::StopOutcome> {
    let w = process::Worker::from_row(pid, start)?;
    Some(process::stop(w, process::STOP_GRACE).await)
}

/// [`stop`] for a command in front of a person: `berth: stopping the worker of ID … Ns` on a terminal while it waits
/// out the grace period.
pub async fn stop_shown(ctx: &Ctx, task: &str, pid: Option<i64>, start: Option<i64>) {
    if pid.is_some() {
        crate::edge::output::with_progress(ctx.json, &format!("stopping the worker of {task}"), stop(pid, start)).await;
    }
}

/// What a heartbeat thread beats for.
struct Beat {
    /// The worker's connection to the board, lent while the command runs (a lost PostgreSQL connection is replaced
    /// by the store itself).
    store: Board,
    /// This host's id: each beat renews the host's heartbeat too.
    host: String,
    task: String,
    run: i64,
    every: Duration,
    claim_ttl: Duration,
}

/// Heartbeats the run every `every` on the worker's connection until stopped (and hands the connection back),
/// extending its claim by the claim TTL.
/// Once the task has left the run (reclaimed, blocked or archived, perhaps by another host) it says so on `lost`
/// and stops beating: the worker then stops its command, so a task never runs twice at once. Dropping `stop`'s
/// sender ends it at once (the join does not wait out a sleep: the task's slot is held until its worker records
/// the outcome).
fn heartbeat_thread(
    beat: Beat,
    stop: std::sync::mpsc::Receiver<()>,
    lost: tokio::sync::oneshot::Sender<()>,
) -> std::thread::JoinHandle<Board> {
    use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
    let Beat { mut store, host, task, run, every, claim_ttl } = beat;
    std::thread::spawn(move || {
        loop {
            // A beat the board cannot take (an outage) is skipped; the run is only lost when the board says so.
            let now = SystemClock.now();
            let _ = store.renew_host(&host, now);
            if let Ok(false) = store.heartbeat_run(&task, run, claim_ttl, now) {
                if stop.try_recv() == Err(TryRecvError::Empty) {
                    let _ = lost.send(());
                }
                return store;
            }
            if stop.recv_timeout(every) != Err(RecvTimeoutError::Timeout) {
                return store;
            }
        }
    })
}

/// The marker put in the environment of a worker's command, so its processes can be found and stopped.
fn run_marker(task: &str, run: Option<i64>) -> String {
    format!("BERTH_KANBAN_RUN={task}:{}", run.unwrap_or(0))
}

/// `berth worker run TASK`: runs the task's command in its sandbox and records the outcome.
///
/// On SIGTERM (the dispatcher reclaimed the task or its runtime ran out) it stops the command inside the sandbox
/// and exits without touching the task, whose run the dispatcher already closed.
///
/// # Errors
/// A failure when the task cannot be read or is not running; command failures are recorded on the task instead.
pub async fn run(ctx: &Ctx, task_id: &str, gate: Gate, setup: Option<Failure>) -> Result<u8, Failure> {
    let confirmed = gate.trusted(ctx);
    let template = ctx.settings.kanban.worker_command.clone();
    if confirmed && setup.is_none() && !template.trim().is_empty() {
        // A worker command needs nothing from the board: task, board and profile are in its environment.
        let run = ctx.env.get("BERTH_KANBAN_RUN_ID").and_then(|r| r.parse::<i64>().ok());
        if let (Some(run), Some(board)) = (run, ctx.env.get("BERTH_KANBAN_BOARD")) {
            log_line(&format!("confirmed run {run} of {task_id} as pid {}", std::process::id()));
            return run_worker_command(ctx, task_id, Some(run), ctx.profile.as_str(), board, &template).await;
        }
    }
    // Every write below waits out an outage of the board (bounded): an outcome is recorded late, never lost.
    let patience = outage::patience(ctx);
    let mut store: Option<Board> = None;
    let task = outage::retrying(ctx, "read the task", patience, &mut store, |s| s.task(task_id)).await?;
    if task.status != TaskStatus::Running {
        return Err(Failure::usage(format!(
            "task {task_id} is {}, not running; only the dispatcher starts workers",
            task.status
        )));
    }
    let Some(run) = ctx.env.get("BERTH_KANBAN_RUN_ID").and_then(|r| r.parse().ok()).or(task.current_run_id) else {
        return Err(Failure::usage(format!("task {task_id} has no current run; only the dispatcher starts workers")));
    };
    // The worker's first act: confirm its own run (compare-and-swap on task, run, still claimed, not yet confirmed).
    // A run that was superseded, or that a tick expired when its spawn lease ran out, fails here and nothing runs.
    let claim_ttl = claim_ttl(ctx);
    let task = if confirmed { task } else { confirm(ctx, &mut store, task_id, run, claim_ttl).await? };
    log_line(&format!("confirmed run {run} of {task_id} as pid {}", std::process::id()));
    let breaker = ctx.breaker(ctx.settings.kanban.failure_limit.get(), task.assignee.as_deref());
    let mut store = Outcome { ctx, task: task_id, run, patience, store, breaker };
    // A log or working directory this worker could not set up fails the run with the reason, on the board where
    // `kanban show` gives it (the log may be what could not be opened).
    if let Some(setup) = setup {
        store.fail("failed", &setup.message, None).await?;
        return Ok(Exit::FAILURE);
    }
    if !template.trim().is_empty() {
        drop(store);
        let assignee = task.assignee.clone().unwrap_or_else(|| ctx.profile.as_str().to_owned());
        return run_worker_command(ctx, &task.id, Some(run), &assignee, &task.board, &template).await;
    }
    let Some(command) = task.command.clone().filter(|c| !c.trim().is_empty()) else {
        store.fail("failed", "the task has no command for the built-in worker", None).await?;
        return Ok(Exit::FAILURE);
    };
    log_line(&format!("task {task_id} ({}) as {}: {command}", task.title, ctx.profile));
    run_in_own_sandbox(&mut store, &task, &command, claim_ttl).await
}

/// The built-in worker's command in the task's sandbox, beside the heartbeats of its confirmed run; the outcome
/// recorded (guarded by the run) and the worker's exit code.
async fn run_in_own_sandbox(
    store: &mut Outcome<'_>,
    task: &Task,
    command: &str,
    claim_ttl: Duration,
) -> Result<u8, Failure> {
    let (ctx, task_id, run, patience) = (store.ctx, store.task, store.run, store.patience);
    let marker = run_marker(task_id, Some(run));
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    // A beat at least three times per claim TTL: on a shared board, other hosts judge this worker by its lease.
    let every = Duration::from_secs(30).min(claim_ttl / 3).max(Duration::from_millis(200));
    let every = every.min(ctx.settings.kanban.host_timeout_seconds.duration() / 3).max(Duration::from_millis(200));
    // The worker's one connection beats while the command runs and comes back for the outcome: a worker never
    // holds two of the server's connection slots.
    outage::retrying(ctx, "open the board for heartbeats", patience, &mut store.store, |_| Ok(())).await?;
    let store_for_beats = store.store.take().ok_or_else(|| Failure::other("the board did not open"))?;
    let beat = Beat { store: store_for_beats, host: ctx.host_id(), task: task_id.to_owned(), run, every, claim_ttl };
    let (lost_tx, mut lost) = tokio::sync::oneshot::channel();
    let beats = heartbeat_thread(beat, stopped, lost_tx);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Failure::other(e.to_string()))?;
    let result = tokio::select! {
        r = run_in_sandbox(ctx, task, command, &marker) => Some(r),
        _ = term.recv() => None,
        Ok(()) = &mut lost => None,
    };
    drop(stop);
    store.store = beats.join().ok();
    let result = match result {
        Some(Err(SandboxFault::Infra(e))) => return store.engine_unavailable(&e).await,
        Some(Err(SandboxFault::Stopped(name, code))) => return store.sandbox_stopped(&name, code).await,
        other => other.map(|r| r.map_err(SandboxFault::into_failure)),
    };
    let Some(result) = result else {
        log_line(
            "SIGTERM, or the run was taken back: stopping the command in the sandbox; the board owns the task now",
        );
        if let Ok(identity) = sandbox::identity(ctx, task_id) {
            sandbox::stop_marked(ctx, &identity, &marker, None).await;
        }
        return Ok(Exit::TERMINATED);
    };

    // A finished task (done, or failed at its limit) no longer needs its sandbox; a requeued one keeps it for the
    // retry. The sandbox goes before the outcome is recorded: a worker killed in between leaves a running task that
    // crash detection requeues, never a finished task with a sandbox nobody will remove.
    let snoozed = matches!(result, Ok((ExecOutcome::Exited(code), _, _)) if code == EX_TEMPFAIL);
    let limit_reached = !snoozed
        && matches!(
            domain::board::record_failure(
                u32::try_from(task.consecutive_failures).unwrap_or(0),
                task.max_retries.and_then(|m| u32::try_from(m).ok()),
                store.breaker.limit,
            ),
            FailureOutcome::GiveUp { .. }
        );
    let succeeded = matches!(result, Ok((ExecOutcome::Exited(0), _, _)));
    if succeeded || limit_reached {
        super::release::remove_task_sandbox(ctx, task_id, ctx.profile.as_str()).await;
    }
    store.record(result).await
}

/// `kanban.claim_ttl_seconds`: how long a confirmed claim lasts between heartbeats.
pub fn claim_ttl(ctx: &Ctx) -> Duration {
    ctx.settings.kanban.claim_ttl_seconds.duration()
}

/// Confirms this process as the worker of `run` (waiting out an outage: confirming twice is confirming once), and
/// renews this host's heartbeat, so other hosts of a shared board see the worker's host alive.
async fn confirm(
    ctx: &Ctx,
    store: &mut Option<Board>,
    task: &str,
    run: i64,
    claim_ttl: Duration,
) -> Result<Task, Failure> {
    let pid = std::process::id();
    let host = ctx.host_id();
    let start = domain::ports::ProcessProbe::start_fingerprint(&crate::edge::context::ProcProbe, pid);
    let c = Confirmation { task, run_id: run, pid, start, host: &host };
    outage::retrying(ctx, "confirm the run", outage::patience(ctx), store, |b| {
        let now = SystemClock.now();
        b.renew_host(&host, now)?;
        b.confirm_run(&c, claim_ttl, now)
    })
    .await
}

async fn run_in_sandbox(
    ctx: &Ctx,
    task: &Task,
    command: &str,
    marker: &str,
) -> Result<(ExecOutcome, String, String), SandboxFault> {
    let identity = sandbox::identity(ctx, &task.id)?;
    // `connect` fails only when the engine does not answer.
    let rt = sandbox::connect(ctx).await.map_err(SandboxFault::Infra)?;
    let req = sandbox::request(ctx, &*rt, identity).await?;
    sandbox::maybe_reap(ctx, &*rt).await;
    let timeout =
        task.max_runtime_seconds.and_then(|s| u64::try_from(s).ok()).filter(|s| *s > 0).map(Duration::from_secs);
    let mut env = sandbox::forwarded_env(ctx);
    env.push(marker.to_owned());
    if let Some(note) = &task.review_note {
        env.push(format!("{REVIEW_NOTE_VAR}={note}"));
    }
    let exec = ExecSpec {
        argv: vec!["sh".into(), "-c".into(), command.to_owned()],
        env,
        workdir: Some(req.spec.workdir.clone()),
        user: None,
        timeout,
    };
    // Only a dispatched worker's stdout is its log file; a worker started by hand writes to a terminal.
    let mut sink = LogSink::for_run(ctx, log_path(ctx, &task.id));
    let lease = (!req.persist_across_processes).then(|| crate::sandbox::lease::hold(ctx, &rt, &req.spec.name));
    // Which sandbox, before the command's output; `run_from` acquires again only if that one went away meanwhile.
    // A suspended sandbox is resumed from its snapshot.
    let found = match crate::sandbox::snapshots::resume_if_suspended(ctx, &*rt, &req).await? {
        Some(resumed) => resumed,
        None => service::acquire(&*rt, &req).await?,
    };
    sandbox::admit_credentials(ctx, &*rt, &req, &found).await?;
    log_line(&format!("sandbox {} ({})", found.name, found.action.as_str()));
    let ran = service::run_from(&*rt, &req, Some(found), &exec, &mut sink).await;
    sink.finish();
    let (acquired, outcome) = match ran.map_err(SandboxFault::from) {
        // The engine went away with the command started: it may still run in the sandbox. The task is requeued
        // only once it is gone, so its retry never runs beside it (bounded by the worker's patience).
        Err(SandboxFault::Infra(e)) => return Err(stop_interrupted(ctx, &req.identity, marker, e).await),
        ran => ran?,
    };
    if let ExecOutcome::Exited(code) = outcome
        && STOPPED_EXITS.contains(&code)
        && sandbox_went_away(&*rt, &acquired.id).await
    {
        return Err(SandboxFault::Stopped(acquired.name, code));
    }
    drop(lease);
    if !req.persist_across_processes {
        let _ = tokio::time::timeout(
            sandbox::TEARDOWN_WAIT,
            service::release(&*rt, Some(&acquired.id), ReleaseMode::OptOut),
        )
        .await;
    }
    Ok((outcome, sink.last_line, acquired.name))
}

/// The exits of a command whose sandbox was stopped under it: 137 and 143 (killed with its sandbox's processes), 126
/// (the engine refused to go on in a container that is stopping).
const STOPPED_EXITS: [i64; 3] = [126, 137, 143];

/// How long a command's end may precede its sandbox's stop being seen: the engine marks a stopped container a moment
/// after its processes died.
const STOP_SETTLES: Duration = Duration::from_secs(3);

/// Whether the sandbox `id` is stopped or gone, looked at until [`STOP_SETTLES`] (a sandbox that stays running
/// means the command itself was killed: its own failure). An engine that does not answer says nothing either way.
async fn sandbox_went_away(rt: &dyn domain::ports::ContainerRuntime, id: &str) -> bool {
    let deadline = tokio::time::Instant::now() + STOP_SETTLES;
    loop {
        match rt.inspect(id).await {
            Err(domain::ports::RuntimeError::NotFound(_)) => return true,
            Ok(d) if d.summary.state != domain::container::ContainerState::Running => return true,
            Ok(_) if tokio::time::Instant::now() < deadline => {}
            _ => return false,
        }
        tokio::time::sleep(Duration::from_millis(100)).await; // the engine's state, polled; no event to wait on
    }
}

/// The fault of a command whose engine connection broke: the engine's (the task requeued) once the command is
/// killed by its marker, else (the engine away past `kanban.board_retry_seconds`) a failure of the run, counted,
/// saying the command may still run.
async fn stop_interrupted(ctx: &Ctx, identity: &SandboxIdentity, marker: &str, e: Failure) -> SandboxFault {
    log_line(&format!("the engine connection broke under the command ({}); stopping it before a retry", e.message));
    let patience = outage::patience(ctx);
    if sandbox::kill_marked_confirmed(ctx, identity, marker, patience).await {
        return SandboxFault::Infra(e);
    }
    SandboxFault::Other(Failure::other(format!(
        "{}; the engine did not answer for {}s after, so the command may still run in its sandbox",
        e.message,
        patience.as_secs()
    )))
}

/// Runs the `kanban.worker_command` template rendered for the task as this (confirmed) worker's child, its output
/// through the worker's log sink (`external.rs`); the command's exit code. With `kanban.worker_exit_outcome` that
/// code is also the run's outcome ([`record_exit`]).
async fn run_worker_command(
    ctx: &Ctx,
    task_id: &str,
    run: Option<i64>,
    assignee: &str,
    board: &str,
    template: &str,
) -> Result<u8, Failure> {
    let command = super::external::WorkerCommand::of(template, task_id, assignee, board);
    let mut sink = LogSink::for_run(ctx, log_path(ctx, task_id));
    // On a PostgreSQL board the command reaches the board through this worker (`handoff.rs`).
    let code = super::handoff::run_command(ctx, task_id, run, &command, &mut sink);
    sink.finish();
    match run {
        Some(run) if ctx.settings.kanban.worker_exit_outcome => {
            record_exit(ctx, task_id, run, assignee, code, &sink.last_line).await
        }
        _ => code,
    }
}

/// `kanban.worker_exit_outcome`: the command's end recorded as its run's outcome, as the built-in worker records
/// its own: exit 0 completes the task (the last line of output its result; through the gateway's kept connection
/// when it takes it, `relay.rs`), anything else fails it through the failure limit. Every write is guarded by the
/// run, so a command that recorded its own outcome first (`kanban complete|block`) keeps it and nothing changes.
/// The worker's exit code stays the command's.
async fn record_exit(
    ctx: &Ctx,
    task: &str,
    run: i64,
    assignee: &str,
    code: Result<u8, Failure>,
    last: &str,
) -> Result<u8, Failure> {
    if let Ok(0) = code
        && let Some((_, released)) = super::relay::send(ctx, "complete", task, run, Some(last), &ctx.host_id())
    {
        log_line("the command exited 0: completed through the gateway");
        if !released {
            super::release::remove_task_sandbox(ctx, task, assignee).await;
        }
        return Ok(0);
    }
    let limit = ctx.settings.kanban.failure_limit.get();
    let (said, finished) =
        super::exit_outcome::record(ctx, &mut None, task, run, ctx.breaker(limit, Some(assignee)), &code, last)?;
    log_line(&said);
    if finished {
        super::release::remove_task_sandbox(ctx, task, assignee).await;
    }
    code
}
