//! Table tests of the reuse, cleanup and reaper policies (upstream scenarios 6-35 at the policy level).

use std::collections::{BTreeMap, BTreeSet};

use super::cleanup::{CleanupPlan, ReleaseMode, RemoveReason, plan_cleanup};
use super::reaper::{ReapReason, ReapScope, SpareReason, find_orphans, judge_orphan, reaper_max_age_secs};
use super::reuse::{CreateReason, ReuseDecision, ReusePolicy, select_reusable};
use crate::container::{ContainerDetails, ContainerState, ContainerSummary};
use crate::ids::{ProfileName, TaskId};
use crate::sandbox::SandboxIdentity;
use crate::time::Timestamp;

fn ident(task: &str) -> SandboxIdentity {
    SandboxIdentity::new(TaskId::parse(task).unwrap(), ProfileName::parse("default").unwrap())
}

fn container(id: &str, identity: &SandboxIdentity, state: ContainerState, extra: &[(&str, &str)]) -> ContainerSummary {
    let mut labels = identity.upstream_labels();
    labels.insert("berth.identity".into(), identity.digest());
    labels.insert("berth.fingerprint".into(), "fp1".into());
    for (k, v) in extra {
        labels.insert((*k).into(), (*v).into());
    }
    labels.retain(|_, v| !v.is_empty());
    ContainerSummary {
        id: id.into(),
        name: format!("n-{id}"),
        labels,
        state,
        created: Timestamp::from_secs(1000),
        network_mode: Some("bridge".into()),
    }
}

fn policy() -> ReusePolicy {
    ReusePolicy {
        persist_across_processes: true,
        recreate_on_config_change: true,
        fingerprint: "fp1".into(),
        legacy_fingerprint: Some("legacy1".into()),
        air_gapped: false,
        egress_network: None,
        fields: String::new(),
    }
}

#[test]
fn reuse_table() {
    let me = ident("abc");
    let check = |listed: Vec<ContainerSummary>, p: ReusePolicy, expect: ReuseDecision| {
        assert_eq!(select_reusable(&me, &listed, &p), expect);
    };
    // Running → attach; exited → start; nothing → create.
    check(
        vec![container("reused-cid", &me, ContainerState::Running, &[])],
        policy(),
        ReuseDecision::Attach { id: "reused-cid".into() },
    );
    check(
        vec![container("reused-cid", &me, ContainerState::Exited, &[])],
        policy(),
        ReuseDecision::Start { id: "reused-cid".into(), prior: ContainerState::Exited },
    );
    check(vec![], policy(), ReuseDecision::Create { reason: CreateReason::NoMatch });
    // Opt-out: no lookup, always fresh, even when a running match exists.
    let mut opt_out = policy();
    opt_out.persist_across_processes = false;
    check(
        vec![container("r", &me, ContainerState::Running, &[])],
        opt_out,
        ReuseDecision::Create { reason: CreateReason::OptOut },
    );
    // Several matches: the running one wins even when listed second.
    check(
        vec![
            container("stopped-cid", &me, ContainerState::Exited, &[]),
            container("running-cid", &me, ContainerState::Running, &[]),
        ],
        policy(),
        ReuseDecision::Attach { id: "running-cid".into() },
    );
    // Drift: recreate; with recreation disabled, reuse as is.
    let drifted = container("old", &me, ContainerState::Running, &[("berth.fingerprint", "fp0")]);
    check(
        vec![drifted.clone()],
        policy(),
        ReuseDecision::Recreate { id: "old".into(), old: "fp0".into(), new: "fp1".into(), changed: Vec::new() },
    );
    // With both sides' per-field digests, the decision names what changed.
    let labelled = container(
        "old",
        &me,
        ContainerState::Running,
        &[("berth.fingerprint", "fp0"), ("berth.fields", "image:00000000,memory_bytes:11111111")],
    );
    let mut named = policy();
    named.fields = "image:00000000,memory_bytes:22222222".into();
    check(
        vec![labelled],
        named,
        ReuseDecision::Recreate {
            id: "old".into(),
            old: "fp0".into(),
            new: "fp1".into(),
            changed: vec!["memory_bytes (terminal.container_memory)".into()],
        },
    );
    let mut no_recreate = policy();
    no_recreate.recreate_on_config_change = false;
    check(vec![drifted], no_recreate, ReuseDecision::Attach { id: "old".into() });
    // A container labelled by an older berth with the same spec's legacy fingerprint has not drifted.
    let legacy = container("legacy", &me, ContainerState::Running, &[("berth.fingerprint", "legacy1")]);
    check(vec![legacy], policy(), ReuseDecision::Attach { id: "legacy".into() });
    // A hermes-made container (no identity, no fingerprint) is accepted as it is.
    let hermes = container("h", &me, ContainerState::Running, &[("berth.identity", ""), ("berth.fingerprint", "")]);
    check(vec![hermes], policy(), ReuseDecision::Attach { id: "h".into() });
    // Another raw id whose labels collide is never shared.
    let other = ident("a:b");
    let colliding = container("x", &other, ContainerState::Running, &[]);
    assert_eq!(
        select_reusable(&ident("a/b"), &[colliding], &policy()),
        ReuseDecision::Create { reason: CreateReason::NoMatch }
    );
    // Ephemeral containers of other processes and dead/removing ones are never reused.
    check(
        vec![container("e", &me, ContainerState::Running, &[("berth.mode", "ephemeral")])],
        policy(),
        ReuseDecision::Create { reason: CreateReason::NoMatch },
    );
    check(
        vec![container("d", &me, ContainerState::Dead, &[])],
        policy(),
        ReuseDecision::Create { reason: CreateReason::NoMatch },
    );
}

