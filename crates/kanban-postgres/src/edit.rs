//! Fixing a task after the fact on PostgreSQL: `kanban edit` (the one edit rule, `TaskEdit::apply_to`) and
//! `kanban rm` (audited as `removed`, which outlives the task row).

use domain::board::BoardEvent;
use domain::board::TaskStatus;
use domain::board::{StoreError, Task, TaskEdit, WorkerRef};
use domain::time::Timestamp;

use crate::PgKanbanStore;
use crate::board::{close_run, event, read_task, status_in, worker_of};
use crate::client::GenericClient as _;

impl PgKanbanStore {
    pub(crate) fn edit_task(&mut self, id: &str, edit: &TaskEdit, now: Timestamp) -> Result<Task, StoreError> {
        domain::board::rules::check_edit(edit)?;
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            let status = status_in(&mut tx, id)?;
            if status == TaskStatus::Archived {
                return Err(StoreError::Transition { task: id.to_owned(), status, action: "edit" }.into());
            }
            if status == TaskStatus::Running && (edit.command.is_some() || edit.assignee.is_some()) {
                return Err(StoreError::Transition {
                    task: id.to_owned(),
                    status,
                    action: "change the command or assignee of",
                }
                .into());
            }
            let r = tx.query_one(
                "SELECT title, body, command, priority, assignee, max_runtime_seconds FROM berth.tasks WHERE id = $1",
                &[&id],
            )?;
            let before: domain::board::EditableFields =
                (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?, r.try_get(4)?, r.try_get(5)?);
            let (after, changes) = edit.apply_to(&before);
            if !changes.is_empty() {
                tx.execute(
                    "UPDATE berth.tasks SET title = $2, body = $3, command = $4, priority = $5, assignee = $6, \
                     max_runtime_seconds = $7 WHERE id = $1",
                    &[&id, &after.0, &after.1, &after.2, &after.3, &after.4, &after.5],
                )?;
                event(&mut tx, id, None, &BoardEvent::Edited(&changes), now)?;
            }
            let task = read_task(&mut tx, id)?;
            tx.commit()?;
            Ok(task)
        })
    }

    pub(crate) fn remove_task(&mut self, id: &str, now: Timestamp) -> Result<(Task, Option<WorkerRef>), StoreError> {
        let host = self.host.clone();
        self.with(move |c| {
            let mut tx = c.client.transaction()?;
            let status = status_in(&mut tx, id)?;
            let task = read_task(&mut tx, id)?;
            let worker = worker_of(&mut tx, id, &host)?;
            let run = close_run(&mut tx, id, "removed", None, None, now)?;
            let children: Option<String> = tx
                .query_one("SELECT string_agg(child_id, ',') FROM berth.task_links WHERE parent_id = $1", &[&id])?
                .try_get(0)?;
            let removed = BoardEvent::Removed {
                prev_status: status,
                title: &task.title,
                board: &task.board,
                children: children.as_deref(),
            };
            event(&mut tx, id, run, &removed, now)?;
            tx.execute("DELETE FROM berth.task_links WHERE parent_id = $1 OR child_id = $1", &[&id])?;
            tx.execute("DELETE FROM berth.task_runs WHERE task_id = $1", &[&id])?;
            tx.execute("DELETE FROM berth.tasks WHERE id = $1", &[&id])?;
            tx.commit()?;
            Ok((task, worker))
        })
    }
}
