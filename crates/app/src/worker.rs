//! Workers: how the dispatcher starts one (detached, logged, with the resolved settings in its environment), how
//! it stops one, and the built-in worker `berth worker run` that runs a task's command in the task's sandbox.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use domain::ids::{BoardSlug, ProfileName, TaskId};
use domain::kanban::{FailureOutcome, TaskStatus};
use domain::ports::{Clock, ExecOutcome, ExecSpec, OutputSink, OutputStream};
use domain::sandbox::SandboxIdentity;
use domain::service;
use kanban_store::{RunEnd, SqliteKanbanStore, Task};

use crate::context::{Ctx, SystemClock};
use crate::error::Failure;
use crate::sandbox;

/// A started worker.
pub struct Spawned {
    pub pid: u32,
    pub log: PathBuf,
    /// The sandbox the worker runs in (persist mode: its deterministic container name).
    pub sandbox: String,
}

/// Rotates `log` when it is larger than `max_bytes`, keeping `backups` old copies (`.1` newest).
fn rotate(log: &Path, max_bytes: u64, backups: u32) {
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

/// Starts the worker of a claimed task: `kanban.worker_command` (a template) or the built-in `berth worker run`.
///
/// The worker runs in its own process group with stdin closed and stdout/stderr appended to
/// `<home>/kanban/logs/<task>.log`, and receives the task, board, database, profile and every resolved setting.
///
/// # Errors
/// A one-line reason when the process cannot be started.
pub fn spawn(ctx: &Ctx, board: &BoardSlug, task: &Task, run_id: i64) -> Result<Spawned, String> {
    let assignee = task.assignee.clone().ok_or("the task has no assignee")?;
    let logs = ctx.home.join("kanban").join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
    let log = logs.join(format!("{}.log", task.id));
    rotate(
        &log,
        u64::try_from(ctx.settings.int("kanban.worker_log_rotate_bytes")).unwrap_or(2 * 1024 * 1024),
        u32::try_from(ctx.settings.int("kanban.worker_log_backup_count")).unwrap_or(1),
    );
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| format!("cannot open {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let template = ctx.settings.string("kanban.worker_command");
    let mut cmd = if template.trim().is_empty() {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find the berth executable: {e}"))?;
        let mut c = Command::new(exe);
        c.args(["worker", "run", &task.id, "--board", board.as_str()]);
        c
    } else {
        let rendered =
            template.replace("{task_id}", &task.id).replace("{assignee}", &assignee).replace("{board}", board.as_str());
        let mut c = Command::new("sh");
        c.args(["-c", &rendered]);
        c
    };
    for (k, v) in ctx.settings.worker_env() {
        cmd.env(k, v);
    }
    let db = ctx.db_path().display().to_string();
    let run = run_id.to_string();
    for (k, v) in [
        ("BERTH_HOME", ctx.home.display().to_string()),
        ("BERTH_PROFILE", assignee.clone()),
        ("BERTH_KANBAN_TASK", task.id.clone()),
        ("BERTH_KANBAN_BOARD", board.as_str().to_owned()),
        ("BERTH_KANBAN_DB", db.clone()),
        ("BERTH_KANBAN_RUN_ID", run),
        // The names hermes-agent workers read, so an external worker command works unchanged.
        ("HERMES_KANBAN_TASK", task.id.clone()),
        ("HERMES_KANBAN_BOARD", board.as_str().to_owned()),
        ("HERMES_KANBAN_DB", db),
        ("HERMES_PROFILE", assignee.clone()),
    ] {
        cmd.env(k, v);
    }
    use std::os::unix::process::CommandExt;
    cmd.current_dir(&ctx.home).stdin(Stdio::null()).stdout(out).stderr(err).process_group(0);
    let child = cmd.spawn().map_err(|e| format!("cannot start worker: {e}"))?;
    let sandbox = match (TaskId::parse(&task.id), ProfileName::parse(&assignee)) {
        (Ok(t), Ok(p)) => SandboxIdentity::new(t, p).shared(&sandbox::shared_key(ctx)).persistent_name(),
        _ => String::new(),
    };
    // The child is not waited for here: it outlives a one-shot dispatch (and the gateway reaps exited children).
    Ok(Spawned { pid: child.id(), log, sandbox })
}

/// Stops a worker: SIGTERM to its process group, then SIGKILL after 5 s.
pub async fn stop(pid: Option<i64>) {
    let Some(pid) = pid.and_then(|p| libc::pid_t::try_from(p).ok()).filter(|p| *p > 1) else { return };
    // SAFETY: kill(2) has no memory-safety preconditions; a negative pid addresses the process group.
    let signal = |sig| unsafe { libc::kill(-pid, sig) == 0 || libc::kill(pid, sig) == 0 };
    if !signal(libc::SIGTERM) {
        return;
    }
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        // SAFETY: signal 0 only checks for existence.
        if unsafe { libc::kill(pid, 0) } != 0 {
            return;
        }
    }
    signal(libc::SIGKILL);
}

/// Appends exec output to our stdout/stderr (the worker's log) and keeps the last line for the result.
struct LogSink {
    last_line: String,
}

impl OutputSink for LogSink {
    fn write(&mut self, stream: OutputStream, bytes: &[u8]) {
        use std::io::Write;
        let _ = match stream {
            OutputStream::Stdout => std::io::stdout().lock().write_all(bytes),
            OutputStream::Stderr => std::io::stderr().lock().write_all(bytes),
        };
        if stream == OutputStream::Stdout
            && let Some(line) = String::from_utf8_lossy(bytes).lines().rev().find(|l| !l.trim().is_empty())
        {
            self.last_line = line.chars().take(500).collect();
        }
    }
}

/// Heartbeats the task every `every` on its own connection until stopped.
fn heartbeat_thread(db: PathBuf, task: String, every: Duration, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let Ok(mut store) = SqliteKanbanStore::open(&db) else { return };
        while !stop.load(Ordering::SeqCst) {
            let _ = store.heartbeat(&task, None, SystemClock.now());
            let mut waited = Duration::ZERO;
            while waited < every && !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(200));
                waited += Duration::from_millis(200);
            }
        }
    })
}

