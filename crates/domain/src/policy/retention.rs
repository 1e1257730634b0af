//! Retention of finished tasks' output: which tasks' workspace folders and worker logs have been kept long enough.
//!
//! A finished task keeps its workspace (where its worker's work landed) and its log as its output, but not forever:
//! a `done` task for `kanban.retention_days` after it finished, an `archived` one not at all. Every other status is
//! work that may still run (or be unblocked and retried), and is never chosen.

use serde::Serialize;

use crate::board::TaskStatus;
use crate::time::Timestamp;

/// A task as retention sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskOutput {
    pub id: String,
    pub status: TaskStatus,
    /// When it finished (`completed_at`); `None` for a task never completed.
    pub finished_at: Option<Timestamp>,
}

/// Why a task's output goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum Expiry {
    /// Done longer ago than the retention period.
    Expired { age_secs: i64, retention_secs: i64 },
    /// Archived: its output goes at once.
    Archived,
}

/// The tasks whose output goes, each with its reason. `retention_secs` `None` means "kept until archived".
/// A done task without a finish time is kept (its age is unknown), as is one that finished in the future.
pub fn expired_outputs(now: Timestamp, tasks: &[TaskOutput], retention_secs: Option<i64>) -> Vec<(String, Expiry)> {
    tasks
        .iter()
        .filter_map(|t| match t.status {
            TaskStatus::Archived => Some((t.id.clone(), Expiry::Archived)),
            TaskStatus::Done => {
                let retention_secs = retention_secs?;
                let age_secs = now.secs_since(t.finished_at?).floor() as i64;
                (age_secs >= retention_secs).then(|| (t.id.clone(), Expiry::Expired { age_secs, retention_secs }))
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, status: TaskStatus, finished_secs: Option<i64>) -> TaskOutput {
        TaskOutput { id: id.into(), status, finished_at: finished_secs.map(|s| Timestamp::from_millis(s * 1000)) }
    }

    #[test]
    fn only_done_past_retention_and_archived_tasks_go() {
        let now = Timestamp::from_millis(1_000_000 * 1000);
        let tasks = [
            task("old", TaskStatus::Done, Some(1_000_000 - 700)),
            task("young", TaskStatus::Done, Some(1_000_000 - 10)),
            task("edge", TaskStatus::Done, Some(1_000_000 - 600)),
            task("no-time", TaskStatus::Done, None),
            task("future", TaskStatus::Done, Some(1_000_000 + 50)),
            task("arch", TaskStatus::Archived, None),
            task("run", TaskStatus::Running, Some(0)),
            task("ready", TaskStatus::Ready, Some(0)),
            task("blocked", TaskStatus::Blocked, Some(0)),
            task("todo", TaskStatus::Todo, Some(0)),
            task("triage", TaskStatus::Triage, Some(0)),
        ];
        let got = expired_outputs(now, &tasks, Some(600));
        assert_eq!(
            got,
            vec![
                ("old".into(), Expiry::Expired { age_secs: 700, retention_secs: 600 }),
                ("edge".into(), Expiry::Expired { age_secs: 600, retention_secs: 600 }),
                ("arch".into(), Expiry::Archived),
            ]
        );
        // Off: only archived tasks' output goes.
        assert_eq!(expired_outputs(now, &tasks, None), vec![("arch".into(), Expiry::Archived)]);
    }
}
