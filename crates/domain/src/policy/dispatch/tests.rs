//! Table tests of dispatch planning (upstream scenarios 66-86 at the policy level) and its properties.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::fair::rate_room;
use super::*;
use crate::board::{BoardSnapshot, TaskRow, TaskStatus, TickConfig};

const NOW: Timestamp = Timestamp::from_secs(1_800_000_000);

fn task(id: &str, assignee: Option<&str>, status: TaskStatus) -> TaskRow {
    let running = status == TaskStatus::Running;
    TaskRow {
        claimed: running,
        claim_expires: running.then_some(NOW.plus(std::time::Duration::from_secs(900))),
        started_at: running.then_some(NOW),
        ..TaskRow::waiting(
            id.into(),
            assignee.map(Into::into),
            status,
            0,
            Timestamp::from_secs(1_700_000_000 + id.len() as i64),
        )
    }
}

fn cfg(cap: Option<u32>) -> TickConfig {
    crate::test_util::tick_config(cap)
}

fn snapshot(tasks: Vec<TaskRow>) -> BoardSnapshot {
    BoardSnapshot { tasks, ..BoardSnapshot::default() }
}

fn ready(n: usize, who: &str) -> Vec<TaskRow> {
    (0..n).map(|i| task(&format!("{who}{i}"), Some(who), TaskStatus::Ready)).collect()
}

/// Counts spawns and per-profile-capped skips by assignee: `(spawned, capped)`.
fn tally(plan: &TickPlan) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let (mut s, mut c) = (BTreeMap::new(), BTreeMap::new());
    for d in &plan.decisions {
        let who = d.assignee.clone().unwrap_or_default();
        match d.decision {
            Decision::Spawn => *s.entry(who).or_default() += 1,
            Decision::SkippedPerProfileCapped { .. } => *c.entry(who).or_default() += 1,
            _ => {}
        }
    }
    (s, c)
}

fn codes(plan: &TickPlan) -> Vec<(String, &'static str)> {
    plan.decisions.iter().map(|d| (d.task_id.clone(), d.decision.code())).collect()
}

#[test]
fn unassigned_without_default_is_skipped() {
    let plan = plan_tick(NOW, &snapshot(vec![task("t1", None, TaskStatus::Ready)]), &cfg(None));
    assert_eq!(codes(&plan), [("t1".into(), "skipped_unassigned")]);
    assert!(!plan.decisions[0].auto_assigned);
}

#[test]
fn default_assignee_is_applied_when_it_is_a_profile() {
    let mut c = cfg(None);
    c.default_assignee = Some("default".into());
    let plan = plan_tick(NOW, &snapshot(vec![task("t1", None, TaskStatus::Ready)]), &c);
    assert_eq!(codes(&plan), [("t1".into(), "spawn")]);
    assert!(plan.decisions[0].auto_assigned);
    assert_eq!(plan.decisions[0].assignee.as_deref(), Some("default"));
    // A default that is not a profile is not applied.
    c.default_assignee = Some("ghost".into());
    let plan = plan_tick(NOW, &snapshot(vec![task("t1", None, TaskStatus::Ready)]), &c);
    assert_eq!(codes(&plan), [("t1".into(), "skipped_unassigned")]);
}

#[test]
fn default_assignee_never_overrides_an_assignee() {
    let mut c = cfg(None);
    c.default_assignee = Some("beta".into());
    let plan = plan_tick(NOW, &snapshot(vec![task("t1", Some("default"), TaskStatus::Ready)]), &c);
    assert!(!plan.decisions[0].auto_assigned);
    assert_eq!(plan.decisions[0].assignee.as_deref(), Some("default"));
}

#[test]
fn whitespace_assignee_counts_as_unassigned() {
    let plan = plan_tick(NOW, &snapshot(vec![task("t1", Some("  "), TaskStatus::Ready)]), &cfg(None));
    assert_eq!(codes(&plan), [("t1".into(), "skipped_unassigned")]);
}

#[test]
fn non_profiles_are_nonspawnable() {
    let plan = plan_tick(NOW, &snapshot(vec![task("t1", Some("orion-cc"), TaskStatus::Ready)]), &cfg(None));
    assert_eq!(codes(&plan), [("t1".into(), "skipped_nonspawnable")]);
}

#[test]
fn seed_example_five_alpha_three_beta() {
    let mut tasks = ready(5, "alpha");
    tasks.extend(ready(3, "beta"));
    let (s, c) = tally(&plan_tick(NOW, &snapshot(tasks.clone()), &cfg(None)));
    assert_eq!((s["alpha"], s["beta"], c.len()), (5, 3, 0));
    let (s, c) = tally(&plan_tick(NOW, &snapshot(tasks), &cfg(Some(2))));
    assert_eq!((s["alpha"], s["beta"], c["alpha"], c["beta"]), (2, 2, 3, 1));
}

