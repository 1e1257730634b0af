//! Board writes that wait out an outage: a worker (and a worker command's own `kanban complete|heartbeat`) keeps
//! retrying a write while the board is unreachable, for `kanban.board_retry_seconds`, so a database restart delays
//! an outcome instead of losing it (a task whose outcome is lost would be judged crashed and run again). A refusal
//! (the board answered: no such task, the run was taken back) is returned at once.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use domain::board::StoreError;

use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::edge::open::{Board, open_board};

/// The run this process works for when it is task `id`'s worker (or that worker's command): its writes about the
/// task are guarded by that run and wait out an outage.
pub fn own_run(ctx: &Ctx, id: &str) -> Option<i64> {
    ctx.env
        .get("BERTH_KANBAN_TASK")
        .is_some_and(|t| t == id)
        .then(|| ctx.env.get("BERTH_KANBAN_RUN_ID")?.parse().ok())
        .flatten()
}

/// The one retry policy of board writes through an outage: which errors are waited out (transient ones), for how
/// long (`patience` from the first try), with what back-off (100 ms doubling to 5 s), and what the log says (once
/// that it waits, once that the board is back). [`retrying`] sleeps on the async runtime, [`retrying_blocking`] on
/// its thread (the worker's socket for its command's requests); both follow this.
struct Outage<'a> {
    what: &'a str,
    patience: Duration,
    started: Instant,
    wait: Duration,
    told: bool,
}

impl<'a> Outage<'a> {
    fn new(what: &'a str, patience: Duration) -> Self {
        Self { what, patience, started: Instant::now(), wait: Duration::from_millis(100), told: false }
    }

    /// One try of `op` on the board in `store` (opened, or opened again, as needed): the value, the pause before
    /// the next try, or the error to give up with (a refusal at once, an outage past the patience).
    fn attempt<T>(
        &mut self,
        ctx: &Ctx,
        store: &mut Option<Board>,
        op: &mut impl FnMut(&mut Board) -> Result<T, StoreError>,
    ) -> Result<ControlFlow<T, Duration>, Failure> {
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
                if self.told {
                    let waited = self.started.elapsed().as_secs();
                    tracing::warn!("the board is back; could {} after waiting {waited}s", self.what);
                }
                Ok(ControlFlow::Break(v))
            }
            Err(e) if e.is_transient() && Instant::now() + self.wait < self.started + self.patience => {
                if !self.told {
                    let (what, secs) = (self.what, self.patience.as_secs());
                    tracing::warn!("the board is unreachable ({e}); retrying to {what} for up to {secs}s");
                    self.told = true;
                }
                let wait = self.wait;
                self.wait = (wait * 2).min(Duration::from_secs(5));
                Ok(ControlFlow::Continue(wait))
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Runs `op` on the board in `store` (opened, or opened again, as needed), retrying through an outage for
/// `patience` as [`Outage`] decides.
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
    let mut outage = Outage::new(what, patience);
    loop {
        match outage.attempt(ctx, store, &mut op)? {
            ControlFlow::Break(v) => return Ok(v),
            ControlFlow::Continue(wait) => tokio::time::sleep(wait).await,
        }
    }
}

/// [`retrying`] on a thread that is not the async runtime's, with the same policy.
///
/// # Errors
/// As [`retrying`].
pub fn retrying_blocking<T>(
    ctx: &Ctx,
    what: &str,
    patience: Duration,
    store: &mut Option<Board>,
    mut op: impl FnMut(&mut Board) -> Result<T, StoreError>,
) -> Result<T, Failure> {
    let mut outage = Outage::new(what, patience);
    loop {
        match outage.attempt(ctx, store, &mut op)? {
            ControlFlow::Break(v) => return Ok(v),
            ControlFlow::Continue(wait) => std::thread::sleep(wait),
        }
    }
}

/// A worker's patience with the board (`kanban.board_retry_seconds`).
pub fn patience(ctx: &Ctx) -> Duration {
    ctx.settings.kanban.board_retry_seconds.duration()
}