#[test]
fn cleanup_matrix() {
    assert_eq!(plan_cleanup(None, ReleaseMode::Force), CleanupPlan::Nothing);
    assert_eq!(plan_cleanup(None, ReleaseMode::OptOut), CleanupPlan::Nothing);
    assert_eq!(plan_cleanup(Some("c"), ReleaseMode::new(true, false)), CleanupPlan::Keep { id: "c".into() });
    assert_eq!(
        plan_cleanup(Some("c"), ReleaseMode::new(true, true)),
        CleanupPlan::StopRemove { id: "c".into(), grace_secs: 10, reason: RemoveReason::Forced }
    );
    assert_eq!(
        plan_cleanup(Some("c"), ReleaseMode::new(false, false)),
        CleanupPlan::StopRemove { id: "c".into(), grace_secs: 10, reason: RemoveReason::OptOut }
    );
    assert_eq!(
        plan_cleanup(Some("c"), ReleaseMode::new(false, true)),
        CleanupPlan::StopRemove { id: "c".into(), grace_secs: 10, reason: RemoveReason::Forced }
    );
}

#[test]
fn reaper_age_rule() {
    assert_eq!(reaper_max_age_secs(Some(300)), 600);
    assert_eq!(reaper_max_age_secs(Some(0)), 120);
    // Huge lifetimes saturate to "never" instead of wrapping to a negative threshold that removes everything.
    assert_eq!(reaper_max_age_secs(Some(4_611_686_018_427_387_904)), i64::MAX);
    assert_eq!(reaper_max_age_secs(None), 600);
    assert_eq!(reaper_max_age_secs(Some(-5)), 120);
    assert_eq!(reaper_max_age_secs(Some(1000)), 2000);
}

const NOW: Timestamp = Timestamp::from_secs(1_800_000_000);

fn details(id: &str, profile: &str, state: ContainerState, finished: &str, created: Timestamp) -> ContainerDetails {
    let identity = SandboxIdentity::new(TaskId::parse(id).unwrap(), ProfileName::parse(profile).unwrap());
    let mut summary = container(id, &identity, state, &[]);
    summary.created = created;
    ContainerDetails {
        summary,
        finished_at_raw: finished.into(),
        started_at_raw: String::new(),
        exit_code: Some(0),
        oom_killed: false,
        env: vec![],
    }
}

fn ago(secs: i64) -> String {
    Timestamp::from_secs(NOW.as_secs() - secs).to_rfc3339()
}

