//! Store tests: the upstream dispatch scenarios (66-86) through real SQLite, transitions, integrity, properties.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use domain::board::{TaskStatus, TickConfig};
use domain::ids::BoardSlug;
use domain::policy::dispatch::{Decision, Housekeeping};
use domain::test_util::FakeProcessProbe;
use domain::time::Timestamp;
use proptest::prelude::*;

use super::*;
use domain::board::FailureOutcome;

const T0: Timestamp = Timestamp::from_secs(1_800_000_000);

fn board() -> BoardSlug {
    BoardSlug::default_board()
}

fn cfg(cap: Option<u32>) -> TickConfig {
    domain::test_util::tick_config(cap)
}

struct Fixture {
    store: SqliteKanbanStore,
    probe: FakeProcessProbe,
    n: u32,
    now: Timestamp,
}

impl Fixture {
    fn new() -> Self {
        Self { store: SqliteKanbanStore::open_in_memory().unwrap(), probe: FakeProcessProbe::default(), n: 0, now: T0 }
    }

    fn add(&mut self, assignee: Option<&str>) -> String {
        self.add_on(&board(), assignee, &[])
    }

    fn add_on(&mut self, b: &BoardSlug, assignee: Option<&str>, parents: &[String]) -> String {
        self.add_full(b, assignee, parents, 0)
    }

    fn add_full(&mut self, b: &BoardSlug, assignee: Option<&str>, parents: &[String], priority: i64) -> String {
        self.n += 1;
        self.now = self.now.plus(Duration::from_millis(1));
        let id = format!("t_{:04}", self.n);
        let new = NewTask {
            title: format!("task {}", self.n),
            assignee: assignee.map(Into::into),
            parents: parents.to_vec(),
            priority,
            ..NewTask::default()
        };
        self.store.create_task(b, &id, &new, self.now).unwrap();
        id
    }

    fn tick_on(&mut self, b: &BoardSlug, cfg: &TickConfig, spawn: bool) -> TickOutcome {
        let req = TickRequest {
            board: b,
            cfg,
            now: self.now,
            probe: &self.probe,
            claimer: "host:1",
            claim_ttl: Duration::from_secs(900),
            spawn_lease: Duration::from_secs(20),
        };
        // The streamed tick (what `berth kanban dispatch` runs); the sink gets the whole plan.
        let mut whole = domain::policy::dispatch::TickPlan::default();
        let mut out = domain::board::KanbanStore::tick_into(&mut self.store, &req, &mut whole).unwrap();
        assert!(out.plan.decisions.iter().all(|d| d.decision == Decision::Spawn || d.auto_assigned));
        out.plan = whole;
        if spawn {
            for c in &out.claimed {
                let pid = 10_000 + u32::try_from(c.run_id).unwrap();
                self.probe.set_alive(pid, true);
                let rec =
                    SpawnRecord { task: &c.task_id, run_id: c.run_id, pid, start: Some(u64::from(pid)), log: "log" };
                // The dispatcher's record confirms the run for its worker.
                assert_eq!(self.store.record_spawned(&[rec], Duration::from_secs(900), self.now).unwrap(), 1);
            }
        }
        out
    }

    fn tick(&mut self, cfg: &TickConfig) -> TickOutcome {
        self.tick_on(&board(), cfg, true)
    }

    fn dry(&self, cfg: &TickConfig) -> domain::policy::dispatch::TickPlan {
        let b = board();
        let req = self.request(&b, cfg);
        domain::dispatcher::plan(&self.store, &req).unwrap()
    }

    fn request<'a>(&'a self, b: &'a BoardSlug, cfg: &'a TickConfig) -> TickRequest<'a> {
        TickRequest {
            board: b,
            cfg,
            now: self.now,
            probe: &self.probe,
            claimer: "host:1",
            claim_ttl: Duration::from_secs(900),
            spawn_lease: Duration::from_secs(20),
        }
    }

    fn status(&self, id: &str) -> TaskStatus {
        self.store.task(id).unwrap().status
    }
}

fn spawned_by(out: &TickOutcome) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for c in &out.claimed {
        *m.entry(c.assignee.clone().unwrap_or_default()).or_default() += 1;
    }
    m
}

fn capped_by(plan: &domain::policy::dispatch::TickPlan) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for d in &plan.decisions {
        if matches!(d.decision, Decision::SkippedPerProfileCapped { .. }) {
            *m.entry(d.assignee.clone().unwrap_or_default()).or_default() += 1;
        }
    }
    m
}

#[test]
fn unassigned_without_default_is_skipped_and_untouched() {
    let mut f = Fixture::new();
    let id = f.add(None);
    let out = f.tick(&cfg(None));
    assert!(out.claimed.is_empty());
    assert_eq!(out.plan.decisions[0].decision, Decision::SkippedUnassigned);
    assert_eq!(f.store.task(&id).unwrap().assignee, None);
    assert_eq!(f.status(&id), TaskStatus::Ready);
}

