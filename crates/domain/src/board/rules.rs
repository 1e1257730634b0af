//! The board's rules a store applies without deciding anything: a new task's first status, or the task its
//! idempotency key already names (`plan_creation`), the failure breaker's change (status, count, events), where a
//! completion goes (`completion_status`: done, or review) and where a typed block goes (`block_change`). Each store
//! reads what a rule needs in its own SQL, calls the rule, and writes what it returns.

use std::collections::HashMap;

use crate::board::{BlockKind, Breaker, FailureOutcome, TaskStatus, record_failure};
use crate::time::Timestamp;

use crate::board::{BoardEvent, NewTask, Result, RunEnd, StoreError};

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

/// Where a completion takes a task: `review` when it was created with `--review` (a person approves it or requests
/// changes), else `done`. Only `done` promotes the task's children.
pub fn completion_status(review: bool) -> TaskStatus {
    if review { TaskStatus::Review } else { TaskStatus::Done }
}

/// What a block does to a task: where it goes and the kind kept on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockChange {
    pub status: TaskStatus,
    /// The kind recorded (a dependency with no open parent is kept as `needs-input`).
    pub kind: Option<BlockKind>,
}

/// The one rule of typed blocks (as hermes has them): a `dependency` block sends the task back to `todo` to wait for
/// its parents while one is open, and is kept `blocked` as `needs-input` when none is (never a silent forever-todo);
/// every other block is `blocked`. The same block a second time (the kind kept and the reason equal to the last
/// block's, `last`, and at least one of them given) sends the task to `triage`, for a person to look at.
pub fn block_change(
    kind: Option<BlockKind>,
    reason: Option<&str>,
    last: (Option<BlockKind>, Option<&str>),
    open_parent: bool,
) -> BlockChange {
    let (status, kind) = match kind {
        Some(BlockKind::Dependency) if open_parent => (TaskStatus::Todo, kind),
        Some(BlockKind::Dependency) => (TaskStatus::Blocked, Some(BlockKind::NeedsInput)),
        _ => (TaskStatus::Blocked, kind),
    };
    let has_cause = kind.is_some() || reason.is_some();
    let repeated = has_cause && last == (kind, reason);
    BlockChange { status: if repeated { TaskStatus::Triage } else { status }, kind }
}

/// Refuses an empty review note (`kanban request-changes --note`): the next run is given it and has nothing to
/// go on without one.
///
/// # Errors
/// [`StoreError::Invalid`].
pub fn check_review_note(note: &str) -> Result<()> {
    if note.trim().is_empty() {
        return Err(StoreError::Invalid("a request for changes needs a non-empty --note".into()));
    }
    Ok(())
}

/// Whether a task in `status` waits and so can be given a time (`kanban schedule`): ready, todo, triage or blocked.
pub fn schedulable(status: TaskStatus) -> bool {
    matches!(status, TaskStatus::Ready | TaskStatus::Todo | TaskStatus::Triage | TaskStatus::Blocked)
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
pub fn check_edit(edit: &crate::board::TaskEdit) -> Result<()> {
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

/// The longest idempotency key, in characters.
pub const IDEMPOTENCY_KEY_MAX: usize = 200;

/// Refuses an idempotency key that is not one non-empty line of at most [`IDEMPOTENCY_KEY_MAX`] characters.
///
/// # Errors
/// [`StoreError::Invalid`] saying which.
pub fn check_idempotency_key(key: &str) -> Result<()> {
    if key.trim().is_empty() {
        return Err(StoreError::Invalid("an idempotency key must not be empty".into()));
    }
    if key.contains(['\n', '\r']) {
        return Err(StoreError::Invalid("an idempotency key is one line (it has a line break)".into()));
    }
    let n = key.chars().count();
    if n > IDEMPOTENCY_KEY_MAX {
        return Err(StoreError::Invalid(format!(
            "an idempotency key has at most {IDEMPOTENCY_KEY_MAX} characters (this one has {n})"
        )));
    }
    Ok(())
}

/// What a create does with one entry of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Creation {
    /// Write it, in this first status.
    New(TaskStatus),
    /// Its idempotency key names this task (on the board, or an earlier entry of the batch): write nothing.
    Existing(String),
}

/// The one rule of creating tasks: for each entry of a batch, in order, either the task its idempotency key already
/// names on the board (`keyed`: key to task id, as the store found them), or an earlier entry's with the same key,
/// or a new task in its first status ([`initial_status`], given the statuses the store found for the parents: a
/// parent missing from `found` does not exist). The first entry refused (a bad key, an empty title, a missing parent)
/// is named by its index, so a store writes nothing of the batch.
///
/// # Errors
/// [`StoreError::Batch`].
pub fn plan_creation(
    tasks: &[(String, NewTask)],
    found: &HashMap<String, TaskStatus>,
    keyed: &HashMap<String, String>,
) -> Result<Vec<Creation>> {
    let refused = |index, error| StoreError::Batch { index, error: Box::new(error) };
    let mut batch: HashMap<&str, &str> = HashMap::new();
    let mut plan = Vec::with_capacity(tasks.len());
    for (index, (id, new)) in tasks.iter().enumerate() {
        if let Some(key) = new.idempotency_key.as_deref() {
            check_idempotency_key(key).map_err(|e| refused(index, e))?;
            if let Some(existing) = keyed.get(key).map(String::as_str).or_else(|| batch.get(key).copied()) {
                plan.push(Creation::Existing(existing.to_owned()));
                continue;
            }
            batch.insert(key, id);
        }
        check_new(new).map_err(|e| refused(index, e))?;
        let parents: Vec<(&str, Option<TaskStatus>)> =
            new.parents.iter().map(|p| (p.as_str(), found.get(p).copied())).collect();
        plan.push(Creation::New(initial_status(new, &parents).map_err(|e| refused(index, e))?));
    }
    Ok(plan)
}

/// The idempotency keys of a batch, for the store to look up on the board.
pub fn keys_of(tasks: &[(String, NewTask)]) -> Vec<&str> {
    tasks.iter().filter_map(|(_, new)| new.idempotency_key.as_deref()).collect()
}

/// What a failure does to a task: the breaker's outcome, the status and failure count to write, and the events
/// to append (the failure's own, then `gave_up` when the breaker tripped).
#[derive(Clone, Debug, PartialEq)]
pub struct FailureChange<'a> {
    pub outcome: FailureOutcome,
    pub status: TaskStatus,
    pub failures: i64,
    /// When a requeued task may run again (the backoff); `None` at once, or when blocked.
    pub retry_at: Option<i64>,
    pub events: Vec<BoardEvent<'a>>,
}