fn log_line(text: &str) {
    eprintln!("[berth worker {}] {text}", SystemClock.now());
}

/// The marker put in the environment of a worker's command, so its processes can be found and stopped.
fn run_marker(task: &str, run: Option<i64>) -> String {
    format!("BERTH_KANBAN_RUN={task}:{}", run.unwrap_or(0))
}

/// Removes a task's sandbox (any mode) when its task is finished with it; best effort, bounded.
pub async fn remove_task_sandbox(ctx: &Ctx, task: &str, assignee: &str) {
    let (Ok(t), Ok(p)) = (TaskId::parse(task), ProfileName::parse(assignee)) else { return };
    let identity = SandboxIdentity::new(t, p).shared(&sandbox::shared_key(ctx));
    let work = async {
        let rt = sandbox::connect(ctx).await.ok()?;
        let query = domain::ports::ListQuery { labels: identity.upstream_labels(), states: vec![] };
        let listed = domain::ports::ContainerRuntime::list(&rt, &query).await.ok()?;
        for c in listed.iter().filter(|c| c.identity() == Some(identity.digest().as_str())) {
            let _ = service::release(&rt, Some(&c.id), true, true).await;
        }
        Some(())
    };
    if tokio::time::timeout(sandbox::TEARDOWN_WAIT, work).await.is_err() {
        tracing::warn!("removing the sandbox of {task} did not finish in time; the reaper will take it");
    }
}