#[test]
fn default_assignee_is_persisted_with_one_assigned_event() {
    let mut f = Fixture::new();
    let id = f.add(None);
    let mut c = cfg(None);
    c.default_assignee = Some("default".into());
    let out = f.tick(&c);
    assert_eq!(out.claimed.len(), 1);
    assert_eq!(out.claimed[0].assignee.as_deref(), Some("default"));
    assert_eq!(f.store.task(&id).unwrap().assignee.as_deref(), Some("default"));
    let assigned: Vec<_> = f.store.events(&id, 0).unwrap().into_iter().filter(|e| e.kind == "assigned").collect();
    assert_eq!(assigned.len(), 1);
    assert_eq!(assigned[0].payload, serde_json::json!({"assignee": "default", "source": "kanban.default_assignee"}));
}

#[test]
fn dry_run_with_default_reports_but_writes_nothing() {
    let mut f = Fixture::new();
    let id = f.add(None);
    let mut c = cfg(None);
    c.default_assignee = Some("default".into());
    let plan = f.dry(&c);
    assert!(plan.decisions[0].auto_assigned);
    assert_eq!(plan.spawns().count(), 1);
    assert_eq!(f.store.task(&id).unwrap().assignee, None);
    assert_eq!(f.status(&id), TaskStatus::Ready);
    assert_eq!(f.store.events(&id, 0).unwrap().len(), 1, "only `created`");
}

#[test]
fn an_assigned_task_keeps_its_assignee_over_the_default() {
    let mut f = Fixture::new();
    f.add(Some("default"));
    let mut c = cfg(None);
    c.default_assignee = Some("beta".into());
    let out = f.tick(&c);
    assert_eq!(out.claimed[0].assignee.as_deref(), Some("default"));
    assert!(!out.plan.decisions[0].auto_assigned);
}

#[test]
fn seed_examples_with_per_profile_cap() {
    let mut f = Fixture::new();
    for _ in 0..5 {
        f.add(Some("alpha"));
    }
    for _ in 0..3 {
        f.add(Some("beta"));
    }
    let plan = f.dry(&cfg(None));
    assert_eq!(plan.spawns().count(), 8);
    let out = f.tick(&cfg(Some(2)));
    assert_eq!(spawned_by(&out), BTreeMap::from([("alpha".into(), 2), ("beta".into(), 2)]));
    assert_eq!(capped_by(&out.plan), BTreeMap::from([("alpha".into(), 3), ("beta".into(), 1)]));
    // Nothing finished: the next tick spawns nothing and defers the same tasks.
    let again = f.tick(&cfg(Some(2)));
    assert!(again.claimed.is_empty());
    // One alpha finishes: the next tick picks exactly one deferred alpha.
    let done = out.claimed.iter().find(|c| c.assignee.as_deref() == Some("alpha")).unwrap();
    f.store.complete(&done.task_id, None, None, Some(0), f.now).unwrap();
    let next = f.tick(&cfg(Some(2)));
    assert_eq!(spawned_by(&next), BTreeMap::from([("alpha".into(), 1)]));
    assert_ne!(next.claimed[0].task_id, done.task_id);
}

#[test]
fn pre_existing_running_tasks_count() {
    let mut f = Fixture::new();
    f.add(Some("alpha"));
    f.tick(&cfg(None));
    for _ in 0..2 {
        f.add(Some("alpha"));
        f.add(Some("beta"));
    }
    let out = f.tick(&cfg(Some(1)));
    assert_eq!(spawned_by(&out), BTreeMap::from([("beta".into(), 1)]));
    assert_eq!(capped_by(&out.plan), BTreeMap::from([("alpha".into(), 2), ("beta".into(), 1)]));
}

#[test]
fn the_per_profile_cap_holds_across_boards() {
    let mut f = Fixture::new();
    let other = BoardSlug::parse("other").unwrap();
    f.store.create_board(&other, None, T0).unwrap();
    f.add_on(&other, Some("alpha"), &[]);
    f.add_on(&other, Some("alpha"), &[]);
    f.add(Some("alpha"));
    let out = f.tick_on(&other, &cfg(Some(2)), true);
    assert_eq!(out.claimed.len(), 2);
    let out = f.tick(&cfg(Some(2)));
    assert!(out.claimed.is_empty(), "alpha already runs 2 on the other board");
    // max_in_progress is host-wide too.
    let mut c = cfg(None);
    c.caps.max_in_progress = Some(2);
    assert!(f.tick(&c).claimed.is_empty());
}

#[test]
fn two_ticks_with_completion_in_between() {
    let mut f = Fixture::new();
    for _ in 0..3 {
        f.add(Some("alpha"));
    }
    let first = f.tick(&cfg(Some(1)));
    assert_eq!((first.claimed.len(), capped_by(&first.plan)["alpha"]), (1, 2));
    f.store.complete(&first.claimed[0].task_id, None, Some("ok"), Some(0), f.now).unwrap();
    let second = f.tick(&cfg(Some(1)));
    assert_eq!((second.claimed.len(), capped_by(&second.plan)["alpha"]), (1, 1));
    assert_ne!(first.claimed[0].task_id, second.claimed[0].task_id);
}

