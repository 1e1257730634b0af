//! The one writer of a run's end: every path that ends a run (the home's runner, the built-in worker, the gateway's
//! relay of a command's `kanban complete`, and `kanban complete` itself) calls [`record_run_end`], so what an end does
//! to its task (done and children promoted, a failure through the breaker, a requeue that counts nothing) is decided
//! in one place and written by the store in one guarded transaction.

use domain::kanban::FailureOutcome;
use domain::time::Timestamp;

use crate::{BoardStore, Result, RunEnd, Task};

/// How a run ended.
#[derive(Clone, Copy, Debug)]
pub enum RunEnding<'a> {
    /// It succeeded: the task is done with this result (the command's last line of output, or what it reported).
    Completed { result: Option<&'a str>, exit_code: Option<i64> },
    /// It failed (`failed`, `timed_out`, …): counted by the failure breaker, which requeues or blocks the task.
    Failed(RunEnd<'a>),
    /// It ended for a reason outside the task (`infra_unavailable`): back to ready, nothing counted.
    Requeued(RunEnd<'a>),
}

/// What recording an end did to the task.
#[derive(Clone, Debug, PartialEq)]
pub enum RunRecorded {
    /// Done, as the task now is.
    Done(Box<Task>),
    /// The breaker's verdict on the failure.
    Failed(FailureOutcome),
    /// Back to ready.
    Requeued,
}

impl RunRecorded {
    /// Whether the task is finished with (done, or blocked by the breaker).
    pub fn finished(&self) -> bool {
        matches!(self, Self::Done(_) | Self::Failed(FailureOutcome::GiveUp { .. }))
    }
}

/// Records the end of task `task`'s run `run` (`None`: by hand, whatever run the task is on). A write the task has
/// moved past (its run taken back meanwhile) is refused by the store's guard and changes nothing; the same end
/// recorded twice is recorded once.
///
/// # Errors
/// The store's: [`crate::StoreError::Moved`] or [`crate::StoreError::Transition`] when the task is no longer on the
/// run, a storage error.
pub fn record_run_end<S: BoardStore + ?Sized>(
    store: &mut S,
    task: &str,
    run: Option<i64>,
    ending: &RunEnding<'_>,
    failure_limit: u32,
    now: Timestamp,
) -> Result<RunRecorded> {
    match ending {
        RunEnding::Completed { result, exit_code } => {
            store.complete(task, run, *result, *exit_code, now).map(|t| RunRecorded::Done(Box::new(t)))
        }
        RunEnding::Failed(end) => store.fail(task, run, end, failure_limit, now).map(RunRecorded::Failed),
        RunEnding::Requeued(end) => {
            let run = run.ok_or_else(|| crate::StoreError::Invalid("a requeue needs the run it ends".into()))?;
            store.requeue(task, run, end, now).map(|()| RunRecorded::Requeued)
        }
    }
}
