//! The pieces every transition on PostgreSQL is made of (`board.rs`, `review.rs`, `edit.rs`, `claims.rs`, `tick.rs`):
//! a command checked against the domain's table, the task's row locked, its run closed, an event appended, children
//! promoted, the breaker written, a write's guard.

use domain::board::rules::failure_change;
use domain::board::transitions::{Found, Guarded, TaskCommand, Transition, guard, transition};
use domain::board::{BoardEvent, Breaker, FailureOutcome, RunEnd, Stopped, StoreError, TaskStatus, WorkerRef};
use domain::time::Timestamp;

use crate::PgResult;
use crate::client::GenericClient;
use crate::rows::status_of;

/// The columns that make a claim, cleared whenever a task stops being anyone's (SQL `SET` items).
pub(crate) const CLEAR_CLAIM: &str = "claim_lock = NULL, claim_expires = NULL, worker_pid = NULL, worker_start = NULL";

pub(crate) fn allowed(command: TaskCommand, id: &str, status: TaskStatus) -> PgResult<&'static Transition> {
    Ok(transition(command, status).map_err(|e| StoreError::Transition {
        task: id.to_owned(),
        status,
        action: e.action,
    })?)
}

/// The task's status, locking its row for the rest of the transaction.
pub(crate) fn status_in(tx: &mut impl GenericClient, id: &str) -> PgResult<TaskStatus> {
    let row = tx.query_opt("SELECT status FROM berth.tasks WHERE id = $1 FOR UPDATE", &[&id])?;
    let row = row.ok_or_else(|| StoreError::NoTask(id.to_owned()))?;
    status_of(row.try_get(0)?)
}

/// Appends an event.
pub(crate) fn event(
    tx: &mut impl GenericClient,
    task: &str,
    run: Option<i64>,
    event: &BoardEvent<'_>,
    now: Timestamp,
) -> PgResult<()> {
    // Prepared once per connection (every transition appends an event): one round trip, no parse.
    tx.execute(
        "INSERT INTO berth.task_events (task_id, run_id, kind, payload, created_at) VALUES ($1, $2, $3, $4, $5)",
        &[&task, &run, &event.kind(), &event.payload(), &now.as_millis()],
    )?;
    Ok(())
}