#[test]
fn a_child_is_dispatched_once_its_parent_is_done() {
    let mut f = Fixture::new();
    let p = f.add(Some("alpha"));
    let c = f.add_on(&board(), Some("beta"), std::slice::from_ref(&p));
    assert_eq!(f.status(&c), TaskStatus::Todo);
    let out = f.tick(&cfg(None));
    assert_eq!(out.claimed.iter().map(|c| c.task_id.as_str()).collect::<Vec<_>>(), [p.as_str()]);
    f.store.complete(&p, None, None, Some(0), f.now).unwrap();
    assert_eq!(f.status(&c), TaskStatus::Ready);
    let out = f.tick(&cfg(None));
    assert_eq!(out.claimed[0].task_id, c);
    assert_eq!(out.claimed[0].assignee.as_deref(), Some("beta"));
    assert_eq!(f.status(&c), TaskStatus::Running);
}

#[test]
fn spawn_failure_requeues_then_gives_up() {
    let mut f = Fixture::new();
    let id = f.add(Some("alpha"));
    let out = f.tick_on(&board(), &cfg(None), false);
    assert_eq!(out.claimed.len(), 1);
    let res = f
        .store
        .record_spawn_failure(&id, out.claimed[0].run_id, "no such program", domain::board::Breaker::at_once(2), f.now)
        .unwrap();
    assert!(matches!(res, FailureOutcome::Requeue { failures: 1, limit: 2 }));
    let t = f.store.task(&id).unwrap();
    assert_eq!((t.status, t.claim_lock), (TaskStatus::Ready, None));
    // The same failure again (a retry: its run is over): a no-op, nothing counted twice.
    let again = f
        .store
        .record_spawn_failure(&id, out.claimed[0].run_id, "no such program", domain::board::Breaker::at_once(2), f.now)
        .unwrap();
    assert!(matches!(again, FailureOutcome::Requeue { failures: 1, .. }));
    let out = f.tick_on(&board(), &cfg(None), false);
    let res = f
        .store
        .record_spawn_failure(&id, out.claimed[0].run_id, "no such program", domain::board::Breaker::at_once(2), f.now)
        .unwrap();
    assert!(matches!(res, FailureOutcome::GiveUp { failures: 2, limit: 2 }));
    assert_eq!(f.status(&id), TaskStatus::Blocked);
    let kinds: Vec<String> = f.store.events(&id, 0).unwrap().into_iter().map(|e| e.kind).collect();
    assert!(kinds.ends_with(&["spawn_failed".into(), "gave_up".into()]), "{kinds:?}");
    let runs = f.store.runs(&id).unwrap();
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r.outcome.as_deref() == Some("spawn_failed")));
}

#[test]
fn expired_claims_are_reclaimed_even_in_a_dry_run_report() {
    let mut f = Fixture::new();
    let id = f.add(Some("alpha"));
    f.tick(&cfg(None));
    // A confirmed worker that lives but has been silent past the heartbeat window loses its claim.
    f.now = f.now.plus(Duration::from_secs(3601));
    let plan = f.dry(&cfg(None));
    assert_eq!(plan.housekeeping.len(), 1);
    assert_eq!(f.status(&id), TaskStatus::Running, "dry run wrote nothing");
    let out = f.tick_on(&board(), &cfg(None), false);
    assert!(matches!(out.plan.housekeeping[0].1, domain::policy::dispatch::Housekeeping::Reclaim { .. }));
    assert_eq!(out.claimed.len(), 1, "reclaimed and claimed again in the same tick");
    let kinds: Vec<String> = f.store.events(&id, 0).unwrap().into_iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&"reclaimed".to_owned()));
}

fn confirmation(c: &Claimed, pid: u32) -> Confirmation<'_> {
    Confirmation { task: &c.task_id, run_id: c.run_id, pid, start: Some(7), host: "host" }
}

#[test]
fn a_claim_nobody_confirms_expires_after_the_spawn_lease_not_the_claim_ttl() {
    // The dispatcher died between "claim committed" and "spawn recorded": no pid, no confirmation.
    let mut f = Fixture::new();
    let id = f.add(Some("alpha"));
    let mut c = cfg(None);
    c.caps.max_in_progress = Some(1);
    let first = f.tick_on(&board(), &c, false);
    assert_eq!(first.claimed.len(), 1);
    let task = f.store.task(&id).unwrap();
    assert_eq!(task.claim_expires, Some(f.now.as_millis() + 20_000), "the claim is a 20 s lease, not 900 s");
    assert_eq!(task.confirmed_at, None);
    // Inside the lease the claim holds (and holds its max_in_progress slot).
    f.now = f.now.plus(Duration::from_secs(19));
    let out = f.tick_on(&board(), &c, false);
    assert!(out.plan.housekeeping.is_empty() && out.claimed.is_empty());
    // Past it, a dry run reports the expiry and writes nothing; the next tick requeues and claims again, counting no
    // failure: no worker was ever started, so the task never ran.
    f.now = f.now.plus(Duration::from_secs(2));
    assert!(matches!(f.dry(&c).housekeeping[..], [(_, Housekeeping::LeaseExpired { pid: None, .. })]));
    assert_eq!(f.status(&id), TaskStatus::Running, "dry run wrote nothing");
    let second = f.tick_on(&board(), &c, false);
    assert_eq!(second.claimed.len(), 1, "requeued and claimed again in the same tick");
    let t = f.store.task(&id).unwrap();
    assert_eq!((t.consecutive_failures, t.current_run_id), (0, Some(second.claimed[0].run_id)));
    let runs = f.store.runs(&id).unwrap();
    assert_eq!(runs[0].outcome.as_deref(), Some("lease_expired"));
    assert!(runs[0].ended_at.is_some() && runs[1].ended_at.is_none());
    // The first run's worker starting late cannot confirm: it runs nothing.
    let late = f.store.confirm_run(&confirmation(&first.claimed[0], 500), Duration::from_secs(900), f.now);
    assert!(matches!(late, Err(StoreError::Superseded { .. })), "{late:?}");
    // The current run's worker confirms; its claim now lasts the TTL and the failure count is kept until it ends.
    let t = f.store.confirm_run(&confirmation(&second.claimed[0], 501), Duration::from_secs(900), f.now).unwrap();
    assert_eq!(
        (t.worker_pid, t.confirmed_at, t.claim_expires),
        (Some(501), Some(f.now.as_millis()), Some(f.now.as_millis() + 900_000))
    );
    assert_eq!(f.store.runs(&id).unwrap()[1].confirmed_at, Some(f.now.as_millis()));
}

