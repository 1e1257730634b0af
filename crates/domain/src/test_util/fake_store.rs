//! `FakeKanbanStore`: the board port in memory, applying plans as the SQLite store does (a second store is one trait).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use thiserror::Error;

use crate::board::KanbanStore;
use crate::board::transitions::HousekeepingChange;
use crate::board::{
    BoardSnapshot, Claimed, FailureOutcome, SpawnRecord, TaskBrief, TaskRow, TaskStatus, TickOutcome, TickRequest,
    WorkerRef, record_failure,
};
use crate::ids::BoardSlug;
use crate::policy::dispatch::{Decision, TickPlan};
use crate::time::Timestamp;

/// Errors of the in-memory store (the same cases the SQLite store reports).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FakeStoreError {
    #[error("no task {0}")]
    NoTask(String),
    #[error("no board {0:?}")]
    NoBoard(String),
    #[error("task {task} is {status}; cannot {action} it")]
    Transition { task: String, status: TaskStatus, action: &'static str },
}

/// One task in memory.
#[derive(Clone, Debug)]
pub struct FakeTask {
    pub id: String,
    pub board: String,
    pub assignee: Option<String>,
    pub status: TaskStatus,
    pub priority: i64,
    pub created_at: Timestamp,
    pub parents: Vec<String>,
    pub claim_lock: Option<String>,
    pub claim_expires: Option<Timestamp>,
    pub worker: Option<WorkerRef>,
    pub confirmed_at: Option<Timestamp>,
    pub last_heartbeat: Option<Timestamp>,
    pub max_runtime_secs: Option<i64>,
    pub max_retries: Option<u32>,
    pub consecutive_failures: u32,
    pub current_run: Option<i64>,
}

/// The board in memory: tasks, an event log of `(task, kind)`, and run ids.
#[derive(Debug, Default)]
pub struct FakeKanbanStore {
    boards: BTreeSet<String>,
    tasks: BTreeMap<String, FakeTask>,
    events: Vec<(String, String)>,
    next_run: i64,
}

impl FakeKanbanStore {
    /// A store with the `default` board.
    pub fn new() -> Self {
        Self { boards: BTreeSet::from(["default".to_owned()]), ..Self::default() }
    }

    pub fn add_board(&mut self, slug: &str) {
        self.boards.insert(slug.to_owned());
    }

    /// Adds a task: `todo` when it has parents not done, else `ready`.
    pub fn add_task(
        &mut self,
        board: &str,
        id: &str,
        assignee: Option<&str>,
        priority: i64,
        parents: &[&str],
        now: Timestamp,
    ) {
        let waiting = parents.iter().any(|p| self.tasks.get(*p).is_some_and(|t| !is_finished(t.status)));
        self.tasks.insert(
            id.to_owned(),
            FakeTask {
                id: id.to_owned(),
                board: board.to_owned(),
                assignee: assignee.map(str::to_owned),
                status: if waiting { TaskStatus::Todo } else { TaskStatus::Ready },
                priority,
                created_at: now,
                parents: parents.iter().map(|p| (*p).to_owned()).collect(),
                claim_lock: None,
                claim_expires: None,
                worker: None,
                confirmed_at: None,
                last_heartbeat: None,
                max_runtime_secs: None,
                max_retries: None,
                consecutive_failures: 0,
                current_run: None,
            },
        );
        self.events.push((id.to_owned(), "created".to_owned()));
    }

    pub fn task(&self, id: &str) -> Option<&FakeTask> {
        self.tasks.get(id)
    }

    pub fn task_mut(&mut self, id: &str) -> Option<&mut FakeTask> {
        self.tasks.get_mut(id)
    }

    pub fn tasks(&self) -> impl Iterator<Item = &FakeTask> {
        self.tasks.values()
    }

    /// Every event kind appended for `id`, in order.
    pub fn events(&self, id: &str) -> Vec<String> {
        self.events.iter().filter(|(t, _)| t == id).map(|(_, k)| k.clone()).collect()
    }

    /// The worker confirms its run (the compare-and-swap of `confirm_run`).
    ///
    /// # Errors
    /// [`FakeStoreError::Transition`] when the run is no longer the task's unconfirmed claim.
    pub fn confirm_run(
        &mut self,
        id: &str,
        run: i64,
        worker: WorkerRef,
        ttl: Duration,
        now: Timestamp,
    ) -> Result<(), FakeStoreError> {
        let t = self.tasks.get_mut(id).ok_or_else(|| FakeStoreError::NoTask(id.to_owned()))?;
        // The same worker confirming again (its dispatcher's record confirmed it already) is confirmed.
        if t.status == TaskStatus::Running && t.current_run == Some(run) && t.worker == Some(worker) {
            return Ok(());
        }
        if t.status != TaskStatus::Running
            || t.current_run != Some(run)
            || t.claim_lock.is_none()
            || t.confirmed_at.is_some()
        {
            return Err(FakeStoreError::Transition {
                task: id.to_owned(),
                status: t.status,
                action: "confirm a run of",
            });
        }
        t.worker = Some(worker);
        t.confirmed_at = Some(now);
        t.last_heartbeat = Some(now);
        t.claim_expires = Some(now.plus(ttl));
        self.events.push((id.to_owned(), "confirmed".to_owned()));
        Ok(())
    }

