//! A person's review of a task's work: `kanban review` (a running task's run ended, its worker to stop; a done one
//! back to review), `kanban approve` (done, children promoted) and `kanban request-changes` (back to run, the note on
//! the task). Each is a row of the domain's transition table, applied in one write transaction with its event.

use domain::board::BoardEvent;
use domain::board::transitions::TaskCommand;
use domain::board::{TaskStatus, WorkerRef};
use domain::time::Timestamp;
use rusqlite::params;

use crate::Sql;
use crate::transitions::{allowed, clear_claim, event, parents_done, promote_children, status_in, stop_run};
use crate::{Result, SqliteKanbanStore, Task};

impl SqliteKanbanStore {
    /// Sends a running or done task to review (see [`crate::BoardStore::review`]); returns the worker to stop.
    ///
    /// # Errors
    /// [`crate::StoreError::NoTask`] or [`crate::StoreError::Transition`] unless running or done.
    pub fn review(&mut self, id: &str, note: Option<&str>, now: Timestamp) -> Result<Option<WorkerRef>> {
        let host = self.host.clone();
        let tx = self.write()?;
        let s = stop_run(&tx, id, TaskCommand::Review, &host, note, now)?;
        tx.execute(concat!("UPDATE tasks SET status = 'review', ", clear_claim!(), " WHERE id = ?1"), [id]).sql()?;
        event(&tx, id, s.run, &BoardEvent::ReviewRequested { note, prev_status: s.status }, now).sql()?;
        tx.commit().sql()?;
        Ok(s.worker)
    }

    /// Approves a task in review: done, its children promoted.
    ///
    /// # Errors
    /// [`crate::StoreError::NoTask`] or [`crate::StoreError::Transition`] unless in review.
    pub fn approve(&mut self, id: &str, now: Timestamp) -> Result<Task> {
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        allowed(TaskCommand::Approve, id, status)?;
        tx.execute(
            "UPDATE tasks SET status = 'done', completed_at = coalesce(completed_at, ?2) WHERE id = ?1",
            params![id, now.as_millis()],
        )
        .sql()?;
        event(&tx, id, None, &BoardEvent::Approved {}, now).sql()?;
        promote_children(&tx, id, now).sql()?;
        tx.commit().sql()?;
        self.task(id)
    }

    /// Requests changes on a task in review: `ready` (or `todo` while a parent is unfinished), the note on its record.
    ///
    /// # Errors
    /// [`crate::StoreError::Invalid`] for an empty note; [`crate::StoreError::NoTask`] or
    /// [`crate::StoreError::Transition`] unless in review.
    pub fn request_changes(&mut self, id: &str, note: &str, now: Timestamp) -> Result<Task> {
        domain::board::rules::check_review_note(note)?;
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        allowed(TaskCommand::RequestChanges, id, status)?;
        let next = if parents_done(&tx, id).sql()? { TaskStatus::Ready } else { TaskStatus::Todo };
        tx.execute(
            "UPDATE tasks SET status = ?2, review_note = ?3, consecutive_failures = 0, not_before = NULL WHERE id = ?1",
            params![id, next.as_str(), note],
        )
        .sql()?;
        event(&tx, id, None, &BoardEvent::ChangesRequested { note, status: next }, now).sql()?;
        tx.commit().sql()?;
        self.task(id)
    }
}
