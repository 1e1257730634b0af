//! Reads and creations: boards, tasks (with their links), events and runs.

use std::collections::HashMap;

use domain::board::Created;
use domain::board::TaskStatus;
use domain::board::rules::Creation;
use domain::ids::BoardSlug;
use domain::time::Timestamp;
use rusqlite::{OptionalExtension, params};
use serde_json::Value as Json;

use crate::Sql;
use crate::rows::{TASK_COLUMNS, task_from_row};
use crate::{Board, Event, NewTask, Result, Run, SqliteKanbanStore, StoreError, Task};

/// When each host last heartbeated (epoch milliseconds). A board file from before host heartbeats, opened read-only
/// and so not migrated, has no such table: no host has beaten.
pub(crate) fn host_seen_at(conn: &rusqlite::Connection) -> Result<std::collections::HashMap<String, i64>> {
    let mut stmt = match conn.prepare_cached("SELECT id, seen_at FROM hosts") {
        Ok(stmt) => stmt,
        Err(e) if e.to_string().contains("no such table") => return Ok(std::collections::HashMap::new()),
        Err(e) => return Err(crate::sqlite_error(e)),
    };
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).sql()?;
    rows.collect::<rusqlite::Result<_>>().sql()
}

/// What `rules::plan_creation` needs of the board: the statuses of a batch's parents, and the tasks its idempotency
/// keys name on `board`.
fn creation_reads(
    tx: &rusqlite::Transaction<'_>,
    board: &BoardSlug,
    tasks: &[(String, NewTask)],
) -> Result<(HashMap<String, TaskStatus>, HashMap<String, String>)> {
    let (mut found, mut keyed) = (HashMap::new(), HashMap::new());
    let mut stmt = tx.prepare("SELECT status FROM tasks WHERE id = ?1").sql()?;
    for p in tasks.iter().flat_map(|(_, new)| &new.parents) {
        if found.contains_key(p) {
            continue;
        }
        let status: Option<String> = stmt.query_row([p], |r| r.get(0)).optional().sql()?;
        if let Some(status) = status {
            found.insert(p.clone(), crate::rows::status_of(&status)?);
        }
    }
    let mut stmt = tx.prepare("SELECT id FROM tasks WHERE board = ?1 AND idempotency_key = ?2").sql()?;
    for key in domain::board::rules::keys_of(tasks) {
        let id: Option<String> = stmt.query_row([board.as_str(), key], |r| r.get(0)).optional().sql()?;
        if let Some(id) = id {
            keyed.insert(key.to_owned(), id);
        }
    }
    Ok((found, keyed))
}

