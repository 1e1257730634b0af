//! Fixing a task after the fact: `kanban edit` changes its fields, `kanban rm` takes it off the board. Both are
//! recorded in the append-only event log (`edited` with each field's old and new value, `removed` with what the
//! task was), which outlives the task row.

use domain::board::BoardEvent;
use domain::board::TaskStatus;
use domain::time::Timestamp;
use rusqlite::{OptionalExtension, params};

use crate::Sql;
use crate::transitions::{close_run, event, status_in, worker_of};
use crate::{EditableFields, Result, SqliteKanbanStore, StoreError, Task, TaskEdit, WorkerRef};

impl SqliteKanbanStore {
    /// Changes the given fields of a task and records one `edited` event naming each change; returns the task.
    /// A running task keeps its command and assignee (its worker already runs them); an archived task is final.
    ///
    /// # Errors
    /// [`StoreError::NoTask`]; [`StoreError::Transition`] as above; [`StoreError::Invalid`] for an empty title.
    pub fn edit(&mut self, id: &str, edit: &TaskEdit, now: Timestamp) -> Result<Task> {
        domain::board::rules::check_edit(edit)?;
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        if status == TaskStatus::Archived {
            return Err(StoreError::Transition { task: id.to_owned(), status, action: "edit" });
        }
        if status == TaskStatus::Running && (edit.command.is_some() || edit.assignee.is_some()) {
            return Err(StoreError::Transition {
                task: id.to_owned(),
                status,
                action: "change the command or assignee of",
            });
        }
        let before: EditableFields = tx
            .query_row(
                "SELECT title, body, command, priority, assignee, max_runtime_seconds FROM tasks WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)),
            )
            .sql()?;
        let (after, changes) = edit.apply_to(&before);
        if !changes.is_empty() {
            tx.execute(
                "UPDATE tasks SET title = ?2, body = ?3, command = ?4, priority = ?5, assignee = ?6, \
                 max_runtime_seconds = ?7 WHERE id = ?1",
                params![id, after.0, after.1, after.2, after.3, after.4, after.5],
            )
            .sql()?;
            event(&tx, id, None, &BoardEvent::Edited(&changes), now).sql()?;
        }
        tx.commit().sql()?;
        self.task(id)
    }

    /// Takes a task off its board: closes its run, records a `removed` event (the log keeps it), and deletes the task
    /// with its links and runs. Returns the task as it was and the worker to stop.
    ///
    /// # Errors
    /// [`StoreError::NoTask`].
    pub fn remove(&mut self, id: &str, now: Timestamp) -> Result<(Task, Option<WorkerRef>)> {
        let task = self.task(id)?;
        let host = self.host.clone();
        let tx = self.write()?;
        let status = status_in(&tx, id)?;
        let worker = worker_of(&tx, id, &host)?;
        let run = close_run(&tx, id, "removed", None, None, now).sql()?;
        let children: Option<String> = tx
            .query_row("SELECT group_concat(child_id, ',') FROM task_links WHERE parent_id = ?1", [id], |r| r.get(0))
            .optional()
            .sql()?
            .flatten();
        let removed = BoardEvent::Removed {
            prev_status: status,
            title: &task.title,
            board: &task.board,
            children: children.as_deref(),
        };
        event(&tx, id, run, &removed, now).sql()?;
        tx.execute("DELETE FROM task_links WHERE parent_id = ?1 OR child_id = ?1", [id]).sql()?;
        tx.execute("DELETE FROM task_runs WHERE task_id = ?1", [id]).sql()?;
        tx.execute("DELETE FROM tasks WHERE id = ?1", [id]).sql()?;
        tx.commit().sql()?;
        Ok((task, worker))
    }
}
