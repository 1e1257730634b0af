//! `kanban.worker_exit_outcome`: a command's exit status recorded as its run's outcome, by its `berth worker run`
//! (`worker.rs`) or by the home's runner (`runner.rs`).

use domain::kanban::FailureOutcome;
use domain::ports::Clock;
use kanban_core::{RunEnd, StoreError};

use super::outage;
use crate::edge::context::{Ctx, SystemClock};
use crate::edge::error::Failure;
use crate::edge::open::Board;

/// Records a command's exit as run `run`'s outcome on `store` (opened when `None`, waiting out an outage): exit 0
/// completes the task with `last` its result, anything else fails it through `limit`. What to log, and whether the
/// task is finished with its sandbox (done, or failed for good). A refusal (the run moved on: the command recorded
/// its own outcome, or the task was taken back) is an answer, logged, and changes nothing.
///
/// # Errors
/// The board's error once the outage outlasted `kanban.board_retry_seconds`.
pub(super) fn record(
    ctx: &Ctx,
    store: &mut Option<Board>,
    task: &str,
    run: i64,
    limit: u32,
    code: &Result<u8, Failure>,
    last: &str,
) -> Result<(String, bool), Failure> {
    let now = SystemClock.now();
    let error = match code {
        Ok(0) => None,
        Ok(c) => Some(format!("command exited with {c}")),
        Err(f) => Some(f.message.clone()),
    };
    let exit_code = code.as_ref().ok().map(|c| i64::from(*c));
    let answered = |r: Result<bool, StoreError>| match r {
        Err(e @ (StoreError::Moved { .. } | StoreError::Transition { .. })) => Ok(Err(e)),
        other => other.map(Ok),
    };
    let patience = outage::patience(ctx);
    let recorded = match &error {
        None => outage::retrying_blocking(ctx, "record the completion", patience, store, |b| {
            answered(b.complete(task, Some(run), Some(last), Some(0), now).map(|_| true))
        })?,
        Some(error) => {
            let end = RunEnd { outcome: "failed", error, exit_code };
            outage::retrying_blocking(ctx, "record the failure", patience, store, |b| {
                answered(b.fail(task, Some(run), &end, limit, now).map(|f| matches!(f, FailureOutcome::GiveUp { .. })))
            })?
        }
    };
    Ok(match recorded {
        Ok(finished) => {
            (error.map_or_else(|| "the command exited 0: completed".into(), |e| format!("failed: {e}")), finished)
        }
        Err(e) => (format!("the command's exit is not the outcome: {e}"), false),
    })
}