impl SqliteKanbanStore {
    /// Renews `host`'s heartbeat row (a time behind the stored one leaves it).
    ///
    /// # Errors
    /// An SQLite error.
    pub fn renew_host(&mut self, host: &str, now: Timestamp) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO hosts (id, seen_at) VALUES (?1, ?2) \
                 ON CONFLICT(id) DO UPDATE SET seen_at = max(seen_at, excluded.seen_at)",
            )
            .sql()?
            .execute(params![host, now.as_millis()])
            .sql()?;
        Ok(())
    }

    /// Every host that has heartbeated, most recently seen first.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn hosts(&self, now: Timestamp) -> Result<Vec<crate::HostSeen>> {
        let mut hosts: Vec<crate::HostSeen> = host_seen_at(&self.conn)?
            .into_iter()
            .map(|(id, seen)| crate::HostSeen { id, silent_ms: now.as_millis().saturating_sub(seen).max(0) })
            .collect();
        hosts.sort_by(|a, b| a.silent_ms.cmp(&b.silent_ms).then_with(|| a.id.cmp(&b.id)));
        Ok(hosts)
    }

    /// Creates a board (an existing one is returned as it is).
    ///
    /// # Errors
    /// An SQLite error.
    pub fn create_board(&mut self, slug: &BoardSlug, name: Option<&str>, now: Timestamp) -> Result<(Board, bool)> {
        let tx = self.write()?;
        let n = tx
            .execute(
                "INSERT OR IGNORE INTO boards (slug, name, created_at) VALUES (?1, ?2, ?3)",
                params![slug.as_str(), name.unwrap_or(slug.as_str()), now.as_millis()],
            )
            .sql()?;
        tx.commit().sql()?;
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
            .optional()
            .sql()?
            .ok_or_else(|| StoreError::NoBoard(slug.as_str().to_owned()))
    }

    /// Every board, `default` first.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn boards(&self) -> Result<Vec<Board>> {
        let mut stmt = self
            .conn
            .prepare("SELECT slug, name, created_at FROM boards WHERE archived = 0 ORDER BY slug != 'default', slug")
            .sql()?;
        let rows =
            stmt.query_map([], |r| Ok(Board { slug: r.get(0)?, name: r.get(1)?, created_at: r.get(2)? })).sql()?;
        rows.collect::<rusqlite::Result<_>>().sql()
    }

    // ----- tasks -----

    /// Creates a task: `ready` without unfinished parents, `todo` with them, `triage` when asked; under an
    /// idempotency key the board holds, that task (nothing written).
    ///
    /// # Errors
    /// [`StoreError::NoBoard`], [`StoreError::NoTask`] for a missing parent, or an SQLite error.
    pub fn create_task(&mut self, board: &BoardSlug, id: &str, new: &NewTask, now: Timestamp) -> Result<Task> {
        // A batch of one: one way to write a task, its links and its `created` event.
        let created = self.create_tasks(board, &[(id.to_owned(), new.clone())], now).map_err(|e| match e {
            StoreError::Batch { error, .. } => *error,
            other => other,
        })?;
        self.task(created.first().map_or(id, |c| c.id.as_str()))
    }

    /// Creates a batch of tasks in one `BEGIN IMMEDIATE` transaction, all or none (see `BoardStore::create_tasks`):
    /// the parents and the tasks the batch's idempotency keys name are read first (under the write lock, so no
    /// concurrent create slips in between), `rules::plan_creation` decides, then rows, links and events go in
    /// through statements prepared once.
    ///
    /// # Errors
    /// [`StoreError::NoBoard`], [`StoreError::Batch`] for a refused entry (nothing written), or an SQLite error.
    pub fn create_tasks(
        &mut self,
        board: &BoardSlug,
        tasks: &[(String, NewTask)],
        now: Timestamp,
    ) -> Result<Vec<Created>> {
        self.board(board)?;
        let tx = self.write()?;
        let (found, keyed) = creation_reads(&tx, board, tasks)?;
        let plan = domain::board::rules::plan_creation(tasks, &found, &keyed)?;
        let mut created = Vec::with_capacity(plan.len());
        {
            let mut task = tx
                .prepare(
                    "INSERT INTO tasks (id, board, title, body, command, assignee, status, priority, created_by, \
                     created_at, max_runtime_seconds, max_retries, not_before, idempotency_key, review) VALUES (?1, \
                     ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
                )
                .sql()?;
            let mut link =
                tx.prepare("INSERT OR IGNORE INTO task_links (parent_id, child_id) VALUES (?1, ?2)").sql()?;
            let mut event = tx
                .prepare(
                    "INSERT INTO task_events (task_id, run_id, kind, payload, created_at) \
                     VALUES (?1, NULL, 'created', ?2, ?3)",
                )
                .sql()?;
            let mut status_of = tx.prepare("SELECT status FROM tasks WHERE id = ?1").sql()?;
            for ((id, new), planned) in tasks.iter().zip(plan) {
                let status = match planned {
                    Creation::Existing(existing) => {
                        // Read after the entries before it went in: an earlier entry of this batch is found too.
                        let status: String = status_of.query_row([&existing], |r| r.get(0)).sql()?;
                        let status = crate::rows::status_of(&status)?;
                        created.push(Created { id: existing, status, existing: true });
                        continue;
                    }
                    Creation::New(status) => status,
                };
                task.execute(params![
                    id,
                    board.as_str(),
                    new.title,
                    new.body,
                    new.command,
                    domain::board::rules::assignee_of(new),
                    status.as_str(),
                    new.priority,
                    new.created_by,
                    now.as_millis(),
                    new.max_runtime_seconds,
                    new.max_retries,
                    new.not_before,
                    new.idempotency_key,
                    i64::from(new.review)
                ])
                .sql()?;
                for p in &new.parents {
                    link.execute(params![p, id]).sql()?;
                }
                let payload = domain::board::rules::created(new, status, board.as_str()).payload();
                event.execute(params![id, payload, now.as_millis()]).sql()?;
                created.push(Created { id: id.clone(), status, existing: false });
            }
        }
        tx.commit().sql()?;
        Ok(created)
    }

    /// One task with its parents.
    ///
    /// # Errors
    /// [`StoreError::NoTask`].
    pub fn task(&self, id: &str) -> Result<Task> {
        let mut t = self
            .conn
            .query_row(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1"), [id], task_from_row)
            .optional()
            .sql()?
            .ok_or_else(|| StoreError::NoTask(id.to_owned()))?;
        let mut stmt =
            self.conn.prepare("SELECT parent_id FROM task_links WHERE child_id = ?1 ORDER BY parent_id").sql()?;
        t.parents = stmt.query_map([id], |r| r.get(0)).sql()?.collect::<rusqlite::Result<_>>().sql()?;
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
        )).sql()?;
        let rows =
            stmt.query_map(params![board.as_str(), status.map(TaskStatus::as_str), assignee], task_from_row).sql()?;
        rows.collect::<rusqlite::Result<_>>().sql()
    }

    /// The kind and time of every event of one of `kinds` on `board`'s tasks from `since` (ms) on, oldest first.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn board_event_times(&self, board: &BoardSlug, since: i64, kinds: &[&str]) -> Result<Vec<(String, i64)>> {
        let marks: Vec<String> = (0..kinds.len()).map(|i| format!("?{}", i + 3)).collect();
        let sql = format!(
            "SELECT e.kind, e.created_at FROM task_events e JOIN tasks t ON t.id = e.task_id \
             WHERE t.board = ?1 AND e.created_at >= ?2 AND e.kind IN ({}) ORDER BY e.id",
            if marks.is_empty() { "NULL".to_owned() } else { marks.join(", ") }
        );
        let mut stmt = self.conn.prepare(&sql).sql()?;
        let slug = board.as_str();
        let mut values: Vec<&dyn rusqlite::ToSql> = vec![&slug, &since];
        values.extend(kinds.iter().map(|k| k as &dyn rusqlite::ToSql));
        let rows = stmt.query_map(values.as_slice(), |r| Ok((r.get(0)?, r.get(1)?))).sql()?;
        rows.collect::<rusqlite::Result<_>>().sql()
    }

    /// A task's events, oldest first, after event id `after`.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn events(&self, task: &str, after: i64) -> Result<Vec<Event>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, task_id, run_id, kind, payload, created_at FROM task_events WHERE task_id = ?1 AND id > ?2 ORDER BY id",
        ).sql()?;
        let rows = stmt
            .query_map(params![task, after], |r| {
                let payload: Option<String> = r.get(4)?;
                Ok(Event {
                    id: r.get(0)?,
                    task_id: r.get(1)?,
                    run_id: r.get(2)?,
                    kind: r.get(3)?,
                    payload: payload.and_then(|p| serde_json::from_str(&p).ok()).unwrap_or(Json::Null),
                    created_at: r.get(5)?,
                })
            })
            .sql()?;
        rows.collect::<rusqlite::Result<_>>().sql()
    }

    /// A task's runs, oldest first.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn runs(&self, task: &str) -> Result<Vec<Run>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, task_id, status, assignee, claim_lock, worker_pid, started_at, ended_at, outcome, error, exit_code, \
             worker_start, worker_host, confirmed_at FROM task_runs WHERE task_id = ?1 ORDER BY id",
        ).sql()?;
        let rows = stmt
            .query_map([task], |r| {
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
            })
            .sql()?;
        rows.collect::<rusqlite::Result<_>>().sql()
    }

    /// SQLite's `data_version` of this connection: it changes whenever another connection (another process, or
    /// another store on the same file) commits a change to the board. Reading it touches no page of the file, so a
    /// gateway can poll it to wake on events.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn data_version(&self) -> Result<i64> {
        self.conn.pragma_query_value(None, "data_version", |r| r.get(0)).sql()
    }

    /// The workers of `board`'s running tasks on `host` (see [`domain::board::KanbanStore::local_workers`]).
    ///
    /// # Errors
    /// An SQLite error.
    pub fn local_workers(&self, board: &BoardSlug, host: &str) -> Result<Vec<(i64, Option<i64>)>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT worker_pid, worker_start, worker_host FROM tasks \
                 WHERE board = ?1 AND status = 'running' AND worker_pid IS NOT NULL",
            )
            .sql()?;
        let rows =
            stmt.query_map([board.as_str()], |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, Option<String>>(2)?))).sql()?;
        let rows: Vec<(i64, Option<i64>, Option<String>)> = rows.collect::<rusqlite::Result<_>>().sql()?;
        let local = rows.into_iter().filter(|(.., on)| domain::board::liveness::is_local(host, on.as_deref()));
        Ok(local.map(|(pid, start, _)| (pid, start)).collect())
    }

    /// Running tasks per assignee on this host (all boards).
    ///
    /// # Errors
    /// An SQLite error.
    pub fn running_by_assignee(&self) -> Result<Vec<(String, i64)>> {
        let mut stmt = self.conn.prepare(
            "SELECT assignee, COUNT(*) FROM tasks WHERE status = 'running' AND assignee IS NOT NULL GROUP BY assignee ORDER BY assignee",
        ).sql()?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).sql()?;
        rows.collect::<rusqlite::Result<_>>().sql()
    }
}

