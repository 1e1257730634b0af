//! One dispatch tick on the store: a snapshot, the domain's pure plan, and (unless dry) its application in one
//! `BEGIN IMMEDIATE` transaction — housekeeping, promotion, default assignment and compare-and-swap claims.

use std::collections::BTreeMap;

use domain::board::liveness::WorkerFacts;
use domain::board::transitions::{Guarded, HousekeepingChange};
use domain::board::{AssignedBy, BoardEvent};
use domain::board::{BoardSnapshot, Claimed, RunningRow, TaskRow, TaskStatus, TickOutcome, TickRequest};
use domain::ids::BoardSlug;
use domain::policy::dispatch::{Decision, DecisionRef, Housekeeping, PlanSink, Planner, ReadyTask, TickPlan, requeues};
use domain::time::Timestamp;
use rusqlite::{Connection, params};

use crate::Sql;
use crate::rows::status_of;
use crate::transitions::{close_run, event, guarded, record_task_failure, worker_of};
use crate::{Result, RunEnd, SqliteKanbanStore, StoreError};

fn opt_ts(ms: Option<i64>) -> Option<Timestamp> {
    ms.map(Timestamp::from_millis)
}

/// Reads the board's open tasks and the running counts of the other boards.
///
/// Ready and todo tasks come from one scan of a covering index with only the columns planning needs; running tasks
/// (few) are read whole.
fn snapshot(conn: &Connection, req: &TickRequest<'_>) -> Result<BoardSnapshot> {
    let board = req.board;
    let mut snap = snapshot_of(conn, req, true)?;
    (snap.running_elsewhere, snap.total_running_elsewhere) = running_elsewhere(conn, board)?;
    snap.recent_starts = recent_starts(conn, req)?;
    Ok(snap)
}

/// The board's starts (runs claimed) within the rate window before `req.now`, with their assignees; read only when
/// a start-rate limit is set. From the `task_runs (started_at)` index.
fn recent_starts(conn: &Connection, req: &TickRequest<'_>) -> Result<Vec<(Option<String>, Timestamp)>> {
    if !req.cfg.caps.rate_limited() {
        return Ok(Vec::new());
    }
    let from = req.now.as_millis() - domain::board::RATE_WINDOW_SECS * 1000;
    let mut stmt = conn
        .prepare_cached(
            "SELECT r.assignee, r.started_at FROM task_runs r JOIN tasks t ON t.id = r.task_id \
             WHERE r.started_at > ?2 AND t.board = ?1",
        )
        .sql()?;
    let mut rows = stmt.query(params![req.board.as_str(), from]).sql()?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().sql()? {
        out.push((r.get(0).sql()?, Timestamp::from_millis(r.get(1).sql()?)));
    }
    Ok(out)
}

