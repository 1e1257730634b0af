//! The gateway's log lines about single tasks, each naming its task: a worker started, a worker that ended (with its
//! exit code: a failed run says so), and what a tick's housekeeping did to a task (crashed, timed out, blocked by
//! the failure breaker, a spawn that failed).

use std::collections::{BTreeMap, BTreeSet};

use domain::board::TaskStatus;

use crate::board::TickTally;
use crate::edge::context::Ctx;

/// The workers this gateway started and has not yet seen end: pid → (board, task).
#[derive(Debug, Default)]
pub struct TaskLog {
    workers: BTreeMap<i32, (String, String)>,
    /// Tasks whose worker failed since the last look at the board: blocked by that failure?
    failed: Vec<(String, String)>,
}

impl TaskLog {
    /// Logs what one board's tick did to single tasks and remembers the workers it started.
    pub fn tick(&mut self, board: &str, t: &TickTally<'_>) {
        for s in t.spawned {
            let shown = s.pid.map_or_else(|| "-".to_owned(), |p| p.to_string());
            tracing::info!(
                "kanban dispatcher [{board}]: task {} started (assignee {}, worker pid {shown})",
                s.task_id,
                s.assignee
            );
            if let Some(pid) = s.pid.and_then(|p| i32::try_from(p).ok()) {
                self.workers.insert(pid, (board.to_owned(), s.task_id.clone()));
            }
        }
        let said = |ids: &[&str], what: &str| {
            for id in ids {
                tracing::warn!("kanban dispatcher [{board}]: task {id} {what}");
            }
        };
        said(&t.crashed, "crashed: its worker is gone without recording a result");
        said(&t.timed_out, "timed out: its worker was stopped");
        said(&t.auto_blocked, "blocked: it failed kanban.failure_limit times in a row (`kanban unblock` retries it)");
        for (id, error) in t.spawn_failed {
            tracing::warn!("kanban dispatcher [{board}]: task {id} could not start: {error}");
        }
    }

    /// The tasks on `board` whose worker this gateway started and has not reaped: a worker that requeued its task
    /// wakes the gateway through the board before its exit does. A worker reaped elsewhere (a stop reaps the worker
    /// it stopped) is forgotten here, so its task is not held for ever.
    pub fn unreaped(&mut self, board: &str) -> BTreeSet<String> {
        self.workers.retain(|pid, _| crate::edge::process::is_unreaped_child(*pid));
        self.workers.values().filter(|(b, _)| b == board).map(|(_, t)| t.clone()).collect()
    }

    /// Reaps every exited child (as [`crate::edge::process::reap_children`]), logs each of this gateway's workers
    /// that ended with its task and code, and returns the exit codes.
    pub fn ended(&mut self) -> Vec<i32> {
        let mut codes = Vec::new();
        for (pid, code) in crate::edge::process::reap_children_by_pid() {
            codes.extend(code);
            let Some((board, task)) = self.workers.remove(&pid) else { continue };
            match code {
                Some(0) => tracing::info!("kanban dispatcher [{board}]: task {task}: worker pid {pid} exited 0"),
                Some(c) => {
                    tracing::warn!("kanban dispatcher [{board}]: task {task}: worker pid {pid} failed (exit {c})");
                    self.failed.push((board, task));
                }
                None => tracing::warn!("kanban dispatcher [{board}]: task {task}: worker pid {pid} killed by a signal"),
            }
        }
        codes
    }

    /// Logs each task whose worker failed and that the failure blocked (the worker's own record of its run applies
    /// the failure breaker, so no tick reports it), read off the async thread.
    pub async fn failures_blocked(&mut self, ctx: &Ctx) {
        if self.failed.is_empty() {
            return;
        }
        let failed = std::mem::take(&mut self.failed);
        let at = crate::edge::open::BoardAt::of(ctx);
        let read = tokio::task::spawn_blocking(move || {
            let board = at.open().ok()?;
            Some(failed.into_iter().filter_map(|(b, t)| Some((b, board.task(&t).ok()?))).collect::<Vec<_>>())
        });
        for (board, task) in read.await.ok().flatten().unwrap_or_default() {
            if task.status == TaskStatus::Blocked {
                tracing::warn!(
                    "kanban dispatcher [{board}]: task {} blocked after {} failures in a row (kanban.failure_limit); \
                     `berth kanban unblock {}` retries it",
                    task.id,
                    task.consecutive_failures,
                    task.id
                );
            }
        }
    }
}
