//! The claim protocol's worker writes on PostgreSQL: a worker confirms its own run (compare-and-swap, idempotent for
//! the same worker after a lost reply) and heartbeats it.

use std::time::Duration;

use domain::board::BoardEvent;
use domain::board::{Confirmation, StoreError, Task};
use domain::time::Timestamp;

use crate::PgKanbanStore;
use crate::board::{event, read_task, status_in};
use crate::client::GenericClient as _;
use crate::rows::millis;

impl PgKanbanStore {
    pub(crate) fn confirm(
        &mut self,
        c: &Confirmation<'_>,
        claim_ttl: Duration,
        now: Timestamp,
    ) -> Result<Task, StoreError> {
        let start = c.start.and_then(|v| i64::try_from(v).ok());
        let expires = now.as_millis().saturating_add(millis(claim_ttl));
        let (task, run, pid, host) = (c.task, c.run_id, i64::from(c.pid), c.host);
        self.with(move |conn| {
            let mut tx = conn.client.transaction()?;
            status_in(&mut tx, task)?;
            let n = tx.execute(
                "UPDATE berth.tasks SET worker_pid = $3, worker_start = $4, worker_host = $5, confirmed_at = $6, \
                 started_at = $6, last_heartbeat_at = $6, claim_expires = $7 \
                 WHERE id = $1 AND current_run_id = $2 AND status = 'running' AND claim_lock IS NOT NULL \
                 AND confirmed_at IS NULL",
                &[&task, &run, &pid, &start, &host, &now.as_millis(), &expires],
            )?;
            if n != 1 {
                // The same worker confirming again (its first reply was lost to an outage) is confirmed already.
                let mine = tx.query_opt(
                    "SELECT 1 FROM berth.tasks WHERE id = $1 AND current_run_id = $2 AND status = 'running' \
                     AND confirmed_at IS NOT NULL AND worker_pid = $3 AND worker_start IS NOT DISTINCT FROM $4 \
                     AND worker_host = $5",
                    &[&task, &run, &pid, &start, &host],
                )?;
                if mine.is_some() {
                    return read_task(&mut tx, task);
                }
                return Err(StoreError::Superseded { task: task.to_owned(), run }.into());
            }
            tx.execute(
                "UPDATE berth.task_runs SET worker_pid = $2, worker_start = $3, worker_host = $4, confirmed_at = $5, \
                 claim_expires = $6 WHERE id = $1",
                &[&run, &pid, &start, &host, &now.as_millis(), &expires],
            )?;
            let confirmed = BoardEvent::Confirmed { pid: c.pid, start, host, expires, by: None };
            event(&mut tx, task, Some(run), &confirmed, now)?;
            let t = read_task(&mut tx, task)?;
            tx.commit()?;
            Ok(t)
        })
    }

    pub(crate) fn beat(&mut self, id: &str, run: i64, claim_ttl: Duration, now: Timestamp) -> Result<bool, StoreError> {
        let expires = now.as_millis().saturating_add(millis(claim_ttl));
        self.with(|c| {
            let n = c.client.execute(
                "UPDATE berth.tasks SET last_heartbeat_at = $3, claim_expires = greatest(coalesce(claim_expires, 0), $4) \
                 WHERE id = $1 AND current_run_id = $2 AND status = 'running' AND confirmed_at IS NOT NULL",
                &[&id, &run, &now.as_millis(), &expires],
            )?;
            Ok(n == 1)
        })
    }
}
