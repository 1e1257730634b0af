//! Task state changes: each command is looked up in the domain's transition table, applied in one write
//! transaction with its event; the claim protocol's writes (confirm, heartbeat, spawn records) and the breaker.

use std::time::Duration;

use domain::board::rules::{block_change, failure_change};
use domain::board::transitions::{Found, Guarded, TaskCommand, Transition, guard, transition};
use domain::board::{AssignedBy, BoardEvent};
use domain::board::{BlockKind, Breaker, FailureOutcome, SpawnRecord, Stopped, TaskStatus, WorkerRef};
use domain::time::Timestamp;
use rusqlite::{Connection, OptionalExtension, Transaction, params};

use crate::Sql;
use crate::rows::status_of;
use crate::{Confirmation, Result, RunEnd, SqliteKanbanStore, StoreError, Task};

/// The columns that make a claim, cleared in one place whenever a task stops being anyone's (SQL `SET` items).
macro_rules! clear_claim {
    () => {
        "claim_lock = NULL, claim_expires = NULL, worker_pid = NULL, worker_start = NULL"
    };
}
pub(crate) use clear_claim;

/// Looks `command` up in the domain's transition table for task `id` in `status`.
pub(crate) fn allowed(command: TaskCommand, id: &str, status: TaskStatus) -> Result<&'static Transition> {
    transition(command, status).map_err(|e| StoreError::Transition { task: id.to_owned(), status, action: e.action })
}

