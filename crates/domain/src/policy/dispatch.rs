//! Dispatch planning: housekeeping and spawn decisions for one tick, as pure functions of a snapshot and `now`.
//!
//! The same plan drives a real tick and a dry run, so a dry run reports exactly what a real tick would do.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::board::{
    BoardSnapshot, FailureOutcome, HEARTBEAT_STALE_SECS, TaskRow, TaskStatus, TickConfig, record_failure,
};
use crate::time::Timestamp;

/// What housekeeping does to one running task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Housekeeping {
    /// The worker pid is gone (or reused): a crash, counted as a failure.
    Crashed { pid: u32, outcome: FailureOutcome },
    /// No worker confirmed the run before its spawn lease ran out. When the dispatcher recorded a worker process
    /// (it started, then never confirmed) the run counts as a failure (`outcome`: back to `ready` or blocked), so a
    /// worker that can never confirm still ends the task; when no worker was recorded (the dispatcher died between
    /// claim and spawn) the task never ran: back to `ready`, not counted (`outcome` is `None`). `pid` is a live
    /// process the dispatcher recorded, to stop.
    LeaseExpired { pid: Option<u32>, outcome: Option<FailureOutcome> },
    /// `max_runtime_seconds` elapsed: kill the worker; counted as a failure.
    TimedOut { pid: Option<u32>, outcome: FailureOutcome },
    /// The claim expired but the worker lives and heartbeats: extend the claim.
    ExtendClaim,
    /// The claim expired and the worker is not provably alive: kill it and requeue (not a failure).
    Reclaim { pid: Option<u32> },
    /// Running past the stale timeout without a fresh heartbeat: kill and requeue (not a failure).
    Stale { pid: Option<u32> },
    /// The worker's host stopped heartbeating for longer than the host timeout: its run ends as `host_lost` and the
    /// task goes back to `ready` (not a failure of the task: its host died, not its command).
    HostLost { host: String },
}

/// Why a ready task is or is not spawned this tick.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum Decision {
    /// Claim it and start a worker.
    Spawn,
    /// No assignee and no usable `kanban.default_assignee`.
    SkippedUnassigned,
    /// The assignee is not a profile on this host.
    SkippedNonspawnable,
    /// The assignee is at its per-profile cap.
    SkippedPerProfileCapped { current: u32, cap: u32 },
    /// `kanban.max_in_progress` is reached on this host.
    DeferredMaxInProgress { running: u32, cap: u32 },
    /// `--max` / `kanban.max_spawn` spawns already planned this tick.
    DeferredMaxSpawn { cap: u32 },
    /// A start-rate limit is reached: `limit` starts in the last minute, of the board
    /// (`kanban.rate_limit_per_minute`) or of the assignee's tasks (`per_profile`, its override); the oldest of them
    /// leaves the window in `wait_secs`.
    DeferredRateLimited {
        limit: u32,
        per_profile: bool,
        wait_secs: i64,
        /// When a start is free again (the gateway wakes for the soonest).
        #[serde(skip)]
        until: Timestamp,
    },
    /// A retry whose sandbox is on another host of a shared board: left to that host for a while longer.
    DeferredSandboxElsewhere { wait_secs: i64 },
    /// The container engine was unreachable for this host's recent workers: nothing is claimed until the backoff
    /// ends, so an outage of the infrastructure costs the tasks time, not attempts.
    DeferredEngineUnavailable { wait_secs: i64 },
    /// The task waits for its time: scheduled (`--at`/`--in`), a retry's backoff, or a snooze (exit 75).
    DeferredScheduled {
        wait_secs: i64,
        /// When it is due (the gateway wakes for the soonest).
        #[serde(skip)]
        until: Timestamp,
    },
    /// `--task ID` names a task that is not ready (blocked, done, …): not considered.
    NotReady { status: TaskStatus },
    /// `--task ID` names a task that already runs: not considered.
    AlreadyRunning,
    /// `--task ID` names a `todo` task whose parents are not all done: not considered.
    WaitingOnParents,
}