#[test]
fn pre_existing_running_counts() {
    let mut tasks = vec![task("r", Some("alpha"), TaskStatus::Running)];
    tasks.extend(ready(2, "alpha"));
    tasks.extend(ready(2, "beta"));
    let plan = plan_tick(NOW, &snapshot(tasks), &cfg(Some(1)));
    let (s, c) = tally(&plan);
    assert_eq!((s.get("alpha"), s["beta"], c["alpha"], c["beta"]), (None, 1, 2, 1));
    let capped = plan.decisions.iter().find(|d| d.assignee.as_deref() == Some("alpha")).unwrap();
    assert_eq!(capped.decision, Decision::SkippedPerProfileCapped { current: 1, cap: 1 });
}

#[test]
fn running_on_other_boards_counts_toward_the_per_profile_cap() {
    let mut snap = snapshot(ready(2, "alpha"));
    snap.running_elsewhere.insert("alpha".into(), 1);
    snap.total_running_elsewhere = 1;
    let (s, c) = tally(&plan_tick(NOW, &snap, &cfg(Some(2))));
    assert_eq!((s["alpha"], c["alpha"]), (1, 1));
}

#[test]
fn overrides_beat_the_default_cap() {
    let mut c = cfg(Some(1));
    c.caps.per_profile_overrides.insert("alpha".into(), 3);
    let mut tasks = ready(4, "alpha");
    tasks.extend(ready(2, "beta"));
    let (s, capped) = tally(&plan_tick(NOW, &snapshot(tasks), &c));
    assert_eq!((s["alpha"], s["beta"], capped["alpha"], capped["beta"]), (3, 1, 1, 1));
}

#[test]
fn no_cap_spawns_everything() {
    let (s, c) = tally(&plan_tick(NOW, &snapshot(ready(3, "alpha")), &cfg(None)));
    assert_eq!((s["alpha"], c.len()), (3, 0));
}

#[test]
fn max_in_progress_counts_running_tasks_host_wide() {
    let check = |running: usize, ready_n: usize, cap: Option<u32>, expect: usize| {
        let mut tasks: Vec<TaskRow> =
            (0..running).map(|i| task(&format!("r{i}"), Some("beta"), TaskStatus::Running)).collect();
        tasks.extend(ready(ready_n, "alpha"));
        let mut c = cfg(None);
        c.caps.max_in_progress = cap;
        let plan = plan_tick(NOW, &snapshot(tasks), &c);
        assert_eq!(plan.spawns().count(), expect, "running={running} ready={ready_n} cap={cap:?}");
    };
    check(2, 2, Some(2), 0);
    check(1, 3, Some(3), 2);
    check(0, 4, None, 4);
}

#[test]
fn max_spawn_and_max_in_progress_together_use_the_whole_budget() {
    // Upstream #63466 double-counted running tasks here and stranded work.
    let mut tasks: Vec<TaskRow> = (0..2).map(|i| task(&format!("r{i}"), Some("beta"), TaskStatus::Running)).collect();
    tasks.extend(ready(5, "alpha"));
    let mut c = cfg(None);
    c.caps.max_in_progress = Some(5);
    c.caps.max_spawn = Some(10);
    assert_eq!(plan_tick(NOW, &snapshot(tasks.clone()), &c).spawns().count(), 3);
    c.caps.max_spawn = Some(2);
    let plan = plan_tick(NOW, &snapshot(tasks), &c);
    assert_eq!(plan.spawns().count(), 2);
    assert!(plan.decisions.iter().any(|d| d.decision == Decision::DeferredMaxSpawn { cap: 2 }));
}

#[test]
fn order_is_priority_then_age() {
    let mut a = task("old", Some("alpha"), TaskStatus::Ready);
    a.created_at = Timestamp::from_secs(1);
    let mut b = task("new", Some("alpha"), TaskStatus::Ready);
    b.created_at = Timestamp::from_secs(2);
    let mut c = task("urgent", Some("alpha"), TaskStatus::Ready);
    c.created_at = Timestamp::from_secs(3);
    c.priority = 5;
    let plan = plan_tick(NOW, &snapshot(vec![b, a, c]), &cfg(None));
    let order: Vec<_> = plan.decisions.iter().map(|d| d.task_id.as_str()).collect();
    assert_eq!(order, ["urgent", "old", "new"]);
}

#[test]
fn todo_with_done_parents_is_promoted_and_spawned() {
    let mut child = task("c", Some("beta"), TaskStatus::Todo);
    child.parents_done = true;
    let blocked_child = task("c2", Some("beta"), TaskStatus::Todo);
    let plan = plan_tick(NOW, &snapshot(vec![child, blocked_child]), &cfg(None));
    assert_eq!(plan.promoted, ["c"]);
    assert_eq!(codes(&plan), [("c".into(), "spawn")]);
}

