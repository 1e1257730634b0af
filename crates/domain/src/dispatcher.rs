//! The dispatcher service: one tick through the ports — snapshot → `plan_tick` → apply (the store, in one
//! serialized unit) → stop / release / launch (the launcher) → record (the store). `app` only wires and prints.

use thiserror::Error;

use crate::board::KanbanStore;
use crate::board::liveness::Probed;
use crate::board::{SpawnRecord, TaskStatus, TickRequest, WorkerRef};
use crate::ids::BoardSlug;
use crate::policy::dispatch::{Decision, PlanSink, TickPlan, plan_tick};
use crate::ports::{Clock, Launched, WorkerLauncher};

/// Why a dispatch did not run.
#[derive(Debug, Error)]
pub enum DispatchError<E: std::error::Error + 'static> {
    /// `--task ID` names a task of another board.
    #[error("task {task} is on board {actual:?}, not {board:?} (pass --board {actual})")]
    WrongBoard { task: String, actual: String, board: String },
    /// The store failed (no board, no task, storage); nothing of this tick was applied when it fails in the tick.
    #[error(transparent)]
    Store(#[from] E),
}

/// How to run one dispatch.
#[derive(Clone, Copy, Debug, Default)]
pub struct DispatchOptions {
    /// Plan only: read a snapshot, write nothing, start nothing.
    pub dry_run: bool,
    /// Leave the workers housekeeping took tasks from in [`TickReport::stops`] for the caller to stop off the tick
    /// path (the gateway), instead of stopping them before returning.
    pub detach_stops: bool,
}

/// One started (or, dry, planned) worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpawnedWorker {
    pub task_id: String,
    pub assignee: String,
    /// The sandbox name; empty in a dry run.
    pub sandbox: String,
    /// `None` in a dry run.
    pub pid: Option<u32>,
}

/// What one dispatch did (or, dry, would do).
#[derive(Clone, Debug, Default)]
pub struct TickReport {
    pub plan: TickPlan,
    pub spawned: Vec<SpawnedWorker>,
    /// Claimed tasks whose worker could not be started, with the reason.
    pub spawn_failed: Vec<(String, String)>,
    /// Tasks the failure breaker blocked in this tick (housekeeping or a failed spawn), in order, once each.
    pub auto_blocked: Vec<String>,
    /// For `--task ID`: why it was not even considered.
    pub not_considered: Option<(String, Decision)>,
    /// Workers still to stop (only with [`DispatchOptions::detach_stops`]).
    pub stops: Vec<WorkerRef>,
}

impl TickReport {
    /// Whether ready work could have started (for the gateway's stuck warning).
    pub fn had_spawnable(&self) -> bool {
        self.plan.spawns().next().is_some()
    }
}

/// Plans a tick without writing anything: the same snapshot and plan a real tick would use.
///
/// # Errors
/// The store's error.
pub fn plan<S: KanbanStore>(store: &S, req: &TickRequest<'_>) -> Result<TickPlan, S::Error> {
    let mut plan = TickPlan::default();
    store.plan_into(req, &mut plan)?;
    Ok(plan)
}

/// Applies one tick on the store (snapshot, the domain's plan, housekeeping and claims in one serialized unit).
///
/// # Errors
/// The store's error; nothing is applied then.
pub fn apply<S: KanbanStore>(store: &mut S, req: &TickRequest<'_>) -> Result<crate::board::TickOutcome, S::Error> {
    let probed = probe_before(store, req)?;
    let req = &TickRequest { probe: &probed, ..*req };
    let (now, cfg) = (req.now, req.cfg);
    store.tick(req, &|snap| plan_tick(now, snap, cfg))
}

/// The liveness of this host's workers on the board, read before the tick's transaction (see [`Probed`]).
fn probe_before<S: KanbanStore>(store: &S, req: &TickRequest<'_>) -> Result<Probed, S::Error> {
    Ok(Probed::read(&store.local_workers(req.board, &req.cfg.host)?, req.probe))
}

/// `--task ID`: the task must exist on this board; when it is not ready, say why it is not considered.
fn only_task<S: KanbanStore>(
    store: &S,
    board: &BoardSlug,
    id: Option<&str>,
) -> Result<Option<(String, Decision)>, DispatchError<S::Error>> {
    let Some(id) = id else { return Ok(None) };
    let t = store.task_brief(id)?;
    if t.board != board.as_str() {
        return Err(DispatchError::WrongBoard {
            task: id.to_owned(),
            actual: t.board,
            board: board.as_str().to_owned(),
        });
    }
    Ok(Decision::not_considered(t.status).map(|d| (id.to_owned(), d)))
}

/// Forwards a plan to `inner`, noting whether its housekeeping put `task` (`--task ID`) back in the queue: a running
/// task whose worker died is requeued and considered by the same tick, so it is not "already running".
struct NoteRequeue<'a, P: PlanSink + ?Sized> {
    inner: &'a mut P,
    task: Option<&'a str>,
    requeued: bool,
}

impl<P: PlanSink + ?Sized> PlanSink for NoteRequeue<'_, P> {
    fn housekeeping(&mut self, task_id: &str, action: &crate::policy::dispatch::Housekeeping) {
        if self.task == Some(task_id) && crate::policy::dispatch::requeues(action) {
            self.requeued = true;
        }
        self.inner.housekeeping(task_id, action);
    }
    fn promoted(&mut self, task_id: &str) {
        self.inner.promoted(task_id);
    }
    fn decision(&mut self, decision: &crate::policy::dispatch::DecisionRef<'_>) {
        self.inner.decision(decision);
    }
}

