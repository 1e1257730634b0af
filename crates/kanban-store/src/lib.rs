//! `SqliteKanbanStore`: the board on one SQLite file (`<home>/berth-kanban.db`) holding boards, tasks, links, an
//! append-only event log and one run row per attempt; the domain's `KanbanStore` port (`port.rs`).
//!
//! `board.rs` is the whole board as one trait (`BoardStore`, which `kanban-postgres` implements too), `open.rs` verifies and migrates the file, `rows.rs` holds the row types, `queries.rs` the reads, `transitions.rs`
//! the state changes (through the domain's transition table), `tick.rs` the dispatch tick, `error.rs` the errors.
//!
//! WAL, a busy timeout and `BEGIN IMMEDIATE` for every read-then-write; a whole dispatch tick (housekeeping,
//! promotion, default assignment, claims) is one transaction, so concurrent dispatchers serialize and caps hold.
//! A file that is not a berth board database is reported and never modified.

mod board;
mod edit;
mod error;
mod open;
mod port;
mod queries;
mod rows;
mod schema;
mod tick;
mod transitions;

use std::path::PathBuf;

use rusqlite::Connection;

pub use board::BoardStore;
pub use domain::kanban::{Claimed, SpawnRecord, TickOutcome, TickRequest, WorkerRef};
pub use edit::{EditableFields, TaskEdit};
pub use error::{Result, StoreError};
pub use open::{BOARD_FILE, LEGACY_BOARD_FILE, adopt_legacy_board, board_path, is_berth_board};
pub use rows::{Board, Confirmation, Event, HostSeen, NewTask, Run, RunEnd, Task};
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