impl Decision {
    /// The stable reason code (`--explain`).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Spawn => "spawn",
            Self::SkippedUnassigned => "skipped_unassigned",
            Self::SkippedNonspawnable => "skipped_nonspawnable",
            Self::SkippedPerProfileCapped { .. } => "skipped_per_profile_capped",
            Self::DeferredMaxInProgress { .. } => "deferred_max_in_progress",
            Self::DeferredMaxSpawn { .. } => "deferred_max_spawn",
            Self::DeferredRateLimited { .. } => "deferred_rate_limited",
            Self::DeferredSandboxElsewhere { .. } => "deferred_sandbox_elsewhere",
            Self::DeferredEngineUnavailable { .. } => "deferred_engine_unavailable",
            Self::DeferredScheduled { .. } => "deferred_scheduled",
            Self::NotReady { .. } => "not_ready",
            Self::AlreadyRunning => "already_running",
            Self::WaitingOnParents => "waiting_on_parents",
        }
    }

    /// Why `--task ID` was not even considered, or `None` when the tick plans it: from the task's status.
    pub fn not_considered(status: TaskStatus) -> Option<Self> {
        match status {
            TaskStatus::Ready => None,
            TaskStatus::Running => Some(Self::AlreadyRunning),
            TaskStatus::Todo => Some(Self::WaitingOnParents),
            status => Some(Self::NotReady { status }),
        }
    }

    /// The reason as one line of text: the code, then what it is about when that says more.
    pub fn reason(&self) -> String {
        match self {
            Self::NotReady { status } => format!("not_ready: the task is {status}"),
            other => other.code().to_owned(),
        }
    }
}

impl Housekeeping {
    /// Whether this action tripped the failure breaker (the task is now `blocked`, with `gave_up`).
    pub fn gave_up(&self) -> bool {
        match self {
            Self::Crashed { outcome, .. } | Self::TimedOut { outcome, .. } => outcome.gave_up(),
            Self::LeaseExpired { outcome, .. } => outcome.is_some_and(FailureOutcome::gave_up),
            Self::ExtendClaim | Self::Reclaim { .. } | Self::Stale { .. } | Self::HostLost { .. } => false,
        }
    }
}

/// The decision for one ready task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TaskDecision {
    pub task_id: String,
    /// The assignee the task runs under (after the default assignee), if any.
    pub assignee: Option<String>,
    /// Whether `kanban.default_assignee` was applied to this task in this tick.
    pub auto_assigned: bool,
    pub decision: Decision,
}

/// One tick's plan.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TickPlan {
    pub housekeeping: Vec<(String, Housekeeping)>,
    /// `todo` tasks whose parents are all done: promoted to `ready`.
    pub promoted: Vec<String>,
    /// One decision per ready task considered, in dispatch order, except that the candidates a board-wide limit had
    /// to choose between come last, in the fair-share order (see [`Planner`]).
    pub decisions: Vec<TaskDecision>,
    /// The soonest time a task waiting for its time is due (the gateway wakes for it).
    pub next_due: Option<Timestamp>,
}

impl TickPlan {
    /// Notes when a task waiting for its time is due (every decision passes here, kept or not).
    pub fn note_due(&mut self, decision: &Decision) {
        if let Decision::DeferredScheduled { until, .. } | Decision::DeferredRateLimited { until, .. } = decision {
            self.next_due = Some(self.next_due.map_or(*until, |due| due.min(*until)));
        }
    }

    /// The tasks planned to spawn, with their assignees.
    pub fn spawns(&self) -> impl Iterator<Item = &TaskDecision> {
        self.decisions.iter().filter(|d| d.decision == Decision::Spawn)
    }
}

