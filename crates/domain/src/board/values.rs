//! The board's value types: statuses, the task snapshot a dispatch tick plans over, and the failure breaker.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::time::Timestamp;

/// A task's status on the board.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    Triage,
    Todo,
    Ready,
    Running,
    Blocked,
    /// A successful run of a task created with `--review` (or `kanban review`): waits for `kanban approve` or
    /// `kanban request-changes`.
    Review,
    Done,
    Archived,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 8] =
        [Self::Triage, Self::Todo, Self::Ready, Self::Running, Self::Blocked, Self::Review, Self::Done, Self::Archived];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Triage => "triage",
            Self::Todo => "todo",
            Self::Ready => "ready",
            Self::Running => "running",
            Self::Blocked => "blocked",
            Self::Review => "review",
            Self::Done => "done",
            Self::Archived => "archived",
        }
    }
}

impl TaskStatus {
    /// The one parser of a stored status: exact lowercase names, without allocating (a tick reads one per row).
    pub fn from_db(raw: &str) -> Option<Self> {
        Some(match raw {
            "ready" => Self::Ready,
            "running" => Self::Running,
            "todo" => Self::Todo,
            "triage" => Self::Triage,
            "blocked" => Self::Blocked,
            "review" => Self::Review,
            "done" => Self::Done,
            "archived" => Self::Archived,
            _ => return None,
        })
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_db(s).or_else(|| Self::from_db(&s.trim().to_ascii_lowercase())).ok_or_else(|| {
            let all = Self::ALL.map(Self::as_str);
            let hint = crate::suggest::did_you_mean(s.trim(), all);
            format!("unknown status {s:?}{hint}; expected one of {}", all.join(", "))
        })
    }
}

/// Why a task is blocked (`kanban block --kind`), as hermes types its blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum BlockKind {
    /// It waits for its parents: back to `todo` while one is open (kept blocked as `needs-input` when none is).
    #[serde(rename = "dependency")]
    Dependency,
    /// It waits for a person's answer.
    #[serde(rename = "needs-input")]
    NeedsInput,
    /// Its agent cannot do it (a tool, a permission, a skill it lacks).
    #[serde(rename = "capability")]
    Capability,
    /// Something passing (an outage, a limit) stopped it.
    #[serde(rename = "transient")]
    Transient,
}

impl BlockKind {
    pub const ALL: [BlockKind; 4] = [Self::Dependency, Self::NeedsInput, Self::Capability, Self::Transient];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dependency => "dependency",
            Self::NeedsInput => "needs-input",
            Self::Capability => "capability",
            Self::Transient => "transient",
        }
    }

    /// The stored name (hermes's spelling `needs_input` read as well).
    pub fn from_db(raw: &str) -> Option<Self> {
        Some(match raw {
            "dependency" => Self::Dependency,
            "needs-input" | "needs_input" => Self::NeedsInput,
            "capability" => Self::Capability,
            "transient" => Self::Transient,
            _ => return None,
        })
    }
}

impl fmt::Display for BlockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BlockKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_db(s.trim()).ok_or_else(|| {
            let all = Self::ALL.map(Self::as_str);
            let hint = crate::suggest::did_you_mean(s.trim(), all);
            format!("unknown block kind {s:?}{hint}; expected one of {}", all.join(", "))
        })
    }
}

/// One task as a dispatch tick sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRow {
    pub id: String,
    pub assignee: Option<String>,
    pub status: TaskStatus,
    pub priority: i64,
    pub created_at: Timestamp,
    /// Whether some dispatcher holds the claim (running tasks).
    pub claimed: bool,
    pub claim_expires: Option<Timestamp>,
    pub worker_pid: Option<u32>,
    /// Observed at the edge by [`crate::board::liveness::judge`]: is the worker alive (this host: pid and start; another
    /// host: its host's heartbeat)? `None` when nothing can be said (no worker yet, or a host that never beat).
    pub worker_alive: Option<bool>,
    /// The worker's host when it stopped heartbeating for longer than the host timeout: its tasks are taken over.
    pub host_lost: Option<String>,
    /// The run the task is on (`current_run_id`): every write a tick makes on this task expects it still is.
    pub run_id: Option<i64>,
    pub last_heartbeat: Option<Timestamp>,
    /// When the worker confirmed its run (it recorded its own pid and start); its runtime counts from here.
    /// `None` while the claim awaits confirmation: `claim_expires` is then the spawn lease.
    pub started_at: Option<Timestamp>,
    pub max_runtime_secs: Option<i64>,
    pub consecutive_failures: u32,
    pub max_retries: Option<u32>,
    /// For `todo` tasks: whether every parent is done or archived.
    pub parents_done: bool,
    /// For a ready task retried after a failure on another host of a shared board: when that run ended. Its sandbox
    /// (its files) is there, so this host leaves it to that one for `TickConfig::sandbox_affinity_secs`.
    pub sandbox_elsewhere_since: Option<Timestamp>,
    /// For a ready task: not claimed before this time (scheduled, a retry's backoff, a snooze).
    pub not_before: Option<Timestamp>,
}

