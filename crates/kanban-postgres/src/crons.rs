//! Recurring schedules (`kanban cron`) on PostgreSQL: their rows, as on SQLite (`kanban-store`'s `crons.rs`). Which
//! slot is due is `domain::board::recurring`'s rule; each slot's task is created under the slot's key, whose unique
//! index lets one task in whichever host's gateway made it first.

use domain::board::{Cron, NewCron, StoreError};
use domain::ids::BoardSlug;
use domain::time::Timestamp;

use crate::PgResult;
use crate::client::GenericClient;

const COLUMNS: &str = "board, name, every_seconds, cron, assignee, command, created_at, last_slot";

fn cron_from_row(r: &tokio_postgres::Row) -> PgResult<Cron> {
    Ok(Cron {
        board: r.try_get(0)?,
        name: r.try_get(1)?,
        every_seconds: r.try_get(2)?,
        cron: r.try_get(3)?,
        assignee: r.try_get(4)?,
        command: r.try_get(5)?,
        created_at: r.try_get(6)?,
        last_slot: r.try_get(7)?,
    })
}

pub(crate) fn add(c: &mut impl GenericClient, board: &BoardSlug, new: &NewCron, now: Timestamp) -> PgResult<Cron> {
    crate::board::read_board(c, board.as_str())?;
    let row = c.query_opt(
        &format!(
            "INSERT INTO berth.schedules (board, name, every_seconds, cron, assignee, command, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (board, name) DO NOTHING RETURNING {COLUMNS}"
        ),
        &[&board.as_str(), &new.name, &new.every_seconds, &new.cron, &new.assignee, &new.command, &now.as_millis()],
    )?;
    match row {
        Some(r) => cron_from_row(&r),
        None => Err(StoreError::Invalid(format!(
            "board {board} already has a schedule named {}; remove it first (kanban cron rm {})",
            new.name, new.name
        ))
        .into()),
    }
}

pub(crate) fn list(c: &mut impl GenericClient, board: &BoardSlug) -> PgResult<Vec<Cron>> {
    let sql = format!("SELECT {COLUMNS} FROM berth.schedules WHERE board = $1 ORDER BY name COLLATE \"C\"");
    c.query(&sql, &[&board.as_str()])?.iter().map(cron_from_row).collect()
}

pub(crate) fn remove(c: &mut impl GenericClient, board: &BoardSlug, name: &str) -> PgResult<Cron> {
    let sql = format!("DELETE FROM berth.schedules WHERE board = $1 AND name = $2 RETURNING {COLUMNS}");
    match c.query_opt(&sql, &[&board.as_str(), &name])? {
        Some(r) => cron_from_row(&r),
        None => Err(StoreError::Invalid(format!("board {board} has no schedule named {name}")).into()),
    }
}

pub(crate) fn made(c: &mut impl GenericClient, board: &BoardSlug, name: &str, slot: Timestamp) -> PgResult<()> {
    c.execute(
        "UPDATE berth.schedules SET last_slot = $3 WHERE board = $1 AND name = $2 \
         AND (last_slot IS NULL OR last_slot < $3)",
        &[&board.as_str(), &name, &slot.as_millis()],
    )?;
    Ok(())
}