/// Plans the housekeeping of one running task, or `None` when it is healthy.
pub fn plan_housekeeping(now: Timestamp, t: &TaskRow, cfg: &TickConfig) -> Option<Housekeeping> {
    if t.status != TaskStatus::Running {
        return None;
    }
    if let Some(host) = &t.host_lost {
        return Some(Housekeeping::HostLost { host: host.clone() });
    }
    let heartbeat_fresh = t.last_heartbeat.is_some_and(|hb| now.secs_since(hb) < HEARTBEAT_STALE_SECS as f64);
    let alive = t.worker_alive == Some(true);
    if let (Some(pid), Some(false)) = (t.worker_pid, t.worker_alive) {
        return Some(Housekeeping::Crashed {
            pid,
            outcome: record_failure(t.consecutive_failures, t.max_retries, cfg.failure_limit),
        });
    }
    let Some(started) = t.started_at else {
        // Unconfirmed: the claim is only a spawn lease. Waiting inside it is healthy; past it the run is void (a
        // worker that starts later fails its confirmation and runs nothing), so the task goes back to the queue.
        if t.claim_expires.is_none_or(|exp| exp < now) {
            // Only a run a worker process was started for can be the task's failure, and not while that worker
            // is still alive: confirming is its first act, so a live worker that has not confirmed is waiting for
            // the board (an outage, the server's connection limit reached) and never ran the task's command. It is
            // stopped and the task requeued uncounted; the lease is the back-off before the next try.
            let counted = t.worker_pid.is_some() && !alive;
            return Some(Housekeeping::LeaseExpired {
                pid: t.worker_pid.filter(|_| alive),
                outcome: counted.then(|| record_failure(t.consecutive_failures, t.max_retries, cfg.failure_limit)),
            });
        }
        return None;
    };
    // Runtime counts from the worker's confirmation, not from the claim.
    let elapsed = Some(now.secs_since(started));
    if let (Some(max), Some(elapsed)) = (t.max_runtime_secs.filter(|m| *m > 0), elapsed)
        && elapsed >= max as f64
    {
        return Some(Housekeeping::TimedOut {
            pid: t.worker_pid,
            outcome: record_failure(t.consecutive_failures, t.max_retries, cfg.failure_limit),
        });
    }
    if t.claim_expires.is_some_and(|exp| exp < now) {
        // A live worker keeps its claim while it heartbeats (or has not had to yet: it may be short-lived).
        let recent_start = elapsed.is_some_and(|e| e < HEARTBEAT_STALE_SECS as f64);
        return Some(if alive && (heartbeat_fresh || recent_start) {
            Housekeeping::ExtendClaim
        } else {
            Housekeeping::Reclaim { pid: t.worker_pid }
        });
    }
    if cfg.stale_timeout_secs > 0 && elapsed.is_some_and(|e| e >= cfg.stale_timeout_secs as f64) && !heartbeat_fresh {
        return Some(Housekeeping::Stale { pid: t.worker_pid });
    }
    None
}

/// Whether housekeeping takes the task out of `running`.
fn leaves_running(h: &Housekeeping) -> bool {
    !matches!(h, Housekeeping::ExtendClaim)
}

/// Whether housekeeping puts the task back in `ready` (it then joins this tick's ready tasks).
pub fn requeues(h: &Housekeeping) -> bool {
    match h {
        Housekeeping::Crashed { outcome, .. } | Housekeeping::TimedOut { outcome, .. } => {
            matches!(outcome, FailureOutcome::Requeue { .. })
        }
        Housekeeping::LeaseExpired { outcome, .. } => !outcome.is_some_and(FailureOutcome::gave_up),
        Housekeeping::Reclaim { .. } | Housekeeping::Stale { .. } | Housekeeping::HostLost { .. } => true,
        Housekeeping::ExtendClaim => false,
    }
}

/// A ready task as the planner reads it, borrowed from wherever the store keeps the row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyTask<'a> {
    pub id: &'a str,
    pub assignee: Option<&'a str>,
    pub priority: i64,
    pub created_at: Timestamp,
    /// Since when the task (a retry) waits for another host that holds its sandbox (shared boards only).
    pub sandbox_elsewhere_since: Option<Timestamp>,
    /// Not claimed before this time (scheduled, a retry's backoff, a snooze).
    pub not_before: Option<Timestamp>,
}

impl<'a> ReadyTask<'a> {
    /// The ready view of a snapshot row.
    pub fn of(t: &'a TaskRow) -> Self {
        Self {
            id: &t.id,
            assignee: t.assignee.as_deref(),
            priority: t.priority,
            created_at: t.created_at,
            sandbox_elsewhere_since: t.sandbox_elsewhere_since,
            not_before: t.not_before,
        }
    }