/// A number in [0, 1) drawn from the task and its failure count: retries of many tasks spread out, and the same
/// failure recorded twice waits the same time.
fn jitter(task: &str, failures: u32) -> f64 {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: the same on every host and every run.
    let mut h = std::hash::DefaultHasher::new();
    (task, failures).hash(&mut h);
    (h.finish() >> 11) as f64 / (1_u64 << 53) as f64
}

/// The failure breaker on task `task` whose run ended as `end` (`failed`, `crashed`, `spawn_failed`, …), given its
/// consecutive failures so far and its own `max_retries`: requeue below the limit, after the breaker's backoff, or
/// block with `gave_up` at it.
pub fn failure_change<'a>(
    task: &str,
    end: &RunEnd<'a>,
    consecutive: i64,
    max_retries: Option<i64>,
    breaker: Breaker,
    now: Timestamp,
) -> FailureChange<'a> {
    let outcome = record_failure(
        u32::try_from(consecutive).unwrap_or(0),
        max_retries.and_then(|m| u32::try_from(m).ok()),
        breaker.limit,
    );
    let (status, failures) = match outcome {
        FailureOutcome::Requeue { failures, .. } => (TaskStatus::Ready, failures),
        FailureOutcome::GiveUp { failures, .. } => (TaskStatus::Blocked, failures),
    };
    let delay = breaker.backoff.delay(failures, jitter(task, failures));
    let retry_at = (status == TaskStatus::Ready && !delay.is_zero())
        .then(|| now.as_millis().saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX)));
    let (kind, error, exit_code) = (end.outcome, end.error, end.exit_code);
    let failed = i64::from(failures);
    let mut events = vec![BoardEvent::Failed { outcome: kind, error, exit_code, failures: failed, retry_at }];
    if let FailureOutcome::GiveUp { failures, limit } = outcome {
        events.push(BoardEvent::GaveUp { failures, effective_limit: limit, error, trigger_outcome: kind });
    }
    FailureChange { outcome, status, failures: failed, retry_at, events }
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
    fn a_dependency_waits_for_an_open_parent_and_the_same_block_twice_goes_to_triage() {
        use BlockKind::*;
        let none = (None, None);
        let c = |kind, reason, last, open| block_change(kind, reason, last, open);
        assert_eq!(
            c(Some(Dependency), None, none, true),
            BlockChange { status: TaskStatus::Todo, kind: Some(Dependency) }
        );
        let lone = c(Some(Dependency), Some("x"), none, false);
        assert_eq!(lone, BlockChange { status: TaskStatus::Blocked, kind: Some(NeedsInput) });
        assert_eq!(c(Some(Dependency), Some("x"), (Some(NeedsInput), Some("x")), false).status, TaskStatus::Triage);
        assert_eq!(c(Some(Transient), Some("api"), (Some(Transient), Some("api")), true).status, TaskStatus::Triage);
        assert_eq!(c(Some(Transient), Some("api"), (Some(Capability), Some("api")), true).status, TaskStatus::Blocked);
        assert_eq!(c(None, Some("why"), (None, Some("why")), false).status, TaskStatus::Triage);
        assert_eq!(c(None, None, none, false).status, TaskStatus::Blocked, "a block with no cause never repeats one");
        assert_eq!(completion_status(true), TaskStatus::Review);
        assert_eq!(completion_status(false), TaskStatus::Done);
    }

    #[test]
    fn a_key_the_board_or_the_batch_holds_names_that_task_and_a_bad_key_is_refused() {
        let keyed = |title: &str, key: Option<&str>| NewTask {
            title: title.to_owned(),
            idempotency_key: key.map(str::to_owned),
            ..NewTask::default()
        };
        let tasks = vec![
            ("t_1".to_owned(), keyed("one", Some("k"))),
            ("t_2".to_owned(), keyed("two", Some("new"))),
            ("t_3".to_owned(), keyed("three", Some("new"))),
            ("t_4".to_owned(), keyed("four", None)),
        ];
        let on_board = HashMap::from([("k".to_owned(), "t_old".to_owned())]);
        let plan = plan_creation(&tasks, &HashMap::new(), &on_board).unwrap();
        assert_eq!(
            plan,
            [
                Creation::Existing("t_old".into()),
                Creation::New(TaskStatus::Ready),
                Creation::Existing("t_2".into()),
                Creation::New(TaskStatus::Ready),
            ]
        );
        assert_eq!(keys_of(&tasks), ["k", "new", "new"]);
        for bad in ["", "  ", "a\nb", &"x".repeat(201)] {
            let tasks = vec![("t_1".to_owned(), keyed("ok", None)), ("t_2".to_owned(), keyed("one", Some(bad)))];
            let refused = plan_creation(&tasks, &HashMap::new(), &HashMap::new());
            assert!(matches!(refused, Err(StoreError::Batch { index: 1, .. })), "{bad:?}: {refused:?}");
        }
        assert!(check_idempotency_key(&"é".repeat(200)).is_ok(), "200 characters, not bytes");
    }

    #[test]
    fn the_breaker_requeues_below_the_limit_and_gives_up_at_it_with_its_event() {
        let now = Timestamp::from_millis(1_000_000);
        let crash = RunEnd { outcome: "crashed", error: "gone", exit_code: None, retry_at: None };
        let c = failure_change("t", &crash, 0, None, Breaker::at_once(2), now);
        assert_eq!((c.status, c.failures, c.events.len(), c.retry_at), (TaskStatus::Ready, 1, 1, None));
        let c = failure_change("t", &crash, 1, None, Breaker::at_once(2), now);
        assert_eq!((c.status, c.failures), (TaskStatus::Blocked, 2));
        assert_eq!(c.events[1].kind(), "gave_up");
        assert!(matches!(c.events[1], BoardEvent::GaveUp { trigger_outcome: "crashed", .. }));
        let failed = RunEnd { outcome: "failed", error: "x", exit_code: Some(1), retry_at: None };
        let c = failure_change("t", &failed, 1, Some(5), Breaker::at_once(2), now);
        assert_eq!(c.status, TaskStatus::Ready, "max_retries wins");
    }

    #[test]
    fn a_requeued_failure_waits_a_doubling_backoff_of_which_at_least_half_and_a_blocked_one_none() {
        use std::time::Duration;
        let now = Timestamp::from_millis(1_000_000);
        let failed = RunEnd { outcome: "failed", error: "x", exit_code: Some(1), retry_at: None };
        let backoff = crate::board::RetryBackoff { base: Duration::from_secs(10), max: Duration::from_secs(600) };
        let breaker = Breaker { limit: 20, backoff };
        for (consecutive, full_ms) in [(0, 10_000), (1, 20_000), (2, 40_000), (9, 600_000)] {
            for task in ["a", "b", "c"] {
                let c = failure_change(task, &failed, consecutive, None, breaker, now);
                let wait = c.retry_at.unwrap() - now.as_millis();
                assert!(wait >= full_ms / 2 && wait <= full_ms, "{task} after {consecutive}: {wait} of {full_ms}");
                assert_eq!(c.retry_at, failure_change(task, &failed, consecutive, None, breaker, now).retry_at);
            }
        }
        let blocked = failure_change("a", &failed, 19, None, breaker, now);
        assert_eq!((blocked.status, blocked.retry_at), (TaskStatus::Blocked, None));
    }
}
