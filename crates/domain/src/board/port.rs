//! The board's one port: [`KanbanStore`], what the dispatcher needs (a snapshot, a tick, its claims), and
//! [`BoardStore`], that plus every command's reads and transitions.
//! `kanban-store` implements it on SQLite and `kanban-postgres` on PostgreSQL, sibling adapters that know nothing
//! of each other; `app` holds a `Box<dyn BoardStore + Send>` and names a store type only where it opens one.

use std::time::Duration;

use crate::board::{
    BlockKind, Board, BoardSnapshot, Breaker, Confirmation, Created, Cron, Event, FailureOutcome, HostSeen, NewCron,
    NewTask, Result, Run, RunDone, RunEnd, SpawnRecord, StoreError, Task, TaskBrief, TaskEdit, TaskStatus, TickOutcome,
    TickRequest, WorkerRef,
};
use crate::ids::BoardSlug;
use crate::policy::dispatch::TickPlan;
use crate::time::Timestamp;

/// The board: where tasks, claims and runs live (SQLite today; PostgreSQL next).
///
/// Synchronous on purpose: a tick is one short, serialized transaction (SQLite's `BEGIN IMMEDIATE`, a PostgreSQL
/// advisory lock) and nothing in it waits on the network but the store itself. An async store can implement it
/// with `block_in_place`. The store never decides: it reads a snapshot, hands it to the domain's planner, and
/// applies the returned plan inside the same transaction, so a dry run and a real tick plan identically.
pub trait KanbanStore {
    type Error: std::error::Error + Send + Sync + 'static;

    /// Fails when `board` does not exist.
    ///
    /// # Errors
    /// The store's "no board" error, or a storage error.
    fn check_board(&self, board: &crate::ids::BoardSlug) -> Result<(), Self::Error>;

    /// The task's board, status and assignee.
    ///
    /// # Errors
    /// The store's "no task" error, or a storage error.
    fn task_brief(&self, id: &str) -> Result<crate::board::TaskBrief, Self::Error>;

    /// The workers of `board`'s running tasks that run on `host` (an unrecorded host counts as local), as
    /// `(pid, start)`: what the dispatcher probes before a tick, so no process-table read happens inside the tick's
    /// transaction (see [`crate::board::liveness::Probed`]).
    ///
    /// # Errors
    /// A storage error.
    fn local_workers(&self, board: &crate::ids::BoardSlug, host: &str) -> Result<Vec<(i64, Option<i64>)>, Self::Error>;