#[test]
fn reaper_table() {
    let scope = ReapScope { home: None, profile_label: Some("default".into()), max_age_secs: 600, host: None };
    let old = Timestamp::from_secs(NOW.as_secs() - 10_000);
    let check = |d: ContainerDetails, expect: Result<ReapReason, SpareReason>| {
        let got = judge_orphan(NOW, &d, &scope, &BTreeSet::new()).map(|o| o.reason);
        assert_eq!(got, expect, "{}", d.summary.id);
    };
    check(details("old-cid", "default", ContainerState::Exited, &ago(900), old), Ok(ReapReason::ExitedTooLong));
    check(details("edge", "default", ContainerState::Exited, &ago(600), old), Ok(ReapReason::ExitedTooLong));
    check(
        details("young", "default", ContainerState::Exited, &ago(60), old),
        Err(SpareReason::TooYoung { age_secs: 60, max_age_secs: 600 }),
    );
    check(
        details("zero", "default", ContainerState::Exited, "0001-01-01T00:00:00Z", old),
        Err(SpareReason::NoTimestamp),
    );
    check(details("garbage", "default", ContainerState::Exited, "not-a-timestamp", old), Err(SpareReason::NoTimestamp));
    check(details("running", "default", ContainerState::Running, &ago(9000), old), Err(SpareReason::Live));
    check(details("paused", "default", ContainerState::Paused, &ago(9000), old), Err(SpareReason::Live));
    check(
        details("other", "research-bot", ContainerState::Exited, &ago(9000), old),
        Err(SpareReason::OtherProfile { profile: "research-bot".into() }),
    );
    check(
        details("created", "default", ContainerState::Created, "0001-01-01T00:00:00Z", old),
        Ok(ReapReason::CreatedLeftover),
    );
    check(
        details("fresh-created", "default", ContainerState::Created, "0001-01-01T00:00:00Z", NOW),
        Err(SpareReason::TooYoung { age_secs: 0, max_age_secs: 600 }),
    );
    check(details("dead", "default", ContainerState::Dead, "", old), Ok(ReapReason::DeadLeftover));
    let mut unmanaged = details("u", "default", ContainerState::Exited, &ago(9000), old);
    unmanaged.summary.labels.remove("hermes-agent");
    check(unmanaged, Err(SpareReason::NotManaged));
    // All profiles: another profile's container is in scope.
    let all = ReapScope { home: None, profile_label: None, max_age_secs: 600, host: None };
    assert!(
        judge_orphan(
            NOW,
            &details("other", "research-bot", ContainerState::Exited, &ago(9000), old),
            &all,
            &BTreeSet::new()
        )
        .is_ok()
    );
    let plan = find_orphans(
        NOW,
        &[
            details("a", "default", ContainerState::Exited, &ago(900), old),
            details("b", "default", ContainerState::Running, "", old),
        ],
        &scope,
        &BTreeSet::new(),
    );
    assert_eq!((plan.remove.len(), plan.spare.len()), (1, 1));
}

proptest::proptest! {
    #[test]
    fn the_reaper_never_selects_a_live_container_or_another_profiles(
        states in proptest::collection::vec(0usize..7, 1..30),
        ages in proptest::collection::vec(0i64..100_000, 30),
        profiles in proptest::collection::vec(proptest::sample::select(vec!["default", "alpha"]), 30),
        lifetime in proptest::option::of(-10i64..2000),
    ) {
        let all = [ContainerState::Created, ContainerState::Running, ContainerState::Paused, ContainerState::Restarting, ContainerState::Exited, ContainerState::Dead, ContainerState::Removing];
        let containers: Vec<ContainerDetails> = states.iter().enumerate().map(|(i, s)| {
            details(&format!("c{i}"), profiles[i], all[*s].clone(), &ago(ages[i]), Timestamp::from_secs(NOW.as_secs() - ages[(i + 1) % 30]))
        }).collect();
        let scope = ReapScope { home: None, profile_label: Some("default".into()), max_age_secs: reaper_max_age_secs(lifetime), host: None };
        let plan = find_orphans(NOW, &containers, &scope, &BTreeSet::new());
        proptest::prop_assert_eq!(plan.remove.len() + plan.spare.len(), containers.len());
        for o in &plan.remove {
            let c = containers.iter().find(|c| c.summary.id == o.id).unwrap();
            proptest::prop_assert!(!c.summary.state.is_live());
            proptest::prop_assert_eq!(c.summary.profile_label(), Some("default"));
            proptest::prop_assert!(o.age_secs >= scope.max_age_secs);
        }
    }
}

#[test]
fn a_running_ephemeral_sandbox_whose_owner_died_is_an_orphan() {
    let scope =
        ReapScope { home: None, profile_label: Some("default".into()), max_age_secs: 600, host: Some("h".into()) };
    let old = Timestamp::from_secs(NOW.as_secs() - 10_000);
    let with = |mode: &str, owner: &str| {
        let mut d = details("e", "default", ContainerState::Running, "0001-01-01T00:00:00Z", old);
        d.summary.labels.insert("berth.mode".into(), mode.into());
        d.summary.labels.insert("berth.owner".into(), owner.into());
        d
    };
    let gone = BTreeSet::from(["h:42:7".to_owned()]);
    assert_eq!(
        judge_orphan(NOW, &with("ephemeral", "h:42:7"), &scope, &gone).map(|o| o.reason),
        Ok(ReapReason::OwnerGone)
    );
    assert_eq!(
        judge_orphan(NOW, &with("ephemeral", "h:43:7"), &scope, &gone).map(|o| o.reason),
        Err(SpareReason::Live)
    );
    assert_eq!(judge_orphan(NOW, &with("persist", "h:42:7"), &scope, &gone).map(|o| o.reason), Err(SpareReason::Live));
    let mut young = with("ephemeral", "h:42:7");
    young.summary.created = NOW;
    assert!(matches!(judge_orphan(NOW, &young, &scope, &gone), Err(SpareReason::TooYoung { .. })));
    // An owner on another host is known gone only by its lapsed lease: the reason says so.
    let gone_elsewhere = BTreeSet::from(["other:42:7".to_owned()]);
    assert_eq!(
        judge_orphan(NOW, &with("ephemeral", "other:42:7"), &scope, &gone_elsewhere).map(|o| o.reason),
        Ok(ReapReason::LeaseExpired)
    );
    assert_eq!(
        judge_orphan(NOW, &with("ephemeral", "other:42:7"), &scope, &gone).map(|o| o.reason),
        Err(SpareReason::Live)
    );
    assert_eq!(super::reaper::parse_owner("my:host:42:7"), Some(("my:host", 42, 7)));
    assert_eq!(super::reaper::parse_owner("nonsense"), None);
}

