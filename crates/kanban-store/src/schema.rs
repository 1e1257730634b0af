//! The schema as append-only migrations, and the marks that tell a berth board database from anything else.

/// `PRAGMA application_id` of a berth board database ("BRTH").
pub const APPLICATION_ID: i64 = 0x4252_5448;

/// Migrations, applied in order; `PRAGMA user_version` counts those applied. Never edit or remove an entry.
pub const MIGRATIONS: &[&str] = &[
    // 1: boards, tasks, links, events, runs.
    r#"
    CREATE TABLE boards (
        slug TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        archived INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE tasks (
        id TEXT PRIMARY KEY,
        board TEXT NOT NULL REFERENCES boards(slug),
        title TEXT NOT NULL,
        body TEXT,
        command TEXT,
        assignee TEXT,
        status TEXT NOT NULL,
        priority INTEGER NOT NULL DEFAULT 0,
        created_by TEXT,
        created_at INTEGER NOT NULL,
        started_at INTEGER,
        completed_at INTEGER,
        claim_lock TEXT,
        claim_expires INTEGER,
        worker_pid INTEGER,
        worker_start INTEGER,
        consecutive_failures INTEGER NOT NULL DEFAULT 0,
        last_failure_error TEXT,
        max_runtime_seconds INTEGER,
        max_retries INTEGER,
        last_heartbeat_at INTEGER,
        current_run_id INTEGER,
        result TEXT
    );
    CREATE INDEX tasks_board_status ON tasks(board, status);
    CREATE INDEX tasks_status_assignee ON tasks(status, assignee);
    CREATE TABLE task_links (
        parent_id TEXT NOT NULL REFERENCES tasks(id),
        child_id TEXT NOT NULL REFERENCES tasks(id),
        PRIMARY KEY (parent_id, child_id)
    );
    CREATE INDEX task_links_child ON task_links(child_id);
    CREATE TABLE task_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        task_id TEXT NOT NULL,
        run_id INTEGER,
        kind TEXT NOT NULL,
        payload TEXT,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX task_events_task ON task_events(task_id, id);
    CREATE TABLE task_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        task_id TEXT NOT NULL,
        status TEXT NOT NULL,
        assignee TEXT,
        claim_lock TEXT,
        claim_expires INTEGER,
        worker_pid INTEGER,
        started_at INTEGER NOT NULL,
        ended_at INTEGER,
        outcome TEXT,
        error TEXT,
        exit_code INTEGER
    );
    CREATE INDEX task_runs_task ON task_runs(task_id, id);
    CREATE TRIGGER task_events_no_update BEFORE UPDATE ON task_events
        BEGIN SELECT RAISE(ABORT, 'task_events is append-only'); END;
    CREATE TRIGGER task_events_no_delete BEFORE DELETE ON task_events
        BEGIN SELECT RAISE(ABORT, 'task_events is append-only'); END;
    "#,
    // 2: a covering index for the dispatch scan of ready tasks (no table lookups per row).
    r#"
    CREATE INDEX tasks_dispatch ON tasks(board, status, priority DESC, created_at, id, assignee, claim_lock);
    "#,
    // 3: the claim protocol. A claim is a short spawn lease until the worker confirms its own run (pid, start
    // fingerprint, host, time). Runs already running with a recorded worker count as confirmed when they started.
    r#"
    ALTER TABLE tasks ADD COLUMN worker_host TEXT;
    ALTER TABLE tasks ADD COLUMN confirmed_at INTEGER;
    ALTER TABLE task_runs ADD COLUMN worker_start INTEGER;
    ALTER TABLE task_runs ADD COLUMN worker_host TEXT;
    ALTER TABLE task_runs ADD COLUMN confirmed_at INTEGER;
    UPDATE tasks SET confirmed_at = started_at WHERE status = 'running' AND worker_pid IS NOT NULL;
    UPDATE task_runs SET confirmed_at = started_at WHERE ended_at IS NULL AND worker_pid IS NOT NULL;
    "#,
    // 4: host heartbeats. Each host (its gateway, its workers) renews its row; a worker on another host is judged by
    // its host's row, never by this host's process table.
    r#"
    CREATE TABLE hosts (id TEXT PRIMARY KEY, seen_at INTEGER NOT NULL) WITHOUT ROWID;
    "#,
    // 5: tasks in time. A ready task is not claimed before `not_before` (scheduled, a retry's backoff, a snooze);
    // the dispatch index covers it, so a tick still plans from the index alone.
    r#"
    ALTER TABLE tasks ADD COLUMN not_before INTEGER;
    DROP INDEX tasks_dispatch;
    CREATE INDEX tasks_dispatch ON tasks(board, status, priority DESC, created_at, id, assignee, claim_lock, not_before);
    "#,
    // 6: idempotency keys. At most one task per key on a board: a create under a key the board holds returns that
    // task (looked up by this index).
    r#"
    ALTER TABLE tasks ADD COLUMN idempotency_key TEXT;
    CREATE UNIQUE INDEX tasks_idempotency ON tasks(board, idempotency_key) WHERE idempotency_key IS NOT NULL;
    "#,
    // 7: review and typed blocks. A `review` task's successful run ends in `review`; the last request-changes note
    // reaches its next runs; the last block's kind and reason are kept (the same block again goes to triage).
    r#"
    ALTER TABLE tasks ADD COLUMN review INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN review_note TEXT;
    ALTER TABLE tasks ADD COLUMN block_kind TEXT;
    ALTER TABLE tasks ADD COLUMN block_reason TEXT;
    "#,
    // 8: recurring tasks (`kanban cron`). A schedule is a row; each due slot's task is created under the key
    // `cron:NAME:<slot>` (so a slot makes one task), and `last_slot` keeps the latest slot made.
    r#"
    CREATE TABLE schedules (
        board TEXT NOT NULL REFERENCES boards(slug),
        name TEXT NOT NULL,
        every_seconds INTEGER,
        cron TEXT,
        assignee TEXT NOT NULL,
        command TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        last_slot INTEGER,
        PRIMARY KEY (board, name)
    );
    "#,
    // 9: start-rate limits (`kanban.rate_limit_per_minute`). A tick with a limit set counts the board's runs started
    // in the last minute from this index.
    r#"
    CREATE INDEX task_runs_started ON task_runs(started_at);
    "#,
];
