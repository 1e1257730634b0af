//! The task-status transition table: which command moves a task from which statuses to where, and which event it
//! appends. Stores look a command up here instead of repeating guards; the table is the one place to read the rules.

use thiserror::Error;

use crate::board::TaskStatus::{self, Archived, Blocked, Done, Ready, Review, Running, Todo, Triage};

/// A command that changes a task (by hand, by its worker, or by the dispatch tick).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskCommand {
    /// `kanban assign`: sets or clears the assignee.
    Assign,
    /// `kanban complete`, or the worker finishing its run: done, or review for a task that asks for one.
    Complete,
    /// The worker's run failed (or timed out): the failure breaker decides.
    Fail,
    /// `kanban block` (with its kind: `crate::board::rules::block_change` says where it goes).
    Block,
    /// `kanban unblock`.
    Unblock,
    /// `kanban archive`.
    Archive,
    /// `kanban reclaim`.
    Reclaim,
    /// `kanban heartbeat`, or the worker's heartbeat.
    Heartbeat,
    /// The tick claims a ready task for a worker (compare-and-swap on `ready` and no claim).
    Claim,
    /// The tick promotes a `todo` task whose parents are all done.
    Promote,
    /// `kanban promote`: a task out of triage (ready, or todo while a parent is unfinished).
    PromoteTriage,
    /// `kanban review`: a running task (its worker stopped) or a done one waits for a person's review.
    Review,
    /// `kanban approve`: a reviewed task is done (its children promoted as on done).
    Approve,
    /// `kanban request-changes`: a reviewed task runs again with the reviewer's note.
    RequestChanges,
}

/// Where a command takes a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The status does not change.
    Stay,
    To(TaskStatus),
    /// `ready` when every parent is done or archived, else `todo`.
    ReadyOrTodo,
    /// The failure breaker: `ready` below the limit, `blocked` (with `gave_up`) at it.
    ReadyOrBlocked,
    /// `review` for a task created with `--review`, else `done` (`crate::board::rules::completion_status`).
    DoneOrReview,
    /// `blocked`; `todo` for a dependency block while a parent is open; `triage` for the same block a second time
    /// (`crate::board::rules::block_change`).
    ByBlockKind,
}

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    pub command: TaskCommand,
    pub from: &'static [TaskStatus],
    pub to: Target,
    /// The event kind appended (a failure appends its outcome, e.g. `failed` or `timed_out`, instead).
    pub event: &'static str,
    /// The verb of the refusal ("task X is done; cannot {action} it").
    pub action: &'static str,
    /// Whether it ends the task's claim: claim, worker and current run cleared in the same write.
    pub clears_claim: bool,
}

/// Every transition. A command not allowed from a status is refused with [`TransitionRefused`].
pub const TRANSITIONS: &[Transition] = &[
    Transition {
        command: TaskCommand::Assign,
        from: &[Triage, Todo, Ready, Blocked, Review],
        to: Target::Stay,
        event: "assigned",
        action: "reassign",
        clears_claim: false,
    },
    Transition {
        command: TaskCommand::Complete,
        from: &[Triage, Todo, Ready, Running, Blocked],
        to: Target::DoneOrReview,
        event: "completed",
        action: "complete",
        clears_claim: true,
    },
    Transition {
        command: TaskCommand::Fail,
        from: &[Running],
        to: Target::ReadyOrBlocked,
        event: "failed",
        action: "fail",
        clears_claim: true,
    },
    Transition {
        command: TaskCommand::Block,
        from: &[Triage, Todo, Ready, Running],
        to: Target::ByBlockKind,
        event: "blocked",
        action: "block",
        clears_claim: true,
    },
    Transition {
        command: TaskCommand::Unblock,
        from: &[Blocked],
        to: Target::ReadyOrTodo,
        event: "unblocked",
        action: "unblock",
        clears_claim: false,
    },
    Transition {
        command: TaskCommand::Archive,
        from: &[Triage, Todo, Ready, Running, Blocked, Review, Done],
        to: Target::To(Archived),
        event: "archived",
        action: "archive",
        clears_claim: true,
    },
    Transition {
        command: TaskCommand::Reclaim,
        from: &[Running],
        to: Target::To(Ready),
        event: "reclaimed",
        action: "reclaim",
        clears_claim: true,
    },
    Transition {
        command: TaskCommand::Heartbeat,
        from: &[Running],
        to: Target::Stay,
        event: "heartbeat",
        action: "heartbeat",
        clears_claim: false,
    },
    Transition {
        command: TaskCommand::Claim,
        from: &[Ready],
        to: Target::To(Running),
        event: "claimed",
        action: "claim",
        clears_claim: false,
    },
    Transition {
        command: TaskCommand::Promote,
        from: &[Todo],
        to: Target::To(Ready),
        event: "promoted",
        action: "promote",
        clears_claim: false,
    },
    Transition {
        command: TaskCommand::PromoteTriage,
        from: &[Triage],
        to: Target::ReadyOrTodo,
        event: "promoted",
        action: "promote",
        clears_claim: false,
    },
    Transition {
        command: TaskCommand::Review,
        from: &[Running, Done],
        to: Target::To(Review),
        event: "review_requested",
        action: "send to review",
        clears_claim: true,
    },
    Transition {
        command: TaskCommand::Approve,
        from: &[Review],
        to: Target::To(Done),
        event: "approved",
        action: "approve",
        clears_claim: false,
    },
    Transition {
        command: TaskCommand::RequestChanges,
        from: &[Review],
        to: Target::ReadyOrTodo,
        event: "changes_requested",
        action: "request changes on",
        clears_claim: false,
    },
];

