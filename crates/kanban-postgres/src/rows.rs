//! Decoding the board's rows from PostgreSQL (as `kanban-store`'s `rows.rs` does from SQLite); reading a task, a board.

use domain::board::{BlockKind, TaskStatus};
use domain::board::{Board, StoreError, Task};

use crate::PgResult;
use crate::client::GenericClient;

pub(crate) const TASK_COLUMNS: &str = "id, board, title, body, command, assignee, status, priority, created_by, created_at, started_at, \
    completed_at, claim_lock, claim_expires, worker_pid, worker_start, consecutive_failures, last_failure_error, \
    max_runtime_seconds, max_retries, last_heartbeat_at, current_run_id, result, worker_host, confirmed_at, not_before, \
    idempotency_key, review, review_note, block_kind, block_reason";

/// How many columns [`TASK_COLUMNS`] names: the index of a column a query selects after them.
pub(crate) const TASK_COLUMN_COUNT: usize = 31;

/// A duration in the board's unit, milliseconds (saturating).
pub(crate) fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

pub(crate) fn status_of(raw: &str) -> PgResult<TaskStatus> {
    Ok(TaskStatus::from_db(raw).ok_or_else(|| StoreError::Invalid(format!("unknown status {raw:?}")))?)
}

pub(crate) fn task_from_row(r: &tokio_postgres::Row) -> PgResult<Task> {
    Ok(Task {
        id: r.try_get(0)?,
        board: r.try_get(1)?,
        title: r.try_get(2)?,
        body: r.try_get(3)?,
        command: r.try_get(4)?,
        assignee: r.try_get(5)?,
        status: status_of(r.try_get(6)?)?,
        priority: r.try_get(7)?,
        created_by: r.try_get(8)?,
        created_at: r.try_get(9)?,
        started_at: r.try_get(10)?,
        completed_at: r.try_get(11)?,
        claim_lock: r.try_get(12)?,
        claim_expires: r.try_get(13)?,
        worker_pid: r.try_get(14)?,
        worker_start: r.try_get(15)?,
        consecutive_failures: r.try_get(16)?,
        last_failure_error: r.try_get(17)?,
        max_runtime_seconds: r.try_get(18)?,
        max_retries: r.try_get(19)?,
        last_heartbeat_at: r.try_get(20)?,
        current_run_id: r.try_get(21)?,
        result: r.try_get(22)?,
        worker_host: r.try_get(23)?,
        confirmed_at: r.try_get(24)?,
        not_before: r.try_get(25)?,
        idempotency_key: r.try_get(26)?,
        review: r.try_get::<_, i64>(27)? != 0,
        review_note: r.try_get(28)?,
        block_kind: r.try_get::<_, Option<&str>>(29)?.and_then(BlockKind::from_db),
        block_reason: r.try_get(30)?,
        parents: Vec::new(),
    })
}

pub(crate) fn board_from_row(r: &tokio_postgres::Row) -> PgResult<Board> {
    Ok(Board { slug: r.try_get(0)?, name: r.try_get(1)?, created_at: r.try_get(2)? })
}

/// A task with its parents, in two round trips (typed parameters: no separate prepare), as every worker and
/// `kanban complete` reads one.
pub(crate) fn read_task(c: &mut impl GenericClient, id: &str) -> PgResult<Task> {
    // One round trip: the task and its parents, the statement prepared once per connection.
    let sql = format!(
        "SELECT {TASK_COLUMNS}, ARRAY(SELECT parent_id FROM berth.task_links WHERE child_id = $1 ORDER BY parent_id) \
         FROM berth.tasks WHERE id = $1"
    );
    let row = c.query_opt(&sql, &[&id])?.ok_or_else(|| StoreError::NoTask(id.to_owned()))?;
    let mut t = task_from_row(&row)?;
    t.parents = row.try_get(TASK_COLUMN_COUNT)?;
    Ok(t)
}

/// A board that is not archived.
pub(crate) fn read_board(c: &mut impl GenericClient, slug: &str) -> PgResult<Board> {
    let row =
        c.query_opt("SELECT slug, name, created_at FROM berth.boards WHERE slug = $1 AND archived = 0", &[&slug])?;
    board_from_row(&row.ok_or_else(|| StoreError::NoBoard(slug.to_owned()))?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_column_count_counts_the_columns() {
        assert_eq!(super::TASK_COLUMNS.split(',').count(), super::TASK_COLUMN_COUNT);
    }
}