    /// The worker completes its task: `done`, children whose parents are all done promoted.
    ///
    /// # Errors
    /// [`FakeStoreError::Transition`] when the task is not running.
    pub fn complete(&mut self, id: &str, now: Timestamp) -> Result<(), FakeStoreError> {
        let _ = now;
        let t = self.tasks.get_mut(id).ok_or_else(|| FakeStoreError::NoTask(id.to_owned()))?;
        if t.status != TaskStatus::Running {
            return Err(FakeStoreError::Transition { task: id.to_owned(), status: t.status, action: "complete" });
        }
        t.status = TaskStatus::Done;
        t.consecutive_failures = 0;
        clear_claim(t);
        self.events.push((id.to_owned(), "completed".to_owned()));
        let children: Vec<String> = self
            .tasks
            .values()
            .filter(|c| c.status == TaskStatus::Todo && c.parents.iter().any(|p| p == id))
            .map(|c| c.id.clone())
            .collect();
        for c in children {
            if self.parents_done(&c) {
                self.set_status(&c, TaskStatus::Ready);
                self.events.push((c, "promoted".to_owned()));
            }
        }
        Ok(())
    }

    fn parents_done(&self, id: &str) -> bool {
        self.tasks[id].parents.iter().all(|p| self.tasks.get(p).is_none_or(|t| is_finished(t.status)))
    }

    fn set_status(&mut self, id: &str, status: TaskStatus) {
        if let Some(t) = self.tasks.get_mut(id) {
            t.status = status;
        }
    }

    fn failure(&mut self, id: &str, kind: &str, failure_limit: u32) -> FailureOutcome {
        let Some(t) = self.tasks.get_mut(id) else { return FailureOutcome::Requeue { failures: 0, limit: 0 } };
        let res = record_failure(t.consecutive_failures, t.max_retries, failure_limit);
        let (status, n) = match res {
            FailureOutcome::Requeue { failures, .. } => (TaskStatus::Ready, failures),
            FailureOutcome::GiveUp { failures, .. } => (TaskStatus::Blocked, failures),
        };
        t.status = status;
        t.consecutive_failures = n;
        clear_claim(t);
        self.events.push((id.to_owned(), kind.to_owned()));
        if res.gave_up() {
            self.events.push((id.to_owned(), "gave_up".to_owned()));
        }
        res
    }
}

fn is_finished(s: TaskStatus) -> bool {
    matches!(s, TaskStatus::Done | TaskStatus::Archived)
}

/// Drops the claim, the worker and the current run: the task is no longer anyone's.
fn clear_claim(t: &mut FakeTask) {
    t.claim_lock = None;
    t.claim_expires = None;
    t.worker = None;
    t.confirmed_at = None;
    t.current_run = None;
}

impl KanbanStore for FakeKanbanStore {
    type Error = FakeStoreError;

    fn check_board(&self, board: &BoardSlug) -> Result<(), Self::Error> {
        if self.boards.contains(board.as_str()) {
            Ok(())
        } else {
            Err(FakeStoreError::NoBoard(board.as_str().to_owned()))
        }
    }

    fn task_brief(&self, id: &str) -> Result<TaskBrief, Self::Error> {
        let t = self.tasks.get(id).ok_or_else(|| FakeStoreError::NoTask(id.to_owned()))?;
        Ok(TaskBrief { id: t.id.clone(), board: t.board.clone(), status: t.status, assignee: t.assignee.clone() })
    }

    fn local_workers(&self, board: &BoardSlug, _host: &str) -> Result<Vec<(i64, Option<i64>)>, Self::Error> {
        let running = self.tasks.values().filter(|t| t.board == board.as_str() && t.status == TaskStatus::Running);
        Ok(running.filter_map(|t| t.worker).map(|w| (w.pid, w.start)).collect())
    }

    fn snapshot(&self, req: &TickRequest<'_>) -> Result<BoardSnapshot, Self::Error> {
        self.check_board(req.board)?;
        let mut snap = BoardSnapshot::default();
        for t in self.tasks.values() {
            if t.board != req.board.as_str() {
                if t.status == TaskStatus::Running {
                    snap.total_running_elsewhere += 1;
                    if let Some(a) = t.assignee.as_deref().filter(|a| !a.is_empty()) {
                        *snap.running_elsewhere.entry(a.to_owned()).or_default() += 1;
                    }
                }
                continue;
            }
            if !matches!(t.status, TaskStatus::Ready | TaskStatus::Todo | TaskStatus::Running) {
                continue;
            }
            let pid = t.worker.and_then(|w| u32::try_from(w.pid).ok());
            let start = t.worker.and_then(|w| w.start).and_then(|s| u64::try_from(s).ok());
            snap.tasks.push(TaskRow {
                sandbox_elsewhere_since: None,
                not_before: None,
                id: t.id.clone(),
                assignee: t.assignee.clone(),
                status: t.status,
                priority: t.priority,
                created_at: t.created_at,
                claimed: t.claim_lock.is_some(),
                claim_expires: t.claim_expires,
                worker_pid: pid,
                worker_alive: pid.map(|p| req.probe.is_alive(p, start)),
                host_lost: None,
                run_id: None,
                last_heartbeat: t.last_heartbeat,
                started_at: t.confirmed_at,
                max_runtime_secs: t.max_runtime_secs,
                consecutive_failures: t.consecutive_failures,
                max_retries: t.max_retries,
                parents_done: t.status == TaskStatus::Todo && self.parents_done(&t.id),
            });
        }
        Ok(snap)
    }

