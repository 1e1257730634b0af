//! Board writes that wait out an outage: a worker (and a worker command's own `kanban complete|heartbeat`) keeps
//! retrying a write while the board is unreachable, for `kanban.board_retry_seconds`, so a database restart delays
//! an outcome instead of losing it (a task whose outcome is lost would be judged crashed and run again). A refusal
//! (the board answered: no such task, the run was taken back) is returned at once.

use std::time::{Duration, Instant};

use kanban_store::StoreError;

use crate::context::Ctx;
use crate::error::Failure;
use crate::kanban::{Board, open_board};

/// The run this process works for when it is task `id`'s worker (or that worker's command): its writes about the
/// task are guarded by that run and wait out an outage.
pub fn own_run(ctx: &Ctx, id: &str) -> Option<i64> {
    ctx.env
        .get("BERTH_KANBAN_TASK")
        .is_some_and(|t| t == id)
        .then(|| ctx.env.get("BERTH_KANBAN_RUN_ID")?.parse().ok())
        .flatten()
}

/// Runs `op` on the board in `store` (opened, or opened again, as needed), retrying through an outage for
/// `patience` with a backoff from 100 ms to 5 s; says once on stderr (the worker's log) that it waits.
///
/// # Errors
/// The last error when `patience` ran out, or a refusal at once.
pub async fn retrying<T>(
    ctx: &Ctx,
    what: &str,
    patience: Duration,
    store: &mut Option<Board>,
    mut op: impl FnMut(&mut Board) -> Result<T, StoreError>,
) -> Result<T, Failure> {
    let waited = Instant::now();
    let deadline = waited + patience;
    let mut wait = Duration::from_millis(100);
    let mut told = false;
    loop {
        let res = match store {
            Some(s) => op(s),
            None => open_board(ctx).and_then(|mut s| {
                let r = op(&mut s);
                *store = Some(s);
                r
            }),
        };
        match res {
            Ok(v) => {
                if told {
                    tracing::warn!("the board is back; could {what} after waiting {}s", waited.elapsed().as_secs());
                }
                return Ok(v);
            }
            Err(e) if e.is_transient() && Instant::now() + wait < deadline => {
                if !told {
                    tracing::warn!(
                        "the board is unreachable ({e}); retrying to {what} for up to {}s",
                        patience.as_secs()
                    );
                    told = true;
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// A worker's patience with the board (`kanban.board_retry_seconds`).
pub fn patience(ctx: &Ctx) -> Duration {
    ctx.settings.kanban.board_retry_seconds.duration()
}