/// The worker recorded on task `id` when it runs on `host` (a worker of another host is that host's to stop).
pub(crate) fn worker_of(conn: &Connection, id: &str, host: &str) -> Result<Option<WorkerRef>> {
    let (pid, start, on): (Option<i64>, Option<i64>, Option<String>) = conn
        .query_row("SELECT worker_pid, worker_start, worker_host FROM tasks WHERE id = ?1", [id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .sql()?;
    let local = domain::board::liveness::is_local(host, on.as_deref());
    Ok(pid.filter(|_| local).map(|pid| WorkerRef { pid, start }))
}

/// Checks `command` against the task's status, notes its worker and closes its run (see [`Stopped`]).
pub(crate) fn stop_run(
    tx: &Transaction<'_>,
    id: &str,
    command: TaskCommand,
    host: &str,
    note: Option<&str>,
    now: Timestamp,
) -> Result<Stopped> {
    let status = status_in(tx, id)?;
    let t = allowed(command, id, status)?;
    let worker = worker_of(tx, id, host)?;
    let run = close_run(tx, id, t.event, note, None, now).sql()?;
    Ok(Stopped { status, worker, run })
}

impl SqliteKanbanStore {
    /// Sets or clears a task's assignee.
    ///
    /// # Errors
    /// [`StoreError::NoTask`]; [`StoreError::Transition`] for a running, done or archived task.
    pub fn assign(&mut self, id: &str, assignee: Option<&str>, now: Timestamp) -> Result<Task> {
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        allowed(TaskCommand::Assign, id, status)?;
        let assignee = assignee.map(str::trim).filter(|a| !a.is_empty());
        tx.execute("UPDATE tasks SET assignee = ?2 WHERE id = ?1", params![id, assignee]).sql()?;
        event(&tx, id, None, &BoardEvent::Assigned { assignee, source: AssignedBy::Hand }, now).sql()?;
        tx.commit().sql()?;
        self.task(id)
    }

    /// Marks a task done (from running, ready or blocked), or `review` when it asks for one
    /// (`rules::completion_status`), closes its run, and (done) promotes children whose parents are all done. With `run`, only while the task is still on that run. Returns the task.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`].
    pub fn complete(
        &mut self,
        id: &str,
        run: Option<i64>,
        result: Option<&str>,
        exit_code: Option<i64>,
        now: Timestamp,
    ) -> Result<Task> {
        let tx = self.write()?;
        let t = match guarded(&tx, id, TaskCommand::Complete, run, "completed")? {
            Guarded::Apply(t) => t,
            Guarded::AlreadyDone => {
                drop(tx);
                return self.task(id);
            }
        };
        let review: i64 = tx.query_row("SELECT review FROM tasks WHERE id = ?1", [id], |r| r.get(0)).sql()?;
        let next = domain::board::rules::completion_status(review != 0);
        let run = close_run(&tx, id, t.event, None, exit_code, now).sql()?;
        tx.execute(
            concat!(
                "UPDATE tasks SET status = ?4, result = ?2, completed_at = ?3, consecutive_failures = 0, ",
                clear_claim!(),
                " WHERE id = ?1"
            ),
            params![id, result, now.as_millis(), next.as_str()],
        )
        .sql()?;
        event(&tx, id, run, &BoardEvent::Completed { result, exit_code }, now).sql()?;
        if next == TaskStatus::Done {
            promote_children(&tx, id, now).sql()?;
        }
        tx.commit().sql()?;
        self.task(id)
    }

    /// A worker's failure: counts toward the failure limit; requeued below it, blocked (`gave_up`) at it.
    /// With `run`, only while the task is still on that run.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] when the task is no longer running.
    pub fn fail(
        &mut self,
        id: &str,
        run: Option<i64>,
        end: &RunEnd<'_>,
        breaker: Breaker,
        now: Timestamp,
    ) -> Result<FailureOutcome> {
        let tx = self.write()?;
        if guarded(&tx, id, TaskCommand::Fail, run, end.outcome)? == Guarded::AlreadyDone {
            return already_failed(&tx, id, breaker.limit);
        }
        let res = record_task_failure(&tx, id, end, breaker, now)?;
        tx.commit().sql()?;
        Ok(res)
    }

    /// Ends `run` with `end.outcome` and puts the task back in `ready` without counting a failure (see
    /// [`crate::BoardStore::requeue`]).
    ///
    /// # Errors
    /// [`StoreError::NoTask`], [`StoreError::Moved`] or [`StoreError::Transition`].
    pub fn requeue(&mut self, id: &str, run: i64, end: &RunEnd<'_>, now: Timestamp) -> Result<()> {
        let tx = self.write()?;
        if guarded(&tx, id, TaskCommand::Reclaim, Some(run), end.outcome)? == Guarded::AlreadyDone {
            return Ok(());
        }
        close_run(&tx, id, end.outcome, Some(end.error), end.exit_code, now).sql()?;
        tx.execute(
            concat!("UPDATE tasks SET status = 'ready', not_before = ?2, ", clear_claim!(), " WHERE id = ?1"),
            params![id, end.retry_at],
        )
        .sql()?;
        let requeued = BoardEvent::Requeued { outcome: end.outcome, error: end.error, retry_at: end.retry_at };
        event(&tx, id, Some(run), &requeued, now).sql()?;
        tx.commit().sql()?;
        Ok(())
    }

    /// Blocks a task (clears any claim), where [`domain::board::rules::block_change`] says for its kind and its last
    /// block; returns the worker to stop, if one ran.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] from done or archived.
    pub fn block(
        &mut self,
        id: &str,
        kind: Option<BlockKind>,
        reason: Option<&str>,
        now: Timestamp,
    ) -> Result<Option<WorkerRef>> {
        let host = self.host.clone();
        let tx = self.write()?;
        let s = stop_run(&tx, id, TaskCommand::Block, &host, reason, now)?;
        let (last_kind, last_reason): (Option<String>, Option<String>) = tx
            .query_row("SELECT block_kind, block_reason FROM tasks WHERE id = ?1", [id], |r| Ok((r.get(0)?, r.get(1)?)))
            .sql()?;
        let last = (last_kind.as_deref().and_then(BlockKind::from_db), last_reason.as_deref());
        let change = block_change(kind, reason, last, !parents_done(&tx, id).sql()?);
        tx.execute(
            concat!(
                "UPDATE tasks SET status = ?2, block_kind = ?3, block_reason = ?4, ",
                clear_claim!(),
                " WHERE id = ?1"
            ),
            params![id, change.status.as_str(), change.kind.map(BlockKind::as_str), reason],
        )
        .sql()?;
        let went = (change.status != TaskStatus::Blocked).then_some(change.status);
        event(&tx, id, s.run, &BoardEvent::Blocked { reason, kind: change.kind, status: went }, now).sql()?;
        tx.commit().sql()?;
        Ok(s.worker)
    }

    /// Unblocks a task back to `ready` (or `todo` while parents are unfinished), resetting its failure count.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] unless blocked.
    pub fn unblock(&mut self, id: &str, now: Timestamp) -> Result<Task> {
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        allowed(TaskCommand::Unblock, id, status)?;
        let next = if parents_done(&tx, id).sql()? { TaskStatus::Ready } else { TaskStatus::Todo };
        tx.execute(
            "UPDATE tasks SET status = ?2, consecutive_failures = 0, not_before = NULL WHERE id = ?1",
            params![id, next.as_str()],
        )
        .sql()?;
        event(&tx, id, None, &BoardEvent::Unblocked { status: next }, now).sql()?;
        tx.commit().sql()?;
        self.task(id)
    }

    /// Takes a task out of triage (see [`crate::BoardStore::promote`]).
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] unless in triage.
    pub fn promote(&mut self, id: &str, now: Timestamp) -> Result<Task> {
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        allowed(TaskCommand::PromoteTriage, id, status)?;
        let next = if parents_done(&tx, id).sql()? { TaskStatus::Ready } else { TaskStatus::Todo };
        tx.execute("UPDATE tasks SET status = ?2 WHERE id = ?1", params![id, next.as_str()]).sql()?;
        event(&tx, id, None, &BoardEvent::Promoted { parent: None, status: Some(next) }, now).sql()?;
        tx.commit().sql()?;
        self.task(id)
    }

    /// Archives a task; returns the worker to stop, if one ran.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] when already archived.
    pub fn archive(&mut self, id: &str, now: Timestamp) -> Result<Option<WorkerRef>> {
        let host = self.host.clone();
        let tx = self.write()?;
        let s = stop_run(&tx, id, TaskCommand::Archive, &host, None, now)?;
        tx.execute(concat!("UPDATE tasks SET status = 'archived', ", clear_claim!(), " WHERE id = ?1"), [id]).sql()?;
        event(&tx, id, s.run, &BoardEvent::Archived { prev_status: s.status }, now).sql()?;
        promote_children(&tx, id, now).sql()?;
        tx.commit().sql()?;
        Ok(s.worker)
    }

    /// Manually reclaims a running task back to `ready`, resetting its failure count; returns the worker to stop.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] unless running.
    pub fn reclaim(&mut self, id: &str, reason: Option<&str>, now: Timestamp) -> Result<Option<WorkerRef>> {
        let host = self.host.clone();
        let tx = self.write()?;
        let lock: Option<String> =
            tx.query_row("SELECT claim_lock FROM tasks WHERE id = ?1", [id], |r| r.get(0)).sql()?;
        let s = stop_run(&tx, id, TaskCommand::Reclaim, &host, reason, now)?;
        tx.execute(
            concat!("UPDATE tasks SET status = 'ready', consecutive_failures = 0, ", clear_claim!(), " WHERE id = ?1"),
            [id],
        )
        .sql()?;
        let reclaimed = BoardEvent::Reclaimed { manual: true, reason, prev_lock: lock.as_deref() };
        event(&tx, id, s.run, &reclaimed, now).sql()?;
        tx.commit().sql()?;
        Ok(s.worker)
    }

    /// Sets when a waiting task may be claimed (see [`crate::BoardStore::schedule`]).
    ///
    /// # Errors
    /// [`StoreError::NoTask`]; [`StoreError::Transition`] for a running, done or archived task.
    pub fn schedule(&mut self, id: &str, at: Option<Timestamp>, now: Timestamp) -> Result<Task> {
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        if !domain::board::rules::schedulable(status) {
            return Err(StoreError::Transition { task: id.to_owned(), status, action: "schedule" });
        }
        let run_at = at.map(Timestamp::as_millis);
        tx.execute("UPDATE tasks SET not_before = ?2 WHERE id = ?1", params![id, run_at]).sql()?;
        event(&tx, id, None, &BoardEvent::Scheduled { run_at }, now).sql()?;
        tx.commit().sql()?;
        self.task(id)
    }

    /// Records a heartbeat (with an event when there is a note).
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] unless running.
    pub fn heartbeat(&mut self, id: &str, note: Option<&str>, now: Timestamp) -> Result<()> {
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        allowed(TaskCommand::Heartbeat, id, status)?;
        tx.execute("UPDATE tasks SET last_heartbeat_at = ?2 WHERE id = ?1", params![id, now.as_millis()]).sql()?;
        if let Some(note) = note {
            let run: Option<i64> =
                tx.query_row("SELECT current_run_id FROM tasks WHERE id = ?1", [id], |r| r.get(0)).sql()?;
            event(&tx, id, run, &BoardEvent::Heartbeat { note }, now).sql()?;
        }
        tx.commit().sql()?;
        Ok(())
    }

    /// A worker's first act: confirms its own run in one compare-and-swap on (task, run, still claimed, not yet
    /// confirmed), recording its pid, start fingerprint and host; the claim then lasts `claim_ttl` and its
    /// heartbeats extend it. Returns the task.
    ///
    /// The spawn lease is enforced by the tick, which ends an expired run in its own write transaction; the two
    /// serialize, so a confirmation either lands first (the tick then sees a confirmed run) or finds the run ended.
    /// Re-checking the lease here would only refuse a worker that no tick has given up on yet.
    ///
    /// # Errors
    /// [`StoreError::Superseded`] when the swap fails (the run was reclaimed, requeued or replaced, for example
    /// because its lease expired, or another process confirmed it): the worker must run nothing.
    /// [`StoreError::NoTask`] or an SQLite error.
    pub fn confirm_run(&mut self, c: &Confirmation<'_>, claim_ttl: Duration, now: Timestamp) -> Result<Task> {
        let tx = self.write()?;
        status_in(&tx, c.task)?;
        let start = c.start.and_then(|v| i64::try_from(v).ok());
        let expires = now.as_millis().saturating_add(i64::try_from(claim_ttl.as_millis()).unwrap_or(i64::MAX));
        let n = tx.execute(
            "UPDATE tasks SET worker_pid = ?3, worker_start = ?4, worker_host = ?5, confirmed_at = ?6, started_at = ?6, \
             last_heartbeat_at = ?6, claim_expires = ?7 \
             WHERE id = ?1 AND current_run_id = ?2 AND status = 'running' AND claim_lock IS NOT NULL \
             AND confirmed_at IS NULL",
            params![c.task, c.run_id, c.pid, start, c.host, now.as_millis(), expires],
        ).sql()?;
        if n != 1 {
            // The same worker confirming again (its first reply was lost to an outage) is confirmed already.
            let mine: bool = tx
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM tasks WHERE id = ?1 AND current_run_id = ?2 AND status = 'running' \
                 AND confirmed_at IS NOT NULL AND worker_pid = ?3 AND worker_start IS ?4 AND worker_host IS ?5)",
                    params![c.task, c.run_id, c.pid, start, c.host],
                    |r| r.get(0),
                )
                .sql()?;
            if mine {
                drop(tx);
                return self.task(c.task);
            }
            return Err(StoreError::Superseded { task: c.task.to_owned(), run: c.run_id });
        }
        tx.execute(
            "UPDATE task_runs SET worker_pid = ?2, worker_start = ?3, worker_host = ?4, confirmed_at = ?5, claim_expires = ?6 \
             WHERE id = ?1",
            params![c.run_id, c.pid, start, c.host, now.as_millis(), expires],
        ).sql()?;
        let confirmed = BoardEvent::Confirmed { pid: c.pid, start, host: c.host, expires, by: None };
        event(&tx, c.task, Some(c.run_id), &confirmed, now).sql()?;
        tx.commit().sql()?;
        self.task(c.task)
    }

    /// A confirmed worker's heartbeat: records it and extends the claim by `claim_ttl`, while the task is still on
    /// `run`. Returns whether it still is (a worker whose run ended should stop beating).
    ///
    /// # Errors
    /// An SQLite error.
    pub fn heartbeat_run(&mut self, id: &str, run: i64, claim_ttl: Duration, now: Timestamp) -> Result<bool> {
        let expires = now.as_millis().saturating_add(i64::try_from(claim_ttl.as_millis()).unwrap_or(i64::MAX));
        let n = self
            .conn
            .execute(
                "UPDATE tasks SET last_heartbeat_at = ?3, claim_expires = max(coalesce(claim_expires, 0), ?4) \
             WHERE id = ?1 AND current_run_id = ?2 AND status = 'running' AND confirmed_at IS NOT NULL",
                params![id, run, now.as_millis(), expires],
            )
            .sql()?;
        Ok(n == 1)
    }

    /// Records the workers a dispatcher started for claimed tasks and confirms their runs for them, all in one
    /// transaction: the same compare-and-swap as [`Self::confirm_run`] (task on that run, running, unconfirmed), with
    /// the pid and start the dispatcher read right after the spawn and this store's host. A run that is no longer its
    /// task's current one (its lease lapsed while this dispatcher was held up, and another took the task) gets
    /// nothing: its worker confirms for itself and finds the run superseded. Returns how many runs were confirmed.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn record_spawned(
        &mut self,
        spawned: &[SpawnRecord<'_>],
        claim_ttl: Duration,
        now: Timestamp,
    ) -> Result<usize> {
        let expires = now.as_millis().saturating_add(i64::try_from(claim_ttl.as_millis()).unwrap_or(i64::MAX));
        let host = self.host.clone();
        let tx = self.write()?;
        let mut confirmed = 0;
        for s in spawned {
            let start = s.start.and_then(|v| i64::try_from(v).ok());
            let n = tx.prepare_cached(
                "UPDATE tasks SET worker_pid = ?3, worker_start = ?4, worker_host = nullif(?5, ''), confirmed_at = ?6, \
                 started_at = ?6, last_heartbeat_at = ?6, claim_expires = ?7 \
                 WHERE id = ?1 AND current_run_id = ?2 AND status = 'running' AND claim_lock IS NOT NULL \
                 AND confirmed_at IS NULL",
            ).sql()?
            .execute(params![s.task, s.run_id, s.pid, start, host, now.as_millis(), expires]).sql()?;
            if n == 0 {
                continue;
            }
            tx.prepare_cached(
                "UPDATE task_runs SET worker_pid = ?2, worker_start = ?3, worker_host = nullif(?4, ''), confirmed_at = ?5, \
                 claim_expires = ?6 WHERE id = ?1",
            ).sql()?
            .execute(params![s.run_id, s.pid, start, host, now.as_millis(), expires]).sql()?;
            event(&tx, s.task, Some(s.run_id), &BoardEvent::Spawned { pid: s.pid, log: s.log, host: &host }, now)
                .sql()?;
            let confirmation =
                BoardEvent::Confirmed { pid: s.pid, start, host: &host, expires, by: Some("dispatcher") };
            event(&tx, s.task, Some(s.run_id), &confirmation, now).sql()?;
            confirmed += 1;
        }
        tx.commit().sql()?;
        Ok(confirmed)
    }

    /// Records a failed spawn: back to `ready` below the failure limit, `blocked` with `gave_up` at it.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn record_spawn_failure(
        &mut self,
        id: &str,
        run: i64,
        error: &str,
        breaker: Breaker,
        now: Timestamp,
    ) -> Result<FailureOutcome> {
        let tx = self.write()?;
        if guarded(&tx, id, TaskCommand::Fail, Some(run), "spawn_failed")? == Guarded::AlreadyDone {
            return already_failed(&tx, id, breaker.limit);
        }
        let end = RunEnd { outcome: "spawn_failed", error, exit_code: None, retry_at: None };
        let res = record_task_failure(&tx, id, &end, breaker, now)?;
        tx.commit().sql()?;
        Ok(res)
    }
}

