//! The dispatcher flow on the in-memory board and launcher: the shared suite, and a property over many ticks.

use std::time::Duration;

use proptest::prelude::*;

use crate::board::{DispatchCaps, TaskStatus, TickConfig};
use crate::test_util::{self as tu, FakeKanbanStore, World};

#[test]
fn caps_hold_across_ticks() {
    tu::caps_hold_across_ticks(FakeKanbanStore::new());
}

#[test]
fn crash_requeues_then_gives_up() {
    tu::crash_requeues_then_gives_up(FakeKanbanStore::new());
}

#[test]
fn spawn_failure_is_recorded() {
    tu::spawn_failure_is_recorded(FakeKanbanStore::new());
}

#[test]
fn lapsed_lease_stops_the_recorded_worker() {
    tu::lapsed_lease_stops_the_recorded_worker(FakeKanbanStore::new());
}

#[test]
fn only_task_reasons() {
    tu::only_task_reasons(FakeKanbanStore::new());
}

#[test]
fn dry_run_changes_nothing() {
    tu::dry_run_changes_nothing(FakeKanbanStore::new());
}

#[derive(Clone, Debug)]
enum Op {
    Tick,
    /// Workers of launched runs confirm.
    Confirm,
    /// The worker of the n-th task (mod the task count) dies without completing.
    Crash(usize),
    /// The worker of the n-th task completes it and exits.
    Complete(usize),
    /// Time passes (spawn leases and claims may lapse).
    Wait(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Tick),
        3 => Just(Op::Confirm),
        2 => (0usize..8).prop_map(Op::Crash),
        2 => (0usize..8).prop_map(Op::Complete),
        1 => (1u64..120).prop_map(Op::Wait),
    ]
}

const TASKS: usize = 8;

fn cfg() -> TickConfig {
    TickConfig {
        caps: DispatchCaps { max_in_progress: Some(3), per_profile: Some(2), ..DispatchCaps::default() },
        ..tu::tick_config(None)
    }
}

fn running(w: &World<FakeKanbanStore>, assignee: Option<&str>) -> usize {
    w.store
        .tasks()
        .filter(|t| t.status == TaskStatus::Running && assignee.is_none_or(|a| t.assignee.as_deref() == Some(a)))
        .count()
}

/// The live worker pid of a running task, if it has one.
fn pid(w: &World<FakeKanbanStore>, id: &str) -> Option<u32> {
    let t = w.store.task(id)?;
    if t.status != TaskStatus::Running {
        return None;
    }
    t.worker.and_then(|r| u32::try_from(r.pid).ok())
}

fn apply(w: &mut World<FakeKanbanStore>, op: &Op) {
    let now = w.now();
    match op {
        Op::Tick => {
            w.tick();
        }
        Op::Confirm => {
            for (c, p) in w.launcher.launched() {
                let _ = w.store.confirm_run(
                    &c.task_id,
                    c.run_id,
                    crate::board::WorkerRef { pid: i64::from(p), start: Some(i64::from(p)) },
                    Duration::from_secs(900),
                    now,
                );
            }
        }
        Op::Crash(i) => {
            if let Some(p) = pid(w, &format!("t{}", i % TASKS)) {
                w.launcher.kill(p);
            }
        }
        Op::Complete(i) => {
            let id = format!("t{}", i % TASKS);
            if let Some(p) = pid(w, &id) {
                w.store.complete(&id, now).expect("running");
                w.launcher.kill(p);
            }
        }
        Op::Wait(s) => w.clock.advance(Duration::from_secs(*s)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Over many ticks with crashes, completions, confirmations and lapsing leases interleaved, no cap is ever
    /// exceeded, and once the remaining work is allowed to finish every task ends in exactly one terminal state
    /// (a child of a task that gave up waits in `todo`).
    #[test]
    fn caps_hold_and_every_task_ends_once(ops in proptest::collection::vec(op(), 1..80)) {
        let mut w = World::new(FakeKanbanStore::new(), cfg());
        let now = w.now();
        for i in 0..TASKS {
            let who = if i % 2 == 0 { "alpha" } else { "beta" };
            let parents: &[&str] = if i == TASKS - 1 { &["t0"] } else { &[] };
            w.store.add_task("default", &format!("t{i}"), Some(who), i64::try_from(i % 3).unwrap_or(0), parents, now);
        }
        for op in &ops {
            apply(&mut w, op);
            prop_assert!(running(&w, None) <= 3, "max_in_progress exceeded after {op:?}");
            prop_assert!(running(&w, Some("alpha")) <= 2 && running(&w, Some("beta")) <= 2, "per-profile cap exceeded after {op:?}");
        }
        // Let everything finish: workers confirm and complete, ticks keep dispatching.
        for _ in 0..4 * TASKS {
            apply(&mut w, &Op::Tick);
            apply(&mut w, &Op::Confirm);
            for i in 0..TASKS {
                apply(&mut w, &Op::Complete(i));
            }
            prop_assert!(running(&w, None) <= 3);
        }
        for i in 0..TASKS {
            let id = format!("t{i}");
            let t = w.store.task(&id).expect("task");
            if i == TASKS - 1 && w.store.task("t0").is_some_and(|p| p.status == TaskStatus::Blocked) {
                // Its parent gave up: it waits in `todo` for a human, never dispatched.
                prop_assert_eq!(t.status, TaskStatus::Todo);
                prop_assert!(w.store.events(&id).iter().all(|k| k == "created"));
                continue;
            }
            prop_assert!(matches!(t.status, TaskStatus::Done | TaskStatus::Blocked), "{id} ended {:?}", t.status);
            let events = w.store.events(&id);
            let terminal = events.iter().filter(|k| *k == "completed" || *k == "gave_up").count();
            prop_assert_eq!(terminal, 1, "{} events {:?}", id, events);
        }
    }
}
