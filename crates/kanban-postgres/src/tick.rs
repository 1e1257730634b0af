//! The dispatch tick on PostgreSQL, and the store as the domain's `KanbanStore` port.
//!
//! A tick is one transaction that first takes [`TICK_LOCK`] (`pg_advisory_xact_lock`): every dispatcher of every
//! host reads its snapshot only once the previous tick committed, so the running counts it plans with are the
//! board's, and `kanban.max_in_progress` and the per-profile caps hold over all hosts together. The lock is the
//! transaction's: a crashed or disconnected holder releases it with its rollback. Claims are compare-and-swaps on
//! rows locked `FOR UPDATE SKIP LOCKED` (a row another command is changing is left for the next tick), written in
//! a few set-based statements so 300 claims cost a handful of round trips.
//!
//! Liveness across hosts: a running task whose worker is on this host (`worker_host` = this host's id) is probed by
//! pid and start time; a worker elsewhere is judged by its heartbeat lease only (`claim_expires`, which its
//! heartbeats extend), so a dead host's tasks are reclaimed once their leases lapse, and a live one's never are.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use domain::board::Breaker;
use domain::board::KanbanStore;
use domain::board::liveness::{WorkerFacts, is_local};
use domain::board::transitions::{Guarded, HousekeepingChange, TaskCommand};
use domain::board::{AssignedBy, BoardEvent};
use domain::board::{
    BoardSnapshot, Claimed, FailureOutcome, RunningRow, SpawnRecord, TaskBrief, TaskRow, TaskStatus, TickConfig,
    TickOutcome, TickRequest,
};
use domain::board::{BoardStore, RunEnd, StoreError};
use domain::ids::BoardSlug;
use domain::policy::dispatch::{Decision, Housekeeping, TickPlan};
use domain::time::Timestamp;

use crate::board::{CLEAR_CLAIM, close_run, guarded, record_task_failure, status_of, worker_of};
use crate::client::GenericClient;
use crate::{Conn, PgErr, PgKanbanStore, PgResult};

/// The advisory lock every tick takes for its transaction ("BRTHTICK").
pub const TICK_LOCK: i64 = 0x4252_5448_5449_434b;

fn opt_ts(ms: Option<i64>) -> Option<Timestamp> {
    ms.map(Timestamp::from_millis)
}

const SNAPSHOT_OPEN: &str = "SELECT t.id, t.assignee, t.status, t.priority, t.created_at, t.claim_lock IS NOT NULL, \
     CASE WHEN t.status = 'todo' THEN NOT EXISTS (SELECT 1 FROM berth.task_links l JOIN berth.tasks p \
          ON p.id = l.parent_id WHERE l.child_id = t.id AND p.status NOT IN ('done', 'archived')) ELSE false END, \
     CASE WHEN t.consecutive_failures > 0 THEN (SELECT r.worker_host FROM berth.task_runs r WHERE r.task_id = t.id \
          ORDER BY r.id DESC LIMIT 1) END, \
     CASE WHEN t.consecutive_failures > 0 THEN (SELECT r.ended_at FROM berth.task_runs r WHERE r.task_id = t.id \
          ORDER BY r.id DESC LIMIT 1) END, t.not_before \
     FROM berth.tasks t WHERE t.board = $1 AND t.status IN ('ready', 'todo')";

/// A running task with how long its worker's host has been silent, by the server's clock and counted at most from
/// the server's own start: after a server restart every host gets a full host timeout to come back before it is
/// judged lost, so an outage of the board alone never hands a live host's tasks to another.
const SNAPSHOT_RUNNING: &str = "SELECT t.id, t.assignee, t.priority, t.created_at, t.claim_lock IS NOT NULL, \
     t.claim_expires, t.worker_pid, t.worker_start, t.last_heartbeat_at, t.confirmed_at, t.max_runtime_seconds, \
     t.consecutive_failures, t.max_retries, t.worker_host, t.current_run_id, \
     (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint \
        - greatest(h.seen_at, (extract(epoch FROM pg_postmaster_start_time()) * 1000)::bigint) \
      FROM berth.hosts h WHERE h.id = t.worker_host) \
     FROM berth.tasks t WHERE t.board = $1 AND t.status = 'running'";

