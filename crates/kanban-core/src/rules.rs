//! The board's rules a store applies without deciding anything: a new task's first status, and the failure
//! breaker's change (status, count, events). Each store reads what a rule needs in its own SQL, calls the rule, and
//! writes what it returns.

use domain::kanban::{FailureOutcome, TaskStatus, record_failure};

use crate::{BoardEvent, NewTask, Result, StoreError};

/// A new task's status: `triage` when asked, `todo` while a parent is unfinished, else `ready`. `parents` are the
/// task's parents with their statuses (`None`: no such task).
///
/// # Errors
/// [`StoreError::NoTask`] for a parent that does not exist.
pub fn initial_status(new: &NewTask, parents: &[(&str, Option<TaskStatus>)]) -> Result<TaskStatus> {
    let mut pending = false;
    for (id, status) in parents {
        match status {
            None => return Err(StoreError::NoTask((*id).to_owned())),
            Some(TaskStatus::Done | TaskStatus::Archived) => {}
            Some(_) => pending = true,
        }
    }
    Ok(if new.triage {
        TaskStatus::Triage
    } else if pending {
        TaskStatus::Todo
    } else {
        TaskStatus::Ready
    })
}

/// Refuses a title a board cannot show on one line: empty, or holding a line break (a listing's row would break).
///
/// # Errors
/// [`StoreError::Invalid`] saying which.
pub fn check_title(title: &str) -> Result<()> {
    if title.trim().is_empty() {
        return Err(StoreError::Invalid("a task needs a non-empty title".into()));
    }
    if title.contains(['\n', '\r']) {
        return Err(StoreError::Invalid("a title is one line (it has a line break); put the details in --body".into()));
    }
    Ok(())
}

/// Refuses a NUL byte in a task's text `field`: SQLite would keep it, PostgreSQL stores no NUL in text, so one such
/// task would stop `kanban migrate` (and any write of it to a shared board) for the whole board.
///
/// # Errors
/// [`StoreError::Invalid`] naming the field.
pub fn check_text(field: &str, value: &str) -> Result<()> {
    if value.contains('\0') {
        return Err(StoreError::Invalid(format!("a task's {field} holds a NUL byte, which no board stores")));
    }
    Ok(())
}

/// A new task's checks, for every store: its title ([`check_title`]) and no NUL in any of its text.
///
/// # Errors
/// [`StoreError::Invalid`] saying which.
pub fn check_new(new: &NewTask) -> Result<()> {
    check_title(&new.title)?;
    check_text("title", &new.title)?;
    let texts =
        [("body", &new.body), ("command", &new.command), ("assignee", &new.assignee), ("creator", &new.created_by)];
    for (field, value) in texts {
        check_text(field, value.as_deref().unwrap_or(""))?;
    }
    new.parents.iter().try_for_each(|p| check_text("parent", p))
}

/// An edit's checks, for every store: a new title as a new task's, and no NUL in any text it sets.
///
/// # Errors
/// [`StoreError::Invalid`] saying which.
pub fn check_edit(edit: &crate::TaskEdit) -> Result<()> {
    if let Some(title) = &edit.title {
        check_title(title)?;
    }
    let texts =
        [("title", &edit.title), ("body", &edit.body), ("command", &edit.command), ("assignee", &edit.assignee)];
    texts.into_iter().try_for_each(|(field, value)| check_text(field, value.as_deref().unwrap_or("")))
}

/// A new task's assignee as stored: trimmed, and none when blank.
pub fn assignee_of(new: &NewTask) -> Option<&str> {
    new.assignee.as_deref().map(str::trim).filter(|a| !a.is_empty())
}

/// The `created` event of a new task.
pub fn created<'a>(new: &'a NewTask, status: TaskStatus, board: &'a str) -> BoardEvent<'a> {
    BoardEvent::Created { assignee: assignee_of(new), status, parents: &new.parents, board }
}

