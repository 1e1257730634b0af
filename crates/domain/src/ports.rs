//! The ports: what berth needs from a container runtime, a clock, the profile directory and the process table.
// mockall's expansion of `exec` repeats its `&'s mut (dyn OutputSink + 's)` where the parentheses are redundant.
#![cfg_attr(test, expect(unused_parens, reason = "in MockContainerRuntime's generated code"))]

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use thiserror::Error;

use crate::container::{ContainerDetails, ContainerProcess, ContainerState, ContainerSummary};
use crate::ids::ProfileName;
use crate::sandbox::CreateSpec;
use crate::time::Timestamp;

mod engine;
pub use engine::{
    ContainerFiles, ContainerLogs, ContainerSnapshots, ContainerUsage, EgressNetworks, EgressSetup, Engine,
    EngineFacts, ExecAttached, ExecIo, ExtraArgsParser, MarkedKill, SnapshotImage, Usage,
};

/// Errors of a [`ContainerRuntime`].
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RuntimeError {
    /// The daemon does not answer, or speaks an API version berth cannot use.
    #[error("cannot reach the container engine at {endpoint}: {message}")]
    Unavailable { endpoint: String, message: String },
    /// No such container (removed, perhaps out of band).
    #[error("no such container {0}")]
    NotFound(String),
    /// The name is taken: another process created the sandbox first.
    #[error("container name {0} is already in use")]
    NameConflict(String),
    /// The call did not finish within its bound.
    #[error("{0} timed out")]
    Timeout(String),
    /// The engine refused the call.
    #[error("engine error {status}: {message}")]
    Api { status: u16, message: String },
}

impl RuntimeError {
    /// Whether this is a fault of the container engine rather than of what was asked of it: it cannot be reached,
    /// a call ran past its bound, or it answered with a server error (5xx: its own storage, runtime or containerd
    /// failed, or a proxy in front of it did). Not 501 ("not implemented": this engine lacks what the settings ask
    /// for, which no retry changes) and no 4xx (the request itself is refused: a missing image, a bad setting, a
    /// conflict). A task whose sandbox fails this way is requeued without counting a failure (see docs/settings.md,
    /// `kanban.failure_limit`).
    pub fn is_infrastructure(&self) -> bool {
        match self {
            Self::Unavailable { .. } | Self::Timeout(_) => true,
            Self::Api { status, .. } => (500..600).contains(status) && *status != 501,
            Self::NotFound(_) | Self::NameConflict(_) => false,
        }
    }
}

/// Which containers to list: every label must match; an empty `states` means any state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListQuery {
    pub labels: BTreeMap<String, String>,
    pub states: Vec<ContainerState>,
}

/// Which stream a chunk of exec output came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// Where exec output goes as it arrives.
pub trait OutputSink: Send {
    fn write(&mut self, stream: OutputStream, bytes: &[u8]);
}

/// A sink that keeps everything, for tests and for callers that want the output as data.
#[derive(Clone, Debug, Default)]
pub struct CapturedOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl OutputSink for CapturedOutput {
    fn write(&mut self, stream: OutputStream, bytes: &[u8]) {
        match stream {
            OutputStream::Stdout => self.stdout.extend_from_slice(bytes),
            OutputStream::Stderr => self.stderr.extend_from_slice(bytes),
        }
    }
}

/// One command to run inside a container, as an argv (no implicit shell).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecSpec {
    pub argv: Vec<String>,
    /// `KEY=VALUE` pairs for this exec only (forwarded secrets go here, never into the container config).
    pub env: Vec<String>,
    pub workdir: Option<String>,
    pub user: Option<String>,
    /// Kill the command (and everything it started) after this long.
    pub timeout: Option<Duration>,
}

/// How an exec ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecOutcome {
    Exited(i64),
    /// The timeout fired and the process inside was killed.
    TimedOut,
}