#[test]
fn only_task_limits_the_tick() {
    let mut c = cfg(None);
    c.only_task = Some("alpha1".into());
    let plan = plan_tick(NOW, &snapshot(ready(3, "alpha")), &c);
    assert_eq!(codes(&plan), [("alpha1".into(), "spawn")]);
}

#[test]
fn housekeeping_table() {
    let c = cfg(None);
    let mut t = task("t", Some("alpha"), TaskStatus::Running);
    t.worker_pid = Some(42);
    t.worker_alive = Some(true);
    assert_eq!(plan_housekeeping(NOW, &t, &c), None);
    // Dead pid: a crash, requeued below the limit, given up at it.
    t.worker_alive = Some(false);
    assert_eq!(
        plan_housekeeping(NOW, &t, &c),
        Some(Housekeeping::Crashed { pid: 42, outcome: FailureOutcome::Requeue { failures: 1, limit: 2 } })
    );
    t.consecutive_failures = 1;
    assert_eq!(
        plan_housekeeping(NOW, &t, &c),
        Some(Housekeeping::Crashed { pid: 42, outcome: FailureOutcome::GiveUp { failures: 2, limit: 2 } })
    );
    t.max_retries = Some(5);
    assert!(matches!(
        plan_housekeeping(NOW, &t, &c),
        Some(Housekeeping::Crashed { outcome: FailureOutcome::Requeue { limit: 5, .. }, .. })
    ));
    // Expired claim: extended while the worker lives, reclaimed otherwise.
    t = task("t", Some("alpha"), TaskStatus::Running);
    t.claim_expires = Some(Timestamp::from_secs(NOW.as_secs() - 1));
    t.worker_pid = Some(42);
    t.worker_alive = Some(true);
    assert_eq!(plan_housekeeping(NOW, &t, &c), Some(Housekeeping::ExtendClaim));
    t.started_at = Some(Timestamp::from_secs(NOW.as_secs() - 7200));
    assert_eq!(
        plan_housekeeping(NOW, &t, &c),
        Some(Housekeeping::Reclaim { pid: Some(42) }),
        "no heartbeat for two hours"
    );
    t.last_heartbeat = Some(NOW);
    assert_eq!(plan_housekeeping(NOW, &t, &c), Some(Housekeeping::ExtendClaim));
    t.worker_pid = None;
    t.worker_alive = None;
    assert_eq!(plan_housekeeping(NOW, &t, &c), Some(Housekeeping::Reclaim { pid: None }));
    // Max runtime.
    let mut t = task("t", Some("alpha"), TaskStatus::Running);
    t.max_runtime_secs = Some(60);
    t.started_at = Some(Timestamp::from_secs(NOW.as_secs() - 61));
    assert!(matches!(plan_housekeeping(NOW, &t, &c), Some(Housekeeping::TimedOut { .. })));
    // Stale: past the timeout without a heartbeat.
    let mut t = task("t", Some("alpha"), TaskStatus::Running);
    t.started_at = Some(Timestamp::from_secs(NOW.as_secs() - 500));
    let mut stale_cfg = cfg(None);
    stale_cfg.stale_timeout_secs = 400;
    assert_eq!(plan_housekeeping(NOW, &t, &stale_cfg), Some(Housekeeping::Stale { pid: None }));
    t.last_heartbeat = Some(NOW);
    assert_eq!(plan_housekeeping(NOW, &t, &stale_cfg), None);
}

/// A claim no worker has confirmed yet: `claim_expires` is its spawn lease.
fn unconfirmed(lease_left_secs: i64) -> TaskRow {
    let mut t = task("t", Some("alpha"), TaskStatus::Running);
    t.started_at = None;
    t.claim_expires = Some(Timestamp::from_secs(NOW.as_secs() + lease_left_secs));
    t
}

