//! A person's decisions on PostgreSQL, as on SQLite (`kanban-store`'s `review.rs` and `transitions.rs`): a typed
//! block (where `domain::board::rules::block_change` says), `kanban review`, `kanban approve` and
//! `kanban request-changes`, each a row of the domain's transition table applied in one transaction with its event.

use domain::board::rules::block_change;
use domain::board::transitions::TaskCommand;
use domain::board::{BlockKind, TaskStatus, WorkerRef};
use domain::board::{BoardEvent, StoreError, Task};
use domain::time::Timestamp;

use crate::PgKanbanStore;
use crate::board::{CLEAR_CLAIM, allowed, event, parents_done, promote_children, read_task, status_in, stop_run};
use crate::client::GenericClient as _;

impl PgKanbanStore {
    pub(crate) fn block_task(
        &mut self,
        id: &str,
        kind: Option<BlockKind>,
        reason: Option<&str>,
        now: Timestamp,
    ) -> Result<Option<WorkerRef>, StoreError> {
        let host = self.host.clone();
        self.with(move |c| {
            let mut tx = c.client.transaction()?;
            let s = stop_run(&mut tx, id, TaskCommand::Block, &host, reason, now)?;
            let row = tx.query_one("SELECT block_kind, block_reason FROM berth.tasks WHERE id = $1", &[&id])?;
            let (last_kind, last_reason): (Option<&str>, Option<&str>) = (row.try_get(0)?, row.try_get(1)?);
            let last = (last_kind.and_then(BlockKind::from_db), last_reason);
            let open_parent = !parents_done(&mut tx, id)?;
            let change = block_change(kind, reason, last, open_parent);
            tx.execute(
                &format!(
                    "UPDATE berth.tasks SET status = $2, block_kind = $3, block_reason = $4, {CLEAR_CLAIM} \
                     WHERE id = $1"
                ),
                &[&id, &change.status.as_str(), &change.kind.map(BlockKind::as_str), &reason],
            )?;
            let went = (change.status != TaskStatus::Blocked).then_some(change.status);
            event(&mut tx, id, s.run, &BoardEvent::Blocked { reason, kind: change.kind, status: went }, now)?;
            tx.commit()?;
            Ok(s.worker)
        })
    }

    pub(crate) fn review_task(
        &mut self,
        id: &str,
        note: Option<&str>,
        now: Timestamp,
    ) -> Result<Option<WorkerRef>, StoreError> {
        let host = self.host.clone();
        self.with(move |c| {
            let mut tx = c.client.transaction()?;
            let s = stop_run(&mut tx, id, TaskCommand::Review, &host, note, now)?;
            tx.execute(&format!("UPDATE berth.tasks SET status = 'review', {CLEAR_CLAIM} WHERE id = $1"), &[&id])?;
            event(&mut tx, id, s.run, &BoardEvent::ReviewRequested { note, prev_status: s.status }, now)?;
            tx.commit()?;
            Ok(s.worker)
        })
    }

    pub(crate) fn approve_task(&mut self, id: &str, now: Timestamp) -> Result<Task, StoreError> {
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            let status = status_in(&mut tx, id)?;
            allowed(TaskCommand::Approve, id, status)?;
            tx.execute(
                "UPDATE berth.tasks SET status = 'done', completed_at = coalesce(completed_at, $2) WHERE id = $1",
                &[&id, &now.as_millis()],
            )?;
            event(&mut tx, id, None, &BoardEvent::Approved {}, now)?;
            promote_children(&mut tx, id, now)?;
            let task = read_task(&mut tx, id)?;
            tx.commit()?;
            Ok(task)
        })
    }

    pub(crate) fn request_task_changes(&mut self, id: &str, note: &str, now: Timestamp) -> Result<Task, StoreError> {
        domain::board::rules::check_review_note(note)?;
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            let status = status_in(&mut tx, id)?;
            allowed(TaskCommand::RequestChanges, id, status)?;
            let next = if parents_done(&mut tx, id)? { TaskStatus::Ready } else { TaskStatus::Todo };
            tx.execute(
                "UPDATE berth.tasks SET status = $2, review_note = $3, consecutive_failures = 0, not_before = NULL \
                 WHERE id = $1",
                &[&id, &next.as_str(), &note],
            )?;
            event(&mut tx, id, None, &BoardEvent::ChangesRequested { note, status: next }, now)?;
            let task = read_task(&mut tx, id)?;
            tx.commit()?;
            Ok(task)
        })
    }
}