/// A container engine (Docker Engine API, Podman's compatible socket, or a fake).
///
/// In tests, mockall's `MockContainerRuntime` asserts interactions the fake cannot express (which calls happen,
/// how often, with which arguments).
///
/// `exec` names the sink's lifetime (`'s`) because mockall cannot mock an async-trait method taking an elided
/// `&mut dyn` argument.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait ContainerRuntime: Send + Sync {
    /// Lists containers, including stopped ones.
    ///
    /// # Errors
    /// [`RuntimeError::Unavailable`] when the engine does not answer; [`RuntimeError::Timeout`].
    async fn list(&self, query: &ListQuery) -> Result<Vec<ContainerSummary>, RuntimeError>;

    /// Inspects one container.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`] when it does not exist.
    async fn inspect(&self, id: &str) -> Result<ContainerDetails, RuntimeError>;

    /// Creates (does not start) a container; returns its id.
    ///
    /// # Errors
    /// [`RuntimeError::NameConflict`] when a container with the same name exists.
    async fn create(&self, spec: &CreateSpec) -> Result<String, RuntimeError>;

    /// Starts (or unpauses) a container; starting a running one is not an error.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`]; [`RuntimeError::Api`] when the engine cannot start it.
    async fn start(&self, id: &str) -> Result<(), RuntimeError>;

    /// Stops a container, killing it after `grace`.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`].
    async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError>;

    /// Removes a container; without `force` the engine refuses to remove a running one.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`]; [`RuntimeError::Api`] with status 409 when it is running and `force` is false.
    async fn remove(&self, id: &str, force: bool) -> Result<(), RuntimeError>;

    /// Follows a container another process is creating and starting, by name or id, until it settles: returns it
    /// once it is no longer `created` (running, exited, …), `None` once it does not exist.
    ///
    /// The wait is bounded by `stall` without progress, not by a fixed total: appearing and leaving `created`
    /// each restart the bound, so a slow engine is followed to the end while a creator that died between create
    /// and start is given up on after `stall` (the container is then returned still `created`). The default
    /// looks once, for runtimes whose changes are instantaneous.
    ///
    /// # Errors
    /// A [`RuntimeError`] other than "not found" from inspecting it.
    async fn await_settled(&self, name_or_id: &str, stall: Duration) -> Result<Option<ContainerSummary>, RuntimeError> {
        let _ = stall;
        match self.inspect(name_or_id).await {
            Ok(d) => Ok(Some(d.summary)),
            Err(RuntimeError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Lists the processes inside a running container (the engine's `top`), for idle detection and `sandbox top`.
    ///
    /// The default says the runtime cannot: a runtime that cannot see inside a container must never make it look
    /// idle (an empty list would stop every sandbox).
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`]; [`RuntimeError::Api`] when it is not running or the runtime cannot list.
    async fn processes(&self, id: &str) -> Result<Vec<ContainerProcess>, RuntimeError> {
        Err(RuntimeError::Api { status: 501, message: format!("this runtime cannot list the processes of {id}") })
    }

    /// Reads the small file `path` inside a container (the ephemeral sandbox lease); `Ok(None)` when it does not exist.
    ///
    /// The default reads nothing: a runtime that cannot read files never lets a lease lapse, so nothing is reaped by
    /// lease on it.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`] when the container is gone.
    async fn read_file(&self, id: &str, path: &str) -> Result<Option<Vec<u8>>, RuntimeError> {
        let _ = (id, path);
        Ok(None)
    }

    /// Runs a command in a running container, streaming its output to `sink`.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`] when the container is gone; [`RuntimeError::Api`] when it is not running.
    async fn exec<'s>(
        &self,
        id: &str,
        spec: &ExecSpec,
        sink: &'s mut (dyn OutputSink + 's),
    ) -> Result<ExecOutcome, RuntimeError>;
}

/// The wall clock, read once per pass at the edge.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}

/// Knows which profiles exist and which one is active.
pub trait ProfileResolver: Send + Sync {
    /// The profile commands run under when none is named.
    fn active(&self) -> ProfileName;
    /// Whether `name` is a real profile (a directory under `<home>/profiles/`).
    fn exists(&self, name: &str) -> bool;
    /// Every profile, sorted (the spawnable assignees a dispatch tick plans with).
    fn list(&self) -> Vec<String>;
}

/// The host's process table, as liveness reads it (declared beside the one rule that uses it).
pub use crate::board::liveness::ProcessProbe;

/// A worker could not be started; the one-line reason is recorded on the task.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{0}")]
pub struct LaunchError(pub String);

/// A started worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launched {
    pub pid: u32,
    pub start: Option<u64>,
    pub log: String,
    /// The sandbox the worker runs in (for the report's `workspace`).
    pub sandbox: String,
}

/// Starts and stops the processes that run tasks (`berth worker run` on this host).
#[async_trait]
pub trait WorkerLauncher: Send + Sync {
    /// Starts the worker for a claimed run. It waits for [`WorkerLauncher::recorded`] before it runs anything.
    ///
    /// # Errors
    /// [`LaunchError`] when no process could be started.
    fn launch(&self, board: &crate::ids::BoardSlug, claimed: &crate::board::Claimed) -> Result<Launched, LaunchError>;

    /// Starts the workers of a tick's claims: one result per claim, in order. A launcher may start them together
    /// (asking for the next before the last is answered); by default each is [`WorkerLauncher::launch`]ed in turn.
    fn launch_all(
        &self,
        board: &crate::ids::BoardSlug,
        claimed: &[crate::board::Claimed],
    ) -> Vec<Result<Launched, LaunchError>> {
        claimed.iter().map(|c| self.launch(board, c)).collect()
    }

    /// Every worker of this tick is recorded: the ones launched may go on (a launcher may hold them until then, so
    /// they do not compete with the dispatcher for the CPU and the board while it finishes its tick). `confirmed`:
    /// the record confirmed every launched worker's run, so a worker told so promptly need not confirm it again
    /// (otherwise each confirms its own run, and one whose run was superseded runs nothing).
    fn recorded(&self, _confirmed: bool) {}

    /// Kills at once what is left of workers whose own process is gone (a worker command's children, still running
    /// the task's command), before this tick starts new workers: a crashed run never overlaps its retry. The stop of
    /// live workers (with its grace period) may run later, detached.
    fn kill_leftovers(&self, workers: &[crate::board::WorkerRef]) {
        let _ = workers;
    }

    /// Stops workers housekeeping took their task from, concurrently, each verified against its start.
    async fn stop(&self, workers: Vec<crate::board::WorkerRef>);

    /// Removes the sandbox of a task that is finished with it (blocked by the breaker).
    async fn release_sandbox(&self, task_id: &str, assignee: &str);
}

#[cfg(test)]
mod infra_tests {
    use super::RuntimeError as R;

    #[test]
    fn engine_faults_are_infrastructure_and_refusals_of_the_request_are_not() {
        let api = |status| R::Api { status, message: "m".into() };
        for infra in [api(500), api(502), api(503), api(504), R::Timeout("list".into())] {
            assert!(infra.is_infrastructure(), "{infra}");
        }
        assert!(R::Unavailable { endpoint: "e".into(), message: "m".into() }.is_infrastructure());
        for not in
            [api(400), api(404), api(409), api(501), api(0), R::NotFound("c".into()), R::NameConflict("c".into())]
        {
            assert!(!not.is_infrastructure(), "{not}");
        }
    }
}
