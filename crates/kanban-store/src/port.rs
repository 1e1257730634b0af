//! `SqliteKanbanStore` as the domain's `KanbanStore` port: the dispatcher service reaches the board only here.

use std::time::Duration;

use domain::ids::BoardSlug;
use domain::kanban::{BoardSnapshot, FailureOutcome, SpawnRecord, TaskBrief, TickOutcome, TickRequest};
use domain::policy::dispatch::TickPlan;
use domain::ports::KanbanStore;
use domain::time::Timestamp;

use crate::{SqliteKanbanStore, StoreError};

impl KanbanStore for SqliteKanbanStore {
    type Error = StoreError;

    fn check_board(&self, board: &BoardSlug) -> Result<(), StoreError> {
        self.board(board).map(drop)
    }

    fn task_brief(&self, id: &str) -> Result<TaskBrief, StoreError> {
        let t = self.task(id)?;
        Ok(TaskBrief { id: t.id, board: t.board, status: t.status, assignee: t.assignee })
    }

    fn snapshot(&self, req: &TickRequest<'_>) -> Result<BoardSnapshot, StoreError> {
        self.read_snapshot(req)
    }

    fn plan_into(
        &self,
        req: &TickRequest<'_>,
        sink: &mut dyn domain::policy::dispatch::PlanSink,
    ) -> Result<(), StoreError> {
        self.stream_dry_plan(req, sink)
    }

    fn tick(
        &mut self,
        req: &TickRequest<'_>,
        plan: &(dyn Fn(&BoardSnapshot) -> TickPlan + Sync),
    ) -> Result<TickOutcome, StoreError> {
        self.apply_tick(req, plan)
    }

    fn tick_into(
        &mut self,
        req: &TickRequest<'_>,
        sink: &mut dyn domain::policy::dispatch::PlanSink,
    ) -> Result<TickOutcome, StoreError> {
        self.apply_tick_streamed(req, sink)
    }

    fn record_spawned(
        &mut self,
        spawned: &[SpawnRecord<'_>],
        lease: Duration,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        SqliteKanbanStore::record_spawned(self, spawned, lease, now)
    }

    fn record_spawn_failure(
        &mut self,
        id: &str,
        run: i64,
        error: &str,
        failure_limit: u32,
        now: Timestamp,
    ) -> Result<FailureOutcome, StoreError> {
        SqliteKanbanStore::record_spawn_failure(self, id, run, error, failure_limit, now)
    }
}
