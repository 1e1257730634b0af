//! `SqliteKanbanStore` as the domain's `KanbanStore` port: the dispatcher service reaches the board only here.

use std::time::Duration;

use domain::board::KanbanStore;
use domain::board::{
    BlockKind, BoardSnapshot, Breaker, FailureOutcome, SpawnRecord, TaskBrief, TickOutcome, TickRequest,
};
use domain::ids::BoardSlug;
use domain::policy::dispatch::TickPlan;
use domain::time::Timestamp;

use domain::board::TaskStatus;
use domain::board::{
    Board, BoardStore, Confirmation, Event, HostSeen, NewTask, Result, Run, RunEnd, Task, TaskEdit, WorkerRef,
};

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

    fn local_workers(&self, board: &BoardSlug, host: &str) -> Result<Vec<(i64, Option<i64>)>, StoreError> {
        SqliteKanbanStore::local_workers(self, board, host)
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
        claim_ttl: Duration,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        SqliteKanbanStore::record_spawned(self, spawned, claim_ttl, now)
    }

    fn record_spawn_failure(
        &mut self,
        id: &str,
        run: i64,
        error: &str,
        breaker: Breaker,
        now: Timestamp,
    ) -> Result<FailureOutcome, StoreError> {
        SqliteKanbanStore::record_spawn_failure(self, id, run, error, breaker, now)
    }
}

impl BoardStore for SqliteKanbanStore {
    fn location(&self) -> String {
        self.path().display().to_string()
    }
    fn create_board(&mut self, slug: &BoardSlug, name: Option<&str>, now: Timestamp) -> Result<(Board, bool)> {
        Self::create_board(self, slug, name, now)
    }
    fn board(&self, slug: &BoardSlug) -> Result<Board> {
        Self::board(self, slug)
    }
    fn boards(&self) -> Result<Vec<Board>> {
        Self::boards(self)
    }
    fn create_task(&mut self, board: &BoardSlug, id: &str, new: &NewTask, now: Timestamp) -> Result<Task> {
        Self::create_task(self, board, id, new, now)
    }
    fn create_tasks(
        &mut self,
        board: &BoardSlug,
        tasks: &[(String, NewTask)],
        now: Timestamp,
    ) -> Result<Vec<domain::board::Created>> {
        Self::create_tasks(self, board, tasks, now)
    }
    fn task(&self, id: &str) -> Result<Task> {
        Self::task(self, id)
    }
    fn tasks(&self, board: &BoardSlug, status: Option<TaskStatus>, assignee: Option<&str>) -> Result<Vec<Task>> {
        Self::tasks(self, board, status, assignee)
    }
    fn events(&self, task: &str, after: i64) -> Result<Vec<Event>> {
        Self::events(self, task, after)
    }
    fn runs(&self, task: &str) -> Result<Vec<Run>> {
        Self::runs(self, task)
    }
    fn board_event_times(&self, board: &BoardSlug, since: i64, kinds: &[&str]) -> Result<Vec<(String, i64)>> {
        Self::board_event_times(self, board, since, kinds)
    }
    fn running_by_assignee(&self) -> Result<Vec<(String, i64)>> {
        Self::running_by_assignee(self)
    }
    fn assign(&mut self, id: &str, assignee: Option<&str>, now: Timestamp) -> Result<Task> {
        Self::assign(self, id, assignee, now)
    }
    fn complete(
        &mut self,
        id: &str,
        run: Option<i64>,
        result: Option<&str>,
        exit_code: Option<i64>,
        now: Timestamp,
    ) -> Result<Task> {
        Self::complete(self, id, run, result, exit_code, now)
    }
    fn fail(
        &mut self,
        id: &str,
        run: Option<i64>,
        end: &RunEnd<'_>,
        breaker: Breaker,
        now: Timestamp,
    ) -> Result<FailureOutcome> {
        Self::fail(self, id, run, end, breaker, now)
    }
    fn promote(&mut self, id: &str, now: Timestamp) -> Result<Task> {
        Self::promote(self, id, now)
    }
    fn schedule(&mut self, id: &str, at: Option<Timestamp>, now: Timestamp) -> Result<Task> {
        Self::schedule(self, id, at, now)
    }
    fn requeue(&mut self, id: &str, run: i64, end: &RunEnd<'_>, now: Timestamp) -> Result<()> {
        Self::requeue(self, id, run, end, now)
    }
    fn block(
        &mut self,
        id: &str,
        kind: Option<BlockKind>,
        reason: Option<&str>,
        now: Timestamp,
    ) -> Result<Option<WorkerRef>> {
        Self::block(self, id, kind, reason, now)
    }
    fn review(&mut self, id: &str, note: Option<&str>, now: Timestamp) -> Result<Option<WorkerRef>> {
        Self::review(self, id, note, now)
    }
    fn approve(&mut self, id: &str, now: Timestamp) -> Result<Task> {
        Self::approve(self, id, now)
    }
    fn request_changes(&mut self, id: &str, note: &str, now: Timestamp) -> Result<Task> {
        Self::request_changes(self, id, note, now)
    }
    fn unblock(&mut self, id: &str, now: Timestamp) -> Result<Task> {
        Self::unblock(self, id, now)
    }
    fn archive(&mut self, id: &str, now: Timestamp) -> Result<Option<WorkerRef>> {
        Self::archive(self, id, now)
    }
    fn reclaim(&mut self, id: &str, reason: Option<&str>, now: Timestamp) -> Result<Option<WorkerRef>> {
        Self::reclaim(self, id, reason, now)
    }
    fn heartbeat(&mut self, id: &str, note: Option<&str>, now: Timestamp) -> Result<()> {
        Self::heartbeat(self, id, note, now)
    }
    fn confirm_run(&mut self, c: &Confirmation<'_>, claim_ttl: Duration, now: Timestamp) -> Result<Task> {
        Self::confirm_run(self, c, claim_ttl, now)
    }
    fn heartbeat_run(&mut self, id: &str, run: i64, claim_ttl: Duration, now: Timestamp) -> Result<bool> {
        Self::heartbeat_run(self, id, run, claim_ttl, now)
    }
    fn edit(&mut self, id: &str, edit: &TaskEdit, now: Timestamp) -> Result<Task> {
        Self::edit(self, id, edit, now)
    }
    fn remove(&mut self, id: &str, now: Timestamp) -> Result<(Task, Option<WorkerRef>)> {
        Self::remove(self, id, now)
    }
    fn add_cron(
        &mut self,
        board: &BoardSlug,
        cron: &domain::board::NewCron,
        now: Timestamp,
    ) -> Result<domain::board::Cron> {
        Self::add_cron(self, board, cron, now)
    }
    fn crons(&self, board: &BoardSlug) -> Result<Vec<domain::board::Cron>> {
        Self::crons(self, board)
    }
    fn remove_cron(&mut self, board: &BoardSlug, name: &str) -> Result<domain::board::Cron> {
        Self::remove_cron(self, board, name)
    }
    fn cron_made(&mut self, board: &BoardSlug, name: &str, slot: Timestamp) -> Result<()> {
        Self::cron_made(self, board, name, slot)
    }
    fn host(&self) -> Option<&str> {
        Some(self.host.as_str()).filter(|h| !h.is_empty())
    }
    fn renew_host(&mut self, host: &str, now: Timestamp) -> Result<()> {
        Self::renew_host(self, host, now)
    }
    fn hosts(&self, now: Timestamp) -> Result<Vec<HostSeen>> {
        Self::hosts(self, now)
    }
}
