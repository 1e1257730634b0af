//! `SqliteKanbanStore`: the board on one SQLite file (`<home>/kanban.db`) holding boards, tasks, links, an
//! append-only event log and one run row per attempt.
//!
//! WAL, a busy timeout and `BEGIN IMMEDIATE` for every read-then-write; a whole dispatch tick (housekeeping,
//! promotion, default assignment, claims) is one transaction, so concurrent dispatchers serialize and caps hold.
//! A file that is not a berth board database is reported and never modified.

mod edit;
mod schema;
mod tick;

use std::path::{Path, PathBuf};
use std::time::Duration;

use domain::ids::BoardSlug;
use domain::kanban::{FailureOutcome, TaskStatus, record_failure};
use domain::time::Timestamp;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params};
use serde::Serialize;
use serde_json::{Value as Json, json};
use thiserror::Error;

pub use edit::TaskEdit;

pub use schema::{APPLICATION_ID, MIGRATIONS};
pub use tick::{Claimed, TickOutcome, TickRequest, gave_up};

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
    #[error("invalid task data: {0}")]
    Invalid(String),
    #[error("board database error")]
    Sqlite(#[from] rusqlite::Error),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// One task row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Task {
    pub id: String,
    pub board: String,
    pub title: String,
    pub body: Option<String>,
    pub command: Option<String>,
    pub assignee: Option<String>,
    pub status: TaskStatus,
    pub priority: i64,
    pub created_by: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub claim_lock: Option<String>,
    pub claim_expires: Option<i64>,
    pub worker_pid: Option<i64>,
    pub worker_start: Option<i64>,
    pub consecutive_failures: i64,
    pub last_failure_error: Option<String>,
    pub max_runtime_seconds: Option<i64>,
    pub max_retries: Option<i64>,
    pub last_heartbeat_at: Option<i64>,
    pub current_run_id: Option<i64>,
    pub result: Option<String>,
    /// The host of the worker that confirmed the current run.
    pub worker_host: Option<String>,
    /// When the worker confirmed the current run; `None` while the claim is only a spawn lease.
    pub confirmed_at: Option<i64>,
    pub parents: Vec<String>,
}

/// A task's worker as its row records it: the pid and the start fingerprint read when it was spawned. Whoever
/// stops it verifies the start first, so a reused pid is never signalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerRef {
    pub pid: i64,
    pub start: Option<i64>,
}

/// The worker recorded on task `id`, if any.
pub(crate) fn worker_of(conn: &Connection, id: &str) -> Result<Option<WorkerRef>> {
    let (pid, start): (Option<i64>, Option<i64>) =
        conn.query_row("SELECT worker_pid, worker_start FROM tasks WHERE id = ?1", [id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    Ok(pid.map(|pid| WorkerRef { pid, start }))
}

/// One audit event.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    pub id: i64,
    pub task_id: String,
    pub run_id: Option<i64>,
    pub kind: String,
    pub payload: Json,
    pub created_at: i64,
}

/// One attempt at a task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Run {
    pub id: i64,
    pub task_id: String,
    pub status: String,
    pub assignee: Option<String>,
    pub claim_lock: Option<String>,
    pub worker_pid: Option<i64>,
    pub worker_start: Option<i64>,
    pub worker_host: Option<String>,
    /// When the worker confirmed this run (claimed runs that never started have none).
    pub confirmed_at: Option<i64>,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    pub outcome: Option<String>,
    pub error: Option<String>,
    pub exit_code: Option<i64>,
}

/// A board.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Board {
    pub slug: String,
    pub name: String,
    pub created_at: i64,
}

/// How a worker's run ended when it failed.
#[derive(Clone, Copy, Debug)]
pub struct RunEnd<'a> {
    /// The run outcome (`failed`, `timed_out`, …), also the event kind.
    pub outcome: &'a str,
    pub error: &'a str,
    pub exit_code: Option<i64>,
}

/// A worker a dispatcher started.
#[derive(Clone, Copy, Debug)]
pub struct SpawnRecord<'a> {
    pub task: &'a str,
    pub run_id: i64,
    pub pid: u32,
    /// The process's start fingerprint (against pid reuse).
    pub start: Option<u64>,
    pub log: &'a str,
}