/// `berth worker run TASK`: runs the task's command in its sandbox and records the outcome.
///
/// On SIGTERM (the dispatcher reclaimed the task or its runtime ran out) it stops the command inside the sandbox
/// and exits without touching the task, whose run the dispatcher already closed.
///
/// # Errors
/// A failure when the task cannot be read or is not running; command failures are recorded on the task instead.
pub async fn run(ctx: &Ctx, task_id: &str) -> Result<u8, Failure> {
    let db = ctx.db_path();
    let mut store = SqliteKanbanStore::open(&db)?;
    let task = store.task(task_id)?;
    if task.status != TaskStatus::Running {
        return Err(Failure::usage(format!(
            "task {task_id} is {}, not running; only the dispatcher starts workers",
            task.status
        )));
    }
    let run_id: Option<i64> = ctx.env.get("BERTH_KANBAN_RUN_ID").and_then(|r| r.parse().ok()).or(task.current_run_id);
    let failure_limit = u32::try_from(ctx.settings.int("kanban.failure_limit")).unwrap_or(2);
    let fail = |store: &mut SqliteKanbanStore,
                outcome: &str,
                error: &str,
                code: Option<i64>|
     -> Result<FailureOutcome, Failure> {
        log_line(&format!("{outcome}: {error}"));
        Ok(store.fail(
            task_id,
            run_id,
            &RunEnd { outcome, error, exit_code: code },
            failure_limit,
            SystemClock.now(),
        )?)
    };
    let Some(command) = task.command.clone().filter(|c| !c.trim().is_empty()) else {
        fail(&mut store, "failed", "the task has no command for the built-in worker", None)?;
        return Ok(1);
    };
    log_line(&format!("task {task_id} ({}) as {}: {command}", task.title, ctx.profile));

    let marker = run_marker(task_id, run_id);
    let stop = Arc::new(AtomicBool::new(false));
    let beats = heartbeat_thread(db.clone(), task_id.to_owned(), Duration::from_secs(30), stop.clone());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Failure::other(e.to_string()))?;
    let result = tokio::select! {
        r = run_in_sandbox(ctx, &task, &command, &marker) => Some(r),
        _ = term.recv() => None,
    };
    stop.store(true, Ordering::SeqCst);
    let _ = beats.join();
    let Some(result) = result else {
        log_line("SIGTERM: stopping the command in the sandbox; the dispatcher owns the task now");
        if let Ok(identity) = sandbox::identity(ctx, task_id) {
            sandbox::stop_marked(ctx, &identity, &marker, None).await;
        }
        return Ok(143);
    };

    // A finished task (done, or failed at its limit) no longer needs its sandbox; a requeued one keeps it for the
    // retry. The sandbox goes before the outcome is recorded: a worker killed in between leaves a running task that
    // crash detection requeues, never a finished task with a sandbox nobody will remove.
    let limit_reached = matches!(
        domain::kanban::record_failure(
            u32::try_from(task.consecutive_failures).unwrap_or(0),
            task.max_retries.and_then(|m| u32::try_from(m).ok()),
            failure_limit,
        ),
        FailureOutcome::GiveUp { .. }
    );
    let succeeded = matches!(result, Ok((ExecOutcome::Exited(0), _, _)));
    if succeeded || limit_reached {
        remove_task_sandbox(ctx, task_id, ctx.profile.as_str()).await;
    }
    let now = SystemClock.now();
    let code = match result {
        Ok((ExecOutcome::Exited(0), last, _)) => {
            store.complete(task_id, run_id, Some(&last), Some(0), now)?;
            log_line("completed");
            0
        }
        Ok((ExecOutcome::Exited(code), _, _)) => {
            fail(&mut store, "failed", &format!("command exited with {code}"), Some(code))?;
            1
        }
        Ok((ExecOutcome::TimedOut, _, _)) => {
            fail(&mut store, "timed_out", "max runtime exceeded", None)?;
            1
        }
        Err(e) => {
            fail(&mut store, "failed", &format!("sandbox: {}", e.message), None)?;
            1
        }
    };
    Ok(code)
}

async fn run_in_sandbox(
    ctx: &Ctx,
    task: &Task,
    command: &str,
    marker: &str,
) -> Result<(ExecOutcome, String, String), Failure> {
    let identity = sandbox::identity(ctx, &task.id)?;
    let rt = sandbox::connect(ctx).await?;
    let req = sandbox::request(ctx, &rt, identity).await?;
    sandbox::maybe_reap(ctx, &rt).await;
    let timeout =
        task.max_runtime_seconds.and_then(|s| u64::try_from(s).ok()).filter(|s| *s > 0).map(Duration::from_secs);
    let mut env = sandbox::forwarded_env(ctx);
    env.push(marker.to_owned());
    let exec = ExecSpec {
        argv: vec!["sh".into(), "-c".into(), command.to_owned()],
        env,
        workdir: Some(req.spec.workdir.clone()),
        user: None,
        timeout,
    };
    let mut sink = LogSink { last_line: String::new() };
    let (acquired, outcome) = service::run(&rt, &req, &exec, &mut sink).await?;
    log_line(&format!("sandbox {} ({})", acquired.name, acquired.action.as_str()));
    if !req.persist_across_processes {
        let _ =
            tokio::time::timeout(sandbox::TEARDOWN_WAIT, service::release(&rt, Some(&acquired.id), false, false)).await;
    }
    Ok((outcome, sink.last_line, acquired.name))
}