/// The worker recorded on task `id` when it runs on `host` (a worker of another host is that host's to stop).
pub(crate) fn worker_of(tx: &mut impl GenericClient, id: &str, host: &str) -> PgResult<Option<WorkerRef>> {
    let row = tx.query_one("SELECT worker_pid, worker_start, worker_host FROM berth.tasks WHERE id = $1", &[&id])?;
    let (pid, start, on): (Option<i64>, Option<i64>, Option<String>) =
        (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
    let local = domain::board::liveness::is_local(host, on.as_deref());
    Ok(pid.filter(|_| local).map(|pid| WorkerRef { pid, start }))
}

/// Checks `command` against the task's status, notes its worker and closes its run (see [`Stopped`]).
pub(crate) fn stop_run(
    tx: &mut impl GenericClient,
    id: &str,
    command: TaskCommand,
    host: &str,
    note: Option<&str>,
    now: Timestamp,
) -> PgResult<Stopped> {
    let status = status_in(tx, id)?;
    let t = allowed(command, id, status)?;
    let worker = worker_of(tx, id, host)?;
    let run = close_run(tx, id, t.event, note, None, now)?;
    Ok(Stopped { status, worker, run })
}

/// Closes the task's current run with `outcome`; returns the run id. One statement: the run read, the task's
/// current run cleared and the run ended, all against the row as the transaction found it.
pub(crate) fn close_run(
    tx: &mut impl GenericClient,
    task: &str,
    outcome: &str,
    error: Option<&str>,
    exit_code: Option<i64>,
    now: Timestamp,
) -> PgResult<Option<i64>> {
    Ok(tx
        .query_one(
            "WITH old AS (SELECT current_run_id AS run FROM berth.tasks WHERE id = $1), \
             cleared AS (UPDATE berth.tasks SET current_run_id = NULL WHERE id = $1 AND current_run_id IS NOT NULL), \
             ended AS (UPDATE berth.task_runs r SET status = 'ended', ended_at = $2, outcome = $3, error = $4, \
             exit_code = $5 FROM old WHERE r.id = old.run AND r.ended_at IS NULL) \
             SELECT run FROM old",
            &[&task, &now.as_millis(), &outcome, &error, &exit_code],
        )?
        .try_get(0)?)
}

pub(crate) fn parents_done(tx: &mut impl GenericClient, id: &str) -> PgResult<bool> {
    Ok(tx
        .query_one(
            "SELECT NOT EXISTS (SELECT 1 FROM berth.task_links l JOIN berth.tasks p ON p.id = l.parent_id \
             WHERE l.child_id = $1 AND p.status NOT IN ('done', 'archived'))",
            &[&id],
        )?
        .try_get(0)?)
}

/// Promotes `todo` children of `parent` whose parents are now all done.
pub(crate) fn promote_children(tx: &mut impl GenericClient, parent: &str, now: Timestamp) -> PgResult<()> {
    let children: Vec<String> = tx
        .query(
            "SELECT t.id FROM berth.task_links l JOIN berth.tasks t ON t.id = l.child_id \
             WHERE l.parent_id = $1 AND t.status = 'todo' ORDER BY t.id",
            &[&parent],
        )?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    for c in children {
        if parents_done(tx, &c)? {
            tx.execute("UPDATE berth.tasks SET status = 'ready' WHERE id = $1 AND status = 'todo'", &[&c])?;
            event(tx, &c, None, &BoardEvent::Promoted { parent: Some(parent), status: None }, now)?;
        }
    }
    Ok(())
}

/// The failure breaker on a task ([`domain::board::rules::failure_change`]), written.
pub(crate) fn record_task_failure(
    tx: &mut impl GenericClient,
    id: &str,
    end: &RunEnd<'_>,
    breaker: Breaker,
    now: Timestamp,
) -> PgResult<FailureOutcome> {
    let row = tx.query_one("SELECT consecutive_failures, max_retries FROM berth.tasks WHERE id = $1", &[&id])?;
    let change = failure_change(id, end, row.try_get(0)?, row.try_get(1)?, breaker, now);
    let run = close_run(tx, id, end.outcome, Some(end.error), end.exit_code, now)?;
    tx.execute(
        &format!(
            "UPDATE berth.tasks SET status = $2, consecutive_failures = $3, last_failure_error = $4, \
             not_before = $5, {CLEAR_CLAIM} WHERE id = $1"
        ),
        &[&id, &change.status.as_str(), &change.failures, &end.error, &change.retry_at],
    )?;
    for e in &change.events {
        event(tx, id, run, e, now)?;
    }
    Ok(change.outcome)
}

/// The guard of a write on task `id` ([`domain::board::transitions::guard`]): the task as this transaction finds it (its
/// row locked), with how `run` ended when the task has left it.
pub(crate) fn guarded(
    tx: &mut impl GenericClient,
    id: &str,
    command: TaskCommand,
    run: Option<i64>,
    outcome: &str,
) -> PgResult<Guarded> {
    let row = tx.query_opt("SELECT status, current_run_id FROM berth.tasks WHERE id = $1 FOR UPDATE", &[&id])?;
    let row = row.ok_or_else(|| StoreError::NoTask(id.to_owned()))?;
    let (status, current_run): (String, Option<i64>) = (row.try_get(0)?, row.try_get(1)?);
    let ended: Option<String> = match run {
        Some(run) if current_run != Some(run) => tx
            .query_opt("SELECT outcome FROM berth.task_runs WHERE id = $1 AND task_id = $2", &[&run, &id])?
            .map(|r| r.try_get(0))
            .transpose()?
            .flatten(),
        _ => None,
    };
    let found = Found { status: status_of(&status)?, current_run, expected_run_outcome: ended.as_deref() };
    Ok(guard(command, &found, run, outcome).map_err(|e| StoreError::refused(id, e))?)
}

/// A failure already recorded (a retry): what the breaker made of it, read back from the task.
pub(crate) fn already_failed(tx: &mut impl GenericClient, id: &str, failure_limit: u32) -> PgResult<FailureOutcome> {
    let row = tx.query_one("SELECT status, consecutive_failures FROM berth.tasks WHERE id = $1", &[&id])?;
    Ok(domain::board::rules::already_failed(status_of(row.try_get(0)?)?, row.try_get(1)?, failure_limit))
}