    /// Dispatch order: priority descending, then age, then id.
    pub fn dispatch_order(&self, other: &Self) -> std::cmp::Ordering {
        other.priority.cmp(&self.priority).then(self.created_at.cmp(&other.created_at)).then(self.id.cmp(other.id))
    }
}

/// One decision, borrowing the task's id and assignee (a streaming consumer copies nothing it does not keep).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionRef<'a> {
    pub task_id: &'a str,
    /// The assignee the task runs under (after the default assignee), if any.
    pub assignee: Option<&'a str>,
    /// Whether `kanban.default_assignee` was applied to this task in this tick.
    pub auto_assigned: bool,
    pub decision: Decision,
}

impl DecisionRef<'_> {
    /// The owned decision.
    pub fn to_decision(&self) -> TaskDecision {
        TaskDecision {
            task_id: self.task_id.to_owned(),
            assignee: self.assignee.map(str::to_owned),
            auto_assigned: self.auto_assigned,
            decision: self.decision.clone(),
        }
    }
}

impl TaskDecision {
    /// The borrowed view.
    pub fn as_ref(&self) -> DecisionRef<'_> {
        DecisionRef {
            task_id: &self.task_id,
            assignee: self.assignee.as_deref(),
            auto_assigned: self.auto_assigned,
            decision: self.decision.clone(),
        }
    }
}

/// Where a streamed plan goes, in order: every housekeeping action and promotion, then one decision per ready task
/// in dispatch order (the candidates a board-wide limit had to choose between last, in the fair-share order).
/// [`TickPlan`] collects one; a report writer prints one as it comes.
pub trait PlanSink {
    fn housekeeping(&mut self, task_id: &str, action: &Housekeeping);
    fn promoted(&mut self, task_id: &str);
    fn decision(&mut self, decision: &DecisionRef<'_>);
}

impl PlanSink for TickPlan {
    fn housekeeping(&mut self, task_id: &str, action: &Housekeeping) {
        self.housekeeping.push((task_id.to_owned(), action.clone()));
    }
    fn promoted(&mut self, task_id: &str) {
        self.promoted.push(task_id.to_owned());
    }
    fn decision(&mut self, decision: &DecisionRef<'_>) {
        self.note_due(&decision.decision);
        self.decisions.push(decision.to_decision());
    }
}

impl TickPlan {
    /// Feeds this plan to `sink`, in the order a streaming planner would.
    pub fn replay(&self, sink: &mut dyn PlanSink) {
        for (id, h) in &self.housekeeping {
            sink.housekeeping(id, h);
        }
        for id in &self.promoted {
            sink.promoted(id);
        }
        for d in &self.decisions {
            sink.decision(&d.as_ref());
        }
    }
}

/// The planner of one tick, fed row by row: first every running task of the board ([`Planner::running`]), then the
/// ready tasks in dispatch order ([`Planner::decide`]), then [`Planner::finish`]. Its state is the running counts per
/// profile, the board's recent starts, the candidates seen per profile and, when a board-wide limit binds, the
/// candidates it must choose between (at most as many per profile as that limit leaves starts), so a store can stream a board of any size through it in
/// memory bounded by the profiles and the free slots.
///
/// **Fair share**, the one rule for who gets a slot when a board-wide limit (`kanban.max_in_progress`, a tick's
/// spawn limit, `kanban.rate_limit_per_minute`) leaves fewer starts than there are ready tasks: higher priority first;
/// within a priority, the next slot goes to the profile with the fewest tasks running (counting those this tick
/// starts), a tie to the profile whose next task is oldest; within a profile, oldest first. With nothing running that
/// is a round robin across the profiles that have ready tasks; see [`fair_key`].
pub struct Planner<'c> {
    now: Timestamp,
    cfg: &'c TickConfig,
    per_profile: BTreeMap<String, u32>,
    total_running: u32,
    /// The board's starts in the rate window, per assignee, oldest first; and all of them.
    starts: BTreeMap<String, Vec<Timestamp>>,
    all_starts: Vec<Timestamp>,
    /// Set at the first ready task (every running one counted by then).
    budget: Option<Budget>,
    /// Each profile's lane this tick: its candidates so far (a task's rank within its profile), its running count
    /// and its own room.
    lanes: BTreeMap<String, Lane>,
    /// Candidates a board-wide limit must choose between; decided at [`Planner::finish`].
    pending: Vec<Pending>,
}

