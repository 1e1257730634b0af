//! How a built-in worker's run ended, recorded on its board through the one writer of a run's end
//! (`domain::board::record_run_end`): done, snoozed (exit 75), failed through the breaker, or requeued for the engine.

use std::time::Duration;

use domain::board::{EX_TEMPFAIL, RunEnd, RunEnding, ending_of_exit, record_run_end};
use domain::ports::{Clock, ExecOutcome};

use super::log_sink::log_line;
use super::outage;
use crate::edge::context::{Ctx, SystemClock};
use crate::edge::error::{Exit, Failure};
use crate::edge::open::Board;

/// Where a worker records how its run ended: its board (opened again after an outage), guarded by its run.
pub(super) struct Outcome<'a> {
    pub(super) ctx: &'a Ctx,
    pub(super) task: &'a str,
    pub(super) run: i64,
    pub(super) patience: Duration,
    pub(super) store: Option<Board>,
    pub(super) breaker: domain::board::Breaker,
}

impl Outcome<'_> {
    /// Records how the command ended: done on exit 0, otherwise a failure through the breaker; the worker's exit code.
    pub(super) async fn record(
        &mut self,
        result: Result<(ExecOutcome, String, String), Failure>,
    ) -> Result<u8, Failure> {
        Ok(match result {
            Ok((ExecOutcome::Exited(0), last, _)) => {
                // Masked where it is stored, whatever masked it on the way.
                let last = crate::edge::redact::redact(&last);
                let (task, run, breaker, now) = (self.task, Some(self.run), self.breaker, SystemClock.now());
                let ending = RunEnding::Completed { result: Some(&last), exit_code: Some(0) };
                outage::retrying(self.ctx, "record the completion", self.patience, &mut self.store, |b| {
                    record_run_end(&mut **b, task, run, &ending, breaker, now)
                })
                .await?;
                log_line("completed");
                0
            }
            Ok((ExecOutcome::Exited(code), _, _)) if code == EX_TEMPFAIL => {
                let cooldown = self.ctx.settings.kanban.tempfail_cooldown_seconds.duration();
                let (task, run, breaker, now) = (self.task, Some(self.run), self.breaker, SystemClock.now());
                let error = format!("command exited {code} (EX_TEMPFAIL): snoozed for {}s", cooldown.as_secs());
                let ending = ending_of_exit(code, None, &error, cooldown, now);
                outage::retrying(self.ctx, "requeue the snoozed task", self.patience, &mut self.store, |b| {
                    record_run_end(&mut **b, task, run, &ending, breaker, now)
                })
                .await?;
                log_line(&format!("snoozed: {error}; no failure counted"));
                0
            }
            Ok((ExecOutcome::Exited(code), _, _)) => {
                self.fail("failed", &format!("command exited with {code}"), Some(code)).await?;
                1
            }
            Ok((ExecOutcome::TimedOut, _, _)) => {
                self.fail("timed_out", "max runtime exceeded", None).await?;
                1
            }
            Err(e) => {
                self.fail("failed", &format!("sandbox: {}", e.message), None).await?;
                1
            }
        })
    }

    /// The sandbox could not be had because the container engine is unreachable: not the task's failure. The run
    /// ends as `infra_unavailable`, the task goes back to `ready` with its failure count unchanged, and the worker
    /// exits 125, which the gateway takes as the signal to back off.
    pub(super) async fn engine_unavailable(&mut self, e: &Failure) -> Result<u8, Failure> {
        let error = format!("sandbox: {}", e.message);
        log_line(&format!("infra_unavailable: {error}; the task is requeued without counting a failure"));
        let (task, run, breaker, now) = (self.task, self.run, self.breaker, SystemClock.now());
        let end = RunEnd { outcome: "infra_unavailable", error: &error, exit_code: None, retry_at: None };
        let ending = RunEnding::Requeued(end);
        outage::retrying(self.ctx, "requeue the task", self.patience, &mut self.store, |b| {
            record_run_end(&mut **b, task, Some(run), &ending, breaker, now)
        })
        .await?;
        Ok(Exit::ENGINE)
    }

    /// The task's sandbox was stopped or removed under its command (by an operator, or the engine): not the task's
    /// failure. The run ends as `sandbox_stopped` and the task goes back to `ready` with its failure count unchanged;
    /// its next run starts the sandbox again (or makes it anew), once the engine says it stopped.
    pub(super) async fn sandbox_stopped(&mut self, name: &str, code: i64) -> Result<u8, Failure> {
        let error = format!(
            "the sandbox {name} was stopped under the command (exit {code}; an operator's stop or the engine's): not \
             the task's failure"
        );
        log_line(&format!("sandbox_stopped: {error}; the task is requeued without counting a failure"));
        let (task, run, breaker, now) = (self.task, self.run, self.breaker, SystemClock.now());
        let end = RunEnd { outcome: "sandbox_stopped", error: &error, exit_code: Some(code), retry_at: None };
        let ending = RunEnding::Requeued(end);
        outage::retrying(self.ctx, "requeue the task", self.patience, &mut self.store, |b| {
            record_run_end(&mut **b, task, Some(run), &ending, breaker, now)
        })
        .await?;
        Ok(Exit::OK)
    }

    /// The run failed: through the breaker, waiting out an outage of the board.
    pub(super) async fn fail(&mut self, outcome: &'static str, error: &str, code: Option<i64>) -> Result<(), Failure> {
        let error = &crate::edge::redact::redact(error);
        log_line(&format!("{outcome}: {error}"));
        let (task, run, breaker, now) = (self.task, Some(self.run), self.breaker, SystemClock.now());
        let ending = RunEnding::Failed(RunEnd { outcome, error, exit_code: code, retry_at: None });
        outage::retrying(self.ctx, "record the failure", self.patience, &mut self.store, |b| {
            record_run_end(&mut **b, task, run, &ending, breaker, now)
        })
        .await
        .map(drop)
    }
}