/// This board's running tasks and its `todo` tasks (with whether their parents are done); with `ready`, its
/// ready tasks too. No counts of the other boards.
fn snapshot_of(conn: &Connection, req: &TickRequest<'_>, ready: bool) -> Result<BoardSnapshot> {
    let board = req.board;
    let mut tasks = Vec::new();
    let sql = if ready {
        "SELECT t.id, t.assignee, t.status, t.priority, t.created_at, t.claim_lock IS NOT NULL, \
         CASE WHEN t.status = 'todo' THEN NOT EXISTS (SELECT 1 FROM task_links l JOIN tasks p ON p.id = l.parent_id \
              WHERE l.child_id = t.id AND p.status NOT IN ('done', 'archived')) ELSE 0 END, t.not_before \
         FROM tasks t WHERE t.board = ?1 AND t.status IN ('ready', 'todo') ORDER BY t.status, t.priority DESC, t.created_at"
    } else {
        "SELECT t.id, t.assignee, t.status, t.priority, t.created_at, t.claim_lock IS NOT NULL, 1, t.not_before FROM tasks t \
         WHERE t.board = ?1 AND t.status = 'todo' AND NOT EXISTS (SELECT 1 FROM task_links l JOIN tasks p ON \
         p.id = l.parent_id WHERE l.child_id = t.id AND p.status NOT IN ('done', 'archived'))"
    };
    let mut stmt = conn.prepare_cached(sql).sql()?;
    let mut rows = stmt.query([board.as_str()]).sql()?;
    while let Some(r) = rows.next().sql()? {
        let status = status_of(r.get_ref(2).sql()?.as_str().map_err(|e| StoreError::Invalid(e.to_string()))?)?;
        tasks.push(TaskRow {
            claimed: r.get(5).sql()?,
            parents_done: r.get(6).sql()?,
            not_before: r.get::<_, Option<i64>>(7).sql()?.map(Timestamp::from_millis),
            ..TaskRow::waiting(
                r.get(0).sql()?,
                r.get(1).sql()?,
                status,
                r.get(3).sql()?,
                Timestamp::from_millis(r.get(4).sql()?),
            )
        });
    }
    let mut stmt = conn.prepare_cached(
        "SELECT t.id, t.assignee, t.priority, t.created_at, t.claim_lock IS NOT NULL, t.claim_expires, t.worker_pid, \
         t.worker_start, t.last_heartbeat_at, t.confirmed_at, t.max_runtime_seconds, t.consecutive_failures, \
         t.max_retries, t.current_run_id, t.worker_host \
         FROM tasks t WHERE t.board = ?1 AND t.status = 'running'",
    ).sql()?;
    let mut rows = stmt.query([board.as_str()]).sql()?;
    let mut seen_at = None;
    while let Some(r) = rows.next().sql()? {
        let host: Option<String> = r.get(14).sql()?;
        let seen = match host.as_deref() {
            Some(h) if !domain::board::liveness::is_local(&req.cfg.host, Some(h)) => {
                seen_at.get_or_insert(crate::queries::host_seen_at(conn)?).get(h).copied()
            }
            _ => None,
        };
        let row = RunningRow {
            id: r.get(0).sql()?,
            assignee: r.get(1).sql()?,
            priority: r.get(2).sql()?,
            created_at: Timestamp::from_millis(r.get(3).sql()?),
            claimed: r.get(4).sql()?,
            claim_expires: opt_ts(r.get(5).sql()?),
            run_id: r.get(13).sql()?,
            worker: WorkerFacts {
                pid: r.get(6).sql()?,
                start: r.get(7).sql()?,
                host: host.as_deref(),
                host_silent: seen.map(|s| silence(req.now, s)),
            },
            last_heartbeat: opt_ts(r.get(8).sql()?),
            started_at: opt_ts(r.get(9).sql()?),
            max_runtime_secs: r.get(10).sql()?,
            consecutive_failures: u32::try_from(r.get::<_, i64>(11).sql()?).unwrap_or(0),
            max_retries: r.get::<_, Option<i64>>(12).sql()?.and_then(|m| u32::try_from(m).ok()),
        };
        tasks.push(TaskRow::running(row, req.cfg, req.probe));
    }
    Ok(BoardSnapshot { tasks, ..BoardSnapshot::default() })
}

/// Running tasks per assignee on the other boards of this host, and their total (assigned or not); from the
/// `(status, assignee)` index.
fn running_elsewhere(conn: &Connection, board: &BoardSlug) -> Result<(BTreeMap<String, u32>, u32)> {
    let mut per = BTreeMap::new();
    let mut total = 0;
    let mut stmt = conn
        .prepare_cached(
            "SELECT assignee, COUNT(*) FROM tasks WHERE status = 'running' AND board != ?1 GROUP BY assignee",
        )
        .sql()?;
    let mut rows = stmt.query([board.as_str()]).sql()?;
    while let Some(r) = rows.next().sql()? {
        let n = u32::try_from(r.get::<_, i64>(1).sql()?).unwrap_or(u32::MAX);
        total += n;
        if let Some(a) = r.get::<_, Option<String>>(0).sql()?.filter(|a| !a.is_empty()) {
            per.insert(a, n);
        }
    }
    Ok((per, total))
}

/// How long ago `seen_at` (epoch milliseconds) was, at `now`; zero for a time ahead of `now`.
pub(crate) fn silence(now: Timestamp, seen_at: i64) -> std::time::Duration {
    std::time::Duration::from_millis(u64::try_from(now.as_millis().saturating_sub(seen_at)).unwrap_or(0))
}

