//! `kanban.worker_exit_outcome`: a command's exit status recorded as its run's outcome, by its `berth worker run`
//! (`worker.rs`) or by the home's runner (`runner.rs`).

use domain::board::{RunEnd, RunEnding, StoreError, ending_of_exit, record_run_end};
use domain::ports::Clock;

use super::outage;
use crate::edge::context::{Ctx, SystemClock};
use crate::edge::error::Failure;
use crate::edge::open::Board;

/// Records a command's exit as run `run`'s outcome on `store` (opened when `None`, waiting out an outage): exit 0
/// completes the task with `last` its result, anything else fails it through `breaker` (the limit and the assignee's
/// backoff). What to log, and whether the task is finished with its sandbox (done, or failed for good). A refusal (the run moved on: the command recorded
/// its own outcome, or the task was taken back) is an answer, logged, and changes nothing.
///
/// # Errors
/// The board's error once the outage outlasted `kanban.board_retry_seconds`.
pub(super) fn record(
    ctx: &Ctx,
    store: &mut Option<Board>,
    task: &str,
    run: i64,
    breaker: domain::board::Breaker,
    code: &Result<u8, Failure>,
    last: &str,
) -> Result<(String, bool), Failure> {
    let now = SystemClock.now();
    let error = match code {
        Ok(0) => None,
        Ok(c) => Some(format!("command exited with {c}")),
        Err(f) => Some(f.message.clone()),
    };
    let cooldown = ctx.settings.kanban.tempfail_cooldown_seconds.duration();
    let ending = match (code, &error) {
        (Ok(c), _) => ending_of_exit(i64::from(*c), Some(last), error.as_deref().unwrap_or_default(), cooldown, now),
        (Err(_), error) => {
            let error = error.as_deref().unwrap_or_default();
            RunEnding::Failed(RunEnd { outcome: "failed", error, exit_code: None, retry_at: None })
        }
    };
    let what = match ending {
        RunEnding::Completed { .. } => "record the completion",
        RunEnding::Requeued(_) => "requeue the snoozed task",
        RunEnding::Failed(_) => "record the failure",
    };
    let recorded = outage::retrying_blocking(ctx, what, outage::patience(ctx), store, |b| {
        match record_run_end(&mut **b, task, Some(run), &ending, breaker, now) {
            Err(e @ (StoreError::Moved { .. } | StoreError::Transition { .. })) => Ok(Err(e)),
            other => other.map(|r| Ok(r.finished())),
        }
    })?;
    Ok(match recorded {
        Ok(finished) => {
            let said = match ending {
                RunEnding::Completed { .. } => "the command exited 0: completed".to_owned(),
                RunEnding::Requeued(_) => format!(
                    "the command exited 75 (EX_TEMPFAIL): snoozed for {}s, no failure counted",
                    cooldown.as_secs()
                ),
                RunEnding::Failed(_) => format!("failed: {}", error.unwrap_or_default()),
            };
            (said, finished)
        }
        Err(e) => (format!("the command's exit is not the outcome: {e}"), false),
    })
}
