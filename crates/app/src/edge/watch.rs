//! Watching the board for changes another process (or, on PostgreSQL, another host) made: what wakes the gateway
//! and feeds the dashboard's live events. Like `open.rs`, one of the places the store types are named.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::edge::context::Ctx;

/// Wakes the gateway when another process (or, on PostgreSQL, another host) changed the board, by a version it polls:
/// on SQLite `data_version` on a connection of its own; on PostgreSQL the count of notifications a
/// [`kanban_postgres::PgBoardListener`] received (the schema notifies on the changes that matter to dispatch, not on
/// heartbeats). The gateway's own ticks write too, so a tick that changed something is followed by at most one more
/// (which finds nothing to do and writes nothing); a change made while a tick ran is never missed, because the
/// version to compare with is read before the tick starts.
pub(crate) struct BoardWatch {
    source: WatchSource,
    /// The version last seen (the gateway sets it to what it read before a tick).
    pub(crate) seen: Option<i64>,
}

/// What a [`BoardWatch`] polls.
enum WatchSource {
    Sqlite {
        path: PathBuf,
        store: Option<kanban_store::SqliteKanbanStore>,
        /// When opening the board last failed (no file yet, or one the ticks quarantine): retried once a second, not
        /// every poll.
        failed_at: Option<Instant>,
    },
    /// `None` when the URL is malformed (each tick reports it).
    Postgres(Option<kanban_postgres::PgBoardListener>),
}

impl BoardWatch {
    pub(crate) fn new(ctx: &Ctx) -> Self {
        // A PostgreSQL board has no file to watch: never open, let alone create, a SQLite file beside it.
        let source = match ctx.database_url() {
            Some(url) => WatchSource::Postgres(
                kanban_postgres::PgBoardListener::start_within(url, ctx.database_timeout())
                    .inspect_err(|e| tracing::warn!("gateway: not listening for board changes: {e}"))
                    .ok(),
            ),
            None => WatchSource::Sqlite { path: ctx.db_path(), store: None, failed_at: None },
        };
        let mut watch = Self { source, seen: None };
        watch.seen = watch.version();
        watch
    }

    /// The board's current version, when it can be read.
    pub(crate) fn version(&mut self) -> Option<i64> {
        let (path, store, failed_at) = match &mut self.source {
            WatchSource::Postgres(listener) => return listener.as_ref().map(|l| l.version().cast_signed()),
            WatchSource::Sqlite { path, store, failed_at } => (path, store, failed_at),
        };
        if store.is_none() && failed_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            // No board file yet (or an unreadable one, which the tick reports): nothing to watch until there is.
            // A read-write connection (that writes nothing): a read-only one on a WAL file can disturb the writers'
            // shared-memory index when it is the last to close.
            if std::fs::metadata(&*path).is_ok_and(|m| m.len() > 0) {
                *store = kanban_store::SqliteKanbanStore::open(path).ok();
            }
            *failed_at = store.is_none().then(Instant::now);
        }
        match store.as_ref().map(kanban_store::SqliteKanbanStore::data_version) {
            Some(Ok(v)) => Some(v),
            Some(Err(_)) => {
                *store = None;
                *failed_at = Some(Instant::now());
                None
            }
            None => None,
        }
    }

    /// Whether the board changed since the version last seen.
    pub(crate) fn changed(&mut self) -> bool {
        let now = self.version();
        let changed = now.is_some() && now != self.seen;
        self.seen = now.or(self.seen);
        changed
    }
}
