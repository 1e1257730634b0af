//! The `WorkerLauncher` port on this host: `berth worker run` processes, the verified stop, the task's sandbox.

use async_trait::async_trait;
use domain::ids::BoardSlug;
use domain::kanban::{Claimed, WorkerRef};
use domain::ports::{LaunchError, Launched, WorkerLauncher};

use crate::context::Ctx;
use crate::{process, worker};

/// Starts workers as detached processes of this host.
pub struct ProcessLauncher<'a> {
    pub ctx: &'a Ctx,
    /// The workers' shared environment, worked out at the first launch.
    env: std::sync::OnceLock<Result<worker::WorkerEnv, String>>,
}

impl<'a> ProcessLauncher<'a> {
    pub fn new(ctx: &'a Ctx) -> Self {
        Self { ctx, env: std::sync::OnceLock::new() }
    }
}

#[async_trait]
impl WorkerLauncher for ProcessLauncher<'_> {
    fn launch(&self, board: &BoardSlug, claimed: &Claimed) -> Result<Launched, LaunchError> {
        let env = self.env.get_or_init(|| worker::WorkerEnv::new(self.ctx));
        let s =
            env.as_ref().map_err(Clone::clone).and_then(|env| worker::spawn(self.ctx, env, board, claimed)).map_err(
                |e| {
                    tracing::warn!("cannot start a worker for {}: {e}", claimed.task_id);
                    LaunchError(e)
                },
            )?;
        Ok(Launched { pid: s.pid, start: s.start, log: s.log.display().to_string(), sandbox: s.sandbox })
    }

    async fn stop(&self, workers: Vec<WorkerRef>) {
        // Concurrently: one worker that ignores SIGTERM costs one grace period, not one per worker.
        process::stop_all(workers.iter().filter_map(|w| process::Worker::from_row(Some(w.pid), w.start)).collect())
            .await;
    }

    async fn release_sandbox(&self, task_id: &str, assignee: &str) {
        worker::remove_task_sandbox(self.ctx, task_id, assignee).await;
    }
}