#[test]
fn labels_map_is_only_upstream_keys_for_lookup() {
    let l: BTreeMap<String, String> = ident("abc").upstream_labels();
    assert_eq!(l.keys().map(String::as_str).collect::<Vec<_>>(), ["hermes-agent", "hermes-profile", "hermes-task-id"]);
}

#[test]
fn air_gapped_reuse_replaces_any_networked_container_whoever_made_it() {
    let me = ident("abc");
    let mut locked = policy();
    locked.air_gapped = true;
    let on = |mode: Option<&str>, extra: &[(&str, &str)]| {
        let mut c = container("cid-123456789abc", &me, ContainerState::Running, extra);
        c.network_mode = mode.map(str::to_owned);
        c
    };
    // A hermes-made container (no fingerprint) on the bridge: replaced, with the reason naming the mode.
    let hermes_made = [("berth.identity", ""), ("berth.fingerprint", "")];
    let d = select_reusable(&me, &[on(Some("bridge"), &hermes_made)], &locked);
    let ReuseDecision::Replace { id, reason } = d else { panic!("expected Replace, got {d:?}") };
    assert_eq!(id, "cid-123456789abc");
    assert!(reason.contains("\"bridge\"") && reason.contains("docker_network is false"), "{reason}");
    // Berth's own container with recreation disabled is still replaced; an unknown mode fails closed.
    let mut no_recreate = locked.clone();
    no_recreate.recreate_on_config_change = false;
    assert!(matches!(
        select_reusable(&me, &[on(Some("default"), &[("berth.fingerprint", "fp1")])], &no_recreate),
        ReuseDecision::Replace { .. }
    ));
    assert!(matches!(select_reusable(&me, &[on(None, &[])], &locked), ReuseDecision::Replace { .. }));
    // Already air-gapped: attached. Without lockdown a networked one is attached as before.
    assert_eq!(
        select_reusable(&me, &[on(Some("none"), &[])], &locked),
        ReuseDecision::Attach { id: "cid-123456789abc".into() }
    );
    assert_eq!(
        select_reusable(&me, &[on(Some("bridge"), &[])], &policy()),
        ReuseDecision::Attach { id: "cid-123456789abc".into() }
    );
}

#[test]
fn egress_label_off_or_absent_is_reusable_a_proxied_one_is_not() {
    let me = ident("abc");
    let c = |egress: &str| container("e", &me, ContainerState::Running, &[("hermes-egress", egress)]);
    assert_eq!(select_reusable(&me, &[c("off")], &policy()), ReuseDecision::Attach { id: "e".into() });
    assert_eq!(
        select_reusable(&me, &[c("0123456789abcdef01234567")], &policy()),
        ReuseDecision::Create { reason: CreateReason::NoMatch }
    );
}

#[test]
fn berths_own_proxied_sandbox_is_reused_and_one_off_the_egress_network_is_replaced() {
    let me = ident("abc");
    let c = |egress: &str| container("e", &me, ContainerState::Running, &[("hermes-egress", egress)]);
    // Not a candidate would mean a second create under the same name; berth's own value is berth's.
    assert_eq!(select_reusable(&me, &[c("berth-0123456789ab")], &policy()), ReuseDecision::Attach { id: "e".into() });
    let mut routed = policy();
    routed.egress_network = Some("berth-egress-x".into());
    assert!(matches!(select_reusable(&me, &[c("off")], &routed), ReuseDecision::Replace { .. }));
    let mut on_net = c("berth-0123456789ab");
    on_net.network_mode = Some("berth-egress-x".into());
    routed.recreate_on_config_change = false;
    assert_eq!(select_reusable(&me, &[on_net], &routed), ReuseDecision::Attach { id: "e".into() });
}