/// A worker confirming its own run: who it is, so liveness checks and stops can verify it.
#[derive(Clone, Copy, Debug)]
pub struct Confirmation<'a> {
    pub task: &'a str,
    pub run_id: i64,
    pub pid: u32,
    /// The process's start fingerprint (against pid reuse).
    pub start: Option<u64>,
    pub host: &'a str,
}

/// What `kanban create` asks for.
#[derive(Clone, Debug, Default)]
pub struct NewTask {
    pub title: String,
    pub body: Option<String>,
    pub command: Option<String>,
    pub assignee: Option<String>,
    pub parents: Vec<String>,
    pub priority: i64,
    pub triage: bool,
    pub max_runtime_seconds: Option<i64>,
    pub max_retries: Option<i64>,
    pub created_by: Option<String>,
}

/// The board store.
pub struct SqliteKanbanStore {
    conn: Connection,
    path: PathBuf,
}

const TASK_COLUMNS: &str = "id, board, title, body, command, assignee, status, priority, created_by, created_at, started_at, \
    completed_at, claim_lock, claim_expires, worker_pid, worker_start, consecutive_failures, last_failure_error, \
    max_runtime_seconds, max_retries, last_heartbeat_at, current_run_id, result, worker_host, confirmed_at";

fn status_of(raw: &str) -> rusqlite::Result<TaskStatus> {
    raw.parse().map_err(|e: String| rusqlite::Error::FromSqlConversionFailure(6, rusqlite::types::Type::Text, e.into()))
}

fn task_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Task> {
    Ok(Task {
        id: r.get(0)?,
        board: r.get(1)?,
        title: r.get(2)?,
        body: r.get(3)?,
        command: r.get(4)?,
        assignee: r.get(5)?,
        status: status_of(&r.get::<_, String>(6)?)?,
        priority: r.get(7)?,
        created_by: r.get(8)?,
        created_at: r.get(9)?,
        started_at: r.get(10)?,
        completed_at: r.get(11)?,
        claim_lock: r.get(12)?,
        claim_expires: r.get(13)?,
        worker_pid: r.get(14)?,
        worker_start: r.get(15)?,
        consecutive_failures: r.get(16)?,
        last_failure_error: r.get(17)?,
        max_runtime_seconds: r.get(18)?,
        max_retries: r.get(19)?,
        last_heartbeat_at: r.get(20)?,
        current_run_id: r.get(21)?,
        result: r.get(22)?,
        worker_host: r.get(23)?,
        confirmed_at: r.get(24)?,
        parents: Vec::new(),
    })
}

/// Whether an SQLite error means the file is damaged or not a database.
fn is_corruption(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt))
}

