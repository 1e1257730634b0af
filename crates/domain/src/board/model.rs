//! The board's rows as every store hands them out (tasks, events, runs, boards, hosts) and what callers pass in.

use crate::board::{BlockKind, TaskStatus, WorkerRef};
use serde::Serialize;
use serde_json::Value as Json;

/// Timestamps are stored as milliseconds since the epoch and serialized (every `--json` output) as RFC 3339.
mod rfc3339 {
    use crate::time::Timestamp;
    use serde::Serializer;
    use serde_json::Value as Json;

    fn text(ms: i64) -> String {
        Timestamp::from_millis(ms).to_rfc3339()
    }

    pub(super) fn one<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&text(*ms))
    }

    pub(super) fn opt<S: Serializer>(ms: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        match ms {
            Some(ms) => s.serialize_some(&text(*ms)),
            None => s.serialize_none(),
        }
    }

    /// Whether an event payload's key names a timestamp.
    fn is_time(key: &str) -> bool {
        key == "expires" || key.ends_with("_at")
    }

    /// An event payload with its timestamp-named integers as RFC 3339 (payloads are stored as written).
    pub(super) fn payload<S: Serializer>(v: &Json, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Json::Object(map) if map.iter().any(|(k, v)| is_time(k) && v.is_i64()) => {
                let shown: serde_json::Map<String, Json> = map
                    .iter()
                    .map(|(k, v)| match v.as_i64() {
                        Some(ms) if is_time(k) => (k.clone(), Json::String(text(ms))),
                        _ => (k.clone(), v.clone()),
                    })
                    .collect();
                serde::Serialize::serialize(&shown, s)
            }
            other => serde::Serialize::serialize(other, s),
        }
    }
}

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
    #[serde(serialize_with = "rfc3339::one")]
    pub created_at: i64,
    #[serde(serialize_with = "rfc3339::opt")]
    pub started_at: Option<i64>,
    #[serde(serialize_with = "rfc3339::opt")]
    pub completed_at: Option<i64>,
    pub claim_lock: Option<String>,
    #[serde(serialize_with = "rfc3339::opt")]
    pub claim_expires: Option<i64>,
    pub worker_pid: Option<i64>,
    pub worker_start: Option<i64>,
    pub consecutive_failures: i64,
    pub last_failure_error: Option<String>,
    pub max_runtime_seconds: Option<i64>,
    pub max_retries: Option<i64>,
    #[serde(serialize_with = "rfc3339::opt")]
    pub last_heartbeat_at: Option<i64>,
    pub current_run_id: Option<i64>,
    pub result: Option<String>,
    /// The host of the worker that confirmed the current run.
    pub worker_host: Option<String>,
    /// When the worker confirmed the current run; `None` while the claim is only a spawn lease.
    #[serde(serialize_with = "rfc3339::opt")]
    pub confirmed_at: Option<i64>,
    /// Not claimed before this time: scheduled (`--at`/`--in`), a retry's backoff, or a snooze (exit 75).
    #[serde(serialize_with = "rfc3339::opt")]
    pub not_before: Option<i64>,
    /// The key it was created under (`--idempotency-key`): a create with the same key on its board returns it.
    pub idempotency_key: Option<String>,
    /// Created with `--review`: a successful run ends in `review`, not `done`.
    pub review: bool,
    /// The note of the last `kanban request-changes`: on the record, and in the next runs' environment
    /// (`BERTH_REVIEW_NOTE`).
    pub review_note: Option<String>,
    /// The last block's kind and reason (kept after an unblock: the same block again sends the task to triage).
    pub block_kind: Option<BlockKind>,
    pub block_reason: Option<String>,
    pub parents: Vec<String>,
}