#[test]
fn max_runtime_counts_from_the_confirmation() {
    // A claim whose worker confirms 10 s later (a slow start, a retry) gets its whole 5 s budget from then on.
    let mut f = Fixture::new();
    let id = f.add(Some("alpha"));
    f.store.conn.execute("UPDATE tasks SET max_runtime_seconds = 5 WHERE id = ?1", [&id]).unwrap();
    let out = f.tick_on(&board(), &cfg(None), false);
    f.now = f.now.plus(Duration::from_secs(10));
    f.store.confirm_run(&confirmation(&out.claimed[0], 700), Duration::from_secs(900), f.now).unwrap();
    f.probe.set_alive(700, true);
    f.now = f.now.plus(Duration::from_secs(4));
    let out = f.tick_on(&board(), &cfg(None), false);
    assert!(out.plan.housekeeping.is_empty(), "4 s of 5 used: {:?}", out.plan.housekeeping);
    f.now = f.now.plus(Duration::from_secs(1));
    let out = f.tick_on(&board(), &cfg(None), false);
    assert!(matches!(out.plan.housekeeping[..], [(_, Housekeeping::TimedOut { pid: Some(700), .. })]));
}

#[test]
fn confirmation_is_a_compare_and_swap() {
    let mut f = Fixture::new();
    let id = f.add(Some("alpha"));
    let out = f.tick_on(&board(), &cfg(None), false);
    let c = &out.claimed[0];
    // A worker whose dispatcher did not confirm for it (the gate closed without a word) confirms itself, once, even
    // late while no tick has ended the run; a second confirmation (another process claiming the same run) fails.
    let later = f.now.plus(Duration::from_secs(40));
    f.store.confirm_run(&confirmation(c, 600), Duration::from_secs(900), later).unwrap();
    let twice = f.store.confirm_run(&confirmation(c, 601), Duration::from_secs(900), f.now);
    assert!(matches!(twice, Err(StoreError::Superseded { .. })));
    // The dispatcher's late record neither overwrites what the worker wrote nor confirms anything.
    let rec = SpawnRecord { task: &c.task_id, run_id: c.run_id, pid: 999, start: Some(1), log: "log" };
    assert_eq!(f.store.record_spawned(&[rec], Duration::from_secs(20), f.now).unwrap(), 0);
    let t = f.store.task(&id).unwrap();
    assert_eq!((t.worker_pid, t.worker_start, t.worker_host.as_deref()), (Some(600), Some(7), Some("host")));
    // Its heartbeat extends the claim while the run is current; after a reclaim it reports the run gone.
    let beat = f.now.plus(Duration::from_secs(800));
    assert!(f.store.heartbeat_run(&id, c.run_id, Duration::from_secs(900), beat).unwrap());
    assert_eq!(f.store.task(&id).unwrap().claim_expires, Some(beat.as_millis() + 900_000));
    f.store.reclaim(&id, None, beat).unwrap();
    assert!(!f.store.heartbeat_run(&id, c.run_id, Duration::from_secs(900), beat).unwrap());
    // The dispatcher's record confirms a run for its worker (the claim lasting the claim TTL from the record), and
    // a confirmed run's dead worker is a crash, not a lease expiry.
    let out = f.tick_on(&board(), &cfg(None), false);
    let c = &out.claimed[0];
    let rec = SpawnRecord { task: &c.task_id, run_id: c.run_id, pid: 602, start: Some(602), log: "log" };
    let recorded = f.now.plus(Duration::from_secs(15));
    assert_eq!(f.store.record_spawned(&[rec], Duration::from_secs(900), recorded).unwrap(), 1);
    let t = f.store.task(&id).unwrap();
    assert_eq!((t.worker_pid, t.claim_expires), (Some(602), Some(recorded.as_millis() + 900_000)));
    assert!(t.confirmed_at.is_some());
    let kinds: Vec<String> = f.store.events(&id, 0).unwrap().into_iter().map(|e| e.kind).collect();
    assert!(kinds.ends_with(&["spawned".to_owned(), "confirmed".to_owned()]), "{kinds:?}");
    f.probe.set_alive(602, false);
    let out = f.tick_on(&board(), &cfg(None), false);
    assert!(matches!(out.plan.housekeeping[..], [(_, Housekeeping::Crashed { pid: 602, .. })]));
}