impl SqliteKanbanStore {
    /// Every table of the board ([`domain::board::TABLES`], in order) as of one moment, for a copy into another store.
    ///
    /// # Errors
    /// An SQLite error.
    pub fn dump(&self) -> Result<Vec<domain::board::TableRows>> {
        use rusqlite::types::ValueRef;
        let tx = self.conn.unchecked_transaction().sql()?;
        let mut data = Vec::new();
        for (table, cols) in domain::board::TABLES {
            let mut stmt = tx.prepare(&format!("SELECT {cols} FROM {table}")).sql()?;
            let n = stmt.column_count();
            let rows = stmt
                .query_map([], |r| {
                    (0..n)
                        .map(|i| {
                            Ok(match r.get_ref(i)? {
                                ValueRef::Null => domain::board::Cell::Null,
                                ValueRef::Integer(v) => domain::board::Cell::Int(v),
                                ValueRef::Real(v) => domain::board::Cell::Int(v as i64),
                                ValueRef::Text(t) | ValueRef::Blob(t) => {
                                    domain::board::Cell::Text(String::from_utf8_lossy(t).into_owned())
                                }
                            })
                        })
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .sql()?;
            data.push(domain::board::TableRows { table, rows: rows.collect::<rusqlite::Result<_>>().sql()? });
        }
        Ok(data)
    }
}
