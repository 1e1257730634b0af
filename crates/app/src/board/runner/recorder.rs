//! The runner's board writes: a task's confirmation and outcome, and the recorder that writes the completions that
//! arrive together in one transaction (each guarded by its run), on the runner's one kept connection.

use super::{Asker, BATCH, Completion, Shared, TaskRun};
use crate::edge::context::{Ctx, ProcProbe, SystemClock};
use crate::edge::error::Failure;
use crate::edge::open::Board;
use domain::board::Confirmation;
use domain::ports::Clock;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, PoisonError};

impl Shared {
    /// Exits when the runner's home was deleted (its lock file gone or replaced): writing a task's outcome, or its
    /// log, would make the home again with an empty board. Checked every second and before every write.
    pub(super) fn stop_if_home_gone(&self) {
        let path = self.home.join("kanban").join("runner.lock");
        let now = std::fs::metadata(path).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).ok();
        if self.lock_inode.is_some() && now != self.lock_inode {
            tracing::warn!("runner: its home {} is gone; exiting", self.home.display());
            std::process::exit(0);
        }
    }

    /// Confirms the run for its worker `pid` on the board (compare-and-swap: still claimed, not yet confirmed).
    pub(super) fn confirm(&self, ctx: &Ctx, t: &TaskRun, pid: u32) -> bool {
        let host = ctx.host_id();
        let start = t.start.or_else(|| domain::ports::ProcessProbe::start_fingerprint(&ProcProbe, pid));
        let c = Confirmation { task: &t.task, run_id: t.run, pid, start, host: &host };
        let ttl = crate::board::worker::claim_ttl(ctx);
        self.stop_if_home_gone();
        let mut store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        crate::board::outage::retrying_blocking(
            ctx,
            "confirm the run",
            crate::board::outage::patience(ctx),
            &mut store,
            |b| {
                let now = SystemClock.now();
                b.renew_host(&host, now)?;
                b.confirm_run(&c, ttl, now)
            },
        )
        .is_ok()
    }

    /// Records the command's exit 0 as the run's completion through the recorder, with the completions that arrive
    /// while it writes others; as [`Shared::record`] would.
    pub(super) fn complete(&self, ctx: &Arc<Ctx>, t: &TaskRun, last: &str) -> Result<(String, bool), Failure> {
        let (answer, answered) = std::sync::mpsc::channel();
        let c = self.completion(ctx, t, Some(last), Some(0), Asker::Exit(answer));
        let sent = self.completions.lock().unwrap_or_else(PoisonError::into_inner).send(c);
        match sent.ok().and_then(|()| answered.recv().ok()) {
            Some(a) => a,
            None => self.record(ctx, t, &Ok(0), last),
        }
    }

    fn completion(
        &self,
        ctx: &Arc<Ctx>,
        t: &TaskRun,
        result: Option<&str>,
        code: Option<i64>,
        asker: Asker,
    ) -> Completion {
        Completion {
            ctx: Arc::clone(ctx),
            task: t.task.clone(),
            run: t.run,
            failure_limit: t.failure_limit,
            assignee: t.assignee.clone(),
            result: result.map(str::to_owned),
            exit_code: code,
            asker,
        }
    }

    /// Writes the completions as they come: each batch is what arrived while the one before was written (no waiting
    /// for more), in one transaction, each completion still guarded by its run. A batch the board does not take as
    /// a whole (an outage, an error) is written one completion at a time, as before, each waiting out the outage.
    pub(super) fn recorder(&self, queue: &Receiver<Completion>) {
        while let Ok(first) = queue.recv() {
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match queue.try_recv() {
                    Ok(c) => batch.push(c),
                    Err(_) => break,
                }
            }
            self.complete_batch(batch);
        }
    }

    fn complete_batch(&self, batch: Vec<Completion>) {
        self.stop_if_home_gone();
        let mut store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        let answers = match (batch.len(), store.as_mut()) {
            (2.., Some(b)) => {
                let runs: Vec<domain::board::RunDone<'_>> = batch
                    .iter()
                    .map(|c| domain::board::RunDone {
                        task: &c.task,
                        run: c.run,
                        result: c.result.as_deref(),
                        exit_code: c.exit_code,
                    })
                    .collect();
                b.complete_runs(&runs, SystemClock.now()).ok()
            }
            _ => None,
        };
        let mut answers = answers.map(Vec::into_iter);
        for c in batch {
            let written = answers.as_mut().and_then(Iterator::next);
            match &c.asker {
                Asker::Exit(answer) => {
                    let a = match written {
                        Some(Ok(())) => Ok(("the command exited 0: completed".to_owned(), true)),
                        Some(Err(
                            e
                            @ (domain::board::StoreError::Moved { .. } | domain::board::StoreError::Transition { .. }),
                        )) => Ok((format!("the command's exit is not the outcome: {e}"), false)),
                        // Alone, or not written with the batch: as one completion (waiting out an outage).
                        _ => {
                            let breaker = c.ctx.breaker(c.failure_limit, Some(&c.assignee));
                            let last = c.result.as_deref().unwrap_or_default();
                            crate::board::exit_outcome::record(
                                &c.ctx,
                                &mut store,
                                &c.task,
                                c.run,
                                breaker,
                                &Ok(0),
                                last,
                            )
                        }
                    };
                    let _ = answer.send(a);
                }
                Asker::Command(answer, full) => {
                    // The task as it is after (its id and assignee alone when the command does not print it);
                    // anything but a completion written with the batch is written (or refused) as the command's own
                    // write would be.
                    let after = match written {
                        Some(Ok(())) if !full => {
                            serde_json::to_value(Named { id: &c.task, assignee: &c.assignee }).ok()
                        }
                        Some(Ok(())) => store.as_mut().and_then(|b| as_value(b.task(&c.task).ok()?).ok()),
                        _ => None,
                    };
                    let a = match after {
                        Some(task) => Ok(task),
                        None => self
                            .command_write_on(&c.ctx, &mut store, &c.task, c.run, "complete", c.result.as_deref())
                            .and_then(as_value),
                    };
                    let _ = answer.send(a);
                }
            }
        }
    }

    /// A write of the command's own on the runner's connection, waiting out an outage.
    fn command_write_on(
        &self,
        ctx: &Ctx,
        store: &mut Option<Board>,
        task: &str,
        run: i64,
        op: &str,
        text: Option<&str>,
    ) -> Result<domain::board::Task, Failure> {
        let host = ctx.host_id();
        let what = format!("record the command's {op}");
        crate::board::outage::retrying_blocking(ctx, &what, crate::board::outage::patience(ctx), store, |b| {
            crate::board::relay::apply(b, op, task, run, text, &host)
        })
    }

    /// The command's own `kanban complete|block|heartbeat` on its task, on the runner's one kept connection (no
    /// connection of the task's own), guarded by the run: the task after it, and whether its sandbox is taken care
    /// of (a completed task's goes with the runner's removals, not the command's).
    pub(super) fn command_write(
        &self,
        ctx: &Arc<Ctx>,
        t: &TaskRun,
        op: &str,
        text: Option<&str>,
        full: bool,
    ) -> Result<(serde_json::Value, bool), Failure> {
        self.stop_if_home_gone();
        let alone = || {
            let mut store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
            self.command_write_on(ctx, &mut store, &t.task, t.run, op, text).and_then(as_value)
        };
        let task = if op == "complete" {
            // With the other completions of the moment, through the recorder.
            let (answer, answered) = std::sync::mpsc::channel();
            let c = self.completion(ctx, t, text, None, Asker::Command(answer, full));
            let sent = self.completions.lock().unwrap_or_else(PoisonError::into_inner).send(c);
            sent.ok().and_then(|()| answered.recv().ok()).unwrap_or_else(alone)
        } else {
            alone()
        }?;
        // A completed task's sandbox goes before the command is answered, as its own `kanban complete` removed it.
        let released = op == "complete" && {
            let (removed, done) = std::sync::mpsc::channel();
            let then: Box<dyn FnOnce(bool) + Send> = Box::new(move |r| {
                let _ = removed.send(r);
            });
            let removals = self.answered_removals.lock().unwrap_or_else(PoisonError::into_inner).clone();
            removals.send(((t.task.clone(), t.assignee.clone()), then)).is_ok() && done.recv().unwrap_or(false)
        };
        Ok((task, released))
    }

    /// Records the command's exit as the run's outcome (`exit_outcome::record`).
    pub(super) fn record(
        &self,
        ctx: &Ctx,
        t: &TaskRun,
        code: &Result<u8, Failure>,
        last: &str,
    ) -> Result<(String, bool), Failure> {
        self.stop_if_home_gone();
        let mut store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        let breaker = ctx.breaker(t.failure_limit, Some(&t.assignee));
        crate::board::exit_outcome::record(ctx, &mut store, &t.task, t.run, breaker, code, last)
    }
}

/// A completed task as the command's answer names it when the command does not print the task.
#[derive(serde::Serialize)]
struct Named<'a> {
    id: &'a str,
    assignee: &'a str,
}

/// A task as the command's answer carries it.
fn as_value(task: domain::board::Task) -> Result<serde_json::Value, Failure> {
    serde_json::to_value(&task).map_err(|e| Failure::other(e.to_string()))
}