impl TaskRow {
    /// A task as a snapshot reads a `todo` or `ready` one: unclaimed, no worker, no run yet; a store sets what
    /// else it knows (a running task's claim and worker, `parents_done`, …) on top.
    pub fn waiting(
        id: String,
        assignee: Option<String>,
        status: TaskStatus,
        priority: i64,
        created_at: Timestamp,
    ) -> Self {
        Self {
            id,
            assignee,
            status,
            priority,
            created_at,
            claimed: false,
            claim_expires: None,
            worker_pid: None,
            worker_alive: None,
            host_lost: None,
            run_id: None,
            last_heartbeat: None,
            started_at: None,
            max_runtime_secs: None,
            consecutive_failures: 0,
            max_retries: None,
            parents_done: false,
            sandbox_elsewhere_since: None,
            not_before: None,
        }
    }
}

/// Everything one tick plans over: this board's open tasks and what runs on the other boards of this host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BoardSnapshot {
    pub tasks: Vec<TaskRow>,
    /// Running tasks per assignee on the other boards of this host.
    pub running_elsewhere: BTreeMap<String, u32>,
    /// All running tasks on the other boards of this host (assigned or not).
    pub total_running_elsewhere: u32,
    /// The board's starts (runs claimed) within the last [`RATE_WINDOW_SECS`], each with its assignee: read only
    /// when a start-rate limit is set (`kanban.rate_limit_per_minute` or an override), empty otherwise.
    pub recent_starts: Vec<(Option<String>, Timestamp)>,
}

/// The window of the start-rate limits: at most N starts in any window this long.
pub const RATE_WINDOW_SECS: i64 = 60;

/// The caps, already validated (invalid values arrive here as `None`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DispatchCaps {
    /// All running workers on this host.
    pub max_in_progress: Option<u32>,
    /// Spawns in this tick.
    pub max_spawn: Option<u32>,
    /// Running workers per assignee, across all boards of this host.
    pub per_profile: Option<u32>,
    /// Per-assignee overrides of `per_profile`.
    pub per_profile_overrides: BTreeMap<String, u32>,
    /// `kanban.rate_limit_per_minute`: most starts of the board in any [`RATE_WINDOW_SECS`]; `None` is no limit.
    pub rate_per_minute: Option<u32>,
    /// `kanban.rate_limit_per_minute_overrides`: most starts of one assignee's tasks on the board in any window;
    /// 0 is no limit for that assignee.
    pub rate_overrides: BTreeMap<String, u32>,
}

impl DispatchCaps {
    /// The cap that applies to `assignee`, if any.
    pub fn cap_for(&self, assignee: &str) -> Option<u32> {
        self.per_profile_overrides.get(assignee).copied().or(self.per_profile)
    }

    /// The start-rate limit of `assignee`'s own tasks, if any (its override; 0 there is none).
    pub fn rate_for(&self, assignee: &str) -> Option<u32> {
        self.rate_overrides.get(assignee).copied().filter(|n| *n > 0)
    }

    /// Whether any start-rate limit is set (then a tick reads the board's recent starts).
    pub fn rate_limited(&self) -> bool {
        self.rate_per_minute.is_some() || self.rate_overrides.values().any(|n| *n > 0)
    }
}

