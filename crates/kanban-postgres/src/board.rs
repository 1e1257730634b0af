//! Reads and task transitions on PostgreSQL (creations are in `create.rs`): each write is one transaction with its
//! event, each transition looked up in the domain's table, as on SQLite (`kanban-store`'s `queries.rs`,
//! `transitions.rs`, `edit.rs`).

use std::time::Duration;

use crate::client::GenericClient;
use domain::board::transitions::{Guarded, TaskCommand};
use domain::board::{AssignedBy, BoardEvent};
use domain::board::{BlockKind, Breaker, FailureOutcome, TaskStatus, WorkerRef};
use domain::board::{
    Board, BoardStore, Confirmation, Event, HostSeen, NewTask, Run, RunEnd, StoreError, Task, TaskEdit,
};
use domain::ids::BoardSlug;
use domain::time::Timestamp;
use serde_json::Value as Json;

use crate::PgKanbanStore;
pub(crate) use crate::rows::status_of;
use crate::rows::{TASK_COLUMNS, board_from_row, task_from_row};
pub(crate) use crate::rows::{read_board, read_task};
pub(crate) use crate::writes::{
    CLEAR_CLAIM, allowed, already_failed, close_run, event, guarded, parents_done, promote_children,
    record_task_failure, status_in, stop_run, worker_of,
};

impl BoardStore for PgKanbanStore {
    fn location(&self) -> String {
        self.shown.clone()
    }

    fn host(&self) -> Option<&str> {
        Some(&self.host)
    }

    /// By the server's clock, so hosts whose clocks disagree still agree on who is silent.
    fn renew_host(&mut self, host: &str, _now: Timestamp) -> Result<(), StoreError> {
        self.with(|c| {
            c.client.execute(
                "INSERT INTO berth.hosts (id, seen_at) VALUES ($1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) \
                 ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at",
                &[&host],
            )?;
            Ok(())
        })
    }

    fn hosts(&self, _now: Timestamp) -> Result<Vec<HostSeen>, StoreError> {
        self.with(|c| {
            let rows = c.client.query(
                "SELECT id, (extract(epoch FROM clock_timestamp()) * 1000)::bigint \
                   - greatest(seen_at, (extract(epoch FROM pg_postmaster_start_time()) * 1000)::bigint) AS silent \
                 FROM berth.hosts ORDER BY silent, id COLLATE \"C\"",
                &[],
            )?;
            rows.iter().map(|r| Ok(HostSeen { id: r.try_get(0)?, silent_ms: r.try_get::<_, i64>(1)?.max(0) })).collect()
        })
    }

    fn add_cron(
        &mut self,
        board: &BoardSlug,
        cron: &domain::board::NewCron,
        now: Timestamp,
    ) -> Result<domain::board::Cron, StoreError> {
        self.with(|c| crate::crons::add(&mut c.client, board, cron, now))
    }

    fn crons(&self, board: &BoardSlug) -> Result<Vec<domain::board::Cron>, StoreError> {
        self.with(|c| crate::crons::list(&mut c.client, board))
    }

    fn remove_cron(&mut self, board: &BoardSlug, name: &str) -> Result<domain::board::Cron, StoreError> {
        self.with(|c| crate::crons::remove(&mut c.client, board, name))
    }

    fn cron_made(&mut self, board: &BoardSlug, name: &str, slot: Timestamp) -> Result<(), StoreError> {
        self.with(|c| crate::crons::made(&mut c.client, board, name, slot))
    }

    fn create_board(
        &mut self,
        slug: &BoardSlug,
        name: Option<&str>,
        now: Timestamp,
    ) -> Result<(Board, bool), StoreError> {
        self.with(|c| {
            let n = c.client.execute(
                "INSERT INTO berth.boards (slug, name, created_at) VALUES ($1, $2, $3) ON CONFLICT (slug) DO NOTHING",
                &[&slug.as_str(), &name.unwrap_or(slug.as_str()), &now.as_millis()],
            )?;
            Ok((read_board(&mut c.client, slug.as_str())?, n == 1))
        })
    }

    fn board(&self, slug: &BoardSlug) -> Result<Board, StoreError> {
        self.with(|c| read_board(&mut c.client, slug.as_str()))
    }

    fn boards(&self) -> Result<Vec<Board>, StoreError> {
        self.with(|c| {
            let sql = "SELECT slug, name, created_at FROM berth.boards WHERE archived = 0 \
                       ORDER BY slug <> 'default', slug COLLATE \"C\"";
            c.client.query(sql, &[])?.iter().map(board_from_row).collect()
        })
    }