/// A dry run streamed into `sink` (the plan a real tick would follow, as the store produces it); writes nothing.
/// Returns, for `--task ID`, why that task was not even considered.
///
/// # Errors
/// [`DispatchError::WrongBoard`], or the store's error (no board, no task, storage).
pub fn dry_run_into<S: KanbanStore>(
    store: &S,
    req: &TickRequest<'_>,
    sink: &mut dyn crate::policy::dispatch::PlanSink,
) -> Result<Option<(String, Decision)>, DispatchError<S::Error>> {
    store.check_board(req.board)?;
    let not_considered = only_task(store, req.board, req.cfg.only_task.as_deref())?;
    let mut note = NoteRequeue { inner: sink, task: req.cfg.only_task.as_deref(), requeued: false };
    store.plan_into(req, &mut note)?;
    Ok(not_considered.filter(|_| !note.requeued))
}

/// Runs one dispatch on `req.board`: plan (dry) or tick, stop the workers housekeeping took tasks from, release
/// the sandboxes of tasks the breaker blocked, launch a worker per claim, and record them all at once.
///
/// `req.now` is the pass's time; `clock` is read again only for what happens after the launches (a spawn failure's
/// time, and the restart of the spawn lease), so a slow launch loop does not eat its workers' leases.
///
/// # Errors
/// [`DispatchError::WrongBoard`], or the store's error (no board, no task, storage).
pub async fn dispatch<S, L>(
    store: &mut S,
    launcher: &L,
    clock: &dyn Clock,
    req: &TickRequest<'_>,
    opts: DispatchOptions,
) -> Result<TickReport, DispatchError<S::Error>>
where
    S: KanbanStore + Send,
    L: WorkerLauncher + ?Sized,
{
    if !opts.dry_run {
        let mut plan = TickPlan::default();
        let mut report = dispatch_into(store, launcher, clock, req, opts, &mut plan).await?;
        report.plan = plan;
        return Ok(report);
    }
    let mut report = TickReport::default();
    report.not_considered = dry_run_into(store, req, &mut report.plan)?;
    report.spawned = report
        .plan
        .spawns()
        .map(|d| SpawnedWorker {
            task_id: d.task_id.clone(),
            assignee: d.assignee.clone().unwrap_or_default(),
            sandbox: String::new(),
            pid: None,
        })
        .collect();
    Ok(report)
}

/// A real tick ([`dispatch`] without `dry_run`) whose whole plan is streamed into `sink` as the store makes it; the
/// report's `plan` then holds what the tick applied (housekeeping, promotions, spawns, default assignments), the
/// rest only went to `sink`. A printer passes its writer, so a tick over any number of ready tasks keeps no
/// decision it did not act on.
///
/// # Errors
/// As [`dispatch`].
pub async fn dispatch_into<S, L>(
    store: &mut S,
    launcher: &L,
    clock: &dyn Clock,
    req: &TickRequest<'_>,
    opts: DispatchOptions,
    sink: &mut (dyn crate::policy::dispatch::PlanSink + Send),
) -> Result<TickReport, DispatchError<S::Error>>
where
    S: KanbanStore + Send,
    L: WorkerLauncher + ?Sized,
{
    store.check_board(req.board)?;
    let not_considered = only_task(store, req.board, req.cfg.only_task.as_deref())?;
    let mut note = NoteRequeue { inner: sink, task: req.cfg.only_task.as_deref(), requeued: false };
    let probed = probe_before(store, req)?;
    let outcome = store.tick_into(&TickRequest { probe: &probed, ..*req }, &mut note)?;
    let mut report = TickReport { not_considered: not_considered.filter(|_| !note.requeued), ..TickReport::default() };
    report.plan = outcome.plan;
    report.auto_blocked =
        report.plan.housekeeping.iter().filter(|(_, h)| h.gave_up()).map(|(id, _)| id.clone()).collect();
    launcher.kill_leftovers(&outcome.stop_workers);
    if opts.detach_stops {
        report.stops = outcome.stop_workers;
    } else {
        launcher.stop(outcome.stop_workers).await;
    }
    // Tasks the breaker just blocked are finished with their sandboxes.
    for id in report.auto_blocked.clone() {
        if let Ok(t) = store.task_brief(&id)
            && t.status == TaskStatus::Blocked
            && let Some(assignee) = &t.assignee
        {
            launcher.release_sandbox(&id, assignee).await;
        }
    }
    // Start every worker, then record them all in one write.
    let mut started: Vec<(&crate::board::Claimed, Launched)> = Vec::new();
    for (claimed, launched) in outcome.claimed.iter().zip(launcher.launch_all(req.board, &outcome.claimed)) {
        match launched {
            Ok(l) => started.push((claimed, l)),
            Err(e) => {
                let res = store.record_spawn_failure(
                    &claimed.task_id,
                    claimed.run_id,
                    &e.0,
                    req.cfg.breaker_for(claimed.assignee.as_deref()),
                    clock.now(),
                )?;
                if res.gave_up() {
                    report.auto_blocked.push(claimed.task_id.clone());
                }
                report.spawn_failed.push((claimed.task_id.clone(), e.0));
            }
        }
    }
    let records: Vec<SpawnRecord<'_>> = started
        .iter()
        .map(|(c, l)| SpawnRecord { task: &c.task_id, run_id: c.run_id, pid: l.pid, start: l.start, log: &l.log })
        .collect();
    let confirmed = store.record_spawned(&records, req.claim_ttl, clock.now())?;
    launcher.recorded(confirmed == records.len());
    report.spawned = started
        .into_iter()
        .map(|(c, l)| SpawnedWorker {
            task_id: c.task_id.clone(),
            assignee: c.assignee.clone().unwrap_or_default(),
            sandbox: l.sandbox,
            pid: Some(l.pid),
        })
        .collect();
    Ok(report)
}

#[cfg(test)]
mod tests;