const SNAPSHOT_ELSEWHERE: &str = "SELECT assignee, COUNT(*) FROM berth.tasks WHERE status = 'running' AND board <> $1 \
     GROUP BY assignee";

/// Whether the board exists and is not archived.
const BOARD_LIVE: &str = "SELECT 1 FROM berth.boards WHERE slug = $1 AND archived = 0";

/// Reads the board's open tasks and the running counts of the other boards (of every host).
fn snapshot(tx: &mut impl GenericClient, req: &TickRequest<'_>) -> PgResult<BoardSnapshot> {
    let (board, cfg, probe, host) = (req.board, req.cfg, req.probe, req.cfg.host.as_str());
    let mut tasks = Vec::new();
    for r in tx.query(SNAPSHOT_OPEN, &[&board.as_str()])? {
        let (last_host, last_ended): (Option<String>, Option<i64>) = (r.try_get(7)?, r.try_get(8)?);
        let elsewhere = last_host.filter(|h| h != host).and(last_ended).map(Timestamp::from_millis);
        let (id, assignee, status) = (r.try_get(0)?, r.try_get(1)?, status_of(r.try_get(2)?)?);
        tasks.push(TaskRow {
            claimed: r.try_get(5)?,
            parents_done: r.try_get(6)?,
            sandbox_elsewhere_since: elsewhere,
            not_before: r.try_get::<_, Option<i64>>(9)?.map(Timestamp::from_millis),
            ..TaskRow::waiting(id, assignee, status, r.try_get(3)?, Timestamp::from_millis(r.try_get(4)?))
        });
    }
    for r in tx.query(SNAPSHOT_RUNNING, &[&board.as_str()])? {
        let host: Option<String> = r.try_get(13)?;
        let silent: Option<i64> = r.try_get(15)?;
        let row = RunningRow {
            id: r.try_get(0)?,
            assignee: r.try_get(1)?,
            priority: r.try_get(2)?,
            created_at: Timestamp::from_millis(r.try_get(3)?),
            claimed: r.try_get(4)?,
            claim_expires: opt_ts(r.try_get(5)?),
            run_id: r.try_get(14)?,
            worker: WorkerFacts {
                pid: r.try_get(6)?,
                start: r.try_get(7)?,
                host: host.as_deref(),
                host_silent: silent.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
            },
            last_heartbeat: opt_ts(r.try_get(8)?),
            started_at: opt_ts(r.try_get(9)?),
            max_runtime_secs: r.try_get(10)?,
            consecutive_failures: u32::try_from(r.try_get::<_, i64>(11)?).unwrap_or(0),
            max_retries: r.try_get::<_, Option<i64>>(12)?.and_then(|m| u32::try_from(m).ok()),
        };
        tasks.push(TaskRow::running(row, cfg, probe));
    }
    let mut running_elsewhere = BTreeMap::new();
    let mut total_running_elsewhere = 0;
    for r in tx.query(SNAPSHOT_ELSEWHERE, &[&board.as_str()])? {
        let n = u32::try_from(r.try_get::<_, i64>(1)?).unwrap_or(u32::MAX);
        total_running_elsewhere += n;
        if let Some(a) = r.try_get::<_, Option<String>>(0)?.filter(|a| !a.is_empty()) {
            running_elsewhere.insert(a, n);
        }
    }
    let mut recent_starts = Vec::new();
    if cfg.caps.rate_limited() {
        // Under the tick's lock, so every host counts the same starts (and its own just committed).
        let from = req.now.as_millis() - domain::board::RATE_WINDOW_SECS * 1000;
        for r in tx.query(SNAPSHOT_STARTS, &[&board.as_str(), &from])? {
            recent_starts.push((r.try_get(0)?, Timestamp::from_millis(r.try_get(1)?)));
        }
    }
    Ok(BoardSnapshot { tasks, running_elsewhere, total_running_elsewhere, recent_starts })
}