impl<'c> Planner<'c> {
    /// A planner that starts from what runs on the other boards of this host.
    pub fn new(
        now: Timestamp,
        cfg: &'c TickConfig,
        running_elsewhere: &BTreeMap<String, u32>,
        total_running_elsewhere: u32,
    ) -> Self {
        Self {
            now,
            cfg,
            per_profile: running_elsewhere.clone(),
            total_running: total_running_elsewhere,
            starts: BTreeMap::new(),
            all_starts: Vec::new(),
            budget: None,
            lanes: BTreeMap::new(),
            pending: Vec::new(),
        }
    }

    /// The board's starts within the rate window (any order), for the start-rate limits.
    #[must_use]
    pub fn with_starts(mut self, starts: &[(Option<String>, Timestamp)]) -> Self {
        let mut all: Vec<Timestamp> = starts.iter().map(|(_, at)| *at).collect();
        all.sort();
        for (who, at) in starts {
            if let Some(who) = who.as_deref().filter(|w| !w.trim().is_empty()) {
                self.starts.entry(who.to_owned()).or_default().push(*at);
            }
        }
        for times in self.starts.values_mut() {
            times.sort();
        }
        self.all_starts = all;
        self
    }

    /// A running task of this board: its housekeeping (`None` when healthy); it counts against the caps while it
    /// stays running. When the action [`requeues`] it, the caller adds the task to the ready tasks.
    pub fn running(&mut self, t: &TaskRow) -> Option<Housekeeping> {
        let hk = plan_housekeeping(self.now, t, self.cfg);
        if hk.as_ref().is_none_or(|h| !leaves_running(h)) {
            self.total_running += 1;
            if let Some(a) = t.assignee.as_deref().filter(|a| !a.is_empty()) {
                *self.per_profile.entry(a.to_owned()).or_default() += 1;
            }
        }
        hk
    }

    /// The next ready task in dispatch order: its decision goes to `sink` now, or, when a board-wide limit must
    /// choose between it and others, at [`Planner::finish`]. Nothing when `--task` names another task.
    pub fn decide(&mut self, t: ReadyTask<'_>, sink: &mut dyn PlanSink) {
        let cfg = self.cfg;
        if cfg.only_task.as_deref().is_some_and(|only| only != t.id) || cfg.held.contains(t.id) {
            return;
        }
        // A deferred task still names its assignee, so `--explain` says whose task waits.
        let named = t.assignee.filter(|a| !a.trim().is_empty());
        let mut d = DecisionRef { task_id: t.id, assignee: named, auto_assigned: false, decision: Decision::Spawn };
        if let Some(at) = t.not_before.filter(|at| *at > self.now) {
            d.decision = Decision::DeferredScheduled { wait_secs: at.secs_since(self.now).ceil() as i64, until: at };
            return sink.decision(&d);
        }
        if let Some(until) = cfg.engine_backoff_until.filter(|until| *until > self.now) {
            d.decision = Decision::DeferredEngineUnavailable { wait_secs: until.secs_since(self.now).ceil() as i64 };
            return sink.decision(&d);
        }
        // A retry waits a while for the host that holds its sandbox (and its files), then any host takes it.
        if let Some(since) = t.sandbox_elsewhere_since {
            let left = cfg.sandbox_affinity_secs - self.now.secs_since(since).floor() as i64;
            if left > 0 {
                d.decision = Decision::DeferredSandboxElsewhere { wait_secs: left };
                return sink.decision(&d);
            }
        }
        if self.budget.is_none() {
            self.budget = Some(self.budget());
        }
        let Some(budget) = &self.budget else { return };
        let left = budget.left;
        if left == Some(0) {
            d.decision = budget.why.clone();
            return sink.decision(&d);
        }
        let assignee = match named {
            Some(a) => a,
            None => match cfg.default_assignee.as_deref().filter(|d| cfg.profiles.contains(*d)) {
                Some(default) => {
                    d.auto_assigned = true;
                    default
                }
                None => {
                    d.decision = Decision::SkippedUnassigned;
                    return sink.decision(&d);
                }
            },
        };
        d.assignee = Some(assignee);
        // One lookup a task once its profile has a lane (only a profile of this host gets one).
        let lane = match self.lanes.get_mut(assignee) {
            Some(lane) => lane,
            None => {
                if !cfg.profiles.contains(assignee) {
                    d.decision = Decision::SkippedNonspawnable;
                    return sink.decision(&d);
                }
                let lane = self.lane(assignee);
                self.lanes.entry(assignee.to_owned()).or_insert(lane)
            }
        };
        let Some(budget) = &self.budget else { return };
        let rank = lane.rank;
        // Past the board's budget: at least that many of the profile's own candidates, each ahead of this one in
        // the fair order, fill every slot first.
        if left.is_some_and(|left| rank >= left) {
            d.decision = budget.why.clone();
            return sink.decision(&d);
        }
        if let Some((room, why)) = &lane.room
            && rank >= *room
        {
            d.decision = why.clone();
            return sink.decision(&d);
        }
        lane.rank += 1;
        if left.is_none() {
            // Nothing board-wide to share: every candidate within its profile's limits starts.
            return sink.decision(&d);
        }
        let key = fair_key(t.priority, lane.running, rank, t.created_at, t.id);
        self.pending.push(Pending { key, assignee: assignee.to_owned(), auto_assigned: d.auto_assigned });
    }