#[test]
fn spawn_lease_table() {
    let c = cfg(None);
    // Inside the lease, with or without a pid the dispatcher recorded: wait for the worker's confirmation.
    assert_eq!(plan_housekeeping(NOW, &unconfirmed(10), &c), None);
    let mut t = unconfirmed(10);
    (t.worker_pid, t.worker_alive) = (Some(42), Some(true));
    assert_eq!(plan_housekeeping(NOW, &t, &c), None);
    // Past the lease with no worker ever recorded (the dispatcher died between claim and spawn): the task never
    // ran, so it is requeued without counting a failure, even at the limit.
    let mut t = unconfirmed(-1);
    t.consecutive_failures = 1;
    assert_eq!(plan_housekeeping(NOW, &t, &c), Some(Housekeeping::LeaseExpired { pid: None, outcome: None }));
    assert!(requeues(&Housekeeping::LeaseExpired { pid: None, outcome: None }));
    // A live process the dispatcher recorded that never confirmed was waiting for the board (an outage, the
    // server's connection limit): stopped and requeued uncounted, even at the limit; a dead one is a crash.
    let mut t = unconfirmed(-1);
    (t.worker_pid, t.worker_alive, t.consecutive_failures) = (Some(42), Some(true), 1);
    assert_eq!(plan_housekeeping(NOW, &t, &c), Some(Housekeeping::LeaseExpired { pid: Some(42), outcome: None }));
    assert!(requeues(&Housekeeping::LeaseExpired { pid: Some(42), outcome: None }));
    t.worker_alive = Some(false);
    assert!(matches!(plan_housekeeping(NOW, &t, &c), Some(Housekeeping::Crashed { pid: 42, .. })));
    // The failure rules apply to a started worker this host cannot see (another host's): at the limit the task
    // is blocked.
    let mut t = unconfirmed(-1);
    (t.worker_pid, t.worker_alive, t.consecutive_failures) = (Some(42), None, 1);
    assert_eq!(
        plan_housekeeping(NOW, &t, &c),
        Some(Housekeeping::LeaseExpired { pid: None, outcome: Some(FailureOutcome::GiveUp { failures: 2, limit: 2 }) })
    );
    // A claim with no expiry at all is no lease: it expires.
    let mut t = unconfirmed(0);
    t.claim_expires = None;
    assert!(matches!(plan_housekeeping(NOW, &t, &c), Some(Housekeeping::LeaseExpired { .. })));
    // Once confirmed, the lease no longer applies: the claim TTL and the worker's liveness do.
    let mut t = unconfirmed(-1);
    t.started_at = Some(NOW);
    (t.worker_pid, t.worker_alive) = (Some(42), Some(true));
    assert_eq!(plan_housekeeping(NOW, &t, &c), Some(Housekeeping::ExtendClaim));
}

#[test]
fn max_runtime_counts_from_the_confirmation_not_the_claim() {
    let c = cfg(None);
    // Claimed long ago (a retry waited), confirmed 3 s ago: 3 s of an 8 s budget are used, not all of it.
    let mut t = task("t", Some("alpha"), TaskStatus::Running);
    t.max_runtime_secs = Some(8);
    t.started_at = Some(Timestamp::from_secs(NOW.as_secs() - 3));
    (t.worker_pid, t.worker_alive) = (Some(42), Some(true));
    assert_eq!(plan_housekeeping(NOW, &t, &c), None);
    t.started_at = Some(Timestamp::from_secs(NOW.as_secs() - 8));
    assert!(matches!(plan_housekeeping(NOW, &t, &c), Some(Housekeeping::TimedOut { pid: Some(42), .. })));
    // Unconfirmed, nothing runs yet: no runtime is charged whatever the budget.
    let mut t = unconfirmed(5);
    t.max_runtime_secs = Some(1);
    assert_eq!(plan_housekeeping(NOW, &t, &c), None);
}

#[test]
fn lease_expired_claims_free_their_slot_and_are_dispatched_again() {
    let mut c = cfg(Some(1));
    c.caps.max_in_progress = Some(1);
    let plan = plan_tick(NOW, &snapshot(vec![unconfirmed(-1)]), &c);
    assert!(matches!(plan.housekeeping[..], [(_, Housekeeping::LeaseExpired { .. })]));
    assert_eq!(codes(&plan), [("t".into(), "spawn")]);
    // Inside the lease the claim holds its slot: nothing else starts.
    let mut tasks = vec![unconfirmed(5)];
    tasks.extend(ready(1, "alpha"));
    let plan = plan_tick(NOW, &snapshot(tasks), &c);
    assert!(plan.housekeeping.is_empty());
    assert_eq!(plan.spawns().count(), 0);
}

#[test]
fn reclaimed_tasks_free_their_slot_and_are_dispatched_again() {
    let mut t = task("t", Some("alpha"), TaskStatus::Running);
    t.claim_expires = Some(Timestamp::from_secs(NOW.as_secs() - 1));
    let plan = plan_tick(NOW, &snapshot(vec![t]), &cfg(Some(1)));
    assert_eq!(plan.housekeeping.len(), 1);
    assert_eq!(codes(&plan), [("t".into(), "spawn")]);
}

#[test]
fn failure_breaker() {
    assert_eq!(record_failure(0, None, 2), FailureOutcome::Requeue { failures: 1, limit: 2 });
    assert_eq!(record_failure(1, None, 2), FailureOutcome::GiveUp { failures: 2, limit: 2 });
    assert_eq!(record_failure(0, None, 1), FailureOutcome::GiveUp { failures: 1, limit: 1 });
    assert_eq!(record_failure(1, Some(3), 2), FailureOutcome::Requeue { failures: 2, limit: 3 });
    assert_eq!(record_failure(0, None, 0), FailureOutcome::GiveUp { failures: 1, limit: 1 });
}

