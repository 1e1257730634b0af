//! Opening a board file: verify it read-only first (corrupt, foreign, too new → reported, untouched), then WAL,
//! the busy timeout and the append-only migrations; where the file lives, and the one-time move out of `kanban.db`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

use crate::Sql;
use crate::schema::{APPLICATION_ID, MIGRATIONS};
use crate::{Result, SqliteKanbanStore, StoreError};

/// Whether an SQLite error means the file is damaged or not a database.
pub(crate) fn is_corruption(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt))
}

/// Whether SQLite gave up waiting for a lock another connection holds.
pub(crate) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

/// What went wrong opening `path`, when it is not the file's content: SQLite's own "disk full", else the OS's answer
/// to opening the file for writing (read-only file system, permission denied), else to creating a small file beside
/// it (no space left). `None` when the disk looks fine, i.e. the file itself is the problem.
pub(crate) fn disk_cause(path: &Path, e: &rusqlite::Error) -> Option<String> {
    use std::io::Write as _;
    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
        return Some("the disk is full".to_owned());
    }
    // Opening for append writes nothing.
    if let Err(os) = std::fs::OpenOptions::new().append(true).open(path) {
        return Some(os.to_string());
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let probe = dir.join(format!(".kanban-probe-{}", std::process::id()));
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .and_then(|mut f| f.write_all(&[0; 64 * 1024]).and_then(|()| f.sync_all()));
    let _ = std::fs::remove_file(&probe);
    result.err().map(|os| os.to_string())
}

/// The board file's name in berth's home. Not `kanban.db`: hermes-agent keeps its own board at
/// `<HERMES_HOME>/kanban.db`, and when both share one home hermes would add its tables to berth's file.
pub const BOARD_FILE: &str = "berth-kanban.db";

/// The name berth's board had before [`BOARD_FILE`]; also hermes-agent's board file.
pub const LEGACY_BOARD_FILE: &str = "kanban.db";

/// Whether `path` is a berth board database (its SQLite `application_id` is berth's), checked read-only. A hermes
/// board, any other database or an unreadable file is not.
pub fn is_berth_board(path: &Path) -> bool {
    let Ok(conn) =
        Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
    else {
        return false;
    };
    conn.pragma_query_value(None, "application_id", |r| r.get::<_, i64>(0)).is_ok_and(|id| id == APPLICATION_ID)
}

/// The board file of `home` to read: [`BOARD_FILE`], or a berth board still under the legacy name when the new
/// file does not exist yet (read paths never rename anything).
pub fn board_path(home: &Path) -> PathBuf {
    let current = home.join(BOARD_FILE);
    let legacy = home.join(LEGACY_BOARD_FILE);
    if !current.exists() && legacy.exists() && is_berth_board(&legacy) { legacy } else { current }
}

/// Moves a berth board still named `kanban.db` to [`BOARD_FILE`] (with its `-wal` and `-shm` files), once, before
/// a write. A `kanban.db` that is not berth's (hermes's own board) is never touched. Returns the old path when a
/// board was moved.
///
/// # Errors
/// The rename's IO error.
pub fn adopt_legacy_board(home: &Path) -> std::io::Result<Option<PathBuf>> {
    let current = home.join(BOARD_FILE);
    let legacy = home.join(LEGACY_BOARD_FILE);
    if current.exists() || !legacy.exists() || !is_berth_board(&legacy) {
        return Ok(None);
    }
    // Side files first: a crash in between leaves the main file under the old name with its WAL moved, which the
    // next run completes (the main file still names berth), rather than a new main file without its WAL.
    for suffix in ["-wal", "-shm"] {
        let side = home.join(format!("{LEGACY_BOARD_FILE}{suffix}"));
        if side.exists() {
            std::fs::rename(&side, home.join(format!("{BOARD_FILE}{suffix}")))?;
        }
    }
    std::fs::rename(&legacy, &current)?;
    Ok(Some(legacy))
}

/// The tables every berth board has (migration 1); a berth file without one of them is damaged.
const OWNED_TABLES: [&str; 5] = ["boards", "tasks", "task_links", "task_events", "task_runs"];