fn text(v: rusqlite::types::ValueRef<'_>) -> Result<Option<&str>> {
    match v {
        rusqlite::types::ValueRef::Null => Ok(None),
        v => v.as_str().map(Some).map_err(|e| StoreError::Invalid(e.to_string())),
    }
}

/// A dry run's plan, streamed: the board's running tasks (few, read whole) and promotable `todo` tasks first, then
/// one pass over the covering `tasks_dispatch` index of ready tasks in dispatch order, merged with the tasks
/// housekeeping requeues and the promoted ones. No row outlives its decision, so memory does not grow with the
/// ready tasks.
fn stream_plan(conn: &Connection, req: &TickRequest<'_>, sink: &mut dyn PlanSink) -> Result<()> {
    let board = req.board;
    let (elsewhere, total) = running_elsewhere(conn, board)?;
    let mut planner = Planner::new(req.now, req.cfg, &elsewhere, total).with_starts(&recent_starts(conn, req)?);
    let snap = snapshot_of(conn, req, false)?;
    let mut extra: Vec<ReadyTask<'_>> = Vec::new();
    for t in &snap.tasks {
        match t.status {
            TaskStatus::Running => {
                if let Some(h) = planner.running(t) {
                    if requeues(&h) {
                        extra.push(ReadyTask::of(t));
                    }
                    sink.housekeeping(&t.id, &h);
                }
            }
            TaskStatus::Todo if t.parents_done => {
                sink.promoted(&t.id);
                extra.push(ReadyTask::of(t));
            }
            _ => {}
        }
    }
    extra.sort_by(ReadyTask::dispatch_order);
    let mut extra = extra.into_iter().peekable();
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, assignee, priority, created_at, not_before FROM tasks INDEXED BY tasks_dispatch \
         WHERE board = ?1 AND status = 'ready' AND claim_lock IS NULL ORDER BY priority DESC, created_at, id",
        )
        .sql()?;
    let mut rows = stmt.query([board.as_str()]).sql()?;
    while let Some(r) = rows.next().sql()? {
        let t = ReadyTask {
            id: text(r.get_ref(0).sql()?)?.unwrap_or_default(),
            assignee: text(r.get_ref(1).sql()?)?,
            priority: r.get(2).sql()?,
            created_at: Timestamp::from_millis(r.get(3).sql()?),
            // SQLite boards live on one host: no retry waits for another.
            sandbox_elsewhere_since: None,
            not_before: r.get::<_, Option<i64>>(4).sql()?.map(Timestamp::from_millis),
        };
        while let Some(e) = extra.next_if(|e| e.dispatch_order(&t).is_lt()) {
            planner.decide(e, sink);
        }
        planner.decide(t, sink);
    }
    for e in extra {
        planner.decide(e, sink);
    }
    planner.finish(sink);
    Ok(())
}

impl SqliteKanbanStore {
    /// Streams a dry run's plan into `sink` in one read transaction, writing nothing.
    ///
    /// # Errors
    /// [`StoreError::NoBoard`], [`StoreError::Invalid`] for undecodable rows, or an SQLite error.
    pub(crate) fn stream_dry_plan(&self, req: &TickRequest<'_>, sink: &mut dyn PlanSink) -> Result<()> {
        self.board(req.board)?;
        let tx = self.conn.unchecked_transaction().sql()?;
        stream_plan(&tx, req, sink)
    }

    /// Reads a tick's snapshot in one read transaction, writing nothing (dry run).
    ///
    /// # Errors
    /// [`StoreError::NoBoard`] or an SQLite error.
    pub(crate) fn read_snapshot(&self, req: &TickRequest<'_>) -> Result<BoardSnapshot> {
        self.board(req.board)?;
        let tx = self.conn.unchecked_transaction().sql()?;
        snapshot(&tx, req)
    }