/// One audit event.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    pub id: i64,
    pub task_id: String,
    pub run_id: Option<i64>,
    pub kind: String,
    /// Timestamps in it (`expires`, `*_at`) are stored as milliseconds and printed as RFC 3339.
    #[serde(serialize_with = "rfc3339::payload")]
    pub payload: Json,
    #[serde(serialize_with = "rfc3339::one")]
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
    #[serde(serialize_with = "rfc3339::opt")]
    pub confirmed_at: Option<i64>,
    #[serde(serialize_with = "rfc3339::one")]
    pub started_at: i64,
    #[serde(serialize_with = "rfc3339::opt")]
    pub ended_at: Option<i64>,
    pub outcome: Option<String>,
    pub error: Option<String>,
    pub exit_code: Option<i64>,
}

/// A host of the board as its heartbeat row tells it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HostSeen {
    pub id: String,
    /// How long since its last heartbeat, in seconds in JSON (`silent_secs`).
    #[serde(rename = "silent_secs", serialize_with = "millis_as_secs")]
    pub silent_ms: i64,
}

fn millis_as_secs<S: serde::Serializer>(ms: &i64, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(*ms as f64 / 1000.0)
}

/// A board.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Board {
    pub slug: String,
    pub name: String,
    #[serde(serialize_with = "rfc3339::one")]
    pub created_at: i64,
}

/// How a worker's run ended when it failed.
#[derive(Clone, Copy, Debug)]
pub struct RunEnd<'a> {
    /// The run outcome (`failed`, `timed_out`, …), also the event kind.
    pub outcome: &'static str,
    pub error: &'a str,
    pub exit_code: Option<i64>,
    /// For a requeue: not claimed again before this time (a snooze); `None` at once.
    pub retry_at: Option<i64>,
}

/// What a transition that ends a task's run (archive, reclaim, review, block) found once the transition table allowed
/// it: the status it left, this host's worker to stop, and the run it closed.
#[derive(Clone, Copy, Debug)]
pub struct Stopped {
    pub status: TaskStatus,
    pub worker: Option<WorkerRef>,
    pub run: Option<i64>,
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
    /// Not claimed before this time (`--at`/`--in`), milliseconds since the epoch.
    pub not_before: Option<i64>,
    /// At most one task per key on a board (`--idempotency-key`): a create under a key the board holds returns that
    /// task and writes nothing.
    pub idempotency_key: Option<String>,
    /// A successful run ends in `review` (`--review`), waiting for `kanban approve` or `kanban request-changes`.
    pub review: bool,
}

/// One entry of a batch as the store left it: the task's id and status; `existing` when its idempotency key named a
/// task already on the board (or earlier in the batch), so nothing was written for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Created {
    pub id: String,
    pub status: TaskStatus,
    pub existing: bool,
}

/// A recurring task's schedule (`kanban cron`): each due slot makes one task for `assignee` running `command`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cron {
    pub board: String,
    pub name: String,
    /// Slots every this many seconds (from the epoch); `None` for a cron expression.
    pub every_seconds: Option<i64>,
    /// A five-field cron expression (UTC); `None` for an interval.
    pub cron: Option<String>,
    pub assignee: String,
    pub command: String,
    #[serde(serialize_with = "rfc3339::one")]
    pub created_at: i64,
    /// The latest slot it made a task for.
    #[serde(serialize_with = "rfc3339::opt")]
    pub last_slot: Option<i64>,
}

impl Cron {
    /// When its slots fall.
    ///
    /// # Errors
    /// [`crate::board::StoreError::Invalid`] for a row whose expression no longer parses (written by hand).
    pub fn recurrence(&self) -> crate::board::Result<crate::board::recurring::Recurrence> {
        match (&self.cron, self.every_seconds) {
            (Some(expr), _) => {
                Ok(crate::board::recurring::Recurrence::Cron(crate::board::recurring::CronExpr::parse(expr)?))
            }
            (None, Some(secs)) => crate::board::recurring::Recurrence::every(secs),
            (None, None) => Err(crate::board::StoreError::Invalid(format!("schedule {} has no recurrence", self.name))),
        }
    }
}

/// What `kanban cron add` asks for: exactly one of `every_seconds` and `cron`.
#[derive(Clone, Debug, Default)]
pub struct NewCron {
    pub name: String,
    pub every_seconds: Option<i64>,
    pub cron: Option<String>,
    pub assignee: String,
    pub command: String,
}