/// The first statuses of a batch of new tasks ([`initial_status`] for each), given the statuses the store found
/// for their parents (a parent missing from `found` does not exist). The first entry refused (an empty title, a
/// missing parent) is named by its index, so a store writes nothing of the batch.
///
/// # Errors
/// [`StoreError::Batch`].
pub fn initial_statuses(
    tasks: &[(String, NewTask)],
    found: &std::collections::HashMap<String, TaskStatus>,
) -> Result<Vec<TaskStatus>> {
    let refused = |index, error| StoreError::Batch { index, error: Box::new(error) };
    let mut statuses = Vec::with_capacity(tasks.len());
    for (index, (_, new)) in tasks.iter().enumerate() {
        check_new(new).map_err(|e| refused(index, e))?;
        let parents: Vec<(&str, Option<TaskStatus>)> =
            new.parents.iter().map(|p| (p.as_str(), found.get(p).copied())).collect();
        statuses.push(initial_status(new, &parents).map_err(|e| refused(index, e))?);
    }
    Ok(statuses)
}

/// What a failure does to a task: the breaker's outcome, the status and failure count to write, and the events
/// to append (the failure's own, then `gave_up` when the breaker tripped).
#[derive(Clone, Debug, PartialEq)]
pub struct FailureChange<'a> {
    pub outcome: FailureOutcome,
    pub status: TaskStatus,
    pub failures: i64,
    pub events: Vec<BoardEvent<'a>>,
}

/// The failure breaker on a task that failed with `kind` (`failed`, `crashed`, `spawn_failed`, …), given its
/// consecutive failures so far and its own `max_retries`: requeue below the limit, block with `gave_up` at it.
pub fn failure_change<'a>(
    kind: &'static str,
    error: &'a str,
    exit_code: Option<i64>,
    consecutive: i64,
    max_retries: Option<i64>,
    failure_limit: u32,
) -> FailureChange<'a> {
    let outcome = record_failure(
        u32::try_from(consecutive).unwrap_or(0),
        max_retries.and_then(|m| u32::try_from(m).ok()),
        failure_limit,
    );
    let (status, failures) = match outcome {
        FailureOutcome::Requeue { failures, .. } => (TaskStatus::Ready, failures),
        FailureOutcome::GiveUp { failures, .. } => (TaskStatus::Blocked, failures),
    };
    let mut events = vec![BoardEvent::Failed { outcome: kind, error, exit_code, failures: i64::from(failures) }];
    if let FailureOutcome::GiveUp { failures, limit } = outcome {
        events.push(BoardEvent::GaveUp { failures, effective_limit: limit, error, trigger_outcome: kind });
    }
    FailureChange { outcome, status, failures: i64::from(failures), events }
}

/// A failure already recorded (a retry of the same write): what the breaker made of it, from the task as it is.
pub fn already_failed(status: TaskStatus, consecutive: i64, failure_limit: u32) -> FailureOutcome {
    let failures = u32::try_from(consecutive).unwrap_or(0);
    if status == TaskStatus::Blocked {
        FailureOutcome::GiveUp { failures, limit: failures }
    } else {
        FailureOutcome::Requeue { failures, limit: failure_limit }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_task_waits_for_its_unfinished_parents_and_a_missing_parent_is_refused() {
        let new = NewTask::default();
        assert_eq!(initial_status(&new, &[]).unwrap(), TaskStatus::Ready);
        assert_eq!(initial_status(&new, &[("a", Some(TaskStatus::Done))]).unwrap(), TaskStatus::Ready);
        assert_eq!(initial_status(&new, &[("a", Some(TaskStatus::Running))]).unwrap(), TaskStatus::Todo);
        assert!(matches!(initial_status(&new, &[("gone", None)]), Err(StoreError::NoTask(id)) if id == "gone"));
        let triage = NewTask { triage: true, ..NewTask::default() };
        assert_eq!(initial_status(&triage, &[("a", Some(TaskStatus::Running))]).unwrap(), TaskStatus::Triage);
    }

    #[test]
    fn the_breaker_requeues_below_the_limit_and_gives_up_at_it_with_its_event() {
        let c = failure_change("crashed", "gone", None, 0, None, 2);
        assert_eq!((c.status, c.failures, c.events.len()), (TaskStatus::Ready, 1, 1));
        let c = failure_change("crashed", "gone", None, 1, None, 2);
        assert_eq!((c.status, c.failures), (TaskStatus::Blocked, 2));
        assert_eq!(c.events[1].kind(), "gave_up");
        assert!(matches!(c.events[1], BoardEvent::GaveUp { trigger_outcome: "crashed", .. }));
        assert_eq!(failure_change("failed", "x", Some(1), 1, Some(5), 2).status, TaskStatus::Ready, "max_retries wins");
    }
}