/// The board's starts (runs claimed, by any host) in the rate window, from the `task_runs (started_at)` index.
const SNAPSHOT_STARTS: &str = "SELECT r.assignee, r.started_at FROM berth.task_runs r JOIN berth.tasks t \
     ON t.id = r.task_id WHERE r.started_at > $2 AND t.board = $1";

/// A tick's events, appended in one statement at its end, in order.
#[derive(Default)]
pub(crate) struct Events {
    task: Vec<String>,
    run: Vec<Option<i64>>,
    kind: Vec<&'static str>,
    payload: Vec<String>,
}

impl Events {
    pub(crate) fn push(&mut self, task: &str, run: Option<i64>, event: &BoardEvent<'_>) {
        self.task.push(task.to_owned());
        self.run.push(run);
        self.kind.push(event.kind());
        self.payload.push(event.payload());
    }

    pub(crate) fn flush(self, stmt: &str, tx: &mut impl GenericClient, now: Timestamp) -> PgResult<()> {
        if !self.task.is_empty() {
            tx.execute(stmt, &[&self.task, &self.run, &self.kind, &self.payload, &now.as_millis()])?;
        }
        Ok(())
    }
}

pub(crate) const EVENTS: &str = "INSERT INTO berth.task_events (task_id, run_id, kind, payload, created_at) \
     SELECT u.task, u.run, u.kind, u.payload, $5 FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) \
     WITH ORDINALITY AS u(task, run, kind, payload, n) ORDER BY u.n";

const AUTO_ASSIGN: &str = "UPDATE berth.tasks t SET assignee = u.who FROM unnest($1::text[], $2::text[]) AS u(id, who) \
     WHERE t.id = u.id AND (t.assignee IS NULL OR trim(t.assignee) = '')";

/// The claims of one tick in one statement: lock the planned tasks still ready and unclaimed (`SKIP LOCKED`: a row
/// another command holds is left for the next tick), add a run for each, and turn each into a spawn-lease claim on
/// that run. A task that lost its compare-and-swap gets neither.
const CLAIM: &str = "WITH won AS (SELECT t.id, t.assignee FROM berth.tasks t \
       WHERE t.id = ANY($1) AND t.status = 'ready' AND t.claim_lock IS NULL FOR UPDATE SKIP LOCKED), \
     runs AS (INSERT INTO berth.task_runs (task_id, status, assignee, claim_lock, claim_expires, started_at) \
       SELECT won.id, 'running', coalesce(u.assignee, won.assignee), $3, $4, $5 \
       FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(id, assignee, n) JOIN won ON won.id = u.id \
       ORDER BY u.n RETURNING id, task_id) \
     UPDATE berth.tasks t SET status = 'running', claim_lock = $3, claim_expires = $4, started_at = $5, \
       worker_pid = NULL, worker_start = NULL, worker_host = NULL, confirmed_at = NULL, last_heartbeat_at = NULL, \
       not_before = NULL, current_run_id = runs.id \
     FROM runs WHERE t.id = runs.task_id RETURNING t.id, t.assignee, runs.id, t.review_note";

