//! The dispatcher tests, generic over the store: `domain` runs them on `FakeKanbanStore`, `tests/` on SQLite, so a
//! second store proves itself by passing the same suite.

use std::time::Duration;

use crate::board::KanbanStore;
use crate::board::{TaskStatus, TickConfig, TickRequest, WorkerRef};
use crate::dispatcher::{DispatchError, DispatchOptions, TickReport, dispatch};
use crate::ids::BoardSlug;
use crate::policy::dispatch::Decision;
use crate::test_util::{FakeClock, FakeLauncher, block_on, tick_config};
use crate::time::Timestamp;

/// What the suite needs of a store besides the port: arranging tasks and playing the worker's side.
pub trait DispatchBoard: KanbanStore + Send {
    fn add_board(&mut self, slug: &str);
    /// A task on `board` (ready, or todo while `parents` are not done).
    fn add_task(
        &mut self,
        board: &str,
        id: &str,
        assignee: Option<&str>,
        priority: i64,
        parents: &[&str],
        now: Timestamp,
    );
    /// The worker confirms run `run` with its pid.
    fn confirm(&mut self, id: &str, run: i64, worker: WorkerRef, now: Timestamp);
    /// The worker completes the task.
    fn complete(&mut self, id: &str, now: Timestamp);
    /// Every event kind of the task, in order.
    fn event_kinds(&self, id: &str) -> Vec<String>;

    fn status(&self, id: &str) -> TaskStatus {
        self.task_brief(id).map(|t| t.status).unwrap_or_else(|e| panic!("task {id}: {e}"))
    }
}

const T0: i64 = 1_700_000_000_000;

/// One test's world: the store, a launcher, a clock.
pub struct World<B> {
    pub store: B,
    pub launcher: FakeLauncher,
    pub clock: FakeClock,
    pub cfg: TickConfig,
    pub board: BoardSlug,
}

impl<B: DispatchBoard> World<B> {
    pub fn new(store: B, cfg: TickConfig) -> Self {
        Self {
            store,
            launcher: FakeLauncher::default(),
            clock: FakeClock::new(Timestamp::from_millis(T0)),
            cfg,
            board: BoardSlug::default_board(),
        }
    }

    pub fn now(&self) -> Timestamp {
        crate::ports::Clock::now(&self.clock)
    }

    /// One dispatch on the default board.
    ///
    /// # Errors
    /// The dispatcher's error.
    pub fn try_tick(&mut self, opts: DispatchOptions) -> Result<TickReport, DispatchError<B::Error>> {
        let now = self.now();
        let req = TickRequest {
            board: &self.board,
            cfg: &self.cfg,
            now,
            probe: &self.launcher.probe,
            claimer: "test:1",
            claim_ttl: Duration::from_secs(900),
            spawn_lease: Duration::from_secs(20),
        };
        block_on(dispatch(&mut self.store, &self.launcher, &self.clock, &req, opts))
    }

    pub fn tick(&mut self) -> TickReport {
        self.try_tick(DispatchOptions::default()).unwrap_or_else(|e| panic!("tick: {e}"))
    }

    /// Confirms every launched run that is still the task's current claim (as the worker would on start).
    pub fn confirm_launched(&mut self, report: &TickReport) {
        let launched = self.launcher.launched();
        for w in &report.spawned {
            let (c, pid) = launched.iter().rev().find(|(c, _)| c.task_id == w.task_id).expect("launched").clone();
            let now = self.now();
            self.store.confirm(
                &c.task_id,
                c.run_id,
                WorkerRef { pid: i64::from(pid), start: Some(i64::from(pid)) },
                now,
            );
        }
    }

    fn pid_of(&self, task: &str) -> u32 {
        self.launcher.launched().iter().rev().find(|(c, _)| c.task_id == task).map(|(_, p)| *p).expect("launched")
    }
}