/// The guard of a write on task `id` ([`domain::board::transitions::guard`]): the task as this transaction finds it, with
/// how `run` ended when the task has left it.
pub(crate) fn guarded(
    tx: &Transaction<'_>,
    id: &str,
    command: TaskCommand,
    run: Option<i64>,
    outcome: &str,
) -> Result<Guarded> {
    let row: Option<(String, Option<i64>)> = tx
        .prepare_cached("SELECT status, current_run_id FROM tasks WHERE id = ?1")
        .sql()?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .sql()?;
    let (status, current_run) = row.ok_or_else(|| StoreError::NoTask(id.to_owned()))?;
    let ended: Option<String> = match run {
        Some(run) if current_run != Some(run) => tx
            .prepare_cached("SELECT outcome FROM task_runs WHERE id = ?1 AND task_id = ?2")
            .sql()?
            .query_row(params![run, id], |r| r.get(0))
            .optional()
            .sql()?
            .flatten(),
        _ => None,
    };
    let found = Found { status: status_of(&status)?, current_run, expected_run_outcome: ended.as_deref() };
    guard(command, &found, run, outcome).map_err(|e| StoreError::refused(id, e))
}

/// A failure already recorded (a retry): what the breaker made of it, read back from the task.
fn already_failed(tx: &Transaction<'_>, id: &str, failure_limit: u32) -> Result<FailureOutcome> {
    let (status, failures): (String, i64) = tx
        .query_row("SELECT status, consecutive_failures FROM tasks WHERE id = ?1", [id], |r| Ok((r.get(0)?, r.get(1)?)))
        .sql()?;
    Ok(domain::board::rules::already_failed(status_of(&status)?, failures, failure_limit))
}