#[test]
fn max_in_progress_table() {
    for (running, ready, cap, expect) in [(2, 2, Some(2), 0), (1, 3, Some(3), 2), (0, 4, None, 4)] {
        let mut f = Fixture::new();
        for _ in 0..running {
            f.add(Some("beta"));
        }
        f.tick(&cfg(None));
        for _ in 0..ready {
            f.add(Some("alpha"));
        }
        let mut c = cfg(None);
        c.caps.max_in_progress = cap;
        assert_eq!(f.tick(&c).claimed.len(), expect, "running={running} ready={ready} cap={cap:?}");
    }
}

#[test]
fn crashed_workers_are_requeued_then_blocked() {
    let mut f = Fixture::new();
    let id = f.add(Some("alpha"));
    let out = f.tick(&cfg(None));
    let pid = u32::try_from(out.claimed[0].run_id).unwrap() + 10_000;
    f.probe.set_alive(pid, false);
    // The crash tick requeues it and (free capacity) claims it again at once; spawn with no live pid.
    let out = f.tick_on(&board(), &cfg(None), false);
    assert!(matches!(out.plan.housekeeping[0].1, domain::policy::dispatch::Housekeeping::Crashed { .. }));
    assert_eq!(f.store.task(&id).unwrap().consecutive_failures, 1);
    f.store
        .record_spawned(
            &[SpawnRecord { task: &id, run_id: out.claimed[0].run_id, pid: 4242, start: None, log: "log" }],
            Duration::from_secs(20),
            f.now,
        )
        .unwrap();
    let out = f.tick_on(&board(), &cfg(None), false);
    assert!(out.plan.housekeeping[0].1.gave_up());
    assert_eq!(f.status(&id), TaskStatus::Blocked);
    assert!(f.store.events(&id, 0).unwrap().iter().any(|e| e.kind == "gave_up"));
}

#[test]
fn transitions_and_their_events() {
    let mut f = Fixture::new();
    let id = f.add(None);
    f.store.assign(&id, Some("alpha"), f.now).unwrap();
    let pid = f.store.block(&id, None, Some("waiting"), f.now).unwrap();
    assert_eq!((pid, f.status(&id)), (None, TaskStatus::Blocked));
    assert!(matches!(f.store.block(&id, None, None, f.now), Err(StoreError::Transition { .. })));
    f.store.unblock(&id, f.now).unwrap();
    f.tick(&cfg(None));
    f.store.heartbeat(&id, Some("halfway"), f.now).unwrap();
    let pid = f.store.reclaim(&id, Some("stuck"), f.now).unwrap();
    assert!(pid.is_some());
    assert_eq!(f.status(&id), TaskStatus::Ready);
    f.store.archive(&id, f.now).unwrap();
    assert!(matches!(f.store.assign(&id, Some("beta"), f.now), Err(StoreError::Transition { .. })));
    let kinds: Vec<String> = f.store.events(&id, 0).unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            "created",
            "assigned",
            "blocked",
            "unblocked",
            "claimed",
            "spawned",
            "confirmed",
            "heartbeat",
            "reclaimed",
            "archived"
        ]
    );
    assert!(matches!(f.store.task("t_nope"), Err(StoreError::NoTask(_))));
}

#[test]
fn a_superseded_run_cannot_finish_the_task() {
    let mut f = Fixture::new();
    let id = f.add(Some("alpha"));
    let first = f.tick(&cfg(None)).claimed[0].run_id;
    f.store.reclaim(&id, Some("stuck"), f.now).unwrap();
    let second = f.tick(&cfg(None)).claimed[0].run_id;
    assert!(matches!(f.store.complete(&id, Some(first), None, Some(0), f.now), Err(StoreError::Moved { .. })));
    assert!(matches!(
        f.store.fail(
            &id,
            Some(first),
            &RunEnd { outcome: "failed", error: "x", exit_code: Some(1), retry_at: None },
            domain::board::Breaker::at_once(2),
            f.now
        ),
        Err(StoreError::Moved { .. })
    ));
    assert_eq!(f.status(&id), TaskStatus::Running);
    f.store.complete(&id, Some(second), None, Some(0), f.now).unwrap();
    assert_eq!(f.status(&id), TaskStatus::Done);
}

#[test]
fn events_are_append_only() {
    let mut f = Fixture::new();
    f.add(None);
    assert!(f.store.conn.execute("UPDATE task_events SET kind = 'x'", []).is_err());
    assert!(f.store.conn.execute("DELETE FROM task_events", []).is_err());
}

#[test]
fn migrations_are_append_only() {
    // The first migration is frozen: changing it would fork existing databases.
    let digest = domain::sha256::hex_digest(MIGRATIONS[0].as_bytes());
    assert_eq!(&digest[..16], FROZEN_MIGRATION_1, "migration 1 changed; add a new migration instead");
    // Migrating twice is a no-op.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kanban.db");
    drop(SqliteKanbanStore::open(&path).unwrap());
    drop(SqliteKanbanStore::open(&path).unwrap());
}

