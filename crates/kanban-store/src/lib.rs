//! `SqliteKanbanStore`: the board on one SQLite file (`<home>/berth-kanban.db`) holding boards, tasks, links, an
//! append-only event log and one run row per attempt; the domain's `KanbanStore` port (`port.rs`).
//!
//! `port.rs` implements `domain::board::BoardStore` (the whole board as one trait, which `kanban-postgres` implements
//! too), `open.rs` verifies and migrates the file, `schema.rs` holds the migrations, `rows.rs` the row decoding,
//! `queries.rs` the reads and creations, `crons.rs` the recurring schedules, `transitions.rs` the state changes,
//! `review.rs` a person's review (review, approve, request changes), `edit.rs` edit and remove, `tick.rs` the dispatch
//! tick; the errors are `domain::board::StoreError`.
//!
//! WAL, a busy timeout and `BEGIN IMMEDIATE` for every read-then-write; a whole dispatch tick (housekeeping,
//! promotion, default assignment, claims) is one transaction, so concurrent dispatchers serialize and caps hold.
//! A file that is not a berth board database is reported and never modified.

mod crons;
mod edit;
mod open;
mod port;
mod queries;
mod review;
mod rows;
mod schema;
mod tick;
mod transitions;

use std::path::PathBuf;

use rusqlite::Connection;

// The board's model, port and error live in `board`; re-exported so the store's callers read one name.
pub use domain::board::{
    Board, BoardStore, Claimed, Confirmation, Cron, EditableFields, Event, HostSeen, NewCron, NewTask, Result, Run,
    RunEnd, SpawnRecord, StoreError, Task, TaskEdit, TickOutcome, TickRequest, WorkerRef,
};
/// SQLite's errors as the board's, at the seam: the store's only conversion (`.sql()?` after a driver call).
pub(crate) trait Sql<T> {
    fn sql(self) -> Result<T>;
}

impl<T> Sql<T> for rusqlite::Result<T> {
    fn sql(self) -> Result<T> {
        self.map_err(sqlite_error)
    }
}

/// One SQLite error as a [`StoreError`]: busy or locked past the wait is worth retrying, the rest is not.
pub(crate) fn sqlite_error(e: rusqlite::Error) -> StoreError {
    let busy =
        matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked));
    StoreError::Database { message: e.to_string(), busy }
}

pub use open::{BOARD_FILE, LEGACY_BOARD_FILE, adopt_legacy_board, board_path, is_berth_board};
pub use schema::{APPLICATION_ID, MIGRATIONS};

/// The board store.
pub struct SqliteKanbanStore {
    conn: Connection,
    path: PathBuf,
    /// This host's id (`kanban.host_id`): a recorded worker of another host is never returned to stop. Empty: every
    /// worker is this host's (a board file one host uses).
    host: String,
}

impl SqliteKanbanStore {
    /// Sets this host's id (see [`BoardStore::host`]).
    #[must_use]
    pub fn on_host(mut self, host: &str) -> Self {
        host.clone_into(&mut self.host);
        self
    }
}

#[cfg(test)]
mod tests;
