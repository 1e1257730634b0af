//! The dispatcher suite of `domain` (written once, generic over the `KanbanStore` port) run on both real stores:
//! SQLite on disk and PostgreSQL (a fresh database per test), through the one `BoardStore` trait `app` uses.

use std::time::Duration;

use domain::board::KanbanStore;
use domain::board::{BoardSnapshot, FailureOutcome, SpawnRecord, TaskBrief, TickOutcome, TickRequest, WorkerRef};
use domain::ids::BoardSlug;
use domain::policy::dispatch::{PlanSink, TickPlan};
use domain::test_util::DispatchBoard;
use domain::time::Timestamp;
use kanban_store::{BoardStore, Confirmation, NewTask, SqliteKanbanStore, StoreError};

use crate::pg::TestDb;

/// A board and what keeps it alive (its temporary directory or database); the wrapper only exists because both
/// traits and the store are foreign here.
pub struct AnyBoard {
    pub store: Box<dyn BoardStore + Send>,
    _dir: Option<tempfile::TempDir>,
    _db: Option<TestDb>,
}

pub fn sqlite() -> AnyBoard {
    let dir = tempfile::tempdir().unwrap();
    // As host `host`, as the PostgreSQL board below (and as every board `berth` opens: as its host).
    let store = SqliteKanbanStore::open(&dir.path().join(kanban_store::BOARD_FILE)).unwrap().on_host("host");
    AnyBoard { store: Box::new(store), _dir: Some(dir), _db: None }
}

/// A board in a fresh PostgreSQL database as host `host`; `None` without a test server (outside CI).
pub fn postgres_as(host: &str) -> Option<AnyBoard> {
    let db = TestDb::create()?;
    let store = kanban_postgres::PgKanbanStore::open(&db.url, host).unwrap();
    Some(AnyBoard { store: Box::new(store), _dir: None, _db: Some(db) })
}

pub fn postgres() -> Option<AnyBoard> {
    postgres_as("host")
}

impl KanbanStore for AnyBoard {
    type Error = StoreError;

    fn check_board(&self, board: &BoardSlug) -> Result<(), StoreError> {
        self.store.check_board(board)
    }

    fn task_brief(&self, id: &str) -> Result<TaskBrief, StoreError> {
        self.store.task_brief(id)
    }

    fn local_workers(&self, board: &BoardSlug, host: &str) -> Result<Vec<(i64, Option<i64>)>, StoreError> {
        self.store.local_workers(board, host)
    }

    fn snapshot(&self, req: &TickRequest<'_>) -> Result<BoardSnapshot, StoreError> {
        self.store.snapshot(req)
    }

    fn tick(
        &mut self,
        req: &TickRequest<'_>,
        plan: &(dyn Fn(&BoardSnapshot) -> TickPlan + Sync),
    ) -> Result<TickOutcome, StoreError> {
        self.store.tick(req, plan)
    }

    // Forwarded, never left to the defaults: the suite must run each store's production paths (SQLite streams its
    // dry and real ticks over its ready index; the defaults would plan over a snapshot instead).
    fn plan_into(&self, req: &TickRequest<'_>, sink: &mut dyn PlanSink) -> Result<(), StoreError> {
        self.store.plan_into(req, sink)
    }

    fn tick_into(&mut self, req: &TickRequest<'_>, sink: &mut dyn PlanSink) -> Result<TickOutcome, StoreError> {
        self.store.tick_into(req, sink)
    }

    fn record_spawned(
        &mut self,
        spawned: &[SpawnRecord<'_>],
        claim_ttl: Duration,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        self.store.record_spawned(spawned, claim_ttl, now)
    }

    fn record_spawn_failure(
        &mut self,
        id: &str,
        run: i64,
        error: &str,
        limit: domain::board::Breaker,
        now: Timestamp,
    ) -> Result<FailureOutcome, StoreError> {
        self.store.record_spawn_failure(id, run, error, limit, now)
    }
}

impl DispatchBoard for AnyBoard {
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

/// Each scenario once per store: `sqlite::NAME` and `postgres::NAME`.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() { domain::test_util::$name(super::sqlite()); } )*
        }
        mod postgres {
            $( #[test] fn $name() { if let Some(b) = super::postgres() { domain::test_util::$name(b); } } )*
        }
    };
}

on_both_stores!(
    caps_hold_across_ticks,
    crash_requeues_then_gives_up,
    spawn_failure_is_recorded,
    lapsed_lease_stops_the_recorded_worker,
    only_task_reasons,
    dry_run_changes_nothing,
);

/// One story on a board: a parent and its child completed, a long task blocked, unblocked and archived, a task whose
/// worker crashed once; every event of it as `(task, kind, run, payload)`.
fn story(board: AnyBoard) -> Vec<(String, String, Option<i64>, serde_json::Value)> {
    use domain::test_util::World;
    let mut w = World::new(board, domain::test_util::tick_config(None));
    let now = w.now();
    w.store.add_task("default", "parent", Some("alpha"), 2, &[], now);
    w.store.add_task("default", "child", Some("alpha"), 2, &["parent"], now);
    w.store.add_task("default", "long", Some("alpha"), 1, &[], now);
    w.store.add_task("default", "crashy", Some("alpha"), 0, &[], now);
    let r = w.tick();
    w.confirm_launched(&r);
    w.store.complete("parent", w.now());
    let pid = w.launcher.launched().iter().rev().find(|(c, _)| c.task_id == "crashy").map(|(_, p)| *p).unwrap();
    w.launcher.kill(pid);
    let r = w.tick();
    w.confirm_launched(&r);
    w.store.complete("child", w.now());
    w.store.store.block("long", None, Some("waits for a human"), w.now()).unwrap();
    w.store.store.unblock("long", w.now()).unwrap();
    w.store.store.archive("long", w.now()).unwrap();
    let mut log = Vec::new();
    for id in ["parent", "child", "long", "crashy"] {
        for e in w.store.store.events(id, 0).unwrap() {
            log.push((id.to_owned(), e.kind, e.run_id, e.payload));
        }
    }
    log
}

#[test]
fn the_same_story_leaves_the_same_event_log_on_both_stores() {
    let Some(pg) = postgres() else { return };
    let (on_sqlite, on_postgres) = (story(sqlite()), story(pg));
    for (s, p) in on_sqlite.iter().zip(&on_postgres) {
        assert_eq!(s, p, "the first event that differs (SQLite, then PostgreSQL)");
    }
    assert_eq!(on_sqlite.len(), on_postgres.len(), "{on_sqlite:#?}\n{on_postgres:#?}");
    let kinds: Vec<&str> = on_sqlite.iter().map(|e| e.1.as_str()).collect();
    eprintln!("{kinds:?}");
    for kind in [
        "created",
        "claimed",
        "spawned",
        "confirmed",
        "completed",
        "promoted",
        "crashed",
        "blocked",
        "unblocked",
        "archived",
    ] {
        assert!(kinds.contains(&kind), "the story has a {kind} event: {kinds:?}");
    }
}