/// Applies one tick in one transaction under [`TICK_LOCK`]: snapshot, `plan`, housekeeping, promotion, default
/// assignment and claims.
fn apply_tick(
    c: &mut Conn,
    host: &str,
    req: &TickRequest<'_>,
    plan: &(dyn Fn(&BoardSnapshot) -> TickPlan + Sync),
) -> PgResult<TickOutcome> {
    let now = req.now;
    let lease_ms = i64::try_from(req.spawn_lease.as_millis()).unwrap_or(i64::MAX);
    let mut tx = c.client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&TICK_LOCK])?;
    if tx.query_opt(BOARD_LIVE, &[&req.board.as_str()])?.is_none() {
        return Err(StoreError::NoBoard(req.board.as_str().to_owned()).into());
    }
    let snap = snapshot(&mut tx, req)?;
    let plan = plan(&snap);
    let mut out = TickOutcome::default();
    let mut events = Events::default();

    // Every verdict is guarded by the run it judged: a worker that completed its run between this tick's snapshot
    // and its write (workers do not take the tick's lock) leaves the verdict with nothing to change.
    let runs: HashMap<&str, Option<i64>> =
        snap.tasks.iter().filter(|t| t.status == TaskStatus::Running).map(|t| (t.id.as_str(), t.run_id)).collect();
    let mut plan = plan;
    let mut applied = Vec::with_capacity(plan.housekeeping.len());
    for (id, hk) in std::mem::take(&mut plan.housekeeping) {
        let run = runs.get(id.as_str()).copied().flatten();
        if apply_housekeeping(&mut tx, req, host, (&id, run), &hk, &mut out, &mut events)? {
            applied.push((id, hk));
        }
    }
    plan.housekeeping = applied;
    if !plan.promoted.is_empty() {
        tx.execute(
            "UPDATE berth.tasks SET status = 'ready' WHERE id = ANY($1) AND status = 'todo'",
            &[&plan.promoted],
        )?;
        for id in &plan.promoted {
            events.push(id, None, &BoardEvent::Promoted { parent: None, status: None });
        }
    }
    let (mut assign_ids, mut assign_who) = (Vec::new(), Vec::new());
    let (mut spawn_ids, mut spawn_assignees): (Vec<&str>, Vec<Option<&str>>) = (Vec::new(), Vec::new());
    for d in &plan.decisions {
        if d.auto_assigned {
            let who = d.assignee.as_deref().unwrap_or_default();
            assign_ids.push(d.task_id.as_str());
            assign_who.push(who);
            events.push(
                &d.task_id,
                None,
                &BoardEvent::Assigned { assignee: Some(who), source: AssignedBy::DefaultAssignee },
            );
        }
        if d.decision == Decision::Spawn {
            spawn_ids.push(&d.task_id);
            spawn_assignees.push(d.assignee.as_deref());
        }
    }
    if !assign_ids.is_empty() {
        tx.execute(AUTO_ASSIGN, &[&assign_ids, &assign_who])?;
    }
    if !spawn_ids.is_empty() {
        // The claim starts as a short spawn lease; the worker's confirmation turns it into a `claim_ttl` claim.
        let expires = now.as_millis().saturating_add(lease_ms);
        let assignees: Vec<Option<&str>> = spawn_assignees;
        let mut won: HashMap<String, (Option<String>, i64, Option<String>)> = tx
            .query(CLAIM, &[&spawn_ids, &assignees, &req.claimer, &expires, &now.as_millis()])?
            .iter()
            .map(|r| Ok((r.try_get(0)?, (r.try_get(1)?, r.try_get(2)?, r.try_get(3)?))))
            .collect::<PgResult<_>>()?;
        // In plan order; a claim that lost its compare-and-swap wrote nothing.
        for id in &spawn_ids {
            let Some((assignee, run_id, review_note)) = won.remove(*id) else { continue };
            events.push(id, Some(run_id), &BoardEvent::Claimed { lock: req.claimer, expires, run_id });
            out.claimed.push(Claimed { task_id: (*id).to_owned(), assignee, run_id, review_note });
        }
    }
    events.flush(EVENTS, &mut tx, now)?;
    tx.commit()?;
    out.plan = plan;
    Ok(out)
}

