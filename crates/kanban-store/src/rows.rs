//! The rows the store hands out (tasks, events, runs, boards) and what callers pass in, with their decoding.

use domain::kanban::TaskStatus;
use serde::Serialize;
use serde_json::Value as Json;

use crate::{Result, StoreError};

/// Timestamps are stored as milliseconds since the epoch and serialized (every `--json` output) as RFC 3339.
mod rfc3339 {
    use domain::time::Timestamp;
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
    pub outcome: &'a str,
    pub error: &'a str,
    pub exit_code: Option<i64>,
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
}

pub(crate) const TASK_COLUMNS: &str = "id, board, title, body, command, assignee, status, priority, created_by, created_at, started_at, \
    completed_at, claim_lock, claim_expires, worker_pid, worker_start, consecutive_failures, last_failure_error, \
    max_runtime_seconds, max_retries, last_heartbeat_at, current_run_id, result, worker_host, confirmed_at";

/// The status column, as a conversion error for rusqlite when unknown.
pub(crate) fn status_col(raw: &str) -> rusqlite::Result<TaskStatus> {
    status_of(raw).map_err(|e| rusqlite::Error::FromSqlConversionFailure(6, rusqlite::types::Type::Text, e.into()))
}

/// The one reading of a stored status (no allocation on the way).
pub(crate) fn status_of(raw: &str) -> Result<TaskStatus> {
    TaskStatus::from_db(raw).ok_or_else(|| StoreError::Invalid(format!("unknown status {raw:?}")))
}

/// Decodes one row of [`TASK_COLUMNS`] (links are read separately).
pub(crate) fn task_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Task> {
    Ok(Task {
        id: r.get(0)?,
        board: r.get(1)?,
        title: r.get(2)?,
        body: r.get(3)?,
        command: r.get(4)?,
        assignee: r.get(5)?,
        status: status_col(&r.get::<_, String>(6)?)?,
        priority: r.get(7)?,
        created_by: r.get(8)?,
        created_at: r.get(9)?,
        started_at: r.get(10)?,
        completed_at: r.get(11)?,
        claim_lock: r.get(12)?,
        claim_expires: r.get(13)?,
        worker_pid: r.get(14)?,
        worker_start: r.get(15)?,
        consecutive_failures: r.get(16)?,
        last_failure_error: r.get(17)?,
        max_runtime_seconds: r.get(18)?,
        max_retries: r.get(19)?,
        last_heartbeat_at: r.get(20)?,
        current_run_id: r.get(21)?,
        result: r.get(22)?,
        worker_host: r.get(23)?,
        confirmed_at: r.get(24)?,
        parents: Vec::new(),
    })
}