#[test]
fn migration_3_counts_running_workers_already_recorded_as_confirmed() {
    // A board written by the previous schema, with one running task whose dispatcher recorded its worker and one
    // whose dispatcher died before recording (that one stays an unconfirmed claim, so its lease applies).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kanban.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(MIGRATIONS[0]).unwrap();
        c.execute_batch(MIGRATIONS[1]).unwrap();
        c.pragma_update(None, "user_version", 2).unwrap();
        c.pragma_update(None, "application_id", APPLICATION_ID).unwrap();
        c.execute_batch(
            "INSERT INTO boards (slug, name, created_at) VALUES ('default', 'default', 0);
             INSERT INTO tasks (id, board, title, status, created_at, started_at, claim_lock, claim_expires, worker_pid)
               VALUES ('a', 'default', 'a', 'running', 0, 5, 'h:1', 9, 42), ('b', 'default', 'b', 'running', 0, 6, 'h:1', 9, NULL);",
        )
        .unwrap();
    }
    let s = SqliteKanbanStore::open(&path).unwrap();
    assert_eq!(s.task("a").unwrap().confirmed_at, Some(5));
    assert_eq!(s.task("b").unwrap().confirmed_at, None);
}

#[test]
fn a_board_an_older_berth_made_is_read_after_its_schema_is_brought_up_to_date() {
    // The schema of four migrations ago (before tasks in time and idempotency keys), with one task.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kanban.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        for m in &MIGRATIONS[..4] {
            c.execute_batch(m).unwrap();
        }
        c.pragma_update(None, "user_version", 4).unwrap();
        c.pragma_update(None, "application_id", APPLICATION_ID).unwrap();
        c.execute_batch(
            "INSERT INTO boards (slug, name, created_at) VALUES ('default', 'default', 0);
             INSERT INTO tasks (id, board, title, status, created_at) VALUES ('a', 'default', 'a', 'ready', 0);",
        )
        .unwrap();
    }
    let s = SqliteKanbanStore::open_read_only(&path).unwrap();
    let t = s.task("a").unwrap();
    assert_eq!((t.title.as_str(), t.not_before), ("a", None));
    let c = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = c.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    assert_eq!(version, MIGRATIONS.len() as i64);
}

const FROZEN_MIGRATION_1: &str = "dbf4093aa3336ad8";

#[test]
fn corrupt_foreign_and_truncated_files_are_reported_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, b"this is not a database at all, just some bytes that go on for a while......").unwrap();
    let foreign = dir.path().join("foreign.db");
    {
        let c = rusqlite::Connection::open(&foreign).unwrap();
        c.execute_batch("CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('mine');").unwrap();
    }
    let truncated = dir.path().join("truncated.db");
    {
        let mut s = SqliteKanbanStore::open(&truncated).unwrap();
        for i in 0..200 {
            let new = NewTask { title: format!("task {i} {}", "x".repeat(200)), ..NewTask::default() };
            s.create_task(&board(), &format!("t_{i}"), &new, T0).unwrap();
        }
        s.conn.pragma_update(None, "wal_checkpoint", "TRUNCATE").unwrap();
    }
    let full = std::fs::read(&truncated).unwrap();
    std::fs::write(&truncated, &full[..full.len() / 3]).unwrap();
    for (path, want_foreign) in [(&garbage, false), (&foreign, true), (&truncated, false)] {
        let before = std::fs::read(path).unwrap();
        let err = SqliteKanbanStore::open(path).err().expect("refused");
        match (&err, want_foreign) {
            (StoreError::Foreign { .. }, true) | (StoreError::Corrupt { .. }, false) => {}
            _ => panic!("{}: unexpected {err}", path.display()),
        }
        assert!(err.to_string().contains("left untouched"), "{err}");
        assert!(SqliteKanbanStore::open_read_only(path).is_err());
        assert_eq!(std::fs::read(path).unwrap(), before, "{} changed", path.display());
    }
}

#[test]
fn dry_run_leaves_the_file_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kanban.db");
    {
        let mut s = SqliteKanbanStore::open(&path).unwrap();
        for i in 0..20 {
            let new = NewTask {
                title: format!("t{i}"),
                assignee: Some(["alpha", "beta"][i % 2].into()),
                ..NewTask::default()
            };
            s.create_task(&board(), &format!("t_{i}"), &new, T0).unwrap();
        }
        s.conn.pragma_update(None, "wal_checkpoint", "TRUNCATE").unwrap();
    }
    // Every file of the database (main, -wal), by digest; -shm is shared memory, not data, and an empty -wal that a
    // reader may create holds nothing.
    let snapshot = |p: &std::path::Path| -> Vec<(String, String)> {
        let mut files: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .flatten()
            .map(|e| {
                (e.file_name().into_string().unwrap(), domain::sha256::hex_digest(&std::fs::read(e.path()).unwrap()))
            })
            .filter(|(n, d)| !n.ends_with("-shm") && d != &domain::sha256::hex_digest(b""))
            .collect();
        files.sort();
        files
    };
    let before = snapshot(&path);
    let s = SqliteKanbanStore::open_read_only(&path).unwrap();
    let probe = FakeProcessProbe::default();
    let b = board();
    let mut c = cfg(Some(1));
    c.default_assignee = Some("alpha".into());
    let req = TickRequest {
        board: &b,
        cfg: &c,
        now: T0,
        probe: &probe,
        claimer: "h:1",
        claim_ttl: Duration::from_secs(900),
        spawn_lease: Duration::from_secs(20),
    };
    let plan = domain::dispatcher::plan(&s, &req).unwrap();
    assert_eq!(plan.spawns().count(), 2);
    drop(s);
    assert_eq!(snapshot(&path), before);
}