/// Per-profile caps hold across ticks: two of five start, none while both run, one more when one completes.
pub fn caps_hold_across_ticks<B: DispatchBoard>(store: B) {
    let mut w = World::new(store, tick_config(Some(2)));
    let now = w.now();
    for i in 0..5 {
        w.store.add_task("default", &format!("t{i}"), Some("alpha"), 0, &[], now);
    }
    let r = w.tick();
    assert_eq!(r.spawned.len(), 2, "{r:?}");
    assert_eq!(
        r.plan
            .decisions
            .iter()
            .filter(|d| matches!(d.decision, Decision::SkippedPerProfileCapped { cap: 2, .. }))
            .count(),
        3
    );
    w.confirm_launched(&r);
    assert!(w.tick().spawned.is_empty(), "both slots are taken");
    let first = r.spawned[0].task_id.clone();
    let now = w.now();
    w.store.complete(&first, now);
    w.launcher.kill(w.pid_of(&first));
    let r = w.tick();
    assert_eq!(r.spawned.len(), 1, "{r:?}");
    assert_eq!(w.launcher.launched().len(), 3);
}

/// A crashed worker requeues the task and it is retried; at the failure limit it is blocked once, with its sandbox
/// released.
pub fn crash_requeues_then_gives_up<B: DispatchBoard>(store: B) {
    let mut w = World::new(store, tick_config(None));
    let now = w.now();
    w.store.add_task("default", "a", Some("alpha"), 0, &[], now);
    let r = w.tick();
    w.confirm_launched(&r);
    w.launcher.kill(w.pid_of("a"));
    let r = w.tick();
    assert_eq!(r.plan.housekeeping.len(), 1, "{r:?}");
    assert!(r.auto_blocked.is_empty());
    assert_eq!(r.spawned.len(), 1, "a requeued task is retried in the same tick");
    w.confirm_launched(&r);
    w.launcher.kill(w.pid_of("a"));
    let r = w.tick();
    assert_eq!(r.auto_blocked, vec!["a".to_owned()]);
    assert!(r.spawned.is_empty());
    assert_eq!(w.store.status("a"), TaskStatus::Blocked);
    assert_eq!(w.launcher.released(), vec![("a".to_owned(), "alpha".to_owned())]);
    assert_eq!(w.store.event_kinds("a").iter().filter(|k| *k == "gave_up").count(), 1);
}

/// A worker that cannot be started is reported and counted by the breaker.
pub fn spawn_failure_is_recorded<B: DispatchBoard>(store: B) {
    let mut w = World::new(store, tick_config(None));
    let now = w.now();
    w.store.add_task("default", "a", Some("alpha"), 0, &[], now);
    w.launcher.fail_for("a");
    let r = w.tick();
    assert_eq!(r.spawn_failed.len(), 1, "{r:?}");
    assert!(r.spawned.is_empty() && r.auto_blocked.is_empty());
    assert_eq!(w.store.status("a"), TaskStatus::Ready);
    let r = w.tick();
    assert_eq!(r.auto_blocked, vec!["a".to_owned()]);
    assert_eq!(w.store.status("a"), TaskStatus::Blocked);
    assert!(w.store.event_kinds("a").ends_with(&["spawn_failed".to_owned(), "gave_up".to_owned()]));
}

/// The dispatcher's record confirms the runs it started (one write); a claim it never recorded (the dispatcher died
/// between its claim and its record) is requeued once its spawn lease lapses, with no worker to stop.
pub fn lapsed_lease_stops_the_recorded_worker<B: DispatchBoard>(store: B) {
    let mut w = World::new(store, TickConfig { failure_limit: 3, ..tick_config(None) });
    let now = w.now();
    w.store.add_task("default", "a", Some("alpha"), 0, &[], now);
    w.store.add_task("default", "b", Some("alpha"), 0, &[], now);
    w.tick();
    assert!(w.store.event_kinds("a").ends_with(&["spawned".to_owned(), "confirmed".to_owned()]));
    // A claim of "b" that no dispatcher recorded: the store's own tick, without the dispatcher around it.
    w.store.add_task("default", "c", Some("alpha"), 0, &[], now);
    let req = TickRequest {
        board: &w.board,
        cfg: &w.cfg,
        now,
        probe: &w.launcher.probe,
        claimer: "test:2",
        claim_ttl: Duration::from_secs(900),
        spawn_lease: Duration::from_secs(20),
    };
    let claimed = w.store.tick(&req, &|snap| crate::policy::dispatch::plan_tick(now, snap, &w.cfg)).expect("tick");
    assert_eq!(claimed.claimed.iter().map(|c| c.task_id.as_str()).collect::<Vec<_>>(), ["c"]);
    w.launcher.fail_for("c");
    w.clock.advance(Duration::from_secs(60));
    let r = w.tick();
    let lapsed: Vec<&str> = r
        .plan
        .housekeeping
        .iter()
        .filter(|(_, h)| matches!(h, crate::policy::dispatch::Housekeeping::LeaseExpired { .. }))
        .map(|(id, _)| id.as_str())
        .collect();
    assert_eq!(lapsed, ["c"], "{r:?}");
    assert!(w.launcher.stopped().is_empty(), "no worker was recorded for c: {:?}", w.launcher.stopped());
}