    fn create_task(&mut self, board: &BoardSlug, id: &str, new: &NewTask, now: Timestamp) -> Result<Task, StoreError> {
        self.with(|c| crate::create::create_task(&mut c.client, board, id, new, now))
    }

    fn create_tasks(
        &mut self,
        board: &BoardSlug,
        tasks: &[(String, NewTask)],
        now: Timestamp,
    ) -> Result<Vec<domain::board::Created>, StoreError> {
        self.with(|c| crate::create::create_tasks(&mut c.client, board, tasks, now))
    }

    fn task(&self, id: &str) -> Result<Task, StoreError> {
        self.with(|c| read_task(&mut c.client, id))
    }

    fn current_worker(&self, id: &str) -> Result<(Option<i64>, Option<i64>), StoreError> {
        self.with(|c| {
            let row = c.client.query_opt("SELECT current_run_id, worker_pid FROM berth.tasks WHERE id = $1", &[&id])?;
            let row = row.ok_or_else(|| StoreError::NoTask(id.to_owned()))?;
            Ok((row.try_get(0)?, row.try_get(1)?))
        })
    }

    fn tasks(
        &self,
        board: &BoardSlug,
        status: Option<TaskStatus>,
        assignee: Option<&str>,
    ) -> Result<Vec<Task>, StoreError> {
        self.with(|c| {
            let sql = format!(
                "SELECT {TASK_COLUMNS} FROM berth.tasks WHERE board = $1 AND ($2::text IS NULL OR status = $2) \
                 AND ($3::text IS NULL OR assignee = $3) ORDER BY priority DESC, created_at, id COLLATE \"C\""
            );
            let rows = c.client.query(&sql, &[&board.as_str(), &status.map(TaskStatus::as_str), &assignee])?;
            rows.iter().map(task_from_row).collect()
        })
    }

    fn board_event_times(
        &self,
        board: &BoardSlug,
        since: i64,
        kinds: &[&str],
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let kinds: Vec<String> = kinds.iter().map(|k| (*k).to_owned()).collect();
        self.with(|c| {
            let rows = c.client.query(
                "SELECT e.kind, e.created_at FROM berth.task_events e JOIN berth.tasks t ON t.id = e.task_id \
                 WHERE t.board = $1 AND e.created_at >= $2 AND e.kind = ANY($3) ORDER BY e.id",
                &[&board.as_str(), &since, &kinds],
            )?;
            rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect()
        })
    }

    fn events(&self, task: &str, after: i64) -> Result<Vec<Event>, StoreError> {
        self.with(|c| {
            let rows = c.client.query(
                "SELECT id, task_id, run_id, kind, payload, created_at FROM berth.task_events \
                 WHERE task_id = $1 AND id > $2 ORDER BY id",
                &[&task, &after],
            )?;
            rows.iter()
                .map(|r| {
                    let payload: Option<String> = r.try_get(4)?;
                    Ok(Event {
                        id: r.try_get(0)?,
                        task_id: r.try_get(1)?,
                        run_id: r.try_get(2)?,
                        kind: r.try_get(3)?,
                        payload: payload.and_then(|p| serde_json::from_str(&p).ok()).unwrap_or(Json::Null),
                        created_at: r.try_get(5)?,
                    })
                })
                .collect()
        })
    }

    fn runs(&self, task: &str) -> Result<Vec<Run>, StoreError> {
        self.with(|c| {
            let rows = c.client.query(
                "SELECT id, task_id, status, assignee, claim_lock, worker_pid, started_at, ended_at, outcome, error, \
                 exit_code, worker_start, worker_host, confirmed_at FROM berth.task_runs WHERE task_id = $1 ORDER BY id",
                &[&task],
            )?;
            rows.iter()
                .map(|r| {
                    Ok(Run {
                        id: r.try_get(0)?,
                        task_id: r.try_get(1)?,
                        status: r.try_get(2)?,
                        assignee: r.try_get(3)?,
                        claim_lock: r.try_get(4)?,
                        worker_pid: r.try_get(5)?,
                        started_at: r.try_get(6)?,
                        ended_at: r.try_get(7)?,
                        outcome: r.try_get(8)?,
                        error: r.try_get(9)?,
                        exit_code: r.try_get(10)?,
                        worker_start: r.try_get(11)?,
                        worker_host: r.try_get(12)?,
                        confirmed_at: r.try_get(13)?,
                    })
                })
                .collect()
        })
    }

    fn running_by_assignee(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.with(|c| {
            let rows = c.client.query(
                "SELECT assignee, COUNT(*) FROM berth.tasks WHERE status = 'running' AND assignee IS NOT NULL \
                 GROUP BY assignee ORDER BY assignee COLLATE \"C\"",
                &[],
            )?;
            rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect()
        })
    }

