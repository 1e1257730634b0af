//! The one writer of a run's end: every path that ends a run (the home's runner, the built-in worker, the gateway's
//! relay of a command's `kanban complete`, and `kanban complete` itself) calls [`record_run_end`], so what an end does
//! to its task (done and children promoted, a failure through the breaker, a requeue that counts nothing) is decided
//! in one place and written by the store in one guarded transaction.

use crate::board::{Breaker, FailureOutcome};
use crate::time::Timestamp;

use crate::board::{BoardStore, Result, RunEnd, Task};

/// How a run ended.
#[derive(Clone, Copy, Debug)]
pub enum RunEnding<'a> {
    /// It succeeded: the task is done with this result (the command's last line of output, or what it reported).
    Completed { result: Option<&'a str>, exit_code: Option<i64> },
    /// It failed (`failed`, `timed_out`, …): counted by the failure breaker, which requeues or blocks the task.
    Failed(RunEnd<'a>),
    /// It ended for a reason outside the task (`infra_unavailable`), or asked to wait (`snoozed`: exit 75, its
    /// `retry_at` set): back to ready, nothing counted.
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
/// The store's: [`crate::board::StoreError::Moved`] or [`crate::board::StoreError::Transition`] when the task is no longer on the
/// run, a storage error.
pub fn record_run_end<S: BoardStore + ?Sized>(
    store: &mut S,
    task: &str,
    run: Option<i64>,
    ending: &RunEnding<'_>,
    breaker: Breaker,
    now: Timestamp,
) -> Result<RunRecorded> {
    match ending {
        RunEnding::Completed { result, exit_code } => {
            store.complete(task, run, *result, *exit_code, now).map(|t| RunRecorded::Done(Box::new(t)))
        }
        RunEnding::Failed(end) => store.fail(task, run, end, breaker, now).map(RunRecorded::Failed),
        RunEnding::Requeued(end) => {
            let run = run.ok_or_else(|| crate::board::StoreError::Invalid("a requeue needs the run it ends".into()))?;
            store.requeue(task, run, end, now).map(|()| RunRecorded::Requeued)
        }
    }
}

/// The exit status by which a command asks to be run again later (EX_TEMPFAIL; hermes's rate-limit exit).
pub const EX_TEMPFAIL: i64 = 75;

/// A command's exit status as its run's end, the one rule for every worker: 0 completes with `result`; 75
/// ([`EX_TEMPFAIL`]) snoozes the task for `cooldown` (back to ready, not claimed before, no failure counted); any
/// other code fails with `error`.
pub fn ending_of_exit<'a>(
    code: i64,
    result: Option<&'a str>,
    error: &'a str,
    cooldown: std::time::Duration,
    now: Timestamp,
) -> RunEnding<'a> {
    match code {
        0 => RunEnding::Completed { result, exit_code: Some(0) },
        EX_TEMPFAIL => RunEnding::Requeued(RunEnd {
            outcome: "snoozed",
            error,
            exit_code: Some(code),
            retry_at: Some(now.as_millis().saturating_add(i64::try_from(cooldown.as_millis()).unwrap_or(i64::MAX))),
        }),
        _ => RunEnding::Failed(RunEnd { outcome: "failed", error, exit_code: Some(code), retry_at: None }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_exit_is_a_completion_a_snooze_or_a_failure() {
        let now = Timestamp::from_millis(1_000);
        let cool = Duration::from_secs(60);
        assert!(matches!(
            ending_of_exit(0, Some("ok"), "", cool, now),
            RunEnding::Completed { result: Some("ok"), .. }
        ));
        let RunEnding::Requeued(end) = ending_of_exit(75, None, "exit 75", cool, now) else { panic!("a snooze") };
        assert_eq!((end.outcome, end.retry_at), ("snoozed", Some(61_000)));
        assert!(matches!(
            ending_of_exit(1, None, "exit 1", cool, now),
            RunEnding::Failed(RunEnd { exit_code: Some(1), .. })
        ));
    }
}