    /// Runs a real tick in one `BEGIN IMMEDIATE` transaction: snapshot, the domain's `plan`, then its application;
    /// returns what to spawn and stop.
    ///
    /// # Errors
    /// [`StoreError::NoBoard`], [`StoreError::Invalid`] for undecodable rows, or an SQLite error.
    pub(crate) fn apply_tick(
        &mut self,
        req: &TickRequest<'_>,
        plan: &(dyn Fn(&BoardSnapshot) -> TickPlan + Sync),
    ) -> Result<TickOutcome> {
        self.board(req.board)?;
        let tx = self.write()?;
        let snap = snapshot(&tx, req)?;
        let plan = plan(&snap);
        drop(snap);
        let out = apply_plan(&tx, req, plan)?;
        tx.commit().sql()?;
        Ok(out)
    }

    /// A real tick whose plan is streamed (one pass over the ready index, as a dry run) into `sink` while only what
    /// the tick applies is kept: housekeeping, promotions, spawns and default assignments. Then their application,
    /// all in one `BEGIN IMMEDIATE` transaction.
    ///
    /// # Errors
    /// As [`SqliteKanbanStore::apply_tick`].
    pub(crate) fn apply_tick_streamed(
        &mut self,
        req: &TickRequest<'_>,
        sink: &mut dyn PlanSink,
    ) -> Result<TickOutcome> {
        self.board(req.board)?;
        let tx = self.write()?;
        let mut kept = Applied { plan: TickPlan::default(), sink };
        stream_plan(&tx, req, &mut kept)?;
        let out = apply_plan(&tx, req, kept.plan)?;
        tx.commit().sql()?;
        Ok(out)
    }
}

/// Forwards a streamed plan to the caller's sink and keeps what the tick must apply.
struct Applied<'s> {
    plan: TickPlan,
    sink: &'s mut dyn PlanSink,
}

impl PlanSink for Applied<'_> {
    fn housekeeping(&mut self, task_id: &str, action: &Housekeeping) {
        self.plan.housekeeping(task_id, action);
        self.sink.housekeeping(task_id, action);
    }
    fn promoted(&mut self, task_id: &str) {
        self.plan.promoted(task_id);
        self.sink.promoted(task_id);
    }
    fn decision(&mut self, d: &DecisionRef<'_>) {
        if d.auto_assigned || d.decision == Decision::Spawn {
            self.plan.decision(d);
        } else {
            self.plan.note_due(&d.decision);
        }
        self.sink.decision(d);
    }
}

/// Applies one housekeeping verdict, guarded: `false` (nothing written) when the task left `running` meanwhile.
fn apply_housekeeping(
    tx: &rusqlite::Transaction<'_>,
    req: &TickRequest<'_>,
    id: &str,
    hk: &Housekeeping,
    out: &mut TickOutcome,
) -> Result<bool> {
    let now = req.now;
    let change = hk.change();
    let command = change.command();
    // A verdict the task has moved past writes nothing; a storage error fails the tick, as on every store.
    match guarded(tx, id, command, None, "") {
        Ok(Guarded::Apply(_)) => {}
        Ok(Guarded::AlreadyDone) | Err(StoreError::Moved { .. } | StoreError::Transition { .. }) => return Ok(false),
        Err(e) => return Err(e),
    }
    match change {
        HousekeepingChange::Extend => {
            let expires = now.as_millis().saturating_add(i64::try_from(req.claim_ttl.as_millis()).unwrap_or(i64::MAX));
            tx.execute("UPDATE tasks SET claim_expires = ?2 WHERE id = ?1", params![id, expires]).sql()?;
            event(tx, id, None, &BoardEvent::ClaimExtended { expires }, now).sql()?;
        }
        HousekeepingChange::Fail { outcome, error, stop_worker } => {
            if stop_worker {
                out.stop_workers.extend(worker_of(tx, id, &req.cfg.host)?);
            }
            let end = RunEnd { outcome, error: &error, exit_code: None, retry_at: None };
            // The backoff is the task's assignee's (per-profile overrides).
            let assignee: Option<String> =
                tx.query_row("SELECT assignee FROM tasks WHERE id = ?1", [id], |r| r.get(0)).sql()?;
            record_task_failure(tx, id, &end, req.cfg.breaker_for(assignee.as_deref()), now)?;
        }
        HousekeepingChange::Requeue { outcome, stop_worker } => {
            if stop_worker {
                out.stop_workers.extend(worker_of(tx, id, &req.cfg.host)?);
            }
            let run = close_run(tx, id, outcome, None, None, now).sql()?;
            tx.execute(
                concat!("UPDATE tasks SET status = 'ready', ", crate::transitions::clear_claim!(), " WHERE id = ?1"),
                [id],
            )
            .sql()?;
            event(tx, id, run, &BoardEvent::Housekeeping(hk), now).sql()?;
        }
    }
    Ok(true)
}