    /// Decides the candidates a board-wide limit had to choose between, in the fair order (see [`Planner`]): as many
    /// as it leaves start, the others wait for it.
    pub fn finish(self, sink: &mut dyn PlanSink) {
        let Some(budget) = self.budget else { return };
        let mut pending = self.pending;
        pending.sort_by(|a, b| a.key.cmp(&b.key));
        let left = budget.left.unwrap_or(u32::MAX) as usize;
        for (i, p) in pending.iter().enumerate() {
            let decision = if i < left { Decision::Spawn } else { budget.why.clone() };
            let d = DecisionRef {
                task_id: &p.key.id,
                assignee: Some(&p.assignee),
                auto_assigned: p.auto_assigned,
                decision,
            };
            sink.decision(&d);
        }
    }
}

/// Plans a whole tick: housekeeping, promotion, then one decision per ready task under every cap.
pub fn plan_tick(now: Timestamp, snapshot: &BoardSnapshot, cfg: &TickConfig) -> TickPlan {
    let mut plan = TickPlan::default();
    plan_tick_into(now, snapshot, cfg, &mut plan);
    plan
}

/// [`plan_tick`] into any sink (the order of [`PlanSink`]).
pub fn plan_tick_into(now: Timestamp, snapshot: &BoardSnapshot, cfg: &TickConfig, sink: &mut dyn PlanSink) {
    let mut planner = Planner::new(now, cfg, &snapshot.running_elsewhere, snapshot.total_running_elsewhere)
        .with_starts(&snapshot.recent_starts);
    let mut ready: Vec<ReadyTask<'_>> = Vec::new();
    for t in &snapshot.tasks {
        match t.status {
            TaskStatus::Running => {
                if let Some(h) = planner.running(t) {
                    if requeues(&h) {
                        ready.push(ReadyTask::of(t));
                    }
                    sink.housekeeping(&t.id, &h);
                }
            }
            TaskStatus::Todo if t.parents_done => {
                sink.promoted(&t.id);
                ready.push(ReadyTask::of(t));
            }
            TaskStatus::Ready if !t.claimed => ready.push(ReadyTask::of(t)),
            _ => {}
        }
    }
    ready.sort_by(ReadyTask::dispatch_order);
    for t in ready {
        planner.decide(t, sink);
    }
    planner.finish(sink);
}

mod fair;

use fair::{Budget, Lane, Pending};
pub use fair::{FairKey, fair_key};

#[cfg(test)]
mod tests;
