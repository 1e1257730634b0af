//! Copying a board between stores (`kanban migrate --to`): the tables in an order that satisfies their references,
//! with their columns (the same in every store), and the rows as plain cells. One store dumps, the other loads;
//! neither knows the other.

use serde_json::json;

/// The tables copied, in an order that satisfies their references, with their columns.
pub const TABLES: &[(&str, &str)] = &[
    ("boards", "slug, name, created_at, archived"),
    (
        "tasks",
        "id, board, title, body, command, assignee, status, priority, created_by, created_at, started_at, \
         completed_at, claim_lock, claim_expires, worker_pid, worker_start, consecutive_failures, last_failure_error, \
         max_runtime_seconds, max_retries, last_heartbeat_at, current_run_id, result, worker_host, confirmed_at, \
         not_before, idempotency_key, review, review_note, block_kind, block_reason",
    ),
    ("task_links", "parent_id, child_id"),
    ("task_events", "id, task_id, run_id, kind, payload, created_at"),
    (
        "task_runs",
        "id, task_id, status, assignee, claim_lock, claim_expires, worker_pid, started_at, ended_at, outcome, error, \
         exit_code, worker_start, worker_host, confirmed_at",
    ),
    ("schedules", "board, name, every_seconds, cron, assignee, command, created_at, last_slot"),
];

/// A value of a board's table: text or a whole number (boards hold nothing else).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cell {
    Null,
    Int(i64),
    Text(String),
}

/// One table's rows, in [`TABLES`]' column order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableRows {
    pub table: &'static str,
    pub rows: Vec<Vec<Cell>>,
}

/// How many rows of each table were copied (and found in the target afterwards).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CopyReport {
    pub tables: Vec<(String, i64)>,
}

impl CopyReport {
    pub fn to_json(&self) -> serde_json::Value {
        json!(self.tables.iter().map(|(t, n)| (t.clone(), json!(n))).collect::<serde_json::Map<_, _>>())
    }
}
