//! The board's errors, whatever store holds it: what went wrong with the database, the board, a task or a
//! transition. Each store maps its driver's errors here at its seam (no driver type appears in this enum).

use std::path::PathBuf;

use crate::board::TaskStatus;
use thiserror::Error;

/// Errors of the board store.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The file is damaged or not a database at all; it was left untouched.
    #[error(
        "{path} is not a readable board database ({message}); it was left untouched — move it aside to start a new board"
    )]
    Corrupt { path: PathBuf, message: String },
    /// The file could not be opened for a reason of the disk, not of the file (full, read-only, permissions): the
    /// board may be perfectly good, so nothing suggests moving it.
    #[error("cannot open the board database {path}: {cause}; the file was left untouched (fix that and retry)")]
    Unavailable { path: PathBuf, cause: String },
    /// A valid SQLite database that berth did not make; it was left untouched.
    #[error("{path} is a SQLite database but not a berth board (application id {app_id:#x}); it was left untouched")]
    Foreign { path: PathBuf, app_id: i64 },
    /// A newer berth made this database.
    #[error("{path} has schema version {found}, newer than this berth understands ({known})")]
    TooNew { path: PathBuf, found: i64, known: i64 },
    #[error("no task {0}")]
    NoTask(String),
    #[error("no board {0:?} (create it with `berth kanban board create {0}`)")]
    NoBoard(String),
    #[error("task {task} is {status}; cannot {action} it")]
    Transition { task: String, status: TaskStatus, action: &'static str },
    /// A worker's confirmation lost: its run was superseded, or its spawn lease expired first.
    #[error("run {run} of task {task} is no longer claimed (superseded, or its spawn lease expired); nothing was run")]
    Superseded { task: String, run: i64 },
    /// A write about a run the task has left (a worker's outcome after a crash verdict or a takeover, a verdict on
    /// a run its worker completed meanwhile): nothing was changed.
    #[error("task {task} is no longer on run {run} (it is {status}); nothing was changed")]
    Moved { task: String, run: i64, status: TaskStatus },
    #[error("invalid task data: {0}")]
    Invalid(String),
    /// One entry of a batch (`create_tasks`) was refused, so nothing of the batch was written; `index` counts from 0.
    #[error("entry {} of the batch: {error}", index + 1)]
    Batch { index: usize, error: Box<StoreError> },
    /// The database could not finish an operation (the transaction was rolled back); `busy` when another process
    /// held it locked past the wait, or the connection to a server was lost: worth retrying.
    #[error("board database error: {message}")]
    Database { message: String, busy: bool },
    /// A board on a database server cannot be used as it is (unreachable, refused credentials, a schema berth did
    /// not make, a server too old or a schema too new); the message names which, and nothing was written.
    #[error("{0}")]
    Server(String),
    /// A database server's error during an operation (the transaction was rolled back).
    #[error("board database error: {0}")]
    Backend(String),
    /// The database server could not be reached or dropped the connection during an operation (an outage).
    #[error("the board database is unreachable: {0}")]
    Unreachable(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl StoreError {
    /// Whether the board could not be reached or could not finish (an outage: worth retrying), rather than
    /// refusing (no such task, a transition the table does not allow, a run taken back).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable(_) | Self::Server(_) | Self::Unavailable { .. } => true,
            Self::Database { busy, .. } => *busy,
            Self::Batch { error, .. } => error.is_transient(),
            _ => false,
        }
    }

    /// The guard's refusal for task `task`.
    pub fn refused(task: &str, e: crate::board::transitions::GuardRefused) -> Self {
        match e {
            crate::board::transitions::GuardRefused::Transition(t) => {
                Self::Transition { task: task.to_owned(), status: t.status, action: t.action }
            }
            crate::board::transitions::GuardRefused::Moved { run, status } => {
                Self::Moved { task: task.to_owned(), run, status }
            }
        }
    }
}
