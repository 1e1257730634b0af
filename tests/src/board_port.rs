//! The dispatcher suite of `domain` (written once, generic over the `KanbanStore` port) run on the real SQLite
//! store, on disk: the same scenarios `domain` runs on its in-memory store.

use std::time::Duration;

use domain::ids::BoardSlug;
use domain::kanban::{BoardSnapshot, FailureOutcome, SpawnRecord, TaskBrief, TickOutcome, TickRequest, WorkerRef};
use domain::policy::dispatch::TickPlan;
use domain::ports::KanbanStore;
use domain::test_util::{self as suite, DispatchBoard};
use domain::time::Timestamp;
use kanban_store::{Confirmation, NewTask, SqliteKanbanStore, StoreError};

/// A board file in a temporary directory; the wrapper only exists because both traits and the store are foreign here.
struct SqliteBoard {
    store: SqliteKanbanStore,
    _dir: tempfile::TempDir,
}

fn board() -> SqliteBoard {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteKanbanStore::open(&dir.path().join(kanban_store::BOARD_FILE)).unwrap();
    SqliteBoard { store, _dir: dir }
}

impl KanbanStore for SqliteBoard {
    type Error = StoreError;

    fn check_board(&self, board: &BoardSlug) -> Result<(), StoreError> {
        self.store.check_board(board)
    }

    fn task_brief(&self, id: &str) -> Result<TaskBrief, StoreError> {
        self.store.task_brief(id)
    }

    fn snapshot(&self, req: &TickRequest<'_>) -> Result<BoardSnapshot, StoreError> {
        self.store.snapshot(req)
    }

    fn tick(
        &mut self,
        req: &TickRequest<'_>,
        plan: &dyn Fn(&BoardSnapshot) -> TickPlan,
    ) -> Result<TickOutcome, StoreError> {
        KanbanStore::tick(&mut self.store, req, plan)
    }

    fn record_spawned(
        &mut self,
        spawned: &[SpawnRecord<'_>],
        lease: Duration,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        KanbanStore::record_spawned(&mut self.store, spawned, lease, now)
    }

    fn record_spawn_failure(
        &mut self,
        id: &str,
        error: &str,
        limit: u32,
        now: Timestamp,
    ) -> Result<FailureOutcome, StoreError> {
        KanbanStore::record_spawn_failure(&mut self.store, id, error, limit, now)
    }
}

impl DispatchBoard for SqliteBoard {
    fn add_board(&mut self, slug: &str) {
        self.store.create_board(&BoardSlug::parse(slug).unwrap(), None, Timestamp::from_millis(0)).unwrap();
    }

    fn add_task(
        &mut self,
        board: &str,
        id: &str,
        assignee: Option<&str>,
        priority: i64,
        parents: &[&str],
        now: Timestamp,
    ) {
        let new = NewTask {
            title: id.to_owned(),
            assignee: assignee.map(str::to_owned),
            parents: parents.iter().map(|p| (*p).to_owned()).collect(),
            priority,
            ..NewTask::default()
        };
        self.store.create_task(&BoardSlug::parse(board).unwrap(), id, &new, now).unwrap();
    }

    fn confirm(&mut self, id: &str, run: i64, worker: WorkerRef, now: Timestamp) {
        let c = Confirmation {
            task: id,
            run_id: run,
            pid: u32::try_from(worker.pid).unwrap(),
            start: worker.start.and_then(|s| u64::try_from(s).ok()),
            host: "host",
        };
        self.store.confirm_run(&c, Duration::from_secs(900), now).unwrap();
    }

    fn complete(&mut self, id: &str, now: Timestamp) {
        self.store.complete(id, None, None, Some(0), now).unwrap();
    }

    fn event_kinds(&self, id: &str) -> Vec<String> {
        self.store.events(id, 0).unwrap().into_iter().map(|e| e.kind).collect()
    }
}

#[test]
fn caps_hold_across_ticks() {
    suite::caps_hold_across_ticks(board());
}

#[test]
fn crash_requeues_then_gives_up() {
    suite::crash_requeues_then_gives_up(board());
}

#[test]
fn spawn_failure_is_recorded() {
    suite::spawn_failure_is_recorded(board());
}

#[test]
fn lapsed_lease_stops_the_recorded_worker() {
    suite::lapsed_lease_stops_the_recorded_worker(board());
}

#[test]
fn only_task_reasons() {
    suite::only_task_reasons(board());
}

#[test]
fn dry_run_changes_nothing() {
    suite::dry_run_changes_nothing(board());
}