/// The knobs of one tick besides the caps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TickConfig {
    pub caps: DispatchCaps,
    /// `kanban.default_assignee`, trimmed; `None` when unset or whitespace.
    pub default_assignee: Option<String>,
    /// The profiles that exist (spawnable assignees).
    pub profiles: BTreeSet<String>,
    pub failure_limit: u32,
    /// `kanban.retry_backoff_seconds` and `kanban.retry_backoff_max_seconds` (and their per-profile overrides): the
    /// pause before a failed task's next try.
    pub retry_backoff: RetryBackoffs,
    /// `kanban.dispatch_stale_timeout_seconds`; 0 disables stale detection.
    pub stale_timeout_secs: i64,
    /// Dispatch only this task (`--task ID`).
    pub only_task: Option<String>,
    /// `kanban.sandbox_affinity_seconds`: how long a retried task waits for the host holding its sandbox; 0 is off.
    pub sandbox_affinity_secs: i64,
    /// This host's id on the board (`kanban.host_id`); empty on a single-host board, where every worker is local.
    pub host: String,
    /// `kanban.host_timeout_seconds`: a host silent for longer is lost and its tasks are taken over; zero never.
    pub host_timeout: std::time::Duration,
    /// Until when this host's workers found the container engine unreachable (the gateway's backoff): no task is
    /// claimed before then. `None` when the engine answered.
    pub engine_backoff_until: Option<Timestamp>,
    /// Tasks whose last worker from this dispatcher has not been reaped yet (it requeued its task and is exiting):
    /// not claimed again until it has, so its exit code (an engine fault's back-off) is seen first and a task never
    /// has two workers of one host, even a dying one.
    pub held: BTreeSet<String>,
}

impl TickConfig {
    /// What a failure the tick records on a task of `assignee` does (a crash, a lapsed lease, a timeout, a spawn
    /// failure).
    pub fn breaker_for(&self, assignee: Option<&str>) -> Breaker {
        Breaker { limit: self.failure_limit, backoff: self.retry_backoff.of(assignee) }
    }
}

/// A running task as a store reads it, before its worker is judged.
#[derive(Clone, Debug)]
pub struct RunningRow<'a> {
    pub id: String,
    pub assignee: Option<String>,
    pub priority: i64,
    pub created_at: Timestamp,
    pub claimed: bool,
    pub claim_expires: Option<Timestamp>,
    pub run_id: Option<i64>,
    pub worker: crate::board::liveness::WorkerFacts<'a>,
    pub last_heartbeat: Option<Timestamp>,
    pub started_at: Option<Timestamp>,
    pub max_runtime_secs: Option<i64>,
    pub consecutive_failures: u32,
    pub max_retries: Option<u32>,
}

impl TaskRow {
    /// A running task with its worker judged by the one liveness rule, from `cfg.host`: only a worker of this host
    /// keeps its pid (only this host probes or stops it); a lost host is named for the takeover.
    pub fn running(r: RunningRow<'_>, cfg: &TickConfig, probe: &dyn crate::board::liveness::ProcessProbe) -> Self {
        use crate::board::liveness::{Liveness, is_local, judge};
        let seen = judge(&cfg.host, &r.worker, cfg.host_timeout, probe);
        let local = is_local(&cfg.host, r.worker.host);
        Self {
            id: r.id,
            assignee: r.assignee,
            status: TaskStatus::Running,
            priority: r.priority,
            created_at: r.created_at,
            claimed: r.claimed,
            claim_expires: r.claim_expires,
            worker_pid: r.worker.pid.and_then(|p| u32::try_from(p).ok()).filter(|_| local),
            worker_alive: seen.alive(),
            host_lost: match seen {
                Liveness::HostLost { host, .. } => Some(host),
                _ => None,
            },
            run_id: r.run_id,
            last_heartbeat: r.last_heartbeat,
            started_at: r.started_at,
            max_runtime_secs: r.max_runtime_secs,
            consecutive_failures: r.consecutive_failures,
            max_retries: r.max_retries,
            parents_done: false,
            sandbox_elsewhere_since: None,
            not_before: None,
        }
    }
}

/// A heartbeat older than this no longer proves a worker is making progress.
pub const HEARTBEAT_STALE_SECS: i64 = 3600;

/// What happens to a task after a failure (crash, timeout, spawn failure).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum FailureOutcome {
    /// Below the limit: back to `ready` with the claim cleared.
    Requeue { failures: u32, limit: u32 },
    /// At the limit: `blocked`, with a `gave_up` event.
    GiveUp { failures: u32, limit: u32 },
}

/// How long a failed task waits before its next try: `base` × 2^(failures − 1), at most `max`, then drawn within
/// its upper half by `jitter` (0 ≤ jitter < 1; the store draws it per task), so retries of many tasks spread out
/// and none comes back sooner than half its delay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryBackoff {
    pub base: std::time::Duration,
    pub max: std::time::Duration,
}