fn arb_task() -> impl Strategy<Value = TaskRow> {
    (
        0u32..10_000,
        prop::option::of(prop::sample::select(vec!["alpha", "beta", "default", "ghost", " "])),
        prop::sample::select(vec![
            TaskStatus::Ready,
            TaskStatus::Ready,
            TaskStatus::Running,
            TaskStatus::Todo,
            TaskStatus::Done,
        ]),
        -2i64..3,
        any::<bool>(),
        prop::option::of(any::<bool>()),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(n, who, status, prio, parents_done, alive, expired, confirmed)| {
            let mut t = task(&format!("t{n}"), who, status);
            t.priority = prio;
            t.parents_done = parents_done;
            if status == TaskStatus::Running {
                t.worker_pid = alive.map(|_| 100 + n);
                t.worker_alive = alive;
                if expired {
                    t.claim_expires = Some(Timestamp::from_secs(NOW.as_secs() - 5));
                }
                if !confirmed {
                    t.started_at = None;
                }
            }
            t
        })
}

fn arb_cfg() -> impl Strategy<Value = TickConfig> {
    (
        prop::option::of(0u32..6),
        prop::option::of(0u32..6),
        prop::option::of(1u32..4),
        prop::option::of(1u32..5),
        prop::option::of(prop::sample::select(vec!["alpha", "default", "ghost"])),
    )
        .prop_map(|(mip, ms, pp, alpha_override, default)| {
            let mut c = cfg(pp);
            c.caps.max_in_progress = mip;
            c.caps.max_spawn = ms;
            if let Some(o) = alpha_override {
                c.caps.per_profile_overrides.insert("alpha".into(), o);
            }
            c.default_assignee = default.map(Into::into);
            c
        })
}

fn dedup(tasks: Vec<TaskRow>) -> Vec<TaskRow> {
    let mut seen = BTreeSet::new();
    tasks.into_iter().filter(|t| seen.insert(t.id.clone())).collect()
}

/// A retry whose sandbox is on another host waits for that host for the affinity window (taking no slot), then
/// any host may run it; off at 0.
#[test]
fn a_retry_waits_for_the_host_holding_its_sandbox_for_a_bounded_time() {
    let mut t = task("r", Some("alpha"), TaskStatus::Ready);
    t.sandbox_elsewhere_since = Some(Timestamp::from_secs(1_800_000_000 - 30));
    let other = task("o", Some("alpha"), TaskStatus::Ready);
    let mut c = TickConfig { sandbox_affinity_secs: 120, ..cfg(Some(1)) };
    let plan = plan_tick(NOW, &snapshot(vec![t.clone(), other.clone()]), &c);
    assert_eq!(
        plan.decisions.iter().map(|d| (d.task_id.as_str(), d.decision.clone())).collect::<Vec<_>>(),
        [("o", Decision::Spawn), ("r", Decision::DeferredSandboxElsewhere { wait_secs: 90 })],
        "the deferred retry does not hold the profile's one slot"
    );
    t.sandbox_elsewhere_since = Some(Timestamp::from_secs(1_800_000_000 - 121));
    let plan = plan_tick(NOW, &snapshot(vec![t.clone()]), &c);
    assert_eq!(plan.decisions[0].decision, Decision::Spawn, "past the window any host takes it");
    t.sandbox_elsewhere_since = Some(NOW);
    c.sandbox_affinity_secs = 0;
    assert_eq!(plan_tick(NOW, &snapshot(vec![t]), &c).decisions[0].decision, Decision::Spawn, "0 is off");
}

