//! The task-status transition table: which command moves a task from which statuses to where, and which event it
//! appends. Stores look a command up here instead of repeating guards; the table is the one place to read the rules.

use thiserror::Error;

use crate::kanban::TaskStatus::{self, Archived, Blocked, Done, Ready, Running, Todo, Triage};

/// A command that changes a task (by hand, by its worker, or by the dispatch tick).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskCommand {
    /// `kanban assign`: sets or clears the assignee.
    Assign,
    /// `kanban complete`, or the worker finishing its run.
    Complete,
    /// The worker's run failed (or timed out): the failure breaker decides.
    Fail,
    /// `kanban block`.
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
        from: &[Triage, Todo, Ready, Blocked],
        to: Target::Stay,
        event: "assigned",
        action: "reassign",
        clears_claim: false,
    },
    Transition {
        command: TaskCommand::Complete,
        from: &[Triage, Todo, Ready, Running, Blocked],
        to: Target::To(Done),
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
        to: Target::To(Blocked),
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
        from: &[Triage, Todo, Ready, Running, Blocked, Done],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_exactly_one_row() {
        use TaskCommand::*;
        for c in [Assign, Complete, Fail, Block, Unblock, Archive, Reclaim, Heartbeat, Claim, Promote] {
            assert_eq!(TRANSITIONS.iter().filter(|t| t.command == c).count(), 1, "{c:?}");
        }
    }

    #[test]
    fn finished_tasks_only_archive() {
        for c in TRANSITIONS {
            let from_done = transition(c.command, Done).is_ok();
            assert_eq!(from_done, c.command == TaskCommand::Archive, "{:?} from done", c.command);
            assert!(transition(c.command, Archived).is_err(), "{:?} from archived", c.command);
        }
    }

    #[test]
    fn a_refusal_names_the_status_and_the_verb() {
        let e = transition(TaskCommand::Unblock, Ready).unwrap_err();
        assert_eq!(e.to_string(), "task is ready; cannot unblock it");
        assert_eq!(transition(TaskCommand::Block, Running).map(|t| t.to), Ok(Target::To(Blocked)));
    }
}