pub(crate) fn status_in(tx: &Transaction<'_>, id: &str) -> Result<TaskStatus> {
    let raw: Option<String> =
        tx.query_row("SELECT status FROM tasks WHERE id = ?1", [id], |r| r.get(0)).optional().sql()?;
    status_of(&raw.ok_or_else(|| StoreError::NoTask(id.to_owned()))?)
}

/// Appends an event.
pub(crate) fn event(
    tx: &Transaction<'_>,
    task: &str,
    run: Option<i64>,
    event: &BoardEvent<'_>,
    now: Timestamp,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO task_events (task_id, run_id, kind, payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![task, run, event.kind(), event.payload(), now.as_millis()])
    .map(drop)
}

/// Closes the task's current run with `outcome`; returns the run id.
pub(crate) fn close_run(
    tx: &Transaction<'_>,
    task: &str,
    outcome: &str,
    error: Option<&str>,
    exit_code: Option<i64>,
    now: Timestamp,
) -> rusqlite::Result<Option<i64>> {
    let run: Option<i64> = tx.query_row("SELECT current_run_id FROM tasks WHERE id = ?1", [task], |r| r.get(0))?;
    if let Some(run) = run {
        tx.execute(
            "UPDATE task_runs SET status = 'ended', ended_at = ?2, outcome = ?3, error = ?4, exit_code = ?5 WHERE id = ?1 AND ended_at IS NULL",
            params![run, now.as_millis(), outcome, error, exit_code],
        )?;
        tx.execute("UPDATE tasks SET current_run_id = NULL WHERE id = ?1", [task])?;
    }
    Ok(run)
}

