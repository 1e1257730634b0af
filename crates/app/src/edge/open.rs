//! The one place the adapters are named: opening the engine (Docker's Engine API, or Podman's socket) and the
//! board (SQLite or PostgreSQL, from `kanban.database_url`) for writing or reading, and the store's errors as exit
//! codes. Every surface (board, sandbox, gateway, web) opens them here and holds an `Arc<dyn Engine>` and a
//! `Box<dyn BoardStore + Send>`; `tidy::adapter_types_are_named_in_app_only_by_their_openers` keeps it so.

use std::sync::Arc;

pub use docker_adapter::{CONNECT_TIMEOUT, DEFAULT_ENDPOINT};
use docker_adapter::{DockerRunFlags, DockerRuntime};
use domain::board::{BoardStore, StoreError};
use domain::ports::{Engine, ExtraArgsParser, RuntimeError};
use kanban_store::SqliteKanbanStore;

use crate::edge::context::Ctx;
use crate::edge::error::Failure;

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        let transient = e.is_transient();
        let mut f = match e {
            StoreError::NoTask(_) | StoreError::NoBoard(_) | StoreError::Transition { .. } | StoreError::Invalid(_) => {
                Failure::usage_of(e)
            }
            StoreError::Server(message) => Failure::other(message),
            other => Failure::other(other.to_string()),
        };
        f.transient = transient;
        f
    }
}

/// A board, whichever engine holds it: `app` reaches every store through the one `BoardStore` trait.
pub type Board = Box<dyn BoardStore + Send>;

/// Opens the board for writing: on PostgreSQL when `kanban.database_url` is set (schema created or migrated), else
/// the SQLite file (created when missing).
///
/// # Errors
/// A failure naming the file when it is corrupt or foreign, or the server when it is unreachable, refuses the
/// credentials, is too old or holds a foreign schema (left untouched).
pub fn open_store(ctx: &Ctx) -> Result<Board, Failure> {
    if let Some(url) = ctx.database_url() {
        return Ok(Box::new(kanban_postgres::PgKanbanStore::open_within(url, &ctx.host_id(), ctx.database_timeout())?));
    }
    match kanban_store::adopt_legacy_board(&ctx.home) {
        Ok(Some(old)) => tracing::info!(
            "moved berth's board {} to {} (hermes-agent keeps its own kanban.db)",
            old.display(),
            kanban_store::BOARD_FILE
        ),
        Ok(None) => {}
        Err(e) => return Err(Failure::other(format!("cannot move berth's board out of kanban.db: {e}"))),
    }
    Ok(open_board(ctx)?)
}

/// Opens the board (SQLite or PostgreSQL) as this host, without the legacy move of [`open_store`]: for a process
/// that opens it again after an outage.
pub(crate) fn open_board(ctx: &Ctx) -> Result<Board, domain::board::StoreError> {
    BoardAt::of(ctx).open()
}

/// Where a home's board is and who this host is: what opening the board takes, for a thread that holds no `Ctx`.
#[derive(Clone, Debug)]
pub(crate) struct BoardAt {
    url: Option<String>,
    path: std::path::PathBuf,
    pub(crate) host: String,
    /// `kanban.database_timeout_seconds`: the bound of each round trip to a PostgreSQL board.
    bound: std::time::Duration,
}

impl BoardAt {
    pub(crate) fn of(ctx: &Ctx) -> Self {
        Self {
            url: ctx.database_url().map(str::to_owned),
            path: ctx.db_path(),
            host: ctx.host_id(),
            bound: ctx.database_timeout(),
        }
    }

    /// Opens the board (read-write) as this host.
    pub(crate) fn open(&self) -> Result<Board, domain::board::StoreError> {
        if let Some(url) = &self.url {
            return Ok(Box::new(kanban_postgres::PgKanbanStore::open_within(url, &self.host, self.bound)?));
        }
        Ok(Box::new(SqliteKanbanStore::open(&self.path)?.on_host(&self.host)))
    }
}

/// Opens the board to read; `None` when a SQLite board does not exist yet (nothing is created for a read). Reads
/// write nothing: the SQLite file is opened read-only; on PostgreSQL they are plain queries (opening creates or
/// migrates berth's schema, as any berth command on that board does).
pub(crate) fn open_read_only(ctx: &Ctx) -> Result<Option<Board>, Failure> {
    let host = ctx.host_id();
    open_read_only_at(&ctx.home, ctx.database_url().map(|url| (url, host.as_str(), ctx.database_timeout())))
}

/// [`open_read_only`] for a home and, when the board is on PostgreSQL, its URL, this host's id and the bound of each
/// round trip (for code that holds no `Ctx`, such as the gateway's cleanup loop).
pub(crate) fn open_read_only_at(
    home: &std::path::Path,
    server: Option<(&str, &str, std::time::Duration)>,
) -> Result<Option<Board>, Failure> {
    if let Some((url, host, bound)) = server {
        return Ok(Some(Box::new(kanban_postgres::PgKanbanStore::open_within(url, host, bound)?)));
    }
    let path = kanban_store::board_path(home);
    if !path.exists() || std::fs::metadata(&path).map(|m| m.len() == 0).unwrap_or(true) {
        return Ok(None);
    }
    Ok(Some(Box::new(SqliteKanbanStore::open_read_only(&path)?)))
}

/// `kanban check`: the SQLite board file's full integrity check, one finding a line (`ok` alone when sound).
///
/// # Errors
/// A store failure opening or reading the file.
pub fn check_sqlite_board(path: &std::path::Path) -> Result<Vec<String>, Failure> {
    Ok(SqliteKanbanStore::check(path)?)
}

/// `kanban migrate`: copies the SQLite board at `source` (opened read-only and verified, never changed) into the
/// PostgreSQL board at `to` (each round trip bounded by `bound`); returns the target's URL as it may be shown and what
/// was copied.
///
/// # Errors
/// A store failure on either side.
pub fn copy_sqlite_board(
    source: &std::path::Path,
    to: &str,
    host: &str,
    bound: std::time::Duration,
) -> Result<(String, domain::board::CopyReport), Failure> {
    let dump = SqliteKanbanStore::open_read_only(source)?.dump()?;
    let target = kanban_postgres::PgKanbanStore::open_within(to, host, bound)?;
    let report = kanban_postgres::load_board(&dump, &target)?;
    Ok((target.url().to_string(), report))
}

/// Opens the engine at `endpoint` (`unix:///path`, a socket path, `tcp://host:port`), negotiating its API version
/// within the connect bound.
///
/// # Errors
/// [`RuntimeError::Unavailable`] naming the endpoint.
pub async fn open_engine(endpoint: &str) -> Result<Arc<dyn Engine>, RuntimeError> {
    Ok(Arc::new(DockerRuntime::connect(endpoint).await?))
}

/// The engine's reader of `terminal.docker_extra_args` (`docker run` flags, for Docker and Podman alike): the
/// spec builder applies what it reads, and `config set` and `-c` check a value with it without reaching the engine.
pub fn extra_args_parser() -> &'static dyn ExtraArgsParser {
    &DockerRunFlags
}

/// Opens the engine at `endpoint` at an API version already negotiated with this same engine, without a round trip
/// (`berth run`'s fast path; the caller vouches that the engine is the one that answered).
///
/// # Errors
/// [`RuntimeError::Unavailable`] for an endpoint or version that cannot be used.
pub fn open_engine_at(endpoint: &str, version: &str) -> Result<Arc<dyn Engine>, RuntimeError> {
    Ok(Arc::new(DockerRuntime::connect_at(endpoint, version)?))
}
