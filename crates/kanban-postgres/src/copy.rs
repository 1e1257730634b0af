//! `berth kanban migrate --to <url>`: loads a board another store dumped (boards, tasks, links, events, runs, with
//! their ids) into an empty PostgreSQL board in one transaction, then verifies the counts.

use crate::client::GenericClient;
use domain::board::{Cell, CopyReport, StoreError, TableRows};

use crate::{PgKanbanStore, PgResult};

/// Loads `data` (one store's dump, [`domain::board::TABLES`] in order) into `target`, which must hold no tasks yet (its
/// `default` board may exist). Identity sequences continue after the copied ids.
///
/// # Errors
/// [`StoreError::Invalid`] when the target already holds tasks or events, or a counted table differs after the
/// copy (the transaction is then rolled back); storage errors.
pub fn load_board(data: &[TableRows], target: &PgKanbanStore) -> Result<CopyReport, StoreError> {
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
        for TableRows { table, rows } in data {
            let cols = domain::board::TABLES.iter().find(|(t, _)| t == table).map_or("", |(_, c)| *c);
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
        let mut params: Vec<Box<dyn tokio_postgres::types::ToSql + Sync>> = Vec::with_capacity(chunk.len() * width);
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
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params.iter().map(|p| p.as_ref()).collect();
        tx.execute(&sql, &refs)?;
    }
    Ok(())
}