impl RetryBackoff {
    /// The delay before the try after `failures` consecutive failures (zero with a zero base).
    pub fn delay(&self, failures: u32, jitter: f64) -> std::time::Duration {
        let doubled = self.base.saturating_mul(1_u32.checked_shl(failures.saturating_sub(1)).unwrap_or(u32::MAX));
        let full = doubled.min(self.max.max(self.base));
        full.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
    }
}

/// Each profile's retry backoff: `default` (`kanban.retry_backoff_seconds`, `kanban.retry_backoff_max_seconds`)
/// and the profiles that override either (`kanban.retry_backoff_seconds_overrides`,
/// `kanban.retry_backoff_max_seconds_overrides`), each override in place of its default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetryBackoffs {
    pub default: RetryBackoff,
    pub per_profile: std::collections::BTreeMap<String, RetryBackoff>,
}

impl RetryBackoffs {
    /// The backoff of a task of `assignee` (the default for none, or for a profile without an override).
    pub fn of(&self, assignee: Option<&str>) -> RetryBackoff {
        assignee.and_then(|a| self.per_profile.get(a)).copied().unwrap_or(self.default)
    }
}

/// What a failure does: the breaker's limit (`kanban.failure_limit`) and the pause before the next try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Breaker {
    pub limit: u32,
    pub backoff: RetryBackoff,
}

impl Breaker {
    /// A breaker at `limit` that retries at once (a hand-made dispatch, or a board with no backoff).
    pub fn at_once(limit: u32) -> Self {
        Self { limit, backoff: RetryBackoff::default() }
    }
}

/// The failure breaker: the per-task `max_retries` wins over the configured `failure_limit`.
pub fn record_failure(consecutive_failures: u32, max_retries: Option<u32>, failure_limit: u32) -> FailureOutcome {
    let failures = consecutive_failures.saturating_add(1);
    let limit = max_retries.filter(|n| *n > 0).unwrap_or(failure_limit.max(1));
    if failures >= limit {
        FailureOutcome::GiveUp { failures, limit }
    } else {
        FailureOutcome::Requeue { failures, limit }
    }
}

impl FailureOutcome {
    /// The one "gave up" rule: the breaker tripped and the task is now `blocked`.
    pub fn gave_up(self) -> bool {
        matches!(self, Self::GiveUp { .. })
    }
}

/// A task's worker as its row records it: the pid and the start fingerprint read when it was spawned. Whoever
/// stops it verifies the start first, so a reused pid is never signalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerRef {
    pub pid: i64,
    pub start: Option<i64>,
}

/// What one tick needs besides the store: the board, the knobs, `now` (read once at the edge) and the probe.
#[derive(Clone, Copy)]
pub struct TickRequest<'a> {
    pub board: &'a crate::ids::BoardSlug,
    pub cfg: &'a TickConfig,
    pub now: Timestamp,
    pub probe: &'a dyn crate::board::liveness::ProcessProbe,
    /// Written as `claim_lock` (`<host>:<pid>` of the dispatcher).
    pub claimer: &'a str,
    pub claim_ttl: std::time::Duration,
    /// How long a new claim waits for its worker's confirmation (`kanban.spawn_lease_seconds`).
    pub spawn_lease: std::time::Duration,
}

/// A task a tick claimed: the dispatcher must now start its worker for `run_id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    pub task_id: String,
    pub assignee: Option<String>,
    pub run_id: i64,
    /// The note of the last `kanban request-changes`, which the run is given (`BERTH_REVIEW_NOTE`).
    pub review_note: Option<String>,
}

/// What a store's tick applied.
#[derive(Clone, Debug, Default)]
pub struct TickOutcome {
    pub plan: crate::policy::dispatch::TickPlan,
    pub claimed: Vec<Claimed>,
    /// Workers housekeeping took the task from (reclaimed, timed out, stale, lease lapsed): to stop, verified.
    pub stop_workers: Vec<WorkerRef>,
}

/// A worker a dispatcher started, as the store records it.
#[derive(Clone, Copy, Debug)]
pub struct SpawnRecord<'a> {
    pub task: &'a str,
    pub run_id: i64,
    pub pid: u32,
    /// The process's start fingerprint (against pid reuse).
    pub start: Option<u64>,
    pub log: &'a str,
}

/// The little of a task the dispatcher reads outside a tick (`--task`, releasing a blocked task's sandbox).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskBrief {
    pub id: String,
    pub board: String,
    pub status: TaskStatus,
    pub assignee: Option<String>,
}