/// A command refused from the task's status.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("task is {status}; cannot {action} it")]
pub struct TransitionRefused {
    pub status: TaskStatus,
    pub action: &'static str,
}

/// The transition `command` makes from `from`, or why it is refused.
///
/// # Errors
/// [`TransitionRefused`] when the table has no such move.
pub fn transition(command: TaskCommand, from: TaskStatus) -> Result<&'static Transition, TransitionRefused> {
    let row =
        TRANSITIONS.iter().find(|t| t.command == command).unwrap_or_else(|| unreachable!("every command has a row"));
    if row.from.contains(&from) { Ok(row) } else { Err(TransitionRefused { status: from, action: row.action }) }
}

/// A task as a write finds it, read under the write's lock (SQLite's write transaction, PostgreSQL's row lock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found<'a> {
    pub status: TaskStatus,
    /// The run the task is on (`current_run_id`).
    pub current_run: Option<i64>,
    /// How the run the writer expects ended, when it did (read only when the task is no longer on it).
    pub expected_run_outcome: Option<&'a str>,
}

/// What a guarded write does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guarded {
    /// The move the table allows: apply it.
    Apply(&'static Transition),
    /// The same write already landed (a retry after a reply lost to an outage): change nothing, report success.
    AlreadyDone,
}

/// A guarded write refused: the table does not allow the move, or the task is no longer on the writer's run.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum GuardRefused {
    #[error(transparent)]
    Transition(#[from] TransitionRefused),
    /// The task moved on from run `run` (ended by someone else: a crash verdict, a reclaim, a takeover, a block):
    /// a write about that run changes nothing.
    #[error("the task is no longer on run {run} (it is {status})")]
    Moved { run: i64, status: TaskStatus },
}

/// The guard every write passes, on every store: a write that names the run it acts on (a worker's, a tick's
/// verdict, a takeover) applies only while the task is still on that run, and is a no-op when that run already
/// ended with the outcome the writer meant (`outcome`: the retry of a write whose reply was lost); a write that names
/// no run (a person's command) is checked against the table alone.
///
/// # Errors
/// [`GuardRefused::Moved`] when the task left the run otherwise; [`GuardRefused::Transition`] when the table refuses.
pub fn guard(
    command: TaskCommand,
    found: &Found<'_>,
    expect_run: Option<i64>,
    outcome: &str,
) -> Result<Guarded, GuardRefused> {
    match expect_run {
        Some(run) if found.current_run != Some(run) => {
            if found.expected_run_outcome == Some(outcome) {
                Ok(Guarded::AlreadyDone)
            } else {
                Err(GuardRefused::Moved { run, status: found.status })
            }
        }
        _ => Ok(Guarded::Apply(transition(command, found.status)?)),
    }
}

