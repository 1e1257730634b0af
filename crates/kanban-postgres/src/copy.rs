//! `berth kanban migrate --to <url>`: copies a SQLite board (boards, tasks, links, events, runs, with their ids)
//! into an empty PostgreSQL board in one transaction, then verifies the counts. The SQLite file is opened
//! read-only and never changed.

use std::path::Path;

use kanban_store::StoreError;
use postgres::GenericClient;
use rusqlite::{Connection, OpenFlags};
use serde_json::json;

use crate::{PgKanbanStore, PgResult};

/// The tables copied, in an order that satisfies their references, with their columns (the same on both sides).
const TABLES: &[(&str, &str)] = &[
    ("boards", "slug, name, created_at, archived"),
    (
        "tasks",
        "id, board, title, body, command, assignee, status, priority, created_by, created_at, started_at, \
         completed_at, claim_lock, claim_expires, worker_pid, worker_start, consecutive_failures, last_failure_error, \
         max_runtime_seconds, max_retries, last_heartbeat_at, current_run_id, result, worker_host, confirmed_at",
    ),
    ("task_links", "parent_id, child_id"),
    ("task_events", "id, task_id, run_id, kind, payload, created_at"),
    (
        "task_runs",
        "id, task_id, status, assignee, claim_lock, claim_expires, worker_pid, started_at, ended_at, outcome, error, \
         exit_code, worker_start, worker_host, confirmed_at",
    ),
];

/// How many rows of each table were copied (and found on the server afterwards).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CopyReport {
    pub tables: Vec<(String, i64)>,
}

impl CopyReport {
    pub fn to_json(&self) -> serde_json::Value {
        json!(self.tables.iter().map(|(t, n)| (t.clone(), json!(n))).collect::<serde_json::Map<_, _>>())
    }
}

/// A SQLite value as text or a whole number (berth's boards hold nothing else), for the copy.
enum Cell {
    Null,
    Int(i64),
    Text(String),
}

/// Copies the SQLite board at `source` into `target`, which must hold no tasks yet (its `default` board may
/// exist). Identity sequences continue after the copied ids.
///
/// # Errors
/// [`StoreError::Invalid`] when the target already holds tasks or events, or a counted table differs after the
/// copy (the transaction is then rolled back); storage errors of either side.
pub fn copy_sqlite_board(source: &Path, target: &PgKanbanStore) -> Result<CopyReport, StoreError> {
    // Verifies (read-only) that the source is a berth board this build understands.
    kanban_store::SqliteKanbanStore::open_read_only(source)?;
    let src = Connection::open_with_flags(source, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    // One read transaction: the copy is of one moment of the source.
    src.execute_batch("BEGIN")?;
    let mut data: Vec<(&str, &str, Vec<Vec<Cell>>)> = Vec::new();
    for (table, cols) in TABLES {
        let mut stmt = src.prepare(&format!("SELECT {cols} FROM {table}"))?;
        let n = stmt.column_count();
        let rows = stmt.query_map([], |r| {
            (0..n)
                .map(|i| {
                    Ok(match r.get_ref(i)? {
                        rusqlite::types::ValueRef::Null => Cell::Null,
                        rusqlite::types::ValueRef::Integer(v) => Cell::Int(v),
                        rusqlite::types::ValueRef::Real(v) => Cell::Int(v as i64),
                        rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
                            Cell::Text(String::from_utf8_lossy(t).into_owned())
                        }
                    })
                })
                .collect::<rusqlite::Result<Vec<Cell>>>()
        })?;
        data.push((table, cols, rows.collect::<rusqlite::Result<_>>()?));
    }
    src.execute_batch("COMMIT")?;
    target.with(move |c| {
        let mut tx = c.client.transaction()?;
        let used: i64 = tx
            .query_one("SELECT (SELECT count(*) FROM berth.tasks) + (SELECT count(*) FROM berth.task_events)", &[])?
            .get(0);
        if used > 0 {
            return Err(StoreError::Invalid(format!(
                "the board database at {} already holds tasks; berth copies a board only into an empty one",
                target_name(&mut tx)?
            ))
            .into());
        }
        let mut report = CopyReport::default();
        for (table, cols, rows) in &data {
            if *table == "boards" {
                tx.execute("DELETE FROM berth.boards", &[])?;
            }
            insert_rows(&mut tx, table, cols, rows)?;
            let found: i64 = tx.query_one(&format!("SELECT count(*) FROM berth.{table}"), &[])?.get(0);
            let copied = rows.len() as i64;
            if found != copied {
                return Err(StoreError::Invalid(format!(
                    "{table}: copied {copied} rows but the server holds {found}; nothing was kept"
                ))
                .into());
            }
            report.tables.push(((*table).to_owned(), copied));
        }
        for table in ["task_events", "task_runs"] {
            tx.execute(
                &format!(
                    "SELECT setval(pg_get_serial_sequence('berth.{table}', 'id'), \
                     coalesce((SELECT max(id) FROM berth.{table}), 0) + 1, false)"
                ),
                &[],
            )?;
        }
        tx.commit()?;
        Ok(report)
    })
}

fn target_name(tx: &mut impl GenericClient) -> PgResult<String> {
    Ok(tx.query_one("SELECT current_database()", &[])?.get(0))
}

/// Inserts rows in batches of one multi-row `INSERT` each, every value passed as a parameter.
fn insert_rows(tx: &mut impl GenericClient, table: &str, cols: &str, rows: &[Vec<Cell>]) -> PgResult<()> {
    let width = cols.split(',').count();
    let text_cols: Vec<bool> = {
        let types = tx.query(
            "SELECT data_type FROM information_schema.columns WHERE table_schema = 'berth' AND table_name = $1 \
             AND column_name = ANY($2) ORDER BY array_position($2, column_name::text)",
            &[&table, &cols.split(',').map(str::trim).collect::<Vec<_>>()],
        )?;
        types.iter().map(|r| r.get::<_, String>(0) == "text").collect()
    };
    let batch = (60_000 / width).max(1);
    for chunk in rows.chunks(batch) {
        let mut sql = format!("INSERT INTO berth.{table} ({cols}) VALUES ");
        let mut params: Vec<Box<dyn postgres::types::ToSql + Sync>> = Vec::with_capacity(chunk.len() * width);
        for (i, row) in chunk.iter().enumerate() {
            sql.push_str(if i == 0 { "(" } else { ", (" });
            for (j, cell) in row.iter().enumerate() {
                if j > 0 {
                    sql.push_str(", ");
                }
                let text = text_cols.get(j).copied().unwrap_or(false);
                params.push(match (cell, text) {
                    (Cell::Null, true) => Box::new(None::<String>),
                    (Cell::Null, false) => Box::new(None::<i64>),
                    (Cell::Int(v), true) => Box::new(Some(v.to_string())),
                    (Cell::Int(v), false) => Box::new(Some(*v)),
                    (Cell::Text(t), true) => Box::new(Some(t.clone())),
                    (Cell::Text(t), false) => Box::new(t.parse::<i64>().ok()),
                });
                sql.push_str(&format!("${}", params.len()));
            }
            sql.push(')');
        }
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = params.iter().map(|p| p.as_ref()).collect();
        tx.execute(&sql, &refs)?;
    }
    Ok(())
}