    /// Reads what a tick plans over, writing nothing (dry run).
    ///
    /// # Errors
    /// A storage error or undecodable rows.
    fn snapshot(&self, req: &crate::board::TickRequest<'_>) -> Result<crate::board::BoardSnapshot, Self::Error>;

    /// Streams a dry run's plan into `sink`, writing nothing: every housekeeping action and promotion, then one
    /// decision per ready task in the planner's order (see [`crate::policy::dispatch::PlanSink`]). The default plans
    /// over [`KanbanStore::snapshot`], which holds every ready task in memory; a store that can read its ready tasks
    /// in dispatch order overrides it and feeds a [`crate::policy::dispatch::Planner`] row by row, so a dry run's
    /// memory is bounded by the profiles and the running tasks, not by the ready tasks.
    ///
    /// # Errors
    /// A storage error or undecodable rows (part of the plan may have reached `sink`).
    fn plan_into(
        &self,
        req: &crate::board::TickRequest<'_>,
        sink: &mut dyn crate::policy::dispatch::PlanSink,
    ) -> Result<(), Self::Error> {
        let snap = self.snapshot(req)?;
        crate::policy::dispatch::plan_tick_into(req.now, &snap, req.cfg, sink);
        Ok(())
    }

    /// One serialized unit: snapshot, `plan(snapshot)`, then housekeeping, promotion, default assignment and
    /// compare-and-swap claims (each new claim a spawn lease of `req.spawn_lease`), each appending its event.
    ///
    /// # Errors
    /// A storage error; nothing is applied then.
    fn tick(
        &mut self,
        req: &crate::board::TickRequest<'_>,
        plan: &(dyn Fn(&crate::board::BoardSnapshot) -> crate::policy::dispatch::TickPlan + Sync),
    ) -> Result<crate::board::TickOutcome, Self::Error>;

    /// [`KanbanStore::tick`] with the domain's planner, the whole plan streamed into `sink` as it is made. The
    /// outcome's `plan` holds at least the housekeeping, the promotions and every decision the tick applied (spawns,
    /// default assignments). The default plans over the snapshot, replays the whole plan into `sink` and returns it
    /// whole; a store that streams (SQLite) keeps only what it applies, so a tick's memory does not grow with the
    /// ready tasks.
    ///
    /// # Errors
    /// A storage error; nothing is applied then (part of the plan may have reached `sink`).
    fn tick_into(
        &mut self,
        req: &crate::board::TickRequest<'_>,
        sink: &mut dyn crate::policy::dispatch::PlanSink,
    ) -> Result<crate::board::TickOutcome, Self::Error> {
        let (now, cfg) = (req.now, req.cfg);
        let out = self.tick(req, &|snap| crate::policy::dispatch::plan_tick(now, snap, cfg))?;
        out.plan.replay(sink);
        Ok(out)
    }

    /// Records started workers (pid, start, host, log) and confirms their runs for them, in one write: each run
    /// still its task's current one and unconfirmed becomes confirmed by that (pid, start) on this host, its claim
    /// lasting `claim_ttl` from `now` (the same compare-and-swap a worker's own confirmation is). Returns how many
    /// runs it confirmed; a run it did not (superseded meanwhile) is left for its worker to find superseded.
    ///
    /// # Errors
    /// A storage error.
    fn record_spawned(
        &mut self,
        spawned: &[crate::board::SpawnRecord<'_>],
        claim_ttl: Duration,
        now: Timestamp,
    ) -> Result<usize, Self::Error>;

    /// A worker that could not be started: the failure breaker (requeue, or block with `gave_up`).
    ///
    /// # Errors
    /// A storage error.
    fn record_spawn_failure(
        &mut self,
        id: &str,
        run: i64,
        error: &str,
        breaker: crate::board::Breaker,
        now: Timestamp,
    ) -> Result<crate::board::FailureOutcome, Self::Error>;
}

/// Every operation on a board, whatever engine holds it. Each write is one transaction with its events; a
/// transition is looked up in the domain's transition table; errors are [`StoreError`]s.
pub trait BoardStore: KanbanStore<Error = StoreError> {
    /// Where the board lives, for messages (a file path, or a server URL without its password).
    fn location(&self) -> String;
    /// Creates a board (an existing one is returned as it is, with `false`).
    ///
    /// # Errors
    /// A storage error.
    fn create_board(&mut self, slug: &BoardSlug, name: Option<&str>, now: Timestamp) -> Result<(Board, bool)>;
    /// One board.
    ///
    /// # Errors
    /// [`StoreError::NoBoard`].
    fn board(&self, slug: &BoardSlug) -> Result<Board>;
    /// Every board, `default` first.
    ///
    /// # Errors
    /// A storage error.
    fn boards(&self) -> Result<Vec<Board>>;
    /// Creates a task: `ready`, `todo` while parents are unfinished, or `triage`. Under an idempotency key the board
    /// already holds, it is that task, returned as it is, with nothing written (also when a concurrent create under
    /// the same key wins the race, on another host too).
    ///
    /// # Errors
    /// [`StoreError::NoBoard`], [`StoreError::NoTask`] for a missing parent, [`StoreError::Invalid`].
    fn create_task(&mut self, board: &BoardSlug, id: &str, new: &NewTask, now: Timestamp) -> Result<Task>;
    /// Creates every `(id, task)` of `tasks` in one transaction, all or none, as `rules::plan_creation` says: a new
    /// task in its first status with one `created` event, or the task its idempotency key already names (nothing
    /// written); returns each entry's task, in order. Parents must already be on the board (not in the batch).
    ///
    /// # Errors
    /// [`StoreError::NoBoard`]; [`StoreError::Batch`] naming the first entry refused (a bad key, an empty title, a
    /// missing parent), with nothing written; a storage error.
    fn create_tasks(&mut self, board: &BoardSlug, tasks: &[(String, NewTask)], now: Timestamp) -> Result<Vec<Created>>;
    /// One task with its parents.
    ///
    /// # Errors
    /// [`StoreError::NoTask`].
    fn task(&self, id: &str) -> Result<Task>;
    /// The task's current run and the worker pid recorded for it (what the gateway's relay checks a worker against):
    /// the task without its parents.
    ///
    /// # Errors
    /// [`StoreError::NoTask`].
    fn current_worker(&self, id: &str) -> Result<(Option<i64>, Option<i64>)> {
        self.task(id).map(|t| (t.current_run_id, t.worker_pid))
    }
    /// Tasks of a board, optionally filtered, by priority then age.
    ///
    /// # Errors
    /// A storage error.
    fn tasks(&self, board: &BoardSlug, status: Option<TaskStatus>, assignee: Option<&str>) -> Result<Vec<Task>>;
    /// A task's events after event id `after`, oldest first.
    ///
    /// # Errors
    /// A storage error.
    fn events(&self, task: &str, after: i64) -> Result<Vec<Event>>;
    /// A task's runs, oldest first.
    ///
    /// # Errors
    /// A storage error.
    fn runs(&self, task: &str) -> Result<Vec<Run>>;
    /// The kind and time (ms) of every event of one of `kinds` on `board`'s tasks from `since` on, oldest first
    /// (the dashboard's throughput and failures chart).
    ///
    /// # Errors
    /// A storage error.
    fn board_event_times(&self, board: &BoardSlug, since: i64, kinds: &[&str]) -> Result<Vec<(String, i64)>>;
    /// Running tasks per assignee, all boards.
    ///
    /// # Errors
    /// A storage error.
    fn running_by_assignee(&self) -> Result<Vec<(String, i64)>>;
    /// Sets or clears a task's assignee.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`].
    fn assign(&mut self, id: &str, assignee: Option<&str>, now: Timestamp) -> Result<Task>;
    /// Marks a task done (while still on `run`, when given) and promotes its ready children.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`].
    fn complete(
        &mut self,
        id: &str,
        run: Option<i64>,
        result: Option<&str>,
        exit_code: Option<i64>,
        now: Timestamp,
    ) -> Result<Task>;
    /// Several completions, each guarded by its run as [`BoardStore::complete`] is, each with its own answer
    /// (done, or the refusal); a store may write them in one transaction. The default writes each in its own.
    ///
    /// # Errors
    /// A storage error of the whole batch (none of it may be written: each is then the caller's to write again).
    fn complete_runs(&mut self, runs: &[RunDone<'_>], now: Timestamp) -> Result<Vec<Result<()>>> {
        Ok(runs.iter().map(|r| self.complete(r.task, Some(r.run), r.result, r.exit_code, now).map(drop)).collect())
    }
    /// A worker's failure through the breaker (a requeue waits its backoff).
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`].
    fn fail(
        &mut self,
        id: &str,
        run: Option<i64>,
        end: &RunEnd<'_>,
        breaker: Breaker,
        now: Timestamp,
    ) -> Result<FailureOutcome>;
    /// Sets when a waiting task (ready, todo, triage or blocked) may be claimed (`None`: at once); one `scheduled`
    /// event.
    ///
    /// # Errors
    /// [`StoreError::NoTask`]; [`StoreError::Transition`] for a running, done or archived task.
    fn schedule(&mut self, id: &str, at: Option<Timestamp>, now: Timestamp) -> Result<Task>;
    /// A worker's run that ended for a reason outside the task (the container engine unreachable): the task goes back
    /// to `ready` with its failure count unchanged (a retry of the same write is a no-op).
    ///
    /// # Errors
    /// [`StoreError::NoTask`], [`StoreError::Moved`] or [`StoreError::Transition`].
    fn requeue(&mut self, id: &str, run: i64, end: &RunEnd<'_>, now: Timestamp) -> Result<()>;
    /// Blocks a task, of `kind` when given ([`crate::board::rules::block_change`]: blocked, todo for a dependency while a
    /// parent is open, triage for the same block a second time); returns the worker to stop.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`].
    fn block(
        &mut self,
        id: &str,
        kind: Option<BlockKind>,
        reason: Option<&str>,
        now: Timestamp,
    ) -> Result<Option<WorkerRef>>;
    /// Sends a running task (its run ended, its claim cleared) or a done one to `review`; returns the worker to stop.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] unless running or done.
    fn review(&mut self, id: &str, note: Option<&str>, now: Timestamp) -> Result<Option<WorkerRef>>;
    /// Approves a task in review: done, its children promoted as on done.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] unless in review.
    fn approve(&mut self, id: &str, now: Timestamp) -> Result<Task>;
    /// Requests changes on a task in review: back to `ready` (or `todo` while a parent is unfinished) with `note` on
    /// its record, which its next runs are given.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] unless in review.
    fn request_changes(&mut self, id: &str, note: &str, now: Timestamp) -> Result<Task>;
    /// Unblocks a task.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`].
    fn unblock(&mut self, id: &str, now: Timestamp) -> Result<Task>;
    /// Takes a task out of triage: `ready`, or `todo` while a parent is unfinished (one `promoted` event).
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`] unless in triage.
    fn promote(&mut self, id: &str, now: Timestamp) -> Result<Task>;
    /// Archives a task; returns the worker to stop.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`].
    fn archive(&mut self, id: &str, now: Timestamp) -> Result<Option<WorkerRef>>;
    /// Reclaims a running task by hand; returns the worker to stop.
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`].
    fn reclaim(&mut self, id: &str, reason: Option<&str>, now: Timestamp) -> Result<Option<WorkerRef>>;
    /// Records a heartbeat (an event when there is a note).
    ///
    /// # Errors
    /// [`StoreError::NoTask`] or [`StoreError::Transition`].
    fn heartbeat(&mut self, id: &str, note: Option<&str>, now: Timestamp) -> Result<()>;
    /// A worker confirms its own run (compare-and-swap).
    ///
    /// # Errors
    /// [`StoreError::Superseded`] when the swap fails.
    fn confirm_run(&mut self, c: &Confirmation<'_>, claim_ttl: Duration, now: Timestamp) -> Result<Task>;
    /// A confirmed worker's heartbeat; whether the task is still on `run`.
    ///
    /// # Errors
    /// A storage error.
    fn heartbeat_run(&mut self, id: &str, run: i64, claim_ttl: Duration, now: Timestamp) -> Result<bool>;
    /// Edits a task's fields (one `edited` event).
    ///
    /// # Errors
    /// [`StoreError::NoTask`], [`StoreError::Transition`], [`StoreError::Invalid`].
    fn edit(&mut self, id: &str, edit: &TaskEdit, now: Timestamp) -> Result<Task>;
    /// Takes a task off its board; returns it as it was and the worker to stop.
    ///
    /// # Errors
    /// [`StoreError::NoTask`].
    fn remove(&mut self, id: &str, now: Timestamp) -> Result<(Task, Option<WorkerRef>)>;
    /// Adds a recurring schedule to a board (`kanban cron add`); the caller checked its name and recurrence.
    ///
    /// # Errors
    /// [`StoreError::NoBoard`]; [`StoreError::Invalid`] when the board already has a schedule of that name.
    fn add_cron(&mut self, board: &BoardSlug, cron: &NewCron, now: Timestamp) -> Result<Cron>;
    /// A board's schedules, by name.
    ///
    /// # Errors
    /// A storage error.
    fn crons(&self, board: &BoardSlug) -> Result<Vec<Cron>>;
    /// Removes a schedule (the tasks it made stay); returns it as it was.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] when the board has no schedule of that name.
    fn remove_cron(&mut self, board: &BoardSlug, name: &str) -> Result<Cron>;
    /// Records that a schedule made its task for `slot` (the latest slot it made only grows).
    ///
    /// # Errors
    /// A storage error.
    fn cron_made(&mut self, board: &BoardSlug, name: &str, slot: Timestamp) -> Result<()>;
    /// The host whose workers this store may signal: a recorded worker of another host is never returned as one to
    /// stop. `None` for a single-host store (every worker is local).
    fn host(&self) -> Option<&str> {
        None
    }
    /// Renews `host`'s heartbeat row (its gateway and its workers do, every few seconds): other hosts judge the
    /// workers of `host` by it, never by their own process tables.
    ///
    /// # Errors
    /// A storage error.
    fn renew_host(&mut self, host: &str, now: Timestamp) -> Result<()>;
    /// Every host that has heartbeated, with how long it has been silent at `now` (on a server: by its clock).
    ///
    /// # Errors
    /// A storage error.
    fn hosts(&self, now: Timestamp) -> Result<Vec<HostSeen>>;
}

/// A boxed board is a dispatcher port too, so `crate::dispatcher::dispatch` runs on whichever store `app` opened.
impl KanbanStore for Box<dyn BoardStore + Send> {
    type Error = StoreError;

    fn check_board(&self, board: &BoardSlug) -> Result<()> {
        (**self).check_board(board)
    }
    fn task_brief(&self, id: &str) -> Result<TaskBrief> {
        (**self).task_brief(id)
    }
    fn local_workers(&self, board: &BoardSlug, host: &str) -> Result<Vec<(i64, Option<i64>)>> {
        (**self).local_workers(board, host)
    }
    fn snapshot(&self, req: &TickRequest<'_>) -> Result<BoardSnapshot> {
        (**self).snapshot(req)
    }
    // Forwarded, never left to the defaults: a store's streaming plan is what bounds a tick's memory.
    fn plan_into(&self, req: &TickRequest<'_>, sink: &mut dyn crate::policy::dispatch::PlanSink) -> Result<()> {
        (**self).plan_into(req, sink)
    }
    fn tick(
        &mut self,
        req: &TickRequest<'_>,
        plan: &(dyn Fn(&BoardSnapshot) -> TickPlan + Sync),
    ) -> Result<TickOutcome> {
        (**self).tick(req, plan)
    }
    fn tick_into(
        &mut self,
        req: &TickRequest<'_>,
        sink: &mut dyn crate::policy::dispatch::PlanSink,
    ) -> Result<TickOutcome> {
        (**self).tick_into(req, sink)
    }
    fn record_spawned(&mut self, spawned: &[SpawnRecord<'_>], claim_ttl: Duration, now: Timestamp) -> Result<usize> {
        (**self).record_spawned(spawned, claim_ttl, now)
    }
    fn record_spawn_failure(
        &mut self,
        id: &str,
        run: i64,
        error: &str,
        breaker: Breaker,
        now: Timestamp,
    ) -> Result<FailureOutcome> {
        (**self).record_spawn_failure(id, run, error, breaker, now)
    }
}
