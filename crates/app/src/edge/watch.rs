//! Watching the board for changes another process (or, on PostgreSQL, another host) made: what wakes the gateway
//! and feeds the dashboard's live events. Like `open.rs`, one of the places the store types are named.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
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
    /// The version a thread of its own reads every [`SQLITE_POLL`] ([`UNKNOWN`] when it cannot): a SQLite call may
    /// wait out another process's lock for seconds, which must never hold up the runtime the caller serves on.
    Sqlite(Arc<AtomicI64>),
    /// `None` when the URL is malformed (each tick reports it).
    Postgres(Option<kanban_postgres::PgBoardListener>),
}

/// How often a SQLite board's version is read (the gateway's wake-up latency).
const SQLITE_POLL: Duration = Duration::from_millis(10);

/// How long a new watch waits for its first reading before it goes on without one (a board locked at the start).
const FIRST_READ: Duration = Duration::from_millis(200);

/// No version could be read.
const UNKNOWN: i64 = i64::MIN;

/// Starts the thread reading a SQLite board's version; it ends once the watch is dropped.
fn sqlite_poller(path: PathBuf) -> Arc<AtomicI64> {
    let version = Arc::new(AtomicI64::new(UNKNOWN));
    let weak = Arc::downgrade(&version);
    let (first, read) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = SqliteVersion { path, store: None, failed_at: None };
        while let Some(version) = weak.upgrade() {
            version.store(reader.read().unwrap_or(UNKNOWN), Ordering::SeqCst);
            drop(version);
            let _ = first.send(());
            std::thread::sleep(SQLITE_POLL); // the poll's period, not synchronisation
        }
    });
    let _ = read.recv_timeout(FIRST_READ);
    version
}

/// A SQLite board's `data_version`, on a connection of its own.
struct SqliteVersion {
    path: PathBuf,
    store: Option<kanban_store::SqliteKanbanStore>,
    /// When opening the board last failed (no file yet, or one the ticks quarantine): retried once a second, not
    /// every poll.
    failed_at: Option<Instant>,
}

impl SqliteVersion {
    fn read(&mut self) -> Option<i64> {
        let Self { path, store, failed_at } = self;
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
            None => WatchSource::Sqlite(sqlite_poller(ctx.db_path())),
        };
        let mut watch = Self { source, seen: None };
        watch.seen = watch.version();
        watch
    }

    /// The board's current version, when it can be read (never waits: on SQLite the poller's last reading, at most
    /// [`SQLITE_POLL`] old, which is never newer than the board, so a change is never missed).
    pub(crate) fn version(&mut self) -> Option<i64> {
        match &self.source {
            WatchSource::Postgres(listener) => listener.as_ref().map(|l| l.version().cast_signed()),
            WatchSource::Sqlite(version) => Some(version.load(Ordering::SeqCst)).filter(|v| *v != UNKNOWN),
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