/// `--task` says why a task is not considered, as a `Decision`; a task of another board is an error.
pub fn only_task_reasons<B: DispatchBoard>(store: B) {
    let mut w = World::new(store, tick_config(None));
    let now = w.now();
    w.store.add_board("other");
    w.store.add_task("default", "parent", Some("alpha"), 0, &[], now);
    w.store.add_task("default", "child", Some("alpha"), 0, &["parent"], now);
    w.store.add_task("other", "elsewhere", Some("alpha"), 0, &[], now);
    w.cfg.only_task = Some("child".into());
    let r = w.tick();
    assert_eq!(r.not_considered, Some(("child".to_owned(), Decision::WaitingOnParents)));
    assert!(r.spawned.is_empty(), "--task dispatches only that task");
    w.cfg.only_task = Some("parent".into());
    let r = w.tick();
    assert_eq!(r.spawned.len(), 1);
    let r = w.tick();
    assert_eq!(r.not_considered, Some(("parent".to_owned(), Decision::AlreadyRunning)));
    // A running task whose worker died is requeued and started again by the same tick: considered, not "running".
    w.confirm_launched(&r);
    w.launcher.kill(w.pid_of("parent"));
    let r = w.tick();
    assert_eq!(r.spawned.len(), 1, "{r:?}");
    assert_eq!(r.not_considered, None, "{r:?}");
    w.cfg.only_task = Some("elsewhere".into());
    assert!(matches!(w.try_tick(DispatchOptions::default()), Err(DispatchError::WrongBoard { .. })));
}

/// A dry run plans what a real tick would do and changes nothing.
pub fn dry_run_changes_nothing<B: DispatchBoard>(store: B) {
    let mut w = World::new(store, tick_config(None));
    let now = w.now();
    w.store.add_task("default", "a", None, 0, &[], now);
    w.store.add_task("default", "b", Some("alpha"), 0, &[], now);
    let before = w.store.event_kinds("b");
    let r =
        w.try_tick(DispatchOptions { dry_run: true, ..DispatchOptions::default() }).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.spawned.len(), 1);
    assert_eq!(r.spawned[0].pid, None);
    assert_eq!(r.plan.decisions.iter().map(|d| d.decision.code()).collect::<Vec<_>>(), ["skipped_unassigned", "spawn"]);
    assert!(w.launcher.launched().is_empty());
    assert_eq!(w.store.status("b"), TaskStatus::Ready);
    assert_eq!(w.store.event_kinds("b"), before);
}

/// Every scenario, in order, each on a fresh store from `make`.
pub fn run_all<B: DispatchBoard>(mut make: impl FnMut() -> B) {
    caps_hold_across_ticks(make());
    crash_requeues_then_gives_up(make());
    spawn_failure_is_recorded(make());
    lapsed_lease_stops_the_recorded_worker(make());
    only_task_reasons(make());
    dry_run_changes_nothing(make());
}

impl DispatchBoard for crate::test_util::FakeKanbanStore {
    fn add_board(&mut self, slug: &str) {
        Self::add_board(self, slug);
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
        Self::add_task(self, board, id, assignee, priority, parents, now);
    }

    fn confirm(&mut self, id: &str, run: i64, worker: WorkerRef, now: Timestamp) {
        self.confirm_run(id, run, worker, Duration::from_secs(900), now).unwrap_or_else(|e| panic!("{e}"));
    }

    fn complete(&mut self, id: &str, now: Timestamp) {
        Self::complete(self, id, now).unwrap_or_else(|e| panic!("{e}"));
    }

    fn event_kinds(&self, id: &str) -> Vec<String> {
        self.events(id)
    }
}