/// Applies a tick's plan inside its transaction: housekeeping, promotion, default assignment and compare-and-swap
/// claims; the outcome carries the plan.
fn apply_plan(tx: &rusqlite::Transaction<'_>, req: &TickRequest<'_>, mut plan: TickPlan) -> Result<TickOutcome> {
    let now = req.now;
    let lease_ms = i64::try_from(req.spawn_lease.as_millis()).unwrap_or(i64::MAX);
    let mut out = TickOutcome::default();

    // The tick holds the write lock since its snapshot, so every task is still on the run it judged: the guard
    // (expected status) cannot fail here, but it is the same one PostgreSQL's tick needs.
    let mut applied = Vec::with_capacity(plan.housekeeping.len());
    for (id, hk) in std::mem::take(&mut plan.housekeeping) {
        if apply_housekeeping(tx, req, &id, &hk, &mut out)? {
            applied.push((id, hk));
        }
    }
    plan.housekeeping = applied;
    for id in &plan.promoted {
        tx.execute("UPDATE tasks SET status = 'ready' WHERE id = ?1 AND status = 'todo'", [id]).sql()?;
        event(tx, id, None, &BoardEvent::Promoted { parent: None, status: None }, now).sql()?;
    }
    for d in &plan.decisions {
        if d.auto_assigned {
            let who = d.assignee.as_deref().unwrap_or_default();
            tx.execute(
                "UPDATE tasks SET assignee = ?2 WHERE id = ?1 AND (assignee IS NULL OR trim(assignee) = '')",
                params![d.task_id, who],
            )
            .sql()?;
            let assigned = BoardEvent::Assigned { assignee: Some(who), source: AssignedBy::DefaultAssignee };
            event(tx, &d.task_id, None, &assigned, now).sql()?;
        }
        if d.decision != Decision::Spawn {
            continue;
        }
        // The claim starts as a short spawn lease; the worker's confirmation turns it into a `claim_ttl` claim.
        let expires = now.as_millis().saturating_add(lease_ms);
        // Compare-and-swap: a claim that lost a race writes nothing.
        let n = tx
            .prepare_cached(
                "UPDATE tasks SET status = 'running', claim_lock = ?2, claim_expires = ?3, started_at = ?4, worker_pid = NULL, \
                 worker_start = NULL, worker_host = NULL, confirmed_at = NULL, last_heartbeat_at = NULL, not_before = NULL \
                 WHERE id = ?1 AND status = 'ready' AND claim_lock IS NULL",
            ).sql()?
            .execute(params![d.task_id, req.claimer, expires, now.as_millis()]).sql()?;
        if n != 1 {
            continue;
        }
        tx.prepare_cached(
            "INSERT INTO task_runs (task_id, status, assignee, claim_lock, claim_expires, started_at) VALUES (?1, 'running', ?2, ?3, ?4, ?5)",
        ).sql()?
        .execute(params![d.task_id, d.assignee, req.claimer, expires, now.as_millis()]).sql()?;
        let run_id = tx.last_insert_rowid();
        let (assignee, review_note): (Option<String>, Option<String>) = tx
            .prepare_cached("UPDATE tasks SET current_run_id = ?2 WHERE id = ?1 RETURNING assignee, review_note")
            .sql()?
            .query_row(params![d.task_id, run_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .sql()?;
        let claimed = BoardEvent::Claimed { lock: req.claimer, expires, run_id };
        event(tx, &d.task_id, Some(run_id), &claimed, now).sql()?;
        out.claimed.push(Claimed { task_id: d.task_id.clone(), assignee, run_id, review_note });
    }
    out.plan = plan;
    Ok(out)
}
