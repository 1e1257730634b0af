//! Recurring schedules (`kanban cron`): their rows. Which slot is due is `domain::board::recurring`'s rule; the
//! gateway creates each slot's task through `create_task` under the slot's key.

use domain::board::{Cron, NewCron};
use domain::ids::BoardSlug;
use domain::time::Timestamp;
use rusqlite::{OptionalExtension, params};

use crate::{Result, Sql, SqliteKanbanStore, StoreError};

const COLUMNS: &str = "board, name, every_seconds, cron, assignee, command, created_at, last_slot";

fn cron_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Cron> {
    Ok(Cron {
        board: r.get(0)?,
        name: r.get(1)?,
        every_seconds: r.get(2)?,
        cron: r.get(3)?,
        assignee: r.get(4)?,
        command: r.get(5)?,
        created_at: r.get(6)?,
        last_slot: r.get(7)?,
    })
}

impl SqliteKanbanStore {
    /// Adds a schedule (see `BoardStore::add_cron`).
    ///
    /// # Errors
    /// [`StoreError::NoBoard`], [`StoreError::Invalid`] for a name the board has, or an SQLite error.
    pub fn add_cron(&mut self, board: &BoardSlug, new: &NewCron, now: Timestamp) -> Result<Cron> {
        self.board(board)?;
        let tx = self.write()?;
        let n = tx
            .execute(
                "INSERT OR IGNORE INTO schedules (board, name, every_seconds, cron, assignee, command, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    board.as_str(),
                    new.name,
                    new.every_seconds,
                    new.cron,
                    new.assignee,
                    new.command,
                    now.as_millis()
                ],
            )
            .sql()?;
        if n == 0 {
            return Err(StoreError::Invalid(format!(
                "board {board} already has a schedule named {}; remove it first (kanban cron rm {})",
                new.name, new.name
            )));
        }
        tx.commit().sql()?;
        self.cron(board, &new.name)?.ok_or_else(|| StoreError::Invalid(format!("no schedule {}", new.name)))
    }

    fn cron(&self, board: &BoardSlug, name: &str) -> Result<Option<Cron>> {
        self.conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM schedules WHERE board = ?1 AND name = ?2"),
                params![board.as_str(), name],
                cron_from_row,
            )
            .optional()
            .sql()
    }

    /// A board's schedules, by name.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn crons(&self, board: &BoardSlug) -> Result<Vec<Cron>> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM schedules WHERE board = ?1 ORDER BY name"))
            .sql()?;
        let rows = stmt.query_map([board.as_str()], cron_from_row).sql()?;
        rows.collect::<rusqlite::Result<_>>().sql()
    }

    /// Removes a schedule; returns it as it was.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for a name the board does not have, or an SQLite error.
    pub fn remove_cron(&mut self, board: &BoardSlug, name: &str) -> Result<Cron> {
        let tx = self.write()?;
        let found = tx
            .query_row(
                &format!("DELETE FROM schedules WHERE board = ?1 AND name = ?2 RETURNING {COLUMNS}"),
                params![board.as_str(), name],
                cron_from_row,
            )
            .optional()
            .sql()?;
        let Some(cron) = found else {
            return Err(StoreError::Invalid(format!("board {board} has no schedule named {name}")));
        };
        tx.commit().sql()?;
        Ok(cron)
    }

    /// Records the latest slot a schedule made (it only grows).
    ///
    /// # Errors
    /// An SQLite error.
    pub fn cron_made(&mut self, board: &BoardSlug, name: &str, slot: Timestamp) -> Result<()> {
        let tx = self.write()?;
        tx.execute(
            "UPDATE schedules SET last_slot = ?3 WHERE board = ?1 AND name = ?2 \
             AND (last_slot IS NULL OR last_slot < ?3)",
            params![board.as_str(), name, slot.as_millis()],
        )
        .sql()?;
        tx.commit().sql()
    }
}