proptest! {
    #[test]
    fn no_profile_ever_exceeds_its_cap(tasks in prop::collection::vec(arb_task(), 0..60), c in arb_cfg(), elsewhere in 0u32..3) {
        let mut snap = snapshot(dedup(tasks));
        snap.running_elsewhere.insert("alpha".into(), elsewhere);
        snap.total_running_elsewhere = elsewhere;
        let plan = plan_tick(NOW, &snap, &c);
        // Running after the tick = still running (not taken out by housekeeping) + elsewhere + spawned.
        let leaving: BTreeSet<&str> = plan.housekeeping.iter().filter(|(_, h)| !matches!(h, Housekeeping::ExtendClaim)).map(|(id, _)| id.as_str()).collect();
        let mut per: BTreeMap<String, u32> = snap.running_elsewhere.clone();
        let mut total = snap.total_running_elsewhere;
        let mut pre: BTreeMap<String, u32> = per.clone();
        for t in snap.tasks.iter().filter(|t| t.status == TaskStatus::Running && !leaving.contains(t.id.as_str())) {
            total += 1;
            if let Some(a) = t.assignee.as_deref().filter(|a| !a.is_empty()) {
                *per.entry(a.to_owned()).or_default() += 1;
                *pre.entry(a.to_owned()).or_default() += 1;
            }
        }
        let pre_total = total;
        let spawned = plan.spawns().count() as u32;
        for d in plan.spawns() {
            let a = d.assignee.clone().expect("spawns have assignees");
            prop_assert!(c.profiles.contains(&a));
            *per.entry(a).or_default() += 1;
            total += 1;
        }
        for (who, n) in &per {
            if let Some(cap) = c.caps.cap_for(who) {
                // Spawning never pushes a profile over its cap (it may already be over from before).
                prop_assert!(*n <= cap.max(pre.get(who).copied().unwrap_or(0)), "{who}: {n} > {cap}");
            }
        }
        if let Some(cap) = c.caps.max_in_progress {
            prop_assert!(total <= cap.max(pre_total));
        }
        if let Some(cap) = c.caps.max_spawn {
            prop_assert!(spawned <= cap);
        }
    }

    #[test]
    fn every_ready_task_lands_in_exactly_one_bucket(tasks in prop::collection::vec(arb_task(), 0..60), c in arb_cfg()) {
        let snap = snapshot(dedup(tasks));
        let plan = plan_tick(NOW, &snap, &c);
        let decided: Vec<&str> = plan.decisions.iter().map(|d| d.task_id.as_str()).collect();
        let unique: BTreeSet<&str> = decided.iter().copied().collect();
        prop_assert_eq!(decided.len(), unique.len(), "a task was decided twice");
        for t in &snap.tasks {
            if t.status == TaskStatus::Ready && !t.claimed {
                prop_assert!(unique.contains(t.id.as_str()), "ready task {} was not decided", t.id);
            }
        }
        for d in &plan.decisions {
            if d.auto_assigned {
                prop_assert_eq!(d.assignee.as_deref(), c.default_assignee.as_deref());
            }
        }
    }

    #[test]
    fn no_task_stays_running_without_a_live_worker_past_its_lease(tasks in prop::collection::vec(arb_task(), 0..60), c in arb_cfg()) {
        let snap = snapshot(dedup(tasks));
        let plan = plan_tick(NOW, &snap, &c);
        let hk: BTreeMap<&str, &Housekeeping> = plan.housekeeping.iter().map(|(id, h)| (id.as_str(), h)).collect();
        for t in snap.tasks.iter().filter(|t| t.status == TaskStatus::Running) {
            let dead = t.worker_alive == Some(false);
            let lease_over = t.started_at.is_none() && t.claim_expires.is_none_or(|e| e < NOW);
            let h = hk.get(t.id.as_str());
            if dead || lease_over {
                prop_assert!(h.is_some_and(|h| leaves_running(h)), "{} stays running: {:?}", t.id, h);
            }
            if t.started_at.is_none() && !lease_over && !dead {
                prop_assert!(h.is_none(), "{} was touched inside its spawn lease: {:?}", t.id, h);
            }
            if let Some(Housekeeping::LeaseExpired { pid, .. }) = h {
                // Only a live process is ever signalled.
                prop_assert!(pid.is_none() || t.worker_alive == Some(true));
            }
        }
    }

    #[test]
    fn planning_is_deterministic_so_dry_run_equals_real(tasks in prop::collection::vec(arb_task(), 0..40), c in arb_cfg()) {
        let snap = snapshot(dedup(tasks));
        let mut shuffled = snap.clone();
        shuffled.tasks.reverse();
        let a = plan_tick(NOW, &snap, &c);
        let b = plan_tick(NOW, &shuffled, &c);
        prop_assert_eq!(&a.decisions, &b.decisions);
        prop_assert_eq!(a, plan_tick(NOW, &snap, &c));
    }
}

#[test]
fn an_engine_backoff_claims_nothing_until_it_ends() {
    let mut c = cfg(None);
    c.engine_backoff_until = Some(Timestamp::from_secs(NOW.as_secs() + 4));
    let plan = plan_tick(NOW, &snapshot(ready(2, "alpha")), &c);
    assert_eq!(plan.spawns().count(), 0);
    assert!(plan.decisions.iter().all(|d| d.decision == Decision::DeferredEngineUnavailable { wait_secs: 4 }));
    // Once it ended, the ready tasks go as before.
    c.engine_backoff_until = Some(NOW);
    assert_eq!(plan_tick(NOW, &snapshot(ready(2, "alpha")), &c).spawns().count(), 2);
}

#[test]
fn a_task_whose_last_worker_is_still_exiting_waits_and_the_others_go() {
    let mut c = cfg(None);
    c.held = ["alpha0".to_owned()].into_iter().collect();
    let plan = plan_tick(NOW, &snapshot(ready(2, "alpha")), &c);
    assert_eq!(plan.spawns().map(|d| d.task_id.as_str()).collect::<Vec<_>>(), ["alpha1"]);
    c.held.clear();
    assert_eq!(plan_tick(NOW, &snapshot(ready(2, "alpha")), &c).spawns().count(), 2);
}

/// `n` ready tasks of `who`, created from `from` seconds on (one a second), ids `{who}{i:02}`.
fn aged(n: usize, who: &str, from: i64) -> Vec<TaskRow> {
    (0..n)
        .map(|i| TaskRow {
            created_at: Timestamp::from_secs(from + i as i64),
            ..task(&format!("{who}{i:02}"), Some(who), TaskStatus::Ready)
        })
        .collect()
}

