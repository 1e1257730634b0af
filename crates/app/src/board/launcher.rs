//! The `WorkerLauncher` port on this host: the home's runner for the tasks of a `kanban.worker_command` (`runner.rs`),
//! `berth worker run` processes for the built-in worker's (and wherever no runner can be had), the verified stop,
//! the task's sandbox.

use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use domain::board::{Claimed, WorkerRef};
use domain::ids::BoardSlug;
use domain::ports::{LaunchError, Launched, WorkerLauncher};

use crate::board::runner;
use crate::board::worker;
use crate::edge::context::Ctx;
use crate::edge::handover::Slot;
use crate::edge::process;

/// Starts workers as detached processes of this host.
///
/// The workers of one tick wait at a gate (their stdin, a pipe whose only writer this launcher holds) until the
/// tick has recorded them all: spawning is the dispatcher's slow part (a process start each), and a worker that runs
/// meanwhile takes the CPU from it and the board's write lock from its last transaction. The gate opens when the
/// writer closes: at [`WorkerLauncher::recorded`], or when the launcher (or the whole process) goes away. When the
/// record confirmed every worker's run, one byte per worker goes through the gate first: a worker that reads one
/// knows its run is confirmed (see `worker::Gate`); one that reads only the end of the file confirms it itself.
pub struct ProcessLauncher<'a> {
    pub ctx: &'a Ctx,
    /// The workers' shared environment and the gate's read end, made at the first launch.
    env: OnceLock<Result<worker::WorkerEnv, String>>,
    gate: Mutex<Option<std::io::PipeWriter>>,
    /// Workers started behind the gate.
    launched: AtomicUsize,
    /// `kanban dispatch --failure-limit`: the workers' limit too.
    failure_limit: Option<u32>,
    /// This tick's connection to the home's runner (`runner.rs`), made at its first `kanban.worker_command` task; why
    /// there is none when it could not be had (its tasks then get `berth worker run` workers).
    runner: Mutex<Option<Result<RunnerClient, String>>>,
}

impl<'a> ProcessLauncher<'a> {
    pub fn new(ctx: &'a Ctx, failure_limit: Option<u32>) -> Self {
        Self {
            ctx,
            env: OnceLock::new(),
            gate: Mutex::new(None),
            launched: AtomicUsize::new(0),
            failure_limit,
            runner: Mutex::new(None),
        }
    }

    /// Starts the tasks' workers through the home's runner, all asked for before the first answer is read: one
    /// entry per claim, `None` where the runner cannot be had for it.
    fn through_runner(
        &self,
        env: &worker::WorkerEnv,
        board: &BoardSlug,
        claimed: &[Claimed],
    ) -> Vec<Option<worker::Spawned>> {
        let ctx = self.ctx;
        let mut runner = self.runner.lock().unwrap_or_else(PoisonError::into_inner);
        let client = runner.get_or_insert_with(|| {
            let hello = runner::Hello {
                board: runner::board_identity(ctx),
                template: ctx.settings.kanban.worker_command.clone(),
                // What a `berth worker run` of this dispatch would inherit: this process's environment, the settings
                // (never the board's password: the runner has it).
                env: runner::wire::without_password(
                    ctx,
                    ctx.env.0.clone().into_iter().chain(env.vars.iter().cloned()).collect(),
                ),
                failure_limit: self.failure_limit.unwrap_or_else(|| ctx.settings.kanban.failure_limit.get()),
            };
            RunnerClient::connect(ctx, &env.exe, &hello).inspect_err(|e| {
                tracing::warn!("no runner for this tick's tasks ({e}): each gets a berth worker");
            })
        });
        let Ok(client) = client.as_mut() else { return claimed.iter().map(|_| None).collect() };
        let starts: Vec<Option<(runner::Start, String)>> = claimed
            .iter()
            .map(|claimed| {
                let assignee = claimed.assignee.clone()?;
                let profile = env.profile(ctx, &assignee).ok()?;
                let identity = profile.identity(&claimed.task_id).ok()?;
                let start = runner::Start {
                    task: claimed.task_id.clone(),
                    run: claimed.run_id,
                    log: worker::log_path(ctx, &claimed.task_id),
                    workdir: worker::workdir(&profile, &identity).ok()?,
                    env: profile.vars.iter().cloned().chain(worker::task_vars(board, claimed, &assignee)).collect(),
                    board: board.as_str().to_owned(),
                    assignee,
                };
                Some((start, identity.persistent_name()))
            })
            .collect();
        let mut answers = client.start_all(starts.iter().flatten().map(|(start, _)| start)).into_iter();
        starts
            .into_iter()
            .map(|start| {
                let (start, sandbox) = start?;
                match answers.next()? {
                    Ok((pid, start_time)) => Some(worker::Spawned { pid, start: start_time, sandbox, log: start.log }),
                    Err(e) => {
                        tracing::warn!("the runner did not start {} ({e}): it gets a berth worker", start.task);
                        None
                    }
                }
            })
            .collect()
    }

