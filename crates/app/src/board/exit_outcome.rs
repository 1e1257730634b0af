//! `kanban.worker_exit_outcome`: a command's exit status recorded as its run's outcome, by its `berth worker run`
//! (`worker.rs`) or by the home's runner (`runner.rs`).

use domain::ports::Clock;
use kanban_core::{RunEnd, RunEnding, StoreError, record_run_end};

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
    let (what, ending) = match &error {
        None => ("record the completion", RunEnding::Completed { result: Some(last), exit_code: Some(0) }),
        Some(error) => ("record the failure", RunEnding::Failed(RunEnd { outcome: "failed", error, exit_code })),
    };
    let recorded = outage::retrying_blocking(ctx, what, outage::patience(ctx), store, |b| {
        match record_run_end(&mut **b, task, Some(run), &ending, limit, now) {
            Err(e @ (StoreError::Moved { .. } | StoreError::Transition { .. })) => Ok(Err(e)),
            other => other.map(|r| Ok(r.finished())),
        }
    })?;
    Ok(match recorded {
        Ok(finished) => {
            (error.map_or_else(|| "the command exited 0: completed".into(), |e| format!("failed: {e}")), finished)
        }
        Err(e) => (format!("the command's exit is not the outcome: {e}"), false),
    })
}
