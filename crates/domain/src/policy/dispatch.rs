//! Dispatch planning: housekeeping and spawn decisions for one tick, as pure functions of a snapshot and `now`.
//!
//! The same plan drives a real tick and a dry run, so a dry run reports exactly what a real tick would do.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::kanban::{
    BoardSnapshot, FailureOutcome, HEARTBEAT_STALE_SECS, TaskRow, TaskStatus, TickConfig, record_failure,
};
use crate::time::Timestamp;

/// What housekeeping does to one running task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Housekeeping {
    /// The worker pid is gone (or reused): a crash, counted as a failure.
    Crashed { pid: u32, outcome: FailureOutcome },
    /// No worker confirmed the run before its spawn lease ran out (the dispatcher died between claim and spawn, or
    /// the worker never started): back to `ready` or blocked, counted as a failure. `pid` is a live process the
    /// dispatcher recorded, to stop.
    LeaseExpired { pid: Option<u32>, outcome: FailureOutcome },
    /// `max_runtime_seconds` elapsed: kill the worker; counted as a failure.
    TimedOut { pid: Option<u32>, outcome: FailureOutcome },
    /// The claim expired but the worker lives and heartbeats: extend the claim.
    ExtendClaim,
    /// The claim expired and the worker is not provably alive: kill it and requeue (not a failure).
    Reclaim { pid: Option<u32> },
    /// Running past the stale timeout without a fresh heartbeat: kill and requeue (not a failure).
    Stale { pid: Option<u32> },
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
    /// A retry whose sandbox is on another host of a shared board: left to that host for a while longer.
    DeferredSandboxElsewhere { wait_secs: i64 },
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
            Self::DeferredSandboxElsewhere { .. } => "deferred_sandbox_elsewhere",
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
            Self::Crashed { outcome, .. } | Self::TimedOut { outcome, .. } | Self::LeaseExpired { outcome, .. } => {
                outcome.gave_up()
            }
            Self::ExtendClaim | Self::Reclaim { .. } | Self::Stale { .. } => false,
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
    /// One decision per ready task considered, in dispatch order.
    pub decisions: Vec<TaskDecision>,
}

impl TickPlan {
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
            return Some(Housekeeping::LeaseExpired {
                pid: t.worker_pid.filter(|_| alive),
                outcome: record_failure(t.consecutive_failures, t.max_retries, cfg.failure_limit),
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

/// Whether housekeeping puts the task back in `ready`.
fn requeues(h: &Housekeeping) -> bool {
    match h {
        Housekeeping::Crashed { outcome, .. }
        | Housekeeping::TimedOut { outcome, .. }
        | Housekeeping::LeaseExpired { outcome, .. } => {
            matches!(outcome, FailureOutcome::Requeue { .. })
        }
        Housekeeping::Reclaim { .. } | Housekeeping::Stale { .. } => true,
        Housekeeping::ExtendClaim => false,
    }
}

/// Plans a whole tick: housekeeping, promotion, then one decision per ready task under every cap.
pub fn plan_tick(now: Timestamp, snapshot: &BoardSnapshot, cfg: &TickConfig) -> TickPlan {
    let mut plan = TickPlan::default();
    let mut per_profile: BTreeMap<&str, u32> =
        snapshot.running_elsewhere.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let mut total_running = snapshot.total_running_elsewhere;
    let mut ready: Vec<&TaskRow> = Vec::new();

    for t in &snapshot.tasks {
        match t.status {
            TaskStatus::Running => {
                let hk = plan_housekeeping(now, t, cfg);
                let still_running = hk.as_ref().is_none_or(|h| !leaves_running(h));
                if hk.as_ref().is_some_and(requeues) {
                    ready.push(t);
                }
                if still_running {
                    total_running += 1;
                    if let Some(a) = t.assignee.as_deref().filter(|a| !a.is_empty()) {
                        *per_profile.entry(a).or_default() += 1;
                    }
                }
                if let Some(h) = hk {
                    plan.housekeeping.push((t.id.clone(), h));
                }
            }
            TaskStatus::Todo if t.parents_done => {
                plan.promoted.push(t.id.clone());
                ready.push(t);
            }
            TaskStatus::Ready if !t.claimed => ready.push(t),
            _ => {}
        }
    }
    ready.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.created_at.cmp(&b.created_at)).then(a.id.cmp(&b.id)));

    let caps = &cfg.caps;
    let mut spawned = 0u32;
    for t in ready {
        if cfg.only_task.as_deref().is_some_and(|only| only != t.id) {
            continue;
        }
        // A deferred task still names its assignee, so `--explain` says whose task waits.
        let named = t.assignee.clone().filter(|a| !a.trim().is_empty());
        let mut d =
            TaskDecision { task_id: t.id.clone(), assignee: named, auto_assigned: false, decision: Decision::Spawn };
        if let Some(since) = t.sandbox_elsewhere_since {
            let left = cfg.sandbox_affinity_secs - now.secs_since(since).floor() as i64;
            if left > 0 {
                d.decision = Decision::DeferredSandboxElsewhere { wait_secs: left };
                plan.decisions.push(d);
                continue;
            }
        }
        if let Some(cap) = caps.max_in_progress.filter(|cap| total_running >= *cap) {
            d.decision = Decision::DeferredMaxInProgress { running: total_running, cap };
            plan.decisions.push(d);
            continue;
        }
        if let Some(cap) = caps.max_spawn.filter(|cap| spawned >= *cap) {
            d.decision = Decision::DeferredMaxSpawn { cap };
            plan.decisions.push(d);
            continue;
        }
        let assignee = match t.assignee.as_deref().filter(|a| !a.trim().is_empty()) {
            Some(a) => a,
            None => match cfg.default_assignee.as_deref().filter(|d| cfg.profiles.contains(*d)) {
                Some(default) => {
                    d.auto_assigned = true;
                    default
                }
                None => {
                    d.decision = Decision::SkippedUnassigned;
                    plan.decisions.push(d);
                    continue;
                }
            },
        };
        d.assignee = Some(assignee.to_owned());
        if !cfg.profiles.contains(assignee) {
            d.decision = Decision::SkippedNonspawnable;
            plan.decisions.push(d);
            continue;
        }
        let current = per_profile.get(assignee).copied().unwrap_or(0);
        if let Some(cap) = caps.cap_for(assignee).filter(|cap| current >= *cap) {
            d.decision = Decision::SkippedPerProfileCapped { current, cap };
            plan.decisions.push(d);
            continue;
        }
        per_profile.insert(assignee, current + 1);
        total_running += 1;
        spawned += 1;
        plan.decisions.push(d);
    }
    plan
}

#[cfg(test)]
mod tests;