/// What went wrong opening `path`, when it is not the file's content: SQLite's own "disk full", else the OS's answer
/// to opening the file for writing (read-only file system, permission denied), else to creating a small file beside
/// it (no space left). `None` when the disk looks fine, i.e. the file itself is the problem.
fn disk_cause(path: &Path, e: &rusqlite::Error) -> Option<String> {
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
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(30))?;
        let mut store = Self { conn, path: path.to_owned() };
        store.conn.pragma_update(None, "journal_mode", "WAL").map_err(|e| store.classify(e))?;
        store.conn.pragma_update(None, "synchronous", "NORMAL")?;
        store.conn.pragma_update(None, "foreign_keys", "ON")?;
        store.migrate()?;
        Ok(store)
    }

    /// Opens an existing board database read-only (dry runs, listings); nothing is ever written through it.
    ///
    /// # Errors
    /// As [`SqliteKanbanStore::open`]; a missing file is reported as corrupt-free but empty by the caller.
    pub fn open_read_only(path: &Path) -> Result<Self> {
        Self::verify(path)?;
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
        conn.busy_timeout(Duration::from_secs(30))?;
        Ok(Self { conn, path: path.to_owned() })
    }

    /// An in-memory store (tests and benchmarks).
    ///
    /// # Errors
    /// An SQLite error.
    pub fn open_in_memory() -> Result<Self> {
        let conn = Connection::open_in_memory()?;
        let mut store = Self { conn, path: PathBuf::from(":memory:") };
        store.migrate()?;
        Ok(store)
    }

    /// Checks, read-only, that `path` is a berth board database this version understands.
    fn verify(path: &Path) -> Result<()> {
        // Damage is only what SQLite calls damage; a full or read-only disk is named as such.
        let corrupt = |e: rusqlite::Error| match disk_cause(path, &e) {
            Some(cause) if !is_corruption(&e) => StoreError::Unavailable { path: path.to_owned(), cause },
            _ => StoreError::Corrupt { path: path.to_owned(), message: e.to_string() },
        };
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(corrupt)?;
        conn.busy_timeout(Duration::from_secs(30)).map_err(corrupt)?;
        let app_id: i64 = conn.pragma_query_value(None, "application_id", |r| r.get(0)).map_err(corrupt)?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(corrupt)?;
        let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0)).map_err(corrupt)?;
        if check != "ok" {
            return Err(StoreError::Corrupt { path: path.to_owned(), message: check });
        }
        if app_id != APPLICATION_ID {
            let tables: i64 =
                conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0)).map_err(corrupt)?;
            if app_id != 0 || tables > 0 {
                return Err(StoreError::Foreign { path: path.to_owned(), app_id });
            }
        }
        let known = MIGRATIONS.len() as i64;
        if version > known {
            return Err(StoreError::TooNew { path: path.to_owned(), found: version, known });
        }
        Ok(())
    }

    fn classify(&self, e: rusqlite::Error) -> StoreError {
        if let Some(cause) = (!is_corruption(&e)).then(|| disk_cause(&self.path, &e)).flatten() {
            StoreError::Unavailable { path: self.path.clone(), cause }
        } else if is_corruption(&e) {
            StoreError::Corrupt { path: self.path.clone(), message: e.to_string() }
        } else {
            StoreError::Sqlite(e)
        }
    }

    fn migrate(&mut self) -> Result<()> {
        let version: i64 = self.conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let app_id: i64 = self.conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
        if version == MIGRATIONS.len() as i64 && app_id == APPLICATION_ID {
            // Current: write nothing, so opening never touches a file that needs no change.
            return Ok(());
        }
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let version: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(usize::try_from(version).unwrap_or(0)) {
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", i as i64 + 1)?;
        }
        tx.pragma_update(None, "application_id", APPLICATION_ID)?;
        tx.execute(
            "INSERT OR IGNORE INTO boards (slug, name, created_at) VALUES ('default', 'default', strftime('%s','now') * 1000)",
            [],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write(&mut self) -> Result<Transaction<'_>> {
        let path = self.path.clone();
        self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| {
            if is_corruption(&e) { StoreError::Corrupt { path, message: e.to_string() } } else { StoreError::Sqlite(e) }
        })
    }

    // ----- boards -----

    /// Creates a board (an existing one is returned as it is).
    ///
    /// # Errors
    /// An SQLite error.
    pub fn create_board(&mut self, slug: &BoardSlug, name: Option<&str>, now: Timestamp) -> Result<(Board, bool)> {
        let tx = self.write()?;
        let n = tx.execute(
            "INSERT OR IGNORE INTO boards (slug, name, created_at) VALUES (?1, ?2, ?3)",
            params![slug.as_str(), name.unwrap_or(slug.as_str()), now.as_millis()],
        )?;
        tx.commit()?;
        Ok((self.board(slug)?, n == 1))
    }

    /// One board.
    ///
    /// # Errors
    /// [`StoreError::NoBoard`].
    pub fn board(&self, slug: &BoardSlug) -> Result<Board> {
        self.conn
            .query_row(
                "SELECT slug, name, created_at FROM boards WHERE slug = ?1 AND archived = 0",
                [slug.as_str()],
                |r| Ok(Board { slug: r.get(0)?, name: r.get(1)?, created_at: r.get(2)? }),
            )
            .optional()?
            .ok_or_else(|| StoreError::NoBoard(slug.as_str().to_owned()))
    }

    /// Every board, `default` first.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn boards(&self) -> Result<Vec<Board>> {
        let mut stmt = self
            .conn
            .prepare("SELECT slug, name, created_at FROM boards WHERE archived = 0 ORDER BY slug != 'default', slug")?;
        let rows = stmt.query_map([], |r| Ok(Board { slug: r.get(0)?, name: r.get(1)?, created_at: r.get(2)? }))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    // ----- tasks -----

    /// Creates a task: `ready` without unfinished parents, `todo` with them, `triage` when asked.
    ///
    /// # Errors
    /// [`StoreError::NoBoard`], [`StoreError::NoTask`] for a missing parent, or an SQLite error.
    pub fn create_task(&mut self, board: &BoardSlug, id: &str, new: &NewTask, now: Timestamp) -> Result<Task> {
        if new.title.trim().is_empty() {
            return Err(StoreError::Invalid("a task needs a non-empty title".into()));
        }
        self.board(board)?;
        let tx = self.write()?;
        let mut pending_parents = 0;
        for p in &new.parents {
            let status: Option<String> =
                tx.query_row("SELECT status FROM tasks WHERE id = ?1", [p], |r| r.get(0)).optional()?;
            match status {
                None => return Err(StoreError::NoTask(p.clone())),
                Some(s) if s != "done" && s != "archived" => pending_parents += 1,
                Some(_) => {}
            }
        }
        let status = if new.triage {
            TaskStatus::Triage
        } else if pending_parents > 0 {
            TaskStatus::Todo
        } else {
            TaskStatus::Ready
        };
        let assignee = new.assignee.as_deref().map(str::trim).filter(|a| !a.is_empty());
        tx.execute(
            "INSERT INTO tasks (id, board, title, body, command, assignee, status, priority, created_by, created_at, \
             max_runtime_seconds, max_retries) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                id,
                board.as_str(),
                new.title,
                new.body,
                new.command,
                assignee,
                status.as_str(),
                new.priority,
                new.created_by,
                now.as_millis(),
                new.max_runtime_seconds,
                new.max_retries
            ],
        )?;
        for p in &new.parents {
            tx.execute("INSERT OR IGNORE INTO task_links (parent_id, child_id) VALUES (?1, ?2)", params![p, id])?;
        }
        event(
            &tx,
            id,
            None,
            "created",
            &json!({"assignee": assignee, "status": status.as_str(), "parents": new.parents, "board": board.as_str()}),
            now,
        )?;
        tx.commit()?;
        self.task(id)
    }

    /// One task with its parents.
    ///
    /// # Errors
    /// [`StoreError::NoTask`].
    pub fn task(&self, id: &str) -> Result<Task> {
        let mut t = self
            .conn
            .query_row(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1"), [id], task_from_row)
            .optional()?
            .ok_or_else(|| StoreError::NoTask(id.to_owned()))?;
        let mut stmt = self.conn.prepare("SELECT parent_id FROM task_links WHERE child_id = ?1 ORDER BY parent_id")?;
        t.parents = stmt.query_map([id], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
        Ok(t)
    }

    /// Tasks of a board, optionally filtered, by priority then age.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn tasks(&self, board: &BoardSlug, status: Option<TaskStatus>, assignee: Option<&str>) -> Result<Vec<Task>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE board = ?1 AND (?2 IS NULL OR status = ?2) AND (?3 IS NULL OR assignee = ?3) \
             ORDER BY priority DESC, created_at, id"
        ))?;
        let rows = stmt.query_map(params![board.as_str(), status.map(TaskStatus::as_str), assignee], task_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// A task's events, oldest first, after event id `after`.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn events(&self, task: &str, after: i64) -> Result<Vec<Event>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, task_id, run_id, kind, payload, created_at FROM task_events WHERE task_id = ?1 AND id > ?2 ORDER BY id",
        )?;
        let rows = stmt.query_map(params![task, after], |r| {
            let payload: Option<String> = r.get(4)?;
            Ok(Event {
                id: r.get(0)?,
                task_id: r.get(1)?,
                run_id: r.get(2)?,
                kind: r.get(3)?,
                payload: payload.and_then(|p| serde_json::from_str(&p).ok()).unwrap_or(Json::Null),
                created_at: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// A task's runs, oldest first.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn runs(&self, task: &str) -> Result<Vec<Run>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, task_id, status, assignee, claim_lock, worker_pid, started_at, ended_at, outcome, error, exit_code, \
             worker_start, worker_host, confirmed_at FROM task_runs WHERE task_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([task], |r| {
            Ok(Run {
                id: r.get(0)?,
                task_id: r.get(1)?,
                status: r.get(2)?,
                assignee: r.get(3)?,
                claim_lock: r.get(4)?,
                worker_pid: r.get(5)?,
                started_at: r.get(6)?,
                ended_at: r.get(7)?,
                outcome: r.get(8)?,
                error: r.get(9)?,
                exit_code: r.get(10)?,
                worker_start: r.get(11)?,
                worker_host: r.get(12)?,
                confirmed_at: r.get(13)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Running tasks per assignee on this host (all boards).
    ///
    /// # Errors
    /// An SQLite error.
    pub fn running_by_assignee(&self) -> Result<Vec<(String, i64)>> {
        let mut stmt = self.conn.prepare(
            "SELECT assignee, COUNT(*) FROM tasks WHERE status = 'running' AND assignee IS NOT NULL GROUP BY assignee ORDER BY assignee",
        )?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Sets or clears a task's assignee.
    ///
    /// # Errors
    /// [`StoreError::NoTask`]; [`StoreError::Transition`] for a running, done or archived task.
    pub fn assign(&mut self, id: &str, assignee: Option<&str>, now: Timestamp) -> Result<Task> {
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        if matches!(status, TaskStatus::Running | TaskStatus::Done | TaskStatus::Archived) {
            return Err(StoreError::Transition { task: id.to_owned(), status, action: "reassign" });
        }
        let assignee = assignee.map(str::trim).filter(|a| !a.is_empty());
        tx.execute("UPDATE tasks SET assignee = ?2 WHERE id = ?1", params![id, assignee])?;
        event(&tx, id, None, "assigned", &json!({"assignee": assignee, "source": "cli"}), now)?;
        tx.commit()?;
        self.task(id)
    }

    /// Marks a task done (from running, ready or blocked), closes its run, and promotes children whose parents are
    /// all done. With `run`, only while the task is still on that run. Returns the task.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`].
    pub fn complete(
        &mut self,
        id: &str,
        run: Option<i64>,
        result: Option<&str>,
        exit_code: Option<i64>,
        now: Timestamp,
    ) -> Result<Task> {
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        check_run(&tx, id, run, status)?;
        if !matches!(
            status,
            TaskStatus::Running | TaskStatus::Ready | TaskStatus::Blocked | TaskStatus::Todo | TaskStatus::Triage
        ) {
            return Err(StoreError::Transition { task: id.to_owned(), status, action: "complete" });
        }
        let run = close_run(&tx, id, "completed", None, exit_code, now)?;
        tx.execute(
            "UPDATE tasks SET status = 'done', result = ?2, completed_at = ?3, claim_lock = NULL, claim_expires = NULL, \
             worker_pid = NULL, worker_start = NULL, consecutive_failures = 0 WHERE id = ?1",
            params![id, result, now.as_millis()],
        )?;
        event(&tx, id, run, "completed", &json!({"result": result, "exit_code": exit_code}), now)?;
        promote_children(&tx, id, now)?;
        tx.commit()?;
        self.task(id)
    }

    /// A worker's failure: counts toward the failure limit; requeued below it, blocked (`gave_up`) at it.
    /// With `run`, only while the task is still on that run.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] when the task is no longer running.
    pub fn fail(
        &mut self,
        id: &str,
        run: Option<i64>,
        end: &RunEnd<'_>,
        failure_limit: u32,
        now: Timestamp,
    ) -> Result<FailureOutcome> {
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        if status != TaskStatus::Running {
            return Err(StoreError::Transition { task: id.to_owned(), status, action: "fail" });
        }
        check_run(&tx, id, run, status)?;
        let res = record_task_failure(&tx, id, end.outcome, end.error, end.exit_code, failure_limit, now)?;
        tx.commit()?;
        Ok(res)
    }

    /// Blocks a task (clears any claim); returns the worker to stop, if one ran.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] from done or archived.
    pub fn block(&mut self, id: &str, reason: Option<&str>, now: Timestamp) -> Result<Option<WorkerRef>> {
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        if matches!(status, TaskStatus::Done | TaskStatus::Archived | TaskStatus::Blocked) {
            return Err(StoreError::Transition { task: id.to_owned(), status, action: "block" });
        }
        let pid = worker_of(&tx, id)?;
        let run = close_run(&tx, id, "blocked", reason, None, now)?;
        tx.execute(
            "UPDATE tasks SET status = 'blocked', claim_lock = NULL, claim_expires = NULL, worker_pid = NULL, worker_start = NULL WHERE id = ?1",
            [id],
        )?;
        event(&tx, id, run, "blocked", &json!({"reason": reason}), now)?;
        tx.commit()?;
        Ok(pid)
    }

    /// Unblocks a task back to `ready` (or `todo` while parents are unfinished), resetting its failure count.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] unless blocked.
    pub fn unblock(&mut self, id: &str, now: Timestamp) -> Result<Task> {
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        if status != TaskStatus::Blocked {
            return Err(StoreError::Transition { task: id.to_owned(), status, action: "unblock" });
        }
        let next = if parents_done(&tx, id)? { "ready" } else { "todo" };
        tx.execute("UPDATE tasks SET status = ?2, consecutive_failures = 0 WHERE id = ?1", params![id, next])?;
        event(&tx, id, None, "unblocked", &json!({"status": next}), now)?;
        tx.commit()?;
        self.task(id)
    }

    /// Archives a task; returns the worker to stop, if one ran.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] when already archived.
    pub fn archive(&mut self, id: &str, now: Timestamp) -> Result<Option<WorkerRef>> {
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        if status == TaskStatus::Archived {
            return Err(StoreError::Transition { task: id.to_owned(), status, action: "archive" });
        }
        let pid = worker_of(&tx, id)?;
        let run = close_run(&tx, id, "archived", None, None, now)?;
        tx.execute(
            "UPDATE tasks SET status = 'archived', claim_lock = NULL, claim_expires = NULL, worker_pid = NULL, worker_start = NULL WHERE id = ?1",
            [id],
        )?;
        event(&tx, id, run, "archived", &json!({"prev_status": status.as_str()}), now)?;
        promote_children(&tx, id, now)?;
        tx.commit()?;
        Ok(pid)
    }

    /// Manually reclaims a running task back to `ready`, resetting its failure count; returns the worker to stop.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] unless running.
    pub fn reclaim(&mut self, id: &str, reason: Option<&str>, now: Timestamp) -> Result<Option<WorkerRef>> {
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        if status != TaskStatus::Running {
            return Err(StoreError::Transition { task: id.to_owned(), status, action: "reclaim" });
        }
        let pid = worker_of(&tx, id)?;
        let lock: Option<String> = tx.query_row("SELECT claim_lock FROM tasks WHERE id = ?1", [id], |r| r.get(0))?;
        let run = close_run(&tx, id, "reclaimed", reason, None, now)?;
        tx.execute(
            "UPDATE tasks SET status = 'ready', claim_lock = NULL, claim_expires = NULL, worker_pid = NULL, worker_start = NULL, \
             consecutive_failures = 0 WHERE id = ?1",
            [id],
        )?;
        event(&tx, id, run, "reclaimed", &json!({"manual": true, "reason": reason, "prev_lock": lock}), now)?;
        tx.commit()?;
        Ok(pid)
    }

    /// Records a heartbeat (with an event when there is a note).
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] unless running.
    pub fn heartbeat(&mut self, id: &str, note: Option<&str>, now: Timestamp) -> Result<()> {
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        if status != TaskStatus::Running {
            return Err(StoreError::Transition { task: id.to_owned(), status, action: "heartbeat" });
        }
        tx.execute("UPDATE tasks SET last_heartbeat_at = ?2 WHERE id = ?1", params![id, now.as_millis()])?;
        if let Some(note) = note {
            let run: Option<i64> =
                tx.query_row("SELECT current_run_id FROM tasks WHERE id = ?1", [id], |r| r.get(0))?;
            event(&tx, id, run, "heartbeat", &json!({"note": note}), now)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// A worker's first act: confirms its own run in one compare-and-swap on (task, run, still claimed, not yet
    /// confirmed), recording its pid, start fingerprint and host; the claim then lasts `claim_ttl` and its
    /// heartbeats extend it. Returns the task.
    ///
    /// The spawn lease is enforced by the tick, which ends an expired run in its own write transaction; the two
    /// serialize, so a confirmation either lands first (the tick then sees a confirmed run) or finds the run ended.
    /// Re-checking the lease here would only refuse a worker that no tick has given up on yet.
    ///
    /// # Errors
    /// [`StoreError::Superseded`] when the swap fails (the run was reclaimed, requeued or replaced, for example
    /// because its lease expired, or another process confirmed it): the worker must run nothing.
    /// [`StoreError::NoTask`] or an SQLite error.
    pub fn confirm_run(&mut self, c: &Confirmation<'_>, claim_ttl: Duration, now: Timestamp) -> Result<Task> {
        let tx = self.write()?;
        status_in(&tx, c.task)?;
        let start = c.start.and_then(|v| i64::try_from(v).ok());
        let expires = now.as_millis().saturating_add(i64::try_from(claim_ttl.as_millis()).unwrap_or(i64::MAX));
        let n = tx.execute(
            "UPDATE tasks SET worker_pid = ?3, worker_start = ?4, worker_host = ?5, confirmed_at = ?6, started_at = ?6, \
             last_heartbeat_at = ?6, claim_expires = ?7 \
             WHERE id = ?1 AND current_run_id = ?2 AND status = 'running' AND claim_lock IS NOT NULL \
             AND confirmed_at IS NULL",
            params![c.task, c.run_id, c.pid, start, c.host, now.as_millis(), expires],
        )?;
        if n != 1 {
            return Err(StoreError::Superseded { task: c.task.to_owned(), run: c.run_id });
        }
        tx.execute(
            "UPDATE task_runs SET worker_pid = ?2, worker_start = ?3, worker_host = ?4, confirmed_at = ?5, claim_expires = ?6 \
             WHERE id = ?1",
            params![c.run_id, c.pid, start, c.host, now.as_millis(), expires],
        )?;
        event(
            &tx,
            c.task,
            Some(c.run_id),
            "confirmed",
            &json!({"pid": c.pid, "start": start, "host": c.host, "expires": expires}),
            now,
        )?;
        tx.commit()?;
        self.task(c.task)
    }

    /// A confirmed worker's heartbeat: records it and extends the claim by `claim_ttl`, while the task is still on
    /// `run`. Returns whether it still is (a worker whose run ended should stop beating).
    ///
    /// # Errors
    /// An SQLite error.
    pub fn heartbeat_run(&mut self, id: &str, run: i64, claim_ttl: Duration, now: Timestamp) -> Result<bool> {
        let expires = now.as_millis().saturating_add(i64::try_from(claim_ttl.as_millis()).unwrap_or(i64::MAX));
        let n = self.conn.execute(
            "UPDATE tasks SET last_heartbeat_at = ?3, claim_expires = max(coalesce(claim_expires, 0), ?4) \
             WHERE id = ?1 AND current_run_id = ?2 AND status = 'running' AND confirmed_at IS NOT NULL",
            params![id, run, now.as_millis(), expires],
        )?;
        Ok(n == 1)
    }

    /// Records the workers a dispatcher started for claimed tasks, all in one transaction.
    ///
    /// This is informational (`kanban show` and stops can find the process before it confirms): the worker's own
    /// confirmation is what counts, so a run it already confirmed is left as the worker wrote it. An unconfirmed
    /// run's spawn lease restarts here (`lease` from `now`), so a long spawn loop does not eat its workers' leases.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn record_spawned(&mut self, spawned: &[SpawnRecord<'_>], lease: Duration, now: Timestamp) -> Result<()> {
        let expires = now.as_millis().saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX));
        let tx = self.write()?;
        for s in spawned {
            let start = s.start.and_then(|v| i64::try_from(v).ok());
            tx.prepare_cached(
                "UPDATE tasks SET worker_pid = ?3, worker_start = ?4, claim_expires = max(coalesce(claim_expires, 0), ?5) \
                 WHERE id = ?1 AND current_run_id = ?2 AND status = 'running' AND confirmed_at IS NULL",
            )?
            .execute(params![s.task, s.run_id, s.pid, start, expires])?;
            tx.prepare_cached("UPDATE task_runs SET worker_pid = ?2 WHERE id = ?1 AND confirmed_at IS NULL")?
                .execute(params![s.run_id, s.pid])?;
            event(&tx, s.task, Some(s.run_id), "spawned", &json!({"pid": s.pid, "log": s.log}), now)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Records a failed spawn: back to `ready` below the failure limit, `blocked` with `gave_up` at it.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn record_spawn_failure(
        &mut self,
        id: &str,
        error: &str,
        failure_limit: u32,
        now: Timestamp,
    ) -> Result<FailureOutcome> {
        let tx = self.write()?;
        let res = record_task_failure(&tx, id, "spawn_failed", error, None, failure_limit, now)?;
        tx.commit()?;
        Ok(res)
    }
}

/// With `run` given, the task must still be on that run (a worker whose run was reclaimed writes nothing).
fn check_run(tx: &Transaction<'_>, id: &str, run: Option<i64>, status: TaskStatus) -> Result<()> {
    let Some(run) = run else { return Ok(()) };
    let current: Option<i64> = tx.query_row("SELECT current_run_id FROM tasks WHERE id = ?1", [id], |r| r.get(0))?;
    if current == Some(run) {
        Ok(())
    } else {
        Err(StoreError::Transition { task: id.to_owned(), status, action: "finish a superseded run of" })
    }
}

fn status_in(tx: &Transaction<'_>, id: &str) -> Result<TaskStatus> {
    let raw: Option<String> = tx.query_row("SELECT status FROM tasks WHERE id = ?1", [id], |r| r.get(0)).optional()?;
    let raw = raw.ok_or_else(|| StoreError::NoTask(id.to_owned()))?;
    raw.parse().map_err(StoreError::Invalid)
}

/// Appends an event.
fn event(
    tx: &Transaction<'_>,
    task: &str,
    run: Option<i64>,
    kind: &str,
    payload: &Json,
    now: Timestamp,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO task_events (task_id, run_id, kind, payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![task, run, kind, payload.to_string(), now.as_millis()])
    .map(drop)
}

/// Closes the task's current run with `outcome`; returns the run id.
fn close_run(
    tx: &Transaction<'_>,
    task: &str,
    outcome: &str,
    error: Option<&str>,
    exit_code: Option<i64>,
    now: Timestamp,
) -> rusqlite::Result<Option<i64>> {
    let run: Option<i64> = tx.query_row("SELECT current_run_id FROM tasks WHERE id = ?1", [task], |r| r.get(0))?;
    if let Some(run) = run {
        tx.execute(
            "UPDATE task_runs SET status = 'ended', ended_at = ?2, outcome = ?3, error = ?4, exit_code = ?5 WHERE id = ?1 AND ended_at IS NULL",
            params![run, now.as_millis(), outcome, error, exit_code],
        )?;
        tx.execute("UPDATE tasks SET current_run_id = NULL WHERE id = ?1", [task])?;
    }
    Ok(run)
}

fn parents_done(tx: &Transaction<'_>, id: &str) -> rusqlite::Result<bool> {
    tx.query_row(
        "SELECT NOT EXISTS (SELECT 1 FROM task_links l JOIN tasks p ON p.id = l.parent_id \
         WHERE l.child_id = ?1 AND p.status NOT IN ('done', 'archived'))",
        [id],
        |r| r.get(0),
    )
}

/// Promotes `todo` children of `parent` whose parents are now all done.
fn promote_children(tx: &Transaction<'_>, parent: &str, now: Timestamp) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare(
        "SELECT t.id FROM task_links l JOIN tasks t ON t.id = l.child_id WHERE l.parent_id = ?1 AND t.status = 'todo'",
    )?;
    let children: Vec<String> = stmt.query_map([parent], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
    drop(stmt);
    for c in children {
        if parents_done(tx, &c)? {
            tx.execute("UPDATE tasks SET status = 'ready' WHERE id = ?1 AND status = 'todo'", [&c])?;
            event(tx, &c, None, "promoted", &json!({"parent": parent}), now)?;
        }
    }
    Ok(())
}

/// The failure breaker on a task: requeue below the limit, block with `gave_up` at it.
fn record_task_failure(
    tx: &Transaction<'_>,
    id: &str,
    outcome: &str,
    error: &str,
    exit_code: Option<i64>,
    failure_limit: u32,
    now: Timestamp,
) -> Result<FailureOutcome> {
    let (failures, max_retries): (i64, Option<i64>) =
        tx.query_row("SELECT consecutive_failures, max_retries FROM tasks WHERE id = ?1", [id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    let res = record_failure(
        u32::try_from(failures).unwrap_or(0),
        max_retries.and_then(|m| u32::try_from(m).ok()),
        failure_limit,
    );
    let run = close_run(tx, id, outcome, Some(error), exit_code, now)?;
    let (status, n) = match res {
        FailureOutcome::Requeue { failures, .. } => ("ready", failures),
        FailureOutcome::GiveUp { failures, .. } => ("blocked", failures),
    };
    tx.execute(
        "UPDATE tasks SET status = ?2, consecutive_failures = ?3, last_failure_error = ?4, claim_lock = NULL, claim_expires = NULL, \
         worker_pid = NULL, worker_start = NULL WHERE id = ?1",
        params![id, status, n, error],
    )?;
    event(tx, id, run, outcome, &json!({"error": error, "exit_code": exit_code, "failures": n}), now)?;
    if let FailureOutcome::GiveUp { failures, limit } = res {
        event(
            tx,
            id,
            run,
            "gave_up",
            &json!({"failures": failures, "effective_limit": limit, "error": error, "trigger_outcome": outcome}),
            now,
        )?;
    }
    Ok(res)
}

#[cfg(test)]
mod tests;
