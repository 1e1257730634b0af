//! Decoding the board's rows from SQLite.

use domain::board::{BlockKind, TaskStatus};

use crate::{Result, StoreError, Task};

pub(crate) const TASK_COLUMNS: &str = "id, board, title, body, command, assignee, status, priority, created_by, created_at, started_at, \
    completed_at, claim_lock, claim_expires, worker_pid, worker_start, consecutive_failures, last_failure_error, \
    max_runtime_seconds, max_retries, last_heartbeat_at, current_run_id, result, worker_host, confirmed_at, not_before, \
    idempotency_key, review, review_note, block_kind, block_reason";

/// The status column, as a conversion error for rusqlite when unknown.
pub(crate) fn status_col(raw: &str) -> rusqlite::Result<TaskStatus> {
    status_of(raw).map_err(|e| rusqlite::Error::FromSqlConversionFailure(6, rusqlite::types::Type::Text, e.into()))
}

/// The one reading of a stored status (no allocation on the way).
pub(crate) fn status_of(raw: &str) -> Result<TaskStatus> {
    TaskStatus::from_db(raw).ok_or_else(|| StoreError::Invalid(format!("unknown status {raw:?}")))
}

/// Decodes one row of [`TASK_COLUMNS`] (links are read separately).
pub(crate) fn task_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Task> {
    Ok(Task {
        id: r.get(0)?,
        board: r.get(1)?,
        title: r.get(2)?,
        body: r.get(3)?,
        command: r.get(4)?,
        assignee: r.get(5)?,
        status: status_col(&r.get::<_, String>(6)?)?,
        priority: r.get(7)?,
        created_by: r.get(8)?,
        created_at: r.get(9)?,
        started_at: r.get(10)?,
        completed_at: r.get(11)?,
        claim_lock: r.get(12)?,
        claim_expires: r.get(13)?,
        worker_pid: r.get(14)?,
        worker_start: r.get(15)?,
        consecutive_failures: r.get(16)?,
        last_failure_error: r.get(17)?,
        max_runtime_seconds: r.get(18)?,
        max_retries: r.get(19)?,
        last_heartbeat_at: r.get(20)?,
        current_run_id: r.get(21)?,
        result: r.get(22)?,
        worker_host: r.get(23)?,
        confirmed_at: r.get(24)?,
        not_before: r.get(25)?,
        idempotency_key: r.get(26)?,
        review: r.get::<_, i64>(27)? != 0,
        review_note: r.get(28)?,
        block_kind: r.get::<_, Option<String>>(29)?.as_deref().and_then(BlockKind::from_db),
        block_reason: r.get(30)?,
        parents: Vec::new(),
    })
}