    fn env(&self) -> Result<&worker::WorkerEnv, String> {
        self.env
            .get_or_init(|| {
                let (reader, writer) = std::io::pipe().map_err(|e| format!("cannot make the workers' gate: {e}"))?;
                *self.gate.lock().unwrap_or_else(PoisonError::into_inner) = Some(writer);
                worker::WorkerEnv::new(self.ctx, reader, self.failure_limit)
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

#[async_trait]
impl WorkerLauncher for ProcessLauncher<'_> {
    fn launch(&self, board: &BoardSlug, claimed: &Claimed) -> Result<Launched, LaunchError> {
        let mut one = self.launch_all(board, std::slice::from_ref(claimed));
        one.pop().unwrap_or_else(|| Err(LaunchError("no worker was started".to_owned())))
    }

    /// The tasks of a `kanban.worker_command` through the home's runner, asked for together; the others, and any the
    /// runner could not start, a `berth worker run` each.
    fn launch_all(&self, board: &BoardSlug, claimed: &[Claimed]) -> Vec<Result<Launched, LaunchError>> {
        // A tick that claimed nothing makes no gate and never wakes (or starts) the runner.
        if claimed.is_empty() {
            return Vec::new();
        }
        let env = match self.env() {
            Ok(env) => env,
            Err(e) => return claimed.iter().map(|_| Err(LaunchError(e.clone()))).collect(),
        };
        let by_runner = if runner::wanted(self.ctx) {
            self.through_runner(env, board, claimed)
        } else {
            claimed.iter().map(|_| None).collect()
        };
        claimed
            .iter()
            .zip(by_runner)
            .map(|(claimed, spawned)| {
                let s = spawned.map_or_else(|| worker::spawn(self.ctx, env, board, claimed), Ok).map_err(|e| {
                    tracing::warn!("cannot start a worker for {}: {e}", claimed.task_id);
                    LaunchError(e)
                })?;
                self.launched.fetch_add(1, Ordering::Relaxed);
                Ok(Launched { pid: s.pid, start: s.start, log: s.log.display().to_string(), sandbox: s.sandbox })
            })
            .collect()
    }

    fn recorded(&self, confirmed: bool) {
        if let Some(Ok(client)) = self.runner.lock().unwrap_or_else(PoisonError::into_inner).take() {
            client.release(confirmed);
        }
        let Some(mut gate) = self.gate.lock().unwrap_or_else(PoisonError::into_inner).take() else { return };
        if confirmed {
            // A short write (a worker gone, the pipe full) leaves some workers to confirm for themselves: harmless.
            let _ = gate.write_all(&vec![worker::Gate::CONFIRMED; self.launched.load(Ordering::Relaxed)]);
        }
    }

    fn kill_leftovers(&self, workers: &[WorkerRef]) {
        for w in workers.iter().filter_map(|w| process::Worker::from_row(Some(w.pid), w.start)) {
            process::kill_leftovers(w);
        }
    }

    async fn stop(&self, workers: Vec<WorkerRef>) {
        // Concurrently: one worker that ignores SIGTERM costs one grace period, not one per worker.
        process::stop_all(workers.iter().filter_map(|w| process::Worker::from_row(Some(w.pid), w.start)).collect())
            .await;
    }

    async fn release_sandbox(&self, task_id: &str, assignee: &str) {
        crate::board::release::remove_task_sandbox(self.ctx, task_id, assignee).await;
    }
}

/// How long a launcher waits for a runner it started to listen, and for any answer.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// A launcher's connection to its home's runner, for one tick.
pub(super) struct RunnerClient {
    conn: UnixStream,
    reader: BufReader<UnixStream>,
}

impl RunnerClient {
    /// Connects to this home's runner, starting one (`exe worker runner`, with the workers' environment `env`) when
    /// none answers, and introduces the tick.
    ///
    /// # Errors
    /// A one-line reason (the tick's tasks then get `berth worker run` workers).
    pub(super) fn connect(ctx: &Ctx, exe: &Path, hello: &runner::Hello) -> Result<Self, String> {
        let path = runner::socket_path(ctx);
        let conn = match UnixStream::connect(&path) {
            Ok(c) => c,
            Err(_) => {
                start_runner(ctx, exe, &hello.env)?;
                let deadline = Instant::now() + ANSWER_WAIT;
                loop {
                    match UnixStream::connect(&path) {
                        Ok(c) => break c,
                        Err(e) if Instant::now() > deadline => return Err(format!("the runner did not listen: {e}")),
                        // Waiting for a process just started to bind its socket.
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            }
        };
        conn.set_write_timeout(Some(ANSWER_WAIT)).map_err(|e| e.to_string())?;
        let reader = BufReader::new(conn.try_clone().map_err(|e| e.to_string())?);
        let mut client = Self { conn, reader };
        let welcome = client.ask(hello)?;
        // The runner's challenge, answered for the pid this socket sees at its other end (`runner/wire.rs`); the
        // runner answers the proof with nothing (the starts follow). A runner from before the challenge sends none.
        if let (Some(nonce), Some(pid)) = (welcome.nonce, runner::wire::peer_pid(&client.conn)) {
            let proof = runner::wire::Proof { proof: runner::wire::proof(&runner::wire::key(ctx), &nonce, pid) };
            let line = serde_json::to_string(&proof).map_err(|e| e.to_string())?;
            writeln!(client.conn, "{line}").map_err(|e| format!("the runner is gone: {e}"))?;
        }
        Ok(client)
    }

    fn ask(&mut self, message: &impl serde::Serialize) -> Result<runner::Answer, String> {
        let line = serde_json::to_string(message).map_err(|e| e.to_string())?;
        writeln!(self.conn, "{line}").map_err(|e| format!("the runner is gone: {e}"))?;
        let answer = read_answer(&mut self.reader)?;
        match answer.error {
            Some(e) => Err(e),
            None => Ok(answer),
        }
    }

    /// Starts tasks' workers behind the gate: each one's pid and start time, or a one-line reason (that task then
    /// gets a `berth worker run` worker). Every start is sent before the first answer is read (by a thread of its
    /// own, so neither side waits on a full socket): the runner spawns one worker while the next start is on its way.
    pub(super) fn start_all<'s>(
        &mut self,
        starts: impl Iterator<Item = &'s runner::Start>,
    ) -> Vec<Result<(u32, Option<u64>), String>> {
        let lines: Vec<String> = starts.map(|s| serde_json::to_string(s).unwrap_or_default()).collect();
        let (conn, reader, count) = (&self.conn, &mut self.reader, lines.len());
        std::thread::scope(|scope| {
            scope.spawn(move || {
                let mut out = std::io::BufWriter::new(conn);
                // A runner gone fails the reads below as well.
                let _ = lines.iter().try_for_each(|l| writeln!(out, "{l}")).and_then(|()| out.flush());
            });
            let mut gone = None;
            (0..count)
                .map(|_| {
                    if let Some(e) = &gone {
                        return Err(Clone::clone(e));
                    }
                    let a = read_answer(reader).inspect_err(|e| gone = Some(e.clone()))?;
                    match (a.error, a.pid) {
                        (Some(e), _) => Err(e),
                        (None, Some(pid)) => Ok((pid, a.start)),
                        (None, None) => Err("the runner gave no pid".to_owned()),
                    }
                })
                .collect()
        })
    }

    /// Opens the gate: the tick recorded its workers (`confirmed`: and their runs). Without it (the launcher gone)
    /// the runner confirms each run itself.
    pub(super) fn release(mut self, confirmed: bool) {
        let line = serde_json::to_string(&runner::Release { confirmed }).unwrap_or_default();
        let _ = writeln!(self.conn, "{line}");
    }
}

/// The runner's next answer, within [`ANSWER_WAIT`] whatever trickles in meanwhile.
///
/// # Errors
/// A one-line reason when none comes in time or it does not read (the connection is then of no further use).
fn read_answer(reader: &mut BufReader<UnixStream>) -> Result<runner::Answer, String> {
    match runner::wire::read_line(reader, Some(Instant::now() + ANSWER_WAIT)) {
        Ok(None) => Err("the runner is gone".to_owned()),
        Ok(Some(answer)) => serde_json::from_str(&answer).map_err(|e| format!("the runner's answer: {e}")),
        Err(e) => Err(format!("the runner did not answer: {e}")),
    }
}

/// Starts this home's runner, detached (its own process group; it outlives the dispatcher), its output appended to
/// `<home>/kanban/logs/runner.log`.
fn start_runner(ctx: &Ctx, exe: &Path, env: &[(String, String)]) -> Result<(), String> {
    let log = worker::log_path(ctx, "runner");
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| format!("cannot open {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.args(["worker", "runner"]).envs(env.iter().map(|(k, v)| (k, v)));
    // The board's password never in the runner's environment: on its stdin.
    let url = ctx.database_url().map(|url| crate::edge::handover::hand_over(&mut cmd, url, Slot::Stdin));
    let input = url.transpose().map_err(|e| format!("cannot hand the board's URL to the runner: {e}"))?.flatten();
    cmd.stdin(input.unwrap_or_else(Stdio::null)).stdout(out).stderr(err);
    // Not waited for here: the gateway reaps its exited children, and a one-shot dispatch's runner outlives it.
    process::spawn_detached(&mut cmd).map(drop).map_err(|e| format!("cannot start the runner: {e}"))
}