pub(crate) fn parents_done(tx: &Transaction<'_>, id: &str) -> rusqlite::Result<bool> {
    tx.query_row(
        "SELECT NOT EXISTS (SELECT 1 FROM task_links l JOIN tasks p ON p.id = l.parent_id \
         WHERE l.child_id = ?1 AND p.status NOT IN ('done', 'archived'))",
        [id],
        |r| r.get(0),
    )
}

/// Promotes `todo` children of `parent` whose parents are now all done.
pub(crate) fn promote_children(tx: &Transaction<'_>, parent: &str, now: Timestamp) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare(
        "SELECT t.id FROM task_links l JOIN tasks t ON t.id = l.child_id WHERE l.parent_id = ?1 AND t.status = 'todo'",
    )?;
    let children: Vec<String> = stmt.query_map([parent], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
    drop(stmt);
    for c in children {
        if parents_done(tx, &c)? {
            tx.execute("UPDATE tasks SET status = 'ready' WHERE id = ?1 AND status = 'todo'", [&c])?;
            event(tx, &c, None, &BoardEvent::Promoted { parent: Some(parent), status: None }, now)?;
        }
    }
    Ok(())
}

/// The failure breaker on a task ([`domain::board::rules::failure_change`]), written.
pub(crate) fn record_task_failure(
    tx: &Transaction<'_>,
    id: &str,
    end: &RunEnd<'_>,
    breaker: Breaker,
    now: Timestamp,
) -> Result<FailureOutcome> {
    let (failures, max_retries): (i64, Option<i64>) = tx
        .query_row("SELECT consecutive_failures, max_retries FROM tasks WHERE id = ?1", [id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .sql()?;
    let change = failure_change(id, end, failures, max_retries, breaker, now);
    let run = close_run(tx, id, end.outcome, Some(end.error), end.exit_code, now).sql()?;
    tx.execute(
        concat!(
            "UPDATE tasks SET status = ?2, consecutive_failures = ?3, last_failure_error = ?4, not_before = ?5, ",
            clear_claim!(),
            " WHERE id = ?1"
        ),
        params![id, change.status.as_str(), change.failures, end.error, change.retry_at],
    )
    .sql()?;
    for e in &change.events {
        event(tx, id, run, e, now).sql()?;
    }
    Ok(change.outcome)
}