/// A file shorter than the pages SQLite says the database has (read from the header, or from the WAL when it holds
/// frames): cut off. Only `stat` touches the files here: opening and closing another descriptor of a database file
/// would drop the POSIX locks of every SQLite connection this process holds on it.
fn check_length(path: &Path, conn: &Connection, corrupt: &dyn Fn(rusqlite::Error) -> StoreError) -> Result<()> {
    let pages: u64 = conn.pragma_query_value(None, "page_count", |r| r.get(0)).map_err(corrupt)?;
    let page_size: u64 = conn.pragma_query_value(None, "page_size", |r| r.get(0)).map_err(corrupt)?;
    let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    // SQLite keeps the WAL beside the file a symlink leads to, not beside the link.
    let mut wal = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned()).into_os_string();
    wal.push("-wal");
    // A WAL with frames may hold pages the main file does not have yet: then the length says nothing.
    let wal_frames = std::fs::metadata(&wal).is_ok_and(|m| m.len() > 32);
    if !wal_frames && pages.saturating_mul(page_size) > len {
        return Err(StoreError::Corrupt {
            path: path.to_owned(),
            message: format!(
                "database disk image is malformed (truncated: {pages} pages of {page_size} bytes, the file has {len} bytes)"
            ),
        });
    }
    Ok(())
}

impl SqliteKanbanStore {
    /// Opens (creating when missing or empty) the board database at `path`, read-write.
    ///
    /// The file is checked before anything is written to it: a damaged file, a foreign SQLite database or one from
    /// a newer berth is reported and left byte-for-byte as it was.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`], [`StoreError::Foreign`], [`StoreError::TooNew`] or an SQLite error.
    pub fn open(path: &Path) -> Result<Self> {
        let fresh = std::fs::metadata(path).map(|m| m.len() == 0).unwrap_or(true);
        if !fresh {
            Self::verify(path)?;
        }
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let conn = Connection::open(path).sql()?;
        conn.busy_timeout(Duration::from_secs(30)).sql()?;
        let mut store = Self { conn, path: path.to_owned(), host: String::new() };
        store.conn.pragma_update(None, "journal_mode", "WAL").map_err(|e| store.classify(e))?;
        store.conn.pragma_update(None, "synchronous", "NORMAL").sql()?;
        store.conn.pragma_update(None, "foreign_keys", "ON").sql()?;
        store.migrate()?;
        Ok(store)
    }