/// How a store applies one housekeeping verdict of a tick: the one mapping from verdict to change, so the stores
/// translate it to SQL and decide nothing. Every change is guarded by the run the tick judged ([`guard`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HousekeepingChange {
    /// The claim is extended by the claim TTL (a live worker past its claim).
    Extend,
    /// The run ends with `outcome` through the failure breaker (it counts toward the limit).
    Fail { outcome: &'static str, error: String, stop_worker: bool },
    /// The run ends with `outcome` and the task goes back to `ready`, not counted as the task's failure.
    Requeue { outcome: &'static str, stop_worker: bool },
}

impl HousekeepingChange {
    /// The table's command this change is: a claim extension is a heartbeat, a failure a `fail`, a requeue a
    /// `reclaim` (each from `running` only).
    pub fn command(&self) -> TaskCommand {
        match self {
            Self::Extend => TaskCommand::Heartbeat,
            Self::Fail { .. } => TaskCommand::Fail,
            Self::Requeue { .. } => TaskCommand::Reclaim,
        }
    }
}

impl crate::policy::dispatch::Housekeeping {
    /// The change this verdict makes.
    pub fn change(&self) -> HousekeepingChange {
        use crate::policy::dispatch::Housekeeping as H;
        match self {
            H::ExtendClaim => HousekeepingChange::Extend,
            // Its leader is gone, but a worker command's children may still run the command: stopped with it.
            H::Crashed { pid, .. } => HousekeepingChange::Fail {
                outcome: "crashed",
                error: format!("worker pid {pid} exited without completing the task"),
                stop_worker: true,
            },
            H::LeaseExpired { outcome: Some(_), .. } => HousekeepingChange::Fail {
                outcome: "lease_expired",
                error: "no worker confirmed the run within the spawn lease".to_owned(),
                stop_worker: true,
            },
            // No worker was ever started for the run: the task never ran, so nothing of it failed.
            // A live worker that never confirmed (it waited for the board) is stopped; the task never ran.
            H::LeaseExpired { outcome: None, pid } => {
                HousekeepingChange::Requeue { outcome: "lease_expired", stop_worker: pid.is_some() }
            }
            H::TimedOut { .. } => HousekeepingChange::Fail {
                outcome: "timed_out",
                error: "max runtime exceeded".to_owned(),
                stop_worker: true,
            },
            H::Reclaim { .. } => HousekeepingChange::Requeue { outcome: "reclaimed", stop_worker: true },
            H::Stale { .. } => HousekeepingChange::Requeue { outcome: "stale", stop_worker: true },
            H::HostLost { .. } => HousekeepingChange::Requeue { outcome: "host_lost", stop_worker: false },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_exactly_one_row() {
        use TaskCommand::*;
        for c in [
            Assign,
            Complete,
            Fail,
            Block,
            Unblock,
            Archive,
            Reclaim,
            Heartbeat,
            Claim,
            Promote,
            PromoteTriage,
            Review,
            Approve,
            RequestChanges,
        ] {
            assert_eq!(TRANSITIONS.iter().filter(|t| t.command == c).count(), 1, "{c:?}");
        }
    }

    #[test]
    fn finished_tasks_only_archive_or_go_back_to_review() {
        for c in TRANSITIONS {
            let from_done = transition(c.command, Done).is_ok();
            let expected = matches!(c.command, TaskCommand::Archive | TaskCommand::Review);
            assert_eq!(from_done, expected, "{:?} from done", c.command);
            assert!(transition(c.command, Archived).is_err(), "{:?} from archived", c.command);
        }
    }

    #[test]
    fn a_write_about_a_run_the_task_left_changes_nothing_and_a_retried_one_is_a_no_op() {
        let found = |status, current_run, ended: Option<&'static str>| Found {
            status,
            current_run,
            expected_run_outcome: ended,
        };
        // Still on the run: the table decides.
        assert!(matches!(
            guard(TaskCommand::Fail, &found(Running, Some(7), None), Some(7), "crashed"),
            Ok(Guarded::Apply(_))
        ));
        // A crash verdict on a run its worker completed meanwhile: refused, the task stays done.
        assert_eq!(
            guard(TaskCommand::Fail, &found(Done, None, Some("completed")), Some(7), "crashed"),
            Err(GuardRefused::Moved { run: 7, status: Done })
        );
        // The worker's completion retried after its reply was lost: a no-op.
        assert_eq!(
            guard(TaskCommand::Complete, &found(Done, None, Some("completed")), Some(7), "completed"),
            Ok(Guarded::AlreadyDone)
        );
        // A completion from an old run once the task runs again: refused.
        assert!(guard(TaskCommand::Complete, &found(Running, Some(9), Some("crashed")), Some(7), "completed").is_err());
        // A person's command names no run: the table alone.
        assert!(guard(TaskCommand::Complete, &found(Done, None, None), None, "completed").is_err());
    }

    #[test]
    fn a_refusal_names_the_status_and_the_verb() {
        let e = transition(TaskCommand::Unblock, Ready).unwrap_err();
        assert_eq!(e.to_string(), "task is ready; cannot unblock it");
        assert_eq!(transition(TaskCommand::Block, Running).map(|t| t.to), Ok(Target::ByBlockKind));
        let e = transition(TaskCommand::Approve, Running).unwrap_err();
        assert_eq!(e.to_string(), "task is running; cannot approve it");
        assert_eq!(transition(TaskCommand::RequestChanges, Review).map(|t| t.to), Ok(Target::ReadyOrTodo));
    }
}