/// Applies one housekeeping verdict on `task` (its id and the run the tick judged), guarded: `false` (nothing
/// written) when the task left that run meanwhile.
fn apply_housekeeping(
    tx: &mut impl GenericClient,
    req: &TickRequest<'_>,
    host: &str,
    (id, run): (&str, Option<i64>),
    hk: &Housekeeping,
    out: &mut TickOutcome,
    events: &mut Events,
) -> PgResult<bool> {
    let now = req.now;
    let change = hk.change();
    let command = change.command();
    match guarded(tx, id, command, run, "") {
        Ok(Guarded::Apply(_)) => {}
        Ok(Guarded::AlreadyDone) | Err(PgErr(StoreError::Moved { .. } | StoreError::Transition { .. })) => {
            return Ok(false);
        }
        Err(e) => return Err(e),
    }
    match change {
        HousekeepingChange::Extend => {
            let expires = now.as_millis().saturating_add(i64::try_from(req.claim_ttl.as_millis()).unwrap_or(i64::MAX));
            tx.execute("UPDATE berth.tasks SET claim_expires = $2 WHERE id = $1", &[&id, &expires])?;
            events.push(id, None, &BoardEvent::ClaimExtended { expires });
        }
        HousekeepingChange::Fail { outcome, error, stop_worker } => {
            if stop_worker {
                out.stop_workers.extend(worker_of(tx, id, host)?);
            }
            let end = RunEnd { outcome, error: &error, exit_code: None, retry_at: None };
            // The backoff is the task's assignee's (per-profile overrides).
            let assignee: Option<String> =
                tx.query_one("SELECT assignee FROM berth.tasks WHERE id = $1", &[&id])?.try_get(0)?;
            record_task_failure(tx, id, &end, req.cfg.breaker_for(assignee.as_deref()), now)?;
        }
        HousekeepingChange::Requeue { outcome, stop_worker } => {
            if stop_worker {
                out.stop_workers.extend(worker_of(tx, id, host)?);
            }
            let run = close_run(tx, id, outcome, None, None, now)?;
            tx.execute(&format!("UPDATE berth.tasks SET status = 'ready', {CLEAR_CLAIM} WHERE id = $1"), &[&id])?;
            events.push(id, run, &BoardEvent::Housekeeping(hk));
        }
    }
    Ok(true)
}

/// Reads a tick's snapshot in one read-only transaction, writing nothing (dry run).
fn read_snapshot(c: &mut Conn, req: &TickRequest<'_>) -> PgResult<BoardSnapshot> {
    let mut tx = c.client.snapshot_transaction()?;
    if tx.query_opt(BOARD_LIVE, &[&req.board.as_str()])?.is_none() {
        return Err(StoreError::NoBoard(req.board.as_str().to_owned()).into());
    }
    let snap = snapshot(&mut tx, req)?;
    tx.commit()?;
    Ok(snap)
}

/// A dispatcher's record of the workers it started, confirming each run for its worker: the same compare-and-swap as
/// a worker's own confirmation (`claims.rs`).
const SPAWNED_TASKS: &str = "UPDATE berth.tasks t SET worker_pid = u.pid, worker_start = u.start, worker_host = $5, \
     confirmed_at = $7, started_at = $7, last_heartbeat_at = $7, claim_expires = $6 \
     FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS u(id, run, pid, start) \
     WHERE t.id = u.id AND t.current_run_id = u.run AND t.status = 'running' AND t.claim_lock IS NOT NULL \
     AND t.confirmed_at IS NULL \
     RETURNING t.id";

const SPAWNED_RUNS: &str = "UPDATE berth.task_runs r SET worker_pid = u.pid, worker_start = u.start, worker_host = $4, \
     confirmed_at = $6, claim_expires = $5 \
     FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS u(run, pid, start) WHERE r.id = u.run";

impl PgKanbanStore {
    /// The tick's configuration as this store's host sees it: on a shared board the store's host is who judges.
    fn as_host(&self, cfg: &TickConfig) -> TickConfig {
        TickConfig { host: self.host.clone(), ..cfg.clone() }
    }
}

impl KanbanStore for PgKanbanStore {
    type Error = StoreError;

    fn check_board(&self, board: &BoardSlug) -> Result<(), StoreError> {
        // Every tick checks its board first: one round trip, its statement prepared once per connection.
        self.with(|c| match c.client.query_opt(BOARD_LIVE, &[&board.as_str()])? {
            Some(_) => Ok(()),
            None => Err(StoreError::NoBoard(board.as_str().to_owned()).into()),
        })
    }

    fn task_brief(&self, id: &str) -> Result<TaskBrief, StoreError> {
        let t = BoardStore::task(self, id)?;
        Ok(TaskBrief { id: t.id, board: t.board, status: t.status, assignee: t.assignee })
    }

    fn local_workers(&self, board: &BoardSlug, host: &str) -> Result<Vec<(i64, Option<i64>)>, StoreError> {
        self.with(|c| {
            let rows = c.client.query(
                "SELECT worker_pid, worker_start, worker_host FROM berth.tasks \
                 WHERE board = $1 AND status = 'running' AND worker_pid IS NOT NULL",
                &[&board.as_str()],
            )?;
            let mut local = Vec::new();
            for r in &rows {
                let on: Option<&str> = r.try_get(2)?;
                if is_local(host, on) {
                    local.push((r.try_get(0)?, r.try_get(1)?));
                }
            }
            Ok(local)
        })
    }