/// Issue 40's starving board: the global cap of 2 binds, 10 older tasks of alpha, 4 newer of beta; each tick one
/// running task (the oldest start) finishes. Oldest-first gave alpha the first 8 starts; fair share gives beta half
/// of them while it has tasks.
#[test]
fn fair_share_does_not_starve_the_newer_profile() {
    let mut c = cfg(None);
    c.caps.max_in_progress = Some(2);
    let mut tasks = aged(10, "alpha", 1_000);
    tasks.extend(aged(4, "beta", 2_000));
    let mut starts: Vec<String> = Vec::new();
    while starts.len() < 8 {
        let plan = plan_tick(NOW, &snapshot(tasks.clone()), &c);
        let spawned: Vec<String> = plan.spawns().map(|d| d.task_id.clone()).collect();
        assert!(!spawned.is_empty(), "a slot is free: {:?}", codes(&plan));
        for id in &spawned {
            let t = tasks.iter_mut().find(|t| &t.id == id).unwrap();
            let who = t.assignee.clone();
            *t = task(id, who.as_deref(), TaskStatus::Running);
        }
        starts.extend(spawned);
        // The oldest start finishes.
        let first_running =
            starts.iter().find(|id| tasks.iter().any(|t| &&t.id == id && t.status == TaskStatus::Running));
        let done = first_running.unwrap().clone();
        tasks.retain(|t| t.id != done);
    }
    let beta = starts[..8].iter().filter(|id| id.starts_with("beta")).count();
    assert!(beta >= 3, "beta got {beta} of the first 8 starts: {starts:?}");
    assert_eq!(&starts[..2], ["alpha00", "beta00"], "the first two slots go one to each profile");
}

#[test]
fn free_slots_go_round_robin_oldest_first_within_a_profile() {
    let mut c = cfg(None);
    c.caps.max_spawn = Some(5);
    let mut tasks = aged(6, "alpha", 1_000);
    tasks.extend(aged(6, "beta", 2_000));
    tasks.extend(aged(1, "default", 3_000));
    let plan = plan_tick(NOW, &snapshot(tasks), &c);
    let spawned: Vec<&str> = plan.spawns().map(|d| d.task_id.as_str()).collect();
    assert_eq!(spawned, ["alpha00", "beta00", "default00", "alpha01", "beta01"]);
    // Every other task waits for the tick's spawn limit, and is decided once.
    assert_eq!(plan.decisions.len(), 13);
    assert_eq!(plan.decisions.iter().filter(|d| d.decision == Decision::DeferredMaxSpawn { cap: 5 }).count(), 8);
}

#[test]
fn fair_share_counts_what_each_profile_already_runs() {
    let mut c = cfg(None);
    c.caps.max_in_progress = Some(4);
    let mut tasks: Vec<TaskRow> = (0..2).map(|i| task(&format!("r{i}"), Some("alpha"), TaskStatus::Running)).collect();
    tasks.extend(aged(3, "alpha", 1_000));
    tasks.extend(aged(3, "beta", 2_000));
    let plan = plan_tick(NOW, &snapshot(tasks), &c);
    let spawned: Vec<&str> = plan.spawns().map(|d| d.task_id.as_str()).collect();
    assert_eq!(spawned, ["beta00", "beta01"], "alpha runs 2, so beta's turn comes twice first");
    let waiting = plan.decisions.iter().find(|d| d.task_id == "alpha00").unwrap();
    assert_eq!(waiting.decision, Decision::DeferredMaxInProgress { running: 4, cap: 4 });
}

#[test]
fn priority_comes_before_fair_share() {
    let mut c = cfg(None);
    c.caps.max_spawn = Some(2);
    let mut tasks = aged(3, "alpha", 1_000);
    for t in &mut tasks {
        t.priority = 5;
    }
    tasks.extend(aged(3, "beta", 500));
    let plan = plan_tick(NOW, &snapshot(tasks), &c);
    assert_eq!(plan.spawns().map(|d| d.task_id.as_str()).collect::<Vec<_>>(), ["alpha00", "alpha01"]);
}

#[test]
fn a_board_rate_limit_counts_the_starts_of_the_last_minute() {
    let mut c = cfg(None);
    c.caps.rate_per_minute = Some(3);
    let mut snap = snapshot(aged(5, "alpha", 1_000));
    // Two starts inside the window (50 s and 10 s ago), one outside (61 s ago).
    snap.recent_starts =
        [61, 50, 10].map(|ago| (Some("beta".to_owned()), Timestamp::from_secs(NOW.as_secs() - ago))).to_vec();
    let plan = plan_tick(NOW, &snap, &c);
    assert_eq!(plan.spawns().count(), 1);
    let rated: Vec<&Decision> =
        plan.decisions.iter().map(|d| &d.decision).filter(|d| d.code() == "deferred_rate_limited").collect();
    assert_eq!(rated.len(), 4);
    // The start of 50 s ago leaves the window in 10 s; the gateway wakes for it.
    assert!(
        matches!(rated[0], Decision::DeferredRateLimited { limit: 3, per_profile: false, wait_secs: 10, .. }),
        "{rated:?}"
    );
    assert_eq!(plan.next_due, Some(Timestamp::from_secs(NOW.as_secs() + 10)));
    // Full: nothing starts.
    snap.recent_starts.push((None, Timestamp::from_secs(NOW.as_secs() - 5)));
    assert_eq!(plan_tick(NOW, &snap, &c).spawns().count(), 0);
}