    /// Opens an existing board database read-only (dry runs, listings); nothing is ever written through it. A board
    /// an older berth made is first brought up to this version's schema (its migrations, as any write's open runs
    /// them; its rows are not touched), so every read finds the columns it names.
    ///
    /// # Errors
    /// As [`SqliteKanbanStore::open`]; a missing file is reported as corrupt-free but empty by the caller.
    pub fn open_read_only(path: &Path) -> Result<Self> {
        Self::verify(path)?;
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .sql()?;
        conn.busy_timeout(Duration::from_secs(30)).sql()?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).sql()?;
        if (1..MIGRATIONS.len() as i64).contains(&version) {
            drop(conn);
            drop(Self::open(path)?);
            return Self::open_read_only(path);
        }
        Ok(Self { conn, path: path.to_owned(), host: String::new() })
    }

    /// An in-memory store (tests and benchmarks).
    ///
    /// # Errors
    /// An SQLite error.
    pub fn open_in_memory() -> Result<Self> {
        let conn = Connection::open_in_memory().sql()?;
        let mut store = Self { conn, path: PathBuf::from(":memory:"), host: String::new() };
        store.migrate()?;
        Ok(store)
    }

    /// Checks, read-only and in constant time, that `path` is a berth board database this version understands: the
    /// SQLite header (read by SQLite), a file at least as long as the pages it declares (so a truncated file is
    /// caught), the `application_id`, the schema version and the tables berth owns. Damage deeper in the file
    /// surfaces as a corruption error of the operation that reads it ([`StoreError::Corrupt`], file untouched);
    /// [`SqliteKanbanStore::check`] reads every page on request.
    pub(crate) fn verify(path: &Path) -> Result<()> {
        Self::verify_waiting(path, Duration::from_secs(30))
    }

    /// [`SqliteKanbanStore::verify`], waiting up to `busy` for a lock another process holds.
    pub(crate) fn verify_waiting(path: &Path, busy: Duration) -> Result<()> {
        // Damage is only what SQLite calls damage; a full or read-only disk is named as such.
        // A file another process holds locked past the busy timeout is busy, not damaged.
        let corrupt = |e: rusqlite::Error| match disk_cause(path, &e) {
            Some(cause) if !is_corruption(&e) => StoreError::Unavailable { path: path.to_owned(), cause },
            _ if is_busy(&e) => StoreError::Unavailable {
                path: path.to_owned(),
                cause: format!("another process holds it locked ({e})"),
            },
            _ => StoreError::Corrupt { path: path.to_owned(), message: e.to_string() },
        };
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(corrupt)?;
        conn.busy_timeout(busy).map_err(corrupt)?;
        let app_id: i64 = conn.pragma_query_value(None, "application_id", |r| r.get(0)).map_err(corrupt)?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(corrupt)?;
        check_length(path, &conn, &corrupt)?;
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
            .map_err(corrupt)?;
        let tables: Vec<String> = stmt.query_map([], |r| r.get(0)).and_then(Iterator::collect).map_err(corrupt)?;
        if app_id != APPLICATION_ID {
            if app_id != 0 || !tables.is_empty() {
                return Err(StoreError::Foreign { path: path.to_owned(), app_id });
            }
            return Ok(());
        }
        let known = MIGRATIONS.len() as i64;
        if version > known {
            return Err(StoreError::TooNew { path: path.to_owned(), found: version, known });
        }
        if version > 0
            && let Some(missing) = OWNED_TABLES.iter().find(|t| !tables.iter().any(|have| have == *t))
        {
            return Err(StoreError::Corrupt {
                path: path.to_owned(),
                message: format!("berth's table {missing} is missing"),
            });
        }
        Ok(())
    }

    /// The full check (`berth kanban check`): [`SqliteKanbanStore::verify`], then SQLite's `integrity_check`, which
    /// reads every page. Read-only. Returns SQLite's findings, `["ok"]` for a sound file.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`], [`StoreError::Foreign`], [`StoreError::TooNew`], [`StoreError::Unavailable`].
    pub fn check(path: &Path) -> Result<Vec<String>> {
        Self::verify(path)?;
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .sql()?;
        conn.busy_timeout(Duration::from_secs(30)).sql()?;
        let findings = conn
            .prepare("PRAGMA integrity_check")
            .and_then(|mut s| s.query_map([], |r| r.get::<_, String>(0))?.collect::<rusqlite::Result<Vec<_>>>());
        match findings {
            Ok(f) => Ok(f),
            Err(e) if is_corruption(&e) => Ok(vec![e.to_string()]),
            Err(e) => Err(crate::sqlite_error(e)),
        }
    }

    pub(crate) fn classify(&self, e: rusqlite::Error) -> StoreError {
        if let Some(cause) = (!is_corruption(&e)).then(|| disk_cause(&self.path, &e)).flatten() {
            StoreError::Unavailable { path: self.path.clone(), cause }
        } else if is_corruption(&e) {
            StoreError::Corrupt { path: self.path.clone(), message: e.to_string() }
        } else {
            crate::sqlite_error(e)
        }
    }

    pub(crate) fn migrate(&mut self) -> Result<()> {
        let version: i64 = self.conn.pragma_query_value(None, "user_version", |r| r.get(0)).sql()?;
        let app_id: i64 = self.conn.pragma_query_value(None, "application_id", |r| r.get(0)).sql()?;
        if version == MIGRATIONS.len() as i64 && app_id == APPLICATION_ID {
            // Current: write nothing, so opening never touches a file that needs no change.
            return Ok(());
        }
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).sql()?;
        let version: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0)).sql()?;
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(usize::try_from(version).unwrap_or(0)) {
            tx.execute_batch(sql).sql()?;
            tx.pragma_update(None, "user_version", i as i64 + 1).sql()?;
        }
        tx.pragma_update(None, "application_id", APPLICATION_ID).sql()?;
        tx.execute(
            "INSERT OR IGNORE INTO boards (slug, name, created_at) VALUES ('default', 'default', strftime('%s','now') * 1000)",
            [],
        ).sql()?;
        tx.commit().sql()?;
        Ok(())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn write(&mut self) -> Result<Transaction<'_>> {
        let path = self.path.clone();
        self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| {
            if is_corruption(&e) {
                StoreError::Corrupt { path, message: e.to_string() }
            } else {
                crate::sqlite_error(e)
            }
        })
    }

    // ----- boards -----
}