    fn snapshot(&self, req: &TickRequest<'_>) -> Result<BoardSnapshot, StoreError> {
        let cfg = self.as_host(req.cfg);
        let req = TickRequest { cfg: &cfg, ..*req };
        self.with(move |c| read_snapshot(c, &req))
    }

    fn tick(
        &mut self,
        req: &TickRequest<'_>,
        plan: &(dyn Fn(&BoardSnapshot) -> TickPlan + Sync),
    ) -> Result<TickOutcome, StoreError> {
        let host = self.host.clone();
        let cfg = self.as_host(req.cfg);
        let req = TickRequest { cfg: &cfg, ..*req };
        self.with(move |c| apply_tick(c, &host, &req, plan))
    }

    /// Records started workers (with this host as theirs, so only this host probes or stops them) and confirms
    /// their runs for them.
    fn record_spawned(
        &mut self,
        spawned: &[SpawnRecord<'_>],
        claim_ttl: Duration,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        if spawned.is_empty() {
            return Ok(0);
        }
        let host = self.host.clone();
        let expires = now.as_millis().saturating_add(i64::try_from(claim_ttl.as_millis()).unwrap_or(i64::MAX));
        self.with(move |c| {
            let ids: Vec<&str> = spawned.iter().map(|s| s.task).collect();
            let runs: Vec<i64> = spawned.iter().map(|s| s.run_id).collect();
            let pids: Vec<i64> = spawned.iter().map(|s| i64::from(s.pid)).collect();
            let starts: Vec<Option<i64>> =
                spawned.iter().map(|s| s.start.and_then(|v| i64::try_from(v).ok())).collect();
            let at = now.as_millis();
            let mut tx = c.client.transaction()?;
            // Only the runs still their task's current one (a dispatcher held up past the lease writes nothing).
            let current: std::collections::HashSet<String> = tx
                .query(SPAWNED_TASKS, &[&ids, &runs, &pids, &starts, &host, &expires, &at])?
                .iter()
                .map(|r| r.get(0))
                .collect();
            let spawned: Vec<&SpawnRecord<'_>> = spawned.iter().filter(|s| current.contains(s.task)).collect();
            let runs: Vec<i64> = spawned.iter().map(|s| s.run_id).collect();
            let pids: Vec<i64> = spawned.iter().map(|s| i64::from(s.pid)).collect();
            let starts: Vec<Option<i64>> =
                spawned.iter().map(|s| s.start.and_then(|v| i64::try_from(v).ok())).collect();
            tx.execute(SPAWNED_RUNS, &[&runs, &pids, &starts, &host, &expires, &at])?;
            let mut events = Events::default();
            for (s, start) in spawned.iter().zip(&starts) {
                events.push(s.task, Some(s.run_id), &BoardEvent::Spawned { pid: s.pid, log: s.log, host: &host });
                let confirmation =
                    BoardEvent::Confirmed { pid: s.pid, start: *start, host: &host, expires, by: Some("dispatcher") };
                events.push(s.task, Some(s.run_id), &confirmation);
            }
            events.flush(EVENTS, &mut tx, now)?;
            tx.commit()?;
            Ok(spawned.len())
        })
    }

    fn record_spawn_failure(
        &mut self,
        id: &str,
        run: i64,
        error: &str,
        breaker: Breaker,
        now: Timestamp,
    ) -> Result<FailureOutcome, StoreError> {
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            if guarded(&mut tx, id, TaskCommand::Fail, Some(run), "spawn_failed")? == Guarded::AlreadyDone {
                return crate::board::already_failed(&mut tx, id, breaker.limit);
            }
            let end = RunEnd { outcome: "spawn_failed", error, exit_code: None, retry_at: None };
            let res = record_task_failure(&mut tx, id, &end, breaker, now)?;
            tx.commit()?;
            Ok(res)
        })
    }
}
