//! `PgKanbanStore`: the board on PostgreSQL, for gateways on several hosts sharing one board.
//!
//! The same tables, statuses, events, runs and links as the SQLite board (`kanban-store`), in a `berth` schema that
//! berth creates and migrates with append-only migrations (`schema.rs`); the same `BoardStore` trait, so `app` and
//! the behaviour suites do not know which engine holds a board.
//!
//! - `open.rs`: connecting, the one-line errors (unreachable, bad credentials, foreign schema, too old a server),
//!   the migrations under an advisory lock.
//! - `board.rs`: reads and task transitions (each one transaction with its event); `review.rs`: a typed block and a
//!   person's review (review, approve, request changes); `create.rs`: creating one task or a batch (a fixed number
//!   of round trips however many).
//! - `tick.rs`: the dispatch tick. Every tick of every host takes one transaction-scoped advisory lock, so the
//!   snapshot → plan → claims step is serialized over all hosts and the caps hold globally; claims lock their rows
//!   `FOR UPDATE SKIP LOCKED`, so a tick never waits on a row another command holds.
//! - `crons.rs`: the recurring schedules' rows (`kanban cron`).
//! - `copy.rs`: `kanban migrate --to`, copying a SQLite board with its ids.
//! - `listen.rs`: [`PgBoardListener`], which counts the board's change notifications (`LISTEN`) so a gateway wakes
//!   at once when another process or host changes the board; a quiet server is asked every 30 s whether it still
//!   answers.
//! - `client.rs`: the blocking client over tokio-postgres, every round trip bounded by
//!   `kanban.database_timeout_seconds`, so a server that accepts and never answers, or goes silent mid-session,
//!   costs a call its bound and one line (the board unavailable), never a hang.
//!
//! The client runs each connection's own small runtime and cannot run inside another one; berth's commands run on
//! a current-thread tokio runtime. Every call therefore goes through [`off_runtime`]: on a runtime thread the call
//! runs on a scoped helper thread (the caller blocks, as it does on SQLite's file), elsewhere directly.

mod board;
mod claims;
mod client;
mod copy;
mod create;
mod crons;
mod edit;
mod listen;
mod open;
mod review;
mod rows;
mod schema;
mod tick;
mod writes;

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use domain::board::StoreError;

use crate::client::Client;

pub use copy::load_board;
pub use listen::PgBoardListener;
pub use open::{redact_url, secrets as url_secrets, without_password};

/// Checks that `url` is a board URL the client can read (nothing is connected).
///
/// # Errors
/// [`StoreError::Server`] saying why, with the password masked.
pub fn check_url(url: &str) -> Result<(), StoreError> {
    open::config(url, "berth").map(|_| ())
}

/// The password in a board URL, if it holds one (for masking it in logs).
pub fn url_password(url: &str) -> Option<String> {
    let config = <tokio_postgres::Config as std::str::FromStr>::from_str(url).ok()?;
    config.get_password().map(|p| String::from_utf8_lossy(p).into_owned()).filter(|p| !p.is_empty())
}
pub use schema::{BOARD_CHANNEL, MIGRATIONS, SCHEMA};

/// How long a call waits for the server when the caller names no bound (`kanban.database_timeout_seconds`'s
/// default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The board on a PostgreSQL server.
pub struct PgKanbanStore {
    conn: Mutex<Option<Conn>>,
    /// How to connect again when the connection was lost (a server restart, a cut connection).
    config: tokio_postgres::Config,
    /// The URL without its password, for messages.
    shown: String,
    /// How long any one round trip may wait for the server.
    bound: Duration,
    /// This host's identity (`kanban.host_id`): written into claims and runs; only its own workers are probed by
    /// pid or stopped.
    host: String,
}

/// The connection (it keeps its prepared statements: a statement is parsed once per connection, not per call).
pub(crate) struct Conn {
    pub(crate) client: Client,
}

/// An error inside the store: a server error or a board error, turned into a [`StoreError`] at the boundary.
#[derive(Debug)]
pub(crate) struct PgErr(pub(crate) StoreError);

impl From<tokio_postgres::Error> for PgErr {
    /// A lost connection or a server going down (an outage, worth retrying) apart from the server refusing the
    /// statement.
    fn from(e: tokio_postgres::Error) -> Self {
        use tokio_postgres::error::SqlState;
        let lost = e.is_closed()
            || e.as_db_error().is_none()
            || e.code().is_some_and(|c| {
                c.code().starts_with("08")
                    || [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN, SqlState::CANNOT_CONNECT_NOW].contains(c)
                    || *c == SqlState::TOO_MANY_CONNECTIONS
            });
        PgErr(if lost { StoreError::Unreachable(server_message(&e)) } else { StoreError::Backend(server_message(&e)) })
    }
}

impl From<StoreError> for PgErr {
    fn from(e: StoreError) -> Self {
        PgErr(e)
    }
}

impl From<PgErr> for StoreError {
    fn from(e: PgErr) -> Self {
        e.0
    }
}

pub(crate) type PgResult<T> = Result<T, PgErr>;

/// A server error as one line: the server's own message when it sent one, else the client's.
pub(crate) fn server_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text = format!("{text}: {s}");
                source = s.source();
            }
            text
        }
    }
}

/// Runs `f` where the blocking client may run: on a scoped helper thread when called from an async runtime's
/// thread (the blocking client would panic there), else right here.
pub(crate) fn off_runtime<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

impl PgKanbanStore {
    /// Runs `f` on the connection, off the async runtime.
    pub(crate) fn with<R: Send>(&self, f: impl FnOnce(&mut Conn) -> PgResult<R> + Send) -> Result<R, StoreError> {
        let mut guard = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let slot: &mut Option<Conn> = &mut guard;
        let config = &self.config;
        let shown = &self.shown;
        let bound = self.bound;
        off_runtime(move || {
            let guard = slot;
            // A connection the server or the network closed is replaced before the call, not reported: the board
            // was away, and a gateway or worker that keeps its store must not stay cut off after it comes back.
            if guard.as_ref().is_none_or(|c| c.client.is_closed()) {
                let old = guard.take();
                drop(old);
                let (client, _) = open::connect(config, shown, bound)?;
                // `jit = off` and the statement bound come with the connection's startup options (`open::config`).
                *guard = Some(Conn { client });
            }
            let conn = guard.as_mut().unwrap_or_else(|| unreachable!("connected above"));
            f(conn).map_err(StoreError::from)
        })
    }

    /// This host's identity.
    pub fn host_id(&self) -> &str {
        &self.host
    }

    /// The server URL without its password.
    pub fn url(&self) -> &str {
        &self.shown
    }
}

impl Drop for PgKanbanStore {
    /// The client closes its connection on its own runtime, which may not run or be dropped on an async runtime's
    /// thread.
    fn drop(&mut self) {
        let conn = self.conn.get_mut().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(conn) = conn {
            off_runtime(move || drop(conn));
        }
    }
}