/// Operations of the property test.
#[derive(Clone, Debug)]
enum Op {
    Create(Option<u8>, i64, Option<usize>),
    Assign(usize, Option<u8>),
    Dispatch { cap: u8, max_in_progress: Option<u8>, max_spawn: Option<u8>, default: bool },
    Complete(usize),
    Crash(usize),
    Block(usize),
}

const WHO: [&str; 4] = ["alpha", "beta", "default", "ghost"];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (proptest::option::of(0u8..4), 0i64..3, proptest::option::of(0usize..30)).prop_map(|(w, p, parent)| Op::Create(w, p, parent)),
        1 => (0usize..30, proptest::option::of(0u8..4)).prop_map(|(i, w)| Op::Assign(i, w)),
        3 => (1u8..4, proptest::option::of(1u8..6), proptest::option::of(1u8..4), proptest::bool::ANY)
            .prop_map(|(cap, max_in_progress, max_spawn, default)| Op::Dispatch { cap, max_in_progress, max_spawn, default }),
        2 => (0usize..30).prop_map(Op::Complete),
        1 => (0usize..30).prop_map(Op::Crash),
        1 => (0usize..30).prop_map(Op::Block),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn caps_hold_and_no_task_is_claimed_twice(ops in proptest::collection::vec(op(), 1..60)) {
        let mut f = Fixture::new();
        let mut ids: Vec<String> = Vec::new();
        for op in ops {
            f.now = f.now.plus(Duration::from_secs(1));
            match op {
                Op::Create(w, priority, parent) => {
                    let parents: Vec<String> = parent.and_then(|i| ids.get(i).cloned()).into_iter().collect();
                    ids.push(f.add_full(&board(), w.map(|i| WHO[i as usize]), &parents, priority));
                }
                Op::Assign(i, w) => if let Some(id) = ids.get(i) { let _ = f.store.assign(id, w.map(|i| WHO[i as usize]), f.now); },
                Op::Dispatch { cap, max_in_progress, max_spawn, default } => {
                    let mut c = cfg(Some(u32::from(cap)));
                    c.caps.max_in_progress = max_in_progress.map(u32::from);
                    c.caps.max_spawn = max_spawn.map(u32::from);
                    c.default_assignee = default.then(|| "alpha".to_owned());
                    // The streamed dry plan (one pass over the ready index) is the plan over the whole snapshot.
                    let b = board();
                    let req = f.request(&b, &c);
                    let mut streamed = domain::policy::dispatch::TickPlan::default();
                    domain::board::KanbanStore::plan_into(&f.store, &req, &mut streamed).unwrap();
                    let whole = domain::policy::dispatch::plan_tick(f.now, &domain::board::KanbanStore::snapshot(&f.store, &req).unwrap(), &c);
                    prop_assert_eq!(&streamed, &whole);
                    let before: BTreeMap<String, i64> = f.store.running_by_assignee().unwrap().into_iter().collect();
                    let out = f.tick(&c);
                    // The real tick streamed the same plan the dry run saw.
                    prop_assert_eq!(&out.plan, &whole);
                    for (who, n) in f.store.running_by_assignee().unwrap() {
                        let had = before.get(&who).copied().unwrap_or(0);
                        prop_assert!(n <= i64::from(cap).max(had), "{who} runs {n} > cap {cap}");
                    }
                    let total: i64 = f.store.running_by_assignee().unwrap().iter().map(|(_, n)| n).sum();
                    if let Some(m) = max_in_progress {
                        let had: i64 = before.values().sum();
                        prop_assert!(total <= i64::from(m).max(had));
                    }
                    let claimed: BTreeSet<&str> = out.claimed.iter().map(|c| c.task_id.as_str()).collect();
                    prop_assert_eq!(claimed.len(), out.claimed.len(), "a task claimed twice in one tick");
                }
                Op::Complete(i) => if let Some(id) = ids.get(i) { let _ = f.store.complete(id, None, None, Some(0), f.now); },
                Op::Crash(i) => {
                    let pid = ids.get(i).and_then(|id| f.store.task(id).unwrap().worker_pid);
                    if let Some(pid) = pid { f.probe.set_alive(u32::try_from(pid).unwrap(), false); }
                }
                Op::Block(i) => if let Some(id) = ids.get(i) { let _ = f.store.block(id, None, None, f.now); },
            }
            // Every task has at most one open run, and a running task has exactly one.
            for id in &ids {
                let t = f.store.task(id).unwrap();
                let open = f.store.runs(id).unwrap().iter().filter(|r| r.ended_at.is_none()).count();
                prop_assert!(open <= 1, "{id} has {open} open runs");
                if t.status == TaskStatus::Running {
                    prop_assert_eq!(open, 1);
                    prop_assert!(t.assignee.as_deref().is_some_and(|a| a != "ghost"));
                }
            }
        }
    }
}