    fn tick(
        &mut self,
        req: &TickRequest<'_>,
        plan: &(dyn Fn(&BoardSnapshot) -> TickPlan + Sync),
    ) -> Result<TickOutcome, Self::Error> {
        // Everything below happens under `&mut self`: the in-memory equivalent of one write transaction.
        let plan = plan(&self.snapshot(req)?);
        let now = req.now;
        let limit = req.cfg.failure_limit;
        let mut out = TickOutcome::default();
        for (id, hk) in &plan.housekeeping {
            let worker = self.tasks.get(id).and_then(|t| t.worker);
            match hk.change() {
                HousekeepingChange::Extend => {
                    if let Some(t) = self.tasks.get_mut(id) {
                        t.claim_expires = Some(now.plus(req.claim_ttl));
                    }
                    self.events.push((id.clone(), "claim_extended".to_owned()));
                }
                HousekeepingChange::Fail { outcome, stop_worker, .. } => {
                    if stop_worker {
                        out.stop_workers.extend(worker);
                    }
                    self.failure(id, outcome, limit);
                }
                HousekeepingChange::Requeue { outcome, stop_worker } => {
                    if stop_worker {
                        out.stop_workers.extend(worker);
                    }
                    if let Some(t) = self.tasks.get_mut(id) {
                        t.status = TaskStatus::Ready;
                        clear_claim(t);
                    }
                    self.events.push((id.clone(), outcome.to_owned()));
                }
            }
        }
        for id in &plan.promoted {
            if self.tasks.get(id).is_some_and(|t| t.status == TaskStatus::Todo) {
                self.set_status(id, TaskStatus::Ready);
                self.events.push((id.clone(), "promoted".to_owned()));
            }
        }
        for d in &plan.decisions {
            if d.auto_assigned {
                if let Some(t) =
                    self.tasks.get_mut(&d.task_id).filter(|t| t.assignee.as_deref().is_none_or(|a| a.trim().is_empty()))
                {
                    t.assignee.clone_from(&d.assignee);
                }
                self.events.push((d.task_id.clone(), "assigned".to_owned()));
            }
            if d.decision != Decision::Spawn {
                continue;
            }
            // Compare-and-swap, as the SQL does: a claim that lost a race writes nothing.
            let Some(t) =
                self.tasks.get_mut(&d.task_id).filter(|t| t.status == TaskStatus::Ready && t.claim_lock.is_none())
            else {
                continue;
            };
            self.next_run += 1;
            t.status = TaskStatus::Running;
            t.claim_lock = Some(req.claimer.to_owned());
            t.claim_expires = Some(now.plus(req.spawn_lease));
            t.worker = None;
            t.confirmed_at = None;
            t.last_heartbeat = None;
            t.current_run = Some(self.next_run);
            let (task_id, assignee, run_id) = (t.id.clone(), t.assignee.clone(), self.next_run);
            out.claimed.push(Claimed { task_id, assignee, run_id, review_note: None });
            self.events.push((d.task_id.clone(), "claimed".to_owned()));
        }
        out.plan = plan;
        Ok(out)
    }

    fn record_spawned(
        &mut self,
        spawned: &[SpawnRecord<'_>],
        claim_ttl: Duration,
        now: Timestamp,
    ) -> Result<usize, Self::Error> {
        let mut confirmed = 0;
        for s in spawned {
            if let Some(t) = self.tasks.get_mut(s.task).filter(|t| {
                t.current_run == Some(s.run_id) && t.status == TaskStatus::Running && t.confirmed_at.is_none()
            }) {
                t.worker =
                    Some(WorkerRef { pid: i64::from(s.pid), start: s.start.and_then(|v| i64::try_from(v).ok()) });
                t.confirmed_at = Some(now);
                t.claim_expires = Some(now.plus(claim_ttl));
                confirmed += 1;
                self.events.push((s.task.to_owned(), "spawned".to_owned()));
                self.events.push((s.task.to_owned(), "confirmed".to_owned()));
            }
        }
        Ok(confirmed)
    }

    fn record_spawn_failure(
        &mut self,
        id: &str,
        _run: i64,
        _error: &str,
        breaker: crate::board::Breaker,
        _now: Timestamp,
    ) -> Result<FailureOutcome, Self::Error> {
        if !self.tasks.contains_key(id) {
            return Err(FakeStoreError::NoTask(id.to_owned()));
        }
        Ok(self.failure(id, "spawn_failed", breaker.limit))
    }
}