#[test]
fn a_profile_rate_limit_holds_only_that_profile() {
    let mut c = cfg(None);
    c.caps.rate_overrides.insert("alpha".into(), 3);
    c.caps.rate_overrides.insert("beta".into(), 0);
    let mut tasks = aged(8, "alpha", 1_000);
    tasks.extend(aged(5, "beta", 2_000));
    let mut snap = snapshot(tasks);
    snap.recent_starts = vec![(Some("alpha".to_owned()), Timestamp::from_secs(NOW.as_secs() - 20))];
    let plan = plan_tick(NOW, &snap, &c);
    let (s, _) = tally(&plan);
    assert_eq!((s["alpha"], s["beta"]), (2, 5), "alpha's 3 a minute less the one 20 s ago; 0 is no limit");
    let held = plan.decisions.iter().find(|d| d.task_id == "alpha07").unwrap();
    assert!(matches!(held.decision, Decision::DeferredRateLimited { limit: 3, per_profile: true, wait_secs: 40, .. }));
}

#[test]
fn rate_room_counts_only_the_window() {
    let at = |ago: i64| Timestamp::from_secs(NOW.as_secs() - ago);
    assert_eq!(rate_room(&[], 2, NOW), (2, NOW.plus(std::time::Duration::from_secs(60))));
    assert_eq!(rate_room(&[at(60), at(30)], 2, NOW), (1, at(-30)), "60 s ago is out of the window");
    assert_eq!(rate_room(&[at(59), at(30), at(1)], 2, NOW), (0, at(-30)), "two must leave for one more: 30 s ago");
}

proptest! {
    /// With nothing running and one priority, a board-wide limit shares its starts round robin: a profile left
    /// waiting never has more than one start fewer than any other profile.
    #[test]
    fn a_binding_limit_shares_round_robin(counts in prop::collection::vec(0usize..6, 3), max in 1u32..8) {
        let mut c = cfg(None);
        c.caps.max_spawn = Some(max);
        let mut tasks = Vec::new();
        for (i, (who, n)) in ["alpha", "beta", "default"].iter().zip(&counts).enumerate() {
            tasks.extend(aged(*n, who, 1_000 * (3 - i as i64)));
        }
        let plan = plan_tick(NOW, &snapshot(tasks), &c);
        let (s, _) = tally(&plan);
        let started = |who: &str| s.get(who).copied().unwrap_or(0);
        prop_assert_eq!(plan.spawns().count(), (max as usize).min(counts.iter().sum()));
        for d in plan.decisions.iter().filter(|d| d.decision != Decision::Spawn) {
            let waits = d.assignee.as_deref().unwrap();
            for other in ["alpha", "beta", "default"] {
                prop_assert!(started(other) <= started(waits) + 1, "{waits} waits with {} starts, {other} has {}", started(waits), started(other));
            }
        }
    }

    /// No start-rate limit is ever exceeded: the window's starts plus the tick's stay within each limit.
    #[test]
    fn rate_limits_hold(tasks in prop::collection::vec(arb_task(), 0..60), c in arb_cfg(), board in prop::option::of(1u32..6), alpha in 0u32..4, ago in prop::collection::vec((0i64..120, prop::bool::ANY), 0..8)) {
        let mut c = c;
        c.caps.rate_per_minute = board;
        c.caps.rate_overrides.insert("alpha".into(), alpha);
        let mut snap = snapshot(dedup(tasks));
        snap.recent_starts = ago.iter().map(|(s, a)| (a.then(|| "alpha".to_owned()), Timestamp::from_secs(NOW.as_secs() - s))).collect();
        let plan = plan_tick(NOW, &snap, &c);
        let inside = |alpha_only: bool| ago.iter().filter(|(s, a)| *s < 60 && (!alpha_only || *a)).count();
        if let Some(limit) = board {
            prop_assert!(plan.spawns().count() + inside(false) <= (limit as usize).max(inside(false)));
        }
        if alpha > 0 {
            let alpha_spawns = plan.spawns().filter(|d| d.assignee.as_deref() == Some("alpha")).count();
            prop_assert!(alpha_spawns + inside(true) <= (alpha as usize).max(inside(true)));
        }
    }
}