    fn assign(&mut self, id: &str, assignee: Option<&str>, now: Timestamp) -> Result<Task, StoreError> {
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            let status = status_in(&mut tx, id)?;
            allowed(TaskCommand::Assign, id, status)?;
            let assignee = assignee.map(str::trim).filter(|a| !a.is_empty());
            tx.execute("UPDATE berth.tasks SET assignee = $2 WHERE id = $1", &[&id, &assignee])?;
            event(&mut tx, id, None, &BoardEvent::Assigned { assignee, source: AssignedBy::Hand }, now)?;
            let task = read_task(&mut tx, id)?;
            tx.commit()?;
            Ok(task)
        })
    }

    fn complete(
        &mut self,
        id: &str,
        run: Option<i64>,
        result: Option<&str>,
        exit_code: Option<i64>,
        now: Timestamp,
    ) -> Result<Task, StoreError> {
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            let t = match guarded(&mut tx, id, TaskCommand::Complete, run, "completed")? {
                Guarded::Apply(t) => t,
                Guarded::AlreadyDone => return read_task(&mut tx, id),
            };
            let review: i64 = tx.query_one("SELECT review FROM berth.tasks WHERE id = $1", &[&id])?.try_get(0)?;
            let next = domain::board::rules::completion_status(review != 0);
            let run = close_run(&mut tx, id, t.event, None, exit_code, now)?;
            tx.execute(
                &format!(
                    "UPDATE berth.tasks SET status = $4, result = $2, completed_at = $3, consecutive_failures = 0, \
                     {CLEAR_CLAIM} WHERE id = $1"
                ),
                &[&id, &result, &now.as_millis(), &next.as_str()],
            )?;
            event(&mut tx, id, run, &BoardEvent::Completed { result, exit_code }, now)?;
            if next == TaskStatus::Done {
                promote_children(&mut tx, id, now)?;
            }
            let task = read_task(&mut tx, id)?;
            tx.commit()?;
            Ok(task)
        })
    }

    fn fail(
        &mut self,
        id: &str,
        run: Option<i64>,
        end: &RunEnd<'_>,
        breaker: Breaker,
        now: Timestamp,
    ) -> Result<FailureOutcome, StoreError> {
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            if guarded(&mut tx, id, TaskCommand::Fail, run, end.outcome)? == Guarded::AlreadyDone {
                return already_failed(&mut tx, id, breaker.limit);
            }
            let res = record_task_failure(&mut tx, id, end, breaker, now)?;
            tx.commit()?;
            Ok(res)
        })
    }

    fn requeue(&mut self, id: &str, run: i64, end: &RunEnd<'_>, now: Timestamp) -> Result<(), StoreError> {
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            if guarded(&mut tx, id, TaskCommand::Reclaim, Some(run), end.outcome)? == Guarded::AlreadyDone {
                return Ok(());
            }
            close_run(&mut tx, id, end.outcome, Some(end.error), end.exit_code, now)?;
            tx.execute(
                &format!("UPDATE berth.tasks SET status = 'ready', not_before = $2, {CLEAR_CLAIM} WHERE id = $1"),
                &[&id, &end.retry_at],
            )?;
            let requeued = BoardEvent::Requeued { outcome: end.outcome, error: end.error, retry_at: end.retry_at };
            event(&mut tx, id, Some(run), &requeued, now)?;
            tx.commit()?;
            Ok(())
        })
    }

    fn promote(&mut self, id: &str, now: Timestamp) -> Result<Task, StoreError> {
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            let status = status_in(&mut tx, id)?;
            allowed(TaskCommand::PromoteTriage, id, status)?;
            let next = if parents_done(&mut tx, id)? { TaskStatus::Ready } else { TaskStatus::Todo };
            tx.execute("UPDATE berth.tasks SET status = $2 WHERE id = $1", &[&id, &next.as_str()])?;
            event(&mut tx, id, None, &BoardEvent::Promoted { parent: None, status: Some(next) }, now)?;
            let task = read_task(&mut tx, id)?;
            tx.commit()?;
            Ok(task)
        })
    }

    fn schedule(&mut self, id: &str, at: Option<Timestamp>, now: Timestamp) -> Result<Task, StoreError> {
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            let status = status_in(&mut tx, id)?;
            if !domain::board::rules::schedulable(status) {
                return Err(StoreError::Transition { task: id.to_owned(), status, action: "schedule" }.into());
            }
            let run_at = at.map(Timestamp::as_millis);
            tx.execute("UPDATE berth.tasks SET not_before = $2 WHERE id = $1", &[&id, &run_at])?;
            event(&mut tx, id, None, &BoardEvent::Scheduled { run_at }, now)?;
            let task = read_task(&mut tx, id)?;
            tx.commit()?;
            Ok(task)
        })
    }

    fn block(
        &mut self,
        id: &str,
        kind: Option<BlockKind>,
        reason: Option<&str>,
        now: Timestamp,
    ) -> Result<Option<WorkerRef>, StoreError> {
        self.block_task(id, kind, reason, now)
    }

    fn review(&mut self, id: &str, note: Option<&str>, now: Timestamp) -> Result<Option<WorkerRef>, StoreError> {
        self.review_task(id, note, now)
    }

    fn approve(&mut self, id: &str, now: Timestamp) -> Result<Task, StoreError> {
        self.approve_task(id, now)
    }

    fn request_changes(&mut self, id: &str, note: &str, now: Timestamp) -> Result<Task, StoreError> {
        self.request_task_changes(id, note, now)
    }

    fn unblock(&mut self, id: &str, now: Timestamp) -> Result<Task, StoreError> {
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            let status = status_in(&mut tx, id)?;
            allowed(TaskCommand::Unblock, id, status)?;
            let next = if parents_done(&mut tx, id)? { TaskStatus::Ready } else { TaskStatus::Todo };
            tx.execute(
                "UPDATE berth.tasks SET status = $2, consecutive_failures = 0, not_before = NULL WHERE id = $1",
                &[&id, &next.as_str()],
            )?;
            event(&mut tx, id, None, &BoardEvent::Unblocked { status: next }, now)?;
            let task = read_task(&mut tx, id)?;
            tx.commit()?;
            Ok(task)
        })
    }

    fn archive(&mut self, id: &str, now: Timestamp) -> Result<Option<WorkerRef>, StoreError> {
        let host = self.host.clone();
        self.with(move |c| {
            let mut tx = c.client.transaction()?;
            let s = stop_run(&mut tx, id, TaskCommand::Archive, &host, None, now)?;
            tx.execute(&format!("UPDATE berth.tasks SET status = 'archived', {CLEAR_CLAIM} WHERE id = $1"), &[&id])?;
            event(&mut tx, id, s.run, &BoardEvent::Archived { prev_status: s.status }, now)?;
            promote_children(&mut tx, id, now)?;
            tx.commit()?;
            Ok(s.worker)
        })
    }

    fn reclaim(&mut self, id: &str, reason: Option<&str>, now: Timestamp) -> Result<Option<WorkerRef>, StoreError> {
        let host = self.host.clone();
        self.with(move |c| {
            let mut tx = c.client.transaction()?;
            let lock: Option<String> =
                tx.query_one("SELECT claim_lock FROM berth.tasks WHERE id = $1", &[&id])?.try_get(0)?;
            let s = stop_run(&mut tx, id, TaskCommand::Reclaim, &host, reason, now)?;
            tx.execute(
                &format!(
                    "UPDATE berth.tasks SET status = 'ready', consecutive_failures = 0, {CLEAR_CLAIM} WHERE id = $1"
                ),
                &[&id],
            )?;
            let reclaimed = BoardEvent::Reclaimed { manual: true, reason, prev_lock: lock.as_deref() };
            event(&mut tx, id, s.run, &reclaimed, now)?;
            tx.commit()?;
            Ok(s.worker)
        })
    }

    fn heartbeat(&mut self, id: &str, note: Option<&str>, now: Timestamp) -> Result<(), StoreError> {
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            let status = status_in(&mut tx, id)?;
            allowed(TaskCommand::Heartbeat, id, status)?;
            tx.execute("UPDATE berth.tasks SET last_heartbeat_at = $2 WHERE id = $1", &[&id, &now.as_millis()])?;
            if let Some(note) = note {
                let run: Option<i64> =
                    tx.query_one("SELECT current_run_id FROM berth.tasks WHERE id = $1", &[&id])?.try_get(0)?;
                event(&mut tx, id, run, &BoardEvent::Heartbeat { note }, now)?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    fn confirm_run(&mut self, c: &Confirmation<'_>, claim_ttl: Duration, now: Timestamp) -> Result<Task, StoreError> {
        self.confirm(c, claim_ttl, now)
    }

    fn heartbeat_run(&mut self, id: &str, run: i64, claim_ttl: Duration, now: Timestamp) -> Result<bool, StoreError> {
        self.beat(id, run, claim_ttl, now)
    }

    fn edit(&mut self, id: &str, edit: &TaskEdit, now: Timestamp) -> Result<Task, StoreError> {
        self.edit_task(id, edit, now)
    }

    fn remove(&mut self, id: &str, now: Timestamp) -> Result<(Task, Option<WorkerRef>), StoreError> {
        self.remove_task(id, now)
    }
}
