//! Every event a board writes, as one enum with one serialization: a store writes [`BoardEvent::kind`] and
//! [`BoardEvent::payload`] and never builds a payload of its own, so the same story leaves the same event log on
//! every store (the shared store suite compares them: `board_port::the_same_story_leaves_the_same_event_log`).
//!
//! Payload timestamps (`expires`, `*_at`) are milliseconds since the epoch, printed as RFC 3339 by [`crate::board::Event`].

use crate::board::transitions::HousekeepingChange;
use crate::board::{BlockKind, TaskStatus};
use crate::policy::dispatch::Housekeeping;
use serde::Serialize;
use serde_json::{Map, Value as Json};

/// Who set an assignee.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum AssignedBy {
    /// `kanban assign` (or the dashboard's assign).
    #[serde(rename = "cli")]
    Hand,
    /// A tick gave an unassigned task `kanban.default_assignee`.
    #[serde(rename = "kanban.default_assignee")]
    DefaultAssignee,
}

/// One event of a task's log. Its payload is the variant's fields (a `skip`ped field only decides the kind).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum BoardEvent<'a> {
    Created {
        assignee: Option<&'a str>,
        status: TaskStatus,
        parents: &'a [String],
        board: &'a str,
    },
    Assigned {
        assignee: Option<&'a str>,
        source: AssignedBy,
    },
    Completed {
        result: Option<&'a str>,
        exit_code: Option<i64>,
    },
    /// A run that failed, through the breaker (`failed`, `timed_out`, `crashed`, `spawn_failed`, …).
    Failed {
        #[serde(skip)]
        outcome: &'static str,
        error: &'a str,
        exit_code: Option<i64>,
        failures: i64,
        /// When the retry may start (the backoff), when it waits.
        #[serde(skip_serializing_if = "Option::is_none")]
        retry_at: Option<i64>,
    },
    /// The breaker tripped on the failure just before it.
    GaveUp {
        failures: u32,
        effective_limit: u32,
        error: &'a str,
        trigger_outcome: &'static str,
    },
    /// A run ended for a reason outside the task (`infra_unavailable`): back to ready, no failure counted.
    Requeued {
        #[serde(skip)]
        outcome: &'static str,
        error: &'a str,
        /// When the task may run again (a snooze), when it waits.
        #[serde(skip_serializing_if = "Option::is_none")]
        retry_at: Option<i64>,
    },
    /// A waiting task's time set (`kanban schedule`), or cleared (`None`: at once).
    Scheduled {
        run_at: Option<i64>,
    },
    /// A housekeeping verdict that requeued its task (`lease_expired`, `reclaimed`, `stale`, `host_lost`): the
    /// verdict is the payload.
    Housekeeping(&'a Housekeeping),
    ClaimExtended {
        expires: i64,
    },
    Claimed {
        lock: &'a str,
        expires: i64,
        run_id: i64,
    },
    /// The dispatcher started the run's worker.
    Spawned {
        pid: u32,
        log: &'a str,
        host: &'a str,
    },
    /// A worker confirmed its run; `by` is `dispatcher` when the dispatcher confirmed it for the worker it started.
    Confirmed {
        pid: u32,
        start: Option<i64>,
        host: &'a str,
        expires: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        by: Option<&'static str>,
    },
    /// A waiting task became ready: its parent `parent` finished, or (none) a tick found every parent done.
    Promoted {
        #[serde(skip_serializing_if = "Option::is_none")]
        parent: Option<&'a str>,
        /// Out of triage by hand (`kanban promote`): where it went, ready or todo.
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<TaskStatus>,
    },
    Blocked {
        reason: Option<&'a str>,
        /// Its kind (`kanban block --kind`), as it was kept (a dependency with no open parent is `needs-input`).
        #[serde(skip_serializing_if = "Option::is_none")]
        kind: Option<BlockKind>,
        /// Where it went when not `blocked`: `todo` (a dependency), `triage` (the same block a second time).
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<TaskStatus>,
    },
    /// `kanban review`: the task waits for a person (from `running`, its worker stopped, or from `done`).
    ReviewRequested {
        note: Option<&'a str>,
        prev_status: TaskStatus,
    },
    /// `kanban approve`: the reviewed task is done.
    Approved {},
    /// `kanban request-changes`: back to run with the reviewer's note.
    ChangesRequested {
        note: &'a str,
        status: TaskStatus,
    },
    Unblocked {
        status: TaskStatus,
    },
    Archived {
        prev_status: TaskStatus,
    },
    /// A running task taken back by hand.
    Reclaimed {
        manual: bool,
        reason: Option<&'a str>,
        prev_lock: Option<&'a str>,
    },
    Heartbeat {
        note: &'a str,
    },
    /// Each changed field as `{from, to}` (`TaskEdit::apply_to`).
    Edited(&'a Map<String, Json>),
    /// The task as it was when it was taken off its board (the log outlives the row).
    Removed {
        prev_status: TaskStatus,
        title: &'a str,
        board: &'a str,
        children: Option<&'a str>,
    },
}

impl BoardEvent<'_> {
    /// The event's kind, as stored.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Created { .. } => "created",
            Self::Assigned { .. } => "assigned",
            Self::Completed { .. } => "completed",
            Self::Failed { outcome, .. } | Self::Requeued { outcome, .. } => outcome,
            Self::GaveUp { .. } => "gave_up",
            Self::Housekeeping(hk) => match hk.change() {
                HousekeepingChange::Extend => "claim_extended",
                HousekeepingChange::Fail { outcome, .. } | HousekeepingChange::Requeue { outcome, .. } => outcome,
            },
            Self::Scheduled { .. } => "scheduled",
            Self::ClaimExtended { .. } => "claim_extended",
            Self::Claimed { .. } => "claimed",
            Self::Spawned { .. } => "spawned",
            Self::Confirmed { .. } => "confirmed",
            Self::Promoted { .. } => "promoted",
            Self::Blocked { .. } => "blocked",
            Self::ReviewRequested { .. } => "review_requested",
            Self::Approved {} => "approved",
            Self::ChangesRequested { .. } => "changes_requested",
            Self::Unblocked { .. } => "unblocked",
            Self::Archived { .. } => "archived",
            Self::Reclaimed { .. } => "reclaimed",
            Self::Heartbeat { .. } => "heartbeat",
            Self::Edited(_) => "edited",
            Self::Removed { .. } => "removed",
        }
    }

    /// The payload as stored: the variant's fields as a JSON object.
    pub fn payload(&self) -> String {
        // Every field is a string, number, bool, list or map of them: serializing cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use crate::board::FailureOutcome;

    use super::*;

    fn parsed(e: &BoardEvent<'_>) -> Json {
        serde_json::from_str(&e.payload()).unwrap()
    }

    #[test]
    fn each_event_is_its_kind_and_its_fields() {
        let e = BoardEvent::Spawned { pid: 7, log: "/l", host: "h" };
        assert_eq!((e.kind(), parsed(&e)), ("spawned", serde_json::json!({"pid": 7, "log": "/l", "host": "h"})));
        let e =
            BoardEvent::Failed { outcome: "timed_out", error: "slow", exit_code: None, failures: 2, retry_at: None };
        assert_eq!(e.kind(), "timed_out");
        assert_eq!(parsed(&e), serde_json::json!({"error": "slow", "exit_code": null, "failures": 2}));
        assert_eq!(parsed(&BoardEvent::Promoted { parent: None, status: None }), serde_json::json!({}));
        let e = BoardEvent::Promoted { parent: Some("p"), status: None };
        assert_eq!(parsed(&e), serde_json::json!({"parent": "p"}));
        let e = BoardEvent::Assigned { assignee: Some("a"), source: AssignedBy::DefaultAssignee };
        assert_eq!(parsed(&e)["source"], "kanban.default_assignee");
        let e = BoardEvent::Archived { prev_status: TaskStatus::Blocked };
        assert_eq!(parsed(&e), serde_json::json!({"prev_status": "blocked"}));
    }

    #[test]
    fn a_housekeeping_event_is_named_by_its_verdicts_outcome() {
        let hk = Housekeeping::Stale { pid: Some(3) };
        let e = BoardEvent::Housekeeping(&hk);
        assert_eq!((e.kind(), parsed(&e)), ("stale", serde_json::json!({"action": "stale", "pid": 3})));
        let hk = Housekeeping::Crashed { pid: 3, outcome: FailureOutcome::Requeue { failures: 1, limit: 2 } };
        assert_eq!(BoardEvent::Housekeeping(&hk).kind(), "crashed");
    }
}