#[test]
fn a_berth_board_named_kanban_db_moves_to_berth_kanban_db_and_a_foreign_one_is_never_touched() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    // berth's board under the old name: moved once, readable under the new one; read paths find it before that.
    {
        let mut s = SqliteKanbanStore::open(&home.join(LEGACY_BOARD_FILE)).unwrap();
        s.create_board(&BoardSlug::parse("b1").unwrap(), Some("B1"), Timestamp::from_secs(1)).unwrap();
    }
    assert_eq!(board_path(home), home.join(LEGACY_BOARD_FILE));
    assert_eq!(adopt_legacy_board(home).unwrap(), Some(home.join(LEGACY_BOARD_FILE)));
    assert!(!home.join(LEGACY_BOARD_FILE).exists() && home.join(BOARD_FILE).exists());
    assert_eq!(board_path(home), home.join(BOARD_FILE));
    assert!(is_berth_board(&home.join(BOARD_FILE)));
    assert_eq!(adopt_legacy_board(home).unwrap(), None);
    // hermes's own kanban.db beside it (another application's tables): never moved, never opened for writing.
    let foreign = home.join(LEGACY_BOARD_FILE);
    rusqlite::Connection::open(&foreign).unwrap().execute_batch("CREATE TABLE tasks(id TEXT);").unwrap();
    let before = std::fs::read(&foreign).unwrap();
    assert!(!is_berth_board(&foreign));
    assert_eq!(adopt_legacy_board(home).unwrap(), None);
    let other = tempfile::tempdir().unwrap();
    std::fs::copy(&foreign, other.path().join(LEGACY_BOARD_FILE)).unwrap();
    assert_eq!(adopt_legacy_board(other.path()).unwrap(), None);
    assert_eq!(board_path(other.path()), other.path().join(BOARD_FILE));
    assert_eq!(std::fs::read(&foreign).unwrap(), before);
    assert_eq!(std::fs::read(other.path().join(LEGACY_BOARD_FILE)).unwrap(), before);
}

#[test]
fn opening_checks_the_header_and_tables_and_check_reads_every_page() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("board.db");
    {
        let mut s = SqliteKanbanStore::open(&path).unwrap();
        for i in 0..300 {
            let new = NewTask { title: format!("task {i} {}", "y".repeat(300)), ..NewTask::default() };
            s.create_task(&board(), &format!("t_{i}"), &new, T0).unwrap();
        }
        s.conn.pragma_update(None, "wal_checkpoint", "TRUNCATE").unwrap();
    }
    assert_eq!(SqliteKanbanStore::check(&path).unwrap(), vec!["ok".to_owned()]);
    // Garbage in the middle of the file, length unchanged: opening (constant time) cannot see it, the full check does,
    // and neither writes a byte.
    let mut bytes = std::fs::read(&path).unwrap();
    let page = 4096;
    let mid = (bytes.len() / page / 2) * page;
    bytes[mid..mid + page].fill(0xA5);
    std::fs::write(&path, &bytes).unwrap();
    let findings = SqliteKanbanStore::check(&path).unwrap();
    assert_ne!(findings, vec!["ok".to_owned()]);
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    // A berth file that lost one of its tables is reported, not repaired.
    let lost = dir.path().join("lost.db");
    {
        let s = SqliteKanbanStore::open(&lost).unwrap();
        s.conn.execute_batch("DROP TABLE task_links").unwrap();
        s.conn.pragma_update(None, "wal_checkpoint", "TRUNCATE").unwrap();
    }
    let before = std::fs::read(&lost).unwrap();
    let err = SqliteKanbanStore::open(&lost).err().expect("refused");
    assert!(matches!(&err, StoreError::Corrupt { message, .. } if message.contains("task_links")), "{err}");
    assert_eq!(std::fs::read(&lost).unwrap(), before);
}

/// A board another process holds locked past the busy timeout is busy, not damaged: no advice to move it aside.
#[test]
fn a_locked_board_is_busy_not_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("board.db");
    drop(SqliteKanbanStore::open(&path).unwrap());
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE;").unwrap();
    let err = SqliteKanbanStore::verify_waiting(&path, std::time::Duration::from_millis(100)).unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains("locked") && !err.to_string().contains("move it aside"), "{err}");
    holder.execute_batch("COMMIT;").unwrap();
}

/// A boxed board (what `app` holds) streams as the store itself does: its tick keeps only the decisions it applied,
/// not a row per ready task (the trait's defaults would materialize the whole plan).
#[test]
fn a_boxed_board_streams_its_tick() {
    let mut f = Fixture::new();
    for _ in 0..5 {
        f.add(Some("alpha"));
    }
    let mut boxed: Box<dyn BoardStore + Send> = Box::new(f.store);
    let (b, c) = (board(), cfg(Some(1)));
    let req = TickRequest {
        board: &b,
        cfg: &c,
        now: f.now,
        probe: &f.probe,
        claimer: "host:1",
        claim_ttl: Duration::from_secs(900),
        spawn_lease: Duration::from_secs(20),
    };
    let mut whole = domain::policy::dispatch::TickPlan::default();
    let out = domain::board::KanbanStore::tick_into(&mut boxed, &req, &mut whole).unwrap();
    assert_eq!(whole.decisions.len(), 5, "the sink gets every decision");
    assert_eq!(out.claimed.len(), 1);
    assert!(out.plan.decisions.len() <= 1, "the outcome keeps at most the applied spawn: {:?}", out.plan.decisions);
}
