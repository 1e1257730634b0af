//! Tests of the sandbox service over `FakeRuntime`: reuse, races, drift, recovery, release, reaping, and a
//! state-machine property test against a simple model.

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::container::ContainerDetails;
use crate::ids::{ProfileName, TaskId};
use crate::policy::reaper::{ReapReason, ReapScope, reaper_max_age_secs};
use crate::ports::CapturedOutput;
use crate::ports::ProcessProbe;
use crate::sandbox::{HostFacts, NoExtraArgs, SandboxMode, SandboxSettings, build_create_spec};
use crate::test_util::{FakeProcessProbe, FakeRuntime, block_on};
use crate::time::Timestamp;

const T0: Timestamp = Timestamp::from_secs(1_800_000_000);

fn settings(persist: bool) -> SandboxSettings {
    SandboxSettings {
        egress: crate::egress::EgressPolicy::All,
        image: "img".into(),
        persist_across_processes: persist,
        cpu: 0.0,
        memory_mb: 0,
        disk_mb: 0,
        container_persistent: false,
        ..crate::test_util::sandbox_settings()
    }
}

fn request(task: &str, profile: &str, st: &SandboxSettings, nonce: u32) -> AcquireRequest {
    let identity = SandboxIdentity::new(TaskId::parse(task).unwrap(), ProfileName::parse(profile).unwrap());
    let (mode, name) = if st.persist_across_processes {
        (SandboxMode::Persist, identity.persistent_name())
    } else {
        (SandboxMode::Ephemeral, identity.ephemeral_name(&nonce.to_string()))
    };
    // Each acquire stands for its own process: pid = start = nonce on host "h".
    let host = HostFacts { owner: Some(format!("h:{nonce}:{nonce}")), ..HostFacts::default() };
    let built = build_create_spec(&identity, mode, name, st, &host, &NoExtraArgs);
    AcquireRequest {
        identity,
        spec: built.expect("valid settings").spec,
        persist_across_processes: st.persist_across_processes,
        recreate_on_config_change: st.recreate_on_config_change,
    }
}

#[test]
fn reuse_of_a_running_container_never_creates_or_starts() {
    let rt = FakeRuntime::new(T0);
    let req = request("abc", "default", &settings(true), 0);
    let first = block_on(acquire(&rt, &req)).unwrap();
    assert_eq!(first.action, AcquireAction::Created);
    let before = rt.calls().len();
    let second = block_on(acquire(&rt, &req)).unwrap();
    assert_eq!((second.action, &second.id), (AcquireAction::Attached, &first.id));
    let after: Vec<String> = rt.calls()[before..].to_vec();
    assert!(!after.iter().any(|c| c == "create" || c == "start"), "{after:?}");
    assert_eq!(second.labels["hermes-task-id"], "abc");
}

#[test]
fn exited_container_is_started_not_recreated() {
    let rt = FakeRuntime::new(T0);
    let req = request("abc", "default", &settings(true), 0);
    let first = block_on(acquire(&rt, &req)).unwrap();
    rt.kill(&first.id);
    let again = block_on(acquire(&rt, &req)).unwrap();
    assert_eq!((again.action, again.id), (AcquireAction::Started, first.id));
    assert_eq!(rt.containers().len(), 1);
}

#[test]
fn start_failure_falls_back_to_a_fresh_container() {
    let rt = FakeRuntime::new(T0);
    let req = request("abc", "default", &settings(true), 0);
    let first = block_on(acquire(&rt, &req)).unwrap();
    rt.kill(&first.id);
    rt.fail_start(&first.id);
    let again = block_on(acquire(&rt, &req)).unwrap();
    assert_eq!(again.action, AcquireAction::Created);
    assert_ne!(again.id, first.id);
    assert!(again.notes.iter().any(|n| n.contains("would not start")));
    // Our own broken container was removed to free the name: one container, running.
    assert_eq!(rt.containers().len(), 1);
}

#[test]
fn hermes_made_broken_container_is_left_for_the_reaper() {
    let rt = FakeRuntime::new(T0);
    let req = request("abc", "default", &settings(true), 0);
    let mut hermes_spec = req.spec.clone();
    hermes_spec.name = "hermes-1234abcd".into();
    hermes_spec.labels.retain(|k, _| k.starts_with("hermes-"));
    let hid = rt.insert(hermes_spec, ContainerState::Exited, T0, &T0.to_rfc3339());
    rt.fail_start(&hid);
    let got = block_on(acquire(&rt, &req)).unwrap();
    assert_eq!(got.action, AcquireAction::Created);
    assert_eq!(rt.containers().len(), 2);
}

#[test]
fn hermes_made_running_container_is_reused() {
    let rt = FakeRuntime::new(T0);
    let req = request("abc", "default", &settings(true), 0);
    let mut hermes_spec = req.spec.clone();
    hermes_spec.name = "hermes-1234abcd".into();
    hermes_spec.labels.retain(|k, _| k.starts_with("hermes-"));
    let hid = rt.insert(hermes_spec, ContainerState::Running, T0, "0001-01-01T00:00:00Z");
    let got = block_on(acquire(&rt, &req)).unwrap();
    assert_eq!((got.action, got.id), (AcquireAction::Attached, hid));
}

#[test]
fn opt_out_always_creates_and_release_removes() {
    let rt = FakeRuntime::new(T0);
    let st = settings(false);
    let a = block_on(acquire(&rt, &request("abc", "default", &st, 1))).unwrap();
    let b = block_on(acquire(&rt, &request("abc", "default", &st, 2))).unwrap();
    assert_ne!(a.id, b.id);
    assert!(!rt.calls().iter().any(|c| c == "list"), "opt-out never looks up");
    block_on(release(&rt, Some(&a.id), ReleaseMode::OptOut)).unwrap();
    assert_eq!(rt.containers().len(), 1);
}

#[test]
fn persist_release_keeps_and_force_removes() {
    let rt = FakeRuntime::new(T0);
    let req = request("abc", "default", &settings(true), 0);
    let a = block_on(acquire(&rt, &req)).unwrap();
    let plan = block_on(release(&rt, Some(&a.id), ReleaseMode::Keep)).unwrap();
    assert_eq!(plan, CleanupPlan::Keep { id: a.id.clone() });
    assert_eq!(rt.containers()[0].state, ContainerState::Running);
    block_on(release(&rt, Some(&a.id), ReleaseMode::Force)).unwrap();
    assert!(rt.containers().is_empty());
    // Releasing again (already gone) is fine.
    block_on(release(&rt, Some(&a.id), ReleaseMode::Force)).unwrap();
}

#[test]
fn drift_recreates_once() {
    let rt = FakeRuntime::new(T0);
    let mut st = settings(true);
    let a = block_on(acquire(&rt, &request("abc", "default", &st, 0))).unwrap();
    st.image = "img:2".into();
    let b = block_on(acquire(&rt, &request("abc", "default", &st, 0))).unwrap();
    assert_eq!(b.action, AcquireAction::Recreated);
    assert_ne!(a.id, b.id);
    let c = block_on(acquire(&rt, &request("abc", "default", &st, 0))).unwrap();
    assert_eq!((c.action, c.id), (AcquireAction::Attached, b.id));
    assert_eq!(rt.containers().len(), 1);
}

#[test]
fn name_conflict_attaches_to_the_winner() {
    let rt = FakeRuntime::new(T0);
    let req = request("abc", "default", &settings(true), 0);
    // Another process created (but has not started) the container between our list and create.
    let winner = rt.insert(req.spec.clone(), ContainerState::Created, T0, "0001-01-01T00:00:00Z");
    let got = block_on(acquire(&rt, &req)).unwrap();
    assert_eq!(got.id, winner);
    assert_eq!(rt.containers().len(), 1);
}

#[test]
fn exec_recovers_once_from_out_of_band_removal() {
    let rt = FakeRuntime::new(T0);
    let req = request("abc", "default", &settings(true), 0);
    let first = block_on(acquire(&rt, &req)).unwrap();
    rt.remove_out_of_band(&first.id);
    // The next run's acquire creates anew; simulate the removal landing between acquire and exec instead.
    let second = block_on(acquire(&rt, &req)).unwrap();
    rt.kill(&second.id);
    rt.fail_start(&second.id);
    let mut out = CapturedOutput::default();
    let exec = ExecSpec { argv: vec!["echo".into(), "hi".into()], ..ExecSpec::default() };
    let (got, outcome) = block_on(run(&rt, &req, &exec, &mut out)).unwrap();
    assert_eq!(outcome, ExecOutcome::Exited(0));
    assert_eq!(out.stdout, b"echo hi");
    assert_eq!(rt.execs().last().unwrap().0, got.id);
}

#[test]
fn reaper_sweeps_old_exited_created_and_spares_the_rest() {
    let rt = FakeRuntime::new(T0);
    let st = settings(true);
    let old = Timestamp::from_secs(T0.as_secs() - 5000);
    let ago = |s: i64| Timestamp::from_secs(T0.as_secs() - s).to_rfc3339();
    let spec = |task: &str, profile: &str| request(task, profile, &st, 0).spec;
    let gone_exited = rt.insert(spec("a", "default"), ContainerState::Exited, old, &ago(900));
    let gone_created = rt.insert(spec("b", "default"), ContainerState::Created, old, "0001-01-01T00:00:00Z");
    let young = rt.insert(spec("c", "default"), ContainerState::Exited, old, &ago(60));
    let running = rt.insert(spec("d", "default"), ContainerState::Running, old, &ago(9000));
    let zero = rt.insert(spec("e", "default"), ContainerState::Exited, old, "0001-01-01T00:00:00Z");
    let other = rt.insert(spec("f", "research-bot"), ContainerState::Exited, old, &ago(9000));
    let scope = ReapScope {
        home: None,
        profile_label: Some("default".into()),
        max_age_secs: reaper_max_age_secs(Some(300)),
        host: None,
    };

    let dry = block_on(reap(&rt, T0, &scope, &FakeProcessProbe::default(), true)).unwrap();
    assert_eq!(dry.removed.len(), 2);
    assert_eq!(rt.containers().len(), 6, "dry run removes nothing");

    let report = block_on(reap(&rt, T0, &scope, &FakeProcessProbe::default(), false)).unwrap();
    let mut removed: Vec<&str> = report.removed.iter().map(|o| o.id.as_str()).collect();
    removed.sort();
    let mut expect = vec![gone_exited.as_str(), gone_created.as_str()];
    expect.sort();
    assert_eq!(removed, expect);
    assert!(report.removed.iter().any(|o| o.reason == ReapReason::CreatedLeftover));
    let left: Vec<String> = rt.containers().into_iter().map(|c| c.id).collect();
    for id in [&young, &running, &zero, &other] {
        assert!(left.contains(id));
    }
    // All profiles: the other profile's old container goes too.
    let all = ReapScope { profile_label: None, ..scope };
    let report = block_on(reap(&rt, T0, &all, &FakeProcessProbe::default(), false)).unwrap();
    assert_eq!(report.removed.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(), [other.as_str()]);
}

/// Operations of the state-machine test.
#[derive(Clone, Debug)]
enum Op {
    Acquire { who: usize, persist: bool },
    Release { handle: usize, force: bool },
    Crash { handle: usize },
    RemoveOutOfBand { handle: usize },
    Advance { secs: u64 },
    Reap,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..4, any::<bool>()).prop_map(|(who, persist)| Op::Acquire { who, persist }),
        2 => (0usize..8, any::<bool>()).prop_map(|(handle, force)| Op::Release { handle, force }),
        1 => (0usize..8).prop_map(|handle| Op::Crash { handle }),
        1 => (0usize..8).prop_map(|handle| Op::RemoveOutOfBand { handle }),
        1 => (1u64..2000).prop_map(|secs| Op::Advance { secs }),
        1 => Just(Op::Reap),
    ]
}

// Identities include a colliding pair ("a/b" and "a:b") and a hostile one.
const WHO: [(&str, &str); 4] = [("a/b", "default"), ("a:b", "default"), ("x", "alpha"), ("\n=,😀", "default")];

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn lifecycle_model(ops in proptest::collection::vec(op(), 1..40)) {
        let rt = FakeRuntime::new(T0);
        let mut now = T0;
        // Model: handles acquired, with their identity index and mode; `None` once released.
        let mut handles: Vec<Option<(usize, bool, String)>> = Vec::new();
        let mut released_ephemeral: Vec<String> = Vec::new();
        let mut nonce = 0u32;
        let probe = FakeProcessProbe::default();
        for op in ops {
            match op {
                Op::Acquire { who, persist } => {
                    nonce += 1;
                    let (task, profile) = WHO[who];
                    let req = request(task, profile, &settings(persist), nonce);
                    probe.set_alive(nonce, true);
                    let got = block_on(acquire(&rt, &req)).unwrap();
                    let c = rt.containers().into_iter().find(|c| c.id == got.id).unwrap();
                    prop_assert_eq!(c.state, ContainerState::Running);
                    prop_assert_eq!(&c.spec.labels["berth.identity"], &req.identity.digest());
                    handles.push(Some((who, persist, got.id)));
                }
                Op::Release { handle, force } => {
                    if let Some(Some((_, persist, id))) = handles.get(handle).cloned() {
                        block_on(release(&rt, Some(&id), ReleaseMode::new(persist, force))).unwrap();
                        if !persist || force {
                            prop_assert!(!rt.containers().iter().any(|c| c.id == id), "released container remains");
                            if !persist { released_ephemeral.push(id); }
                        }
                        handles[handle] = None;
                    }
                }
                Op::Crash { handle } => {
                    // The owning process is SIGKILLed (its handle is lost), and its container may die too.
                    if let Some(Some((_, persist, id))) = handles.get(handle).cloned() {
                        if persist {
                            rt.kill(&id);
                        } else if let Some(owner) = rt.containers().iter().find(|c| c.id == id).and_then(|c| c.spec.labels.get("berth.owner").cloned()) {
                            let pid = owner.split(':').nth(1).unwrap().parse().unwrap();
                            probe.set_alive(pid, false);
                        }
                        handles[handle] = None;
                    }
                }
                Op::RemoveOutOfBand { handle } => {
                    if let Some(Some((_, _, id))) = handles.get(handle) { rt.remove_out_of_band(id); }
                }
                Op::Advance { secs } => {
                    now = now.plus(Duration::from_secs(secs));
                    rt.set_now(now);
                }
                Op::Reap => {
                    let scope = ReapScope { home: None, profile_label: None, max_age_secs: 600, host: Some("h".into()) };
                    let before: Vec<_> = rt.containers();
                    block_on(reap(&rt, now, &scope, &probe, false)).unwrap();
                    let owner_alive = |c: &crate::test_util::FakeContainer| {
                        c.spec.labels.get("berth.owner").is_none_or(|o| probe.is_alive(o.split(':').nth(1).unwrap().parse().unwrap(), None))
                    };
                    for c in before.iter().filter(|c| c.state.is_live() && owner_alive(c)) {
                        prop_assert!(rt.containers().iter().any(|x| x.id == c.id), "reaper removed a live container");
                    }
                    // No running ephemeral container whose owner died survives a sweep once it is past the window.
                    for c in rt.containers() {
                        let orphaned = c.state.is_live() && c.spec.labels["berth.mode"] == "ephemeral" && !owner_alive(&c);
                        prop_assert!(!(orphaned && now.secs_since(c.created) >= 600.0), "orphaned ephemeral {} survived", c.id);
                    }
                }
            }
            // Invariant: at most one live persist-mode container per identity, and never a container shared
            // between two identities.
            for (task, profile) in WHO {
                let digest = SandboxIdentity::new(TaskId::parse(task).unwrap(), ProfileName::parse(profile).unwrap()).digest();
                let live = rt.containers().into_iter()
                    .filter(|c| c.state.is_live() && c.spec.labels["berth.identity"] == digest && c.spec.labels["berth.mode"] == "persist")
                    .count();
                prop_assert!(live <= 1, "{live} live persist containers for {task:?}");
            }
            for id in &released_ephemeral {
                prop_assert!(!rt.containers().iter().any(|c| &c.id == id));
            }
        }
    }
}

#[test]
fn reaper_gate_runs_once_and_a_disabled_call_keeps_it_open() {
    let rt = FakeRuntime::new(T0);
    let scope = ReapScope {
        home: None,
        profile_label: Some("research-bot".into()),
        max_age_secs: reaper_max_age_secs(Some(300)),
        host: None,
    };
    let gate = ReaperGate::new();
    assert!(block_on(gate.run_once(false, &rt, T0, &scope, &FakeProcessProbe::default())).is_none());
    assert!(!gate.has_run(), "disabled: the gate stays open");
    let runs = (0..3)
        .filter(|_| block_on(gate.run_once(true, &rt, T0, &scope, &FakeProcessProbe::default())).is_some())
        .count();
    assert_eq!(runs, 1);
    assert_eq!(rt.calls().iter().filter(|c| *c == "list").count(), 1);
    assert_eq!(scope.max_age_secs, 600);
}

#[test]
fn reaper_gate_reports_a_failed_sweep_once_and_never_retries() {
    // A runtime whose list fails: the gate reports the error once and does not try again.
    struct Down;
    #[async_trait::async_trait]
    impl ContainerRuntime for Down {
        async fn list(&self, _: &ListQuery) -> Result<Vec<ContainerSummary>, RuntimeError> {
            Err(RuntimeError::Unavailable { endpoint: "x".into(), message: "down".into() })
        }
        async fn inspect(&self, id: &str) -> Result<ContainerDetails, RuntimeError> {
            Err(RuntimeError::NotFound(id.into()))
        }
        async fn create(&self, s: &CreateSpec) -> Result<String, RuntimeError> {
            Ok(s.name.clone())
        }
        async fn start(&self, _: &str) -> Result<(), RuntimeError> {
            Ok(())
        }
        async fn stop(&self, _: &str, _: Duration) -> Result<(), RuntimeError> {
            Ok(())
        }
        async fn remove(&self, _: &str, _: bool) -> Result<(), RuntimeError> {
            Ok(())
        }
        async fn exec<'s>(
            &self,
            _: &str,
            _: &ExecSpec,
            _: &'s mut (dyn OutputSink + 's),
        ) -> Result<ExecOutcome, RuntimeError> {
            Ok(ExecOutcome::Exited(0))
        }
    }
    let gate = ReaperGate::new();
    let scope = ReapScope { home: None, profile_label: None, max_age_secs: 120, host: None };
    assert!(matches!(block_on(gate.run_once(true, &Down, T0, &scope, &FakeProcessProbe::default())), Some(Err(_))));
    assert!(block_on(gate.run_once(true, &Down, T0, &scope, &FakeProcessProbe::default())).is_none());
}

/// A [`FakeRuntime`] whose listing misbehaves the way real engines do; everything else is delegated.
struct OddListing {
    inner: FakeRuntime,
    /// Docker's listing can lag behind create and inspect: it shows nothing.
    lagging: bool,
    /// Podman 4.3 answers 500 to the `dead` and `restarting` status filters.
    rejects_status_filters: bool,
}

#[async_trait::async_trait]
impl ContainerRuntime for OddListing {
    async fn list(&self, q: &ListQuery) -> Result<Vec<ContainerSummary>, RuntimeError> {
        if self.rejects_status_filters
            && q.states.iter().any(|s| matches!(s, ContainerState::Dead | ContainerState::Restarting))
        {
            return Err(RuntimeError::Api { status: 500, message: "invalid argument: unknown status".into() });
        }
        if self.lagging {
            return Ok(Vec::new());
        }
        self.inner.list(q).await
    }
    async fn inspect(&self, id: &str) -> Result<ContainerDetails, RuntimeError> {
        self.inner.inspect(id).await
    }
    async fn create(&self, s: &CreateSpec) -> Result<String, RuntimeError> {
        self.inner.create(s).await
    }
    async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        self.inner.start(id).await
    }
    async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        self.inner.stop(id, grace).await
    }
    async fn remove(&self, id: &str, force: bool) -> Result<(), RuntimeError> {
        self.inner.remove(id, force).await
    }
    async fn exec<'s>(
        &self,
        id: &str,
        spec: &ExecSpec,
        sink: &'s mut (dyn OutputSink + 's),
    ) -> Result<ExecOutcome, RuntimeError> {
        self.inner.exec(id, spec, sink).await
    }
}

#[test]
fn a_loser_attaches_to_the_winner_even_when_the_listing_lags() {
    // The winner's container runs, but the listing does not show it yet: every create conflicts. The loser follows
    // the name it lost instead of spending a fixed number of attempts on listings that cannot see it.
    let rt = OddListing { inner: FakeRuntime::new(T0), lagging: true, rejects_status_filters: false };
    let req = request("abc", "default", &settings(true), 0);
    let winner = rt.inner.insert(req.spec.clone(), ContainerState::Running, T0, "0001-01-01T00:00:00Z");
    let got = block_on(acquire(&rt, &req)).unwrap();
    assert_eq!((got.action, got.id), (AcquireAction::Attached, winner));
    assert_eq!(rt.inner.containers().len(), 1);
}

#[test]
fn a_created_container_of_our_name_is_followed_once_then_started() {
    // Its creator died between create and start: after following it (no progress), the loser starts it itself.
    let rt = FakeRuntime::new(T0);
    let req = request("abc", "default", &settings(true), 0);
    let leftover = rt.insert(req.spec.clone(), ContainerState::Created, T0, "0001-01-01T00:00:00Z");
    let got = block_on(acquire(&rt, &req)).unwrap();
    assert_eq!((got.action, got.id), (AcquireAction::Started, leftover));
    assert_eq!(rt.calls().iter().filter(|c| *c == "start").count(), 1);
}

#[test]
fn the_reaper_needs_no_status_filter_from_the_engine() {
    let rt = OddListing { inner: FakeRuntime::new(T0), lagging: false, rejects_status_filters: true };
    let st = settings(true);
    let old = Timestamp::from_secs(T0.as_secs() - 5000);
    let spec = |task: &str| request(task, "default", &st, 0).spec;
    let stale =
        rt.inner.insert(spec("a"), ContainerState::Exited, old, &Timestamp::from_secs(T0.as_secs() - 900).to_rfc3339());
    let dead = rt.inner.insert(spec("b"), ContainerState::Dead, old, "0001-01-01T00:00:00Z");
    let live = rt.inner.insert(spec("c"), ContainerState::Running, old, "0001-01-01T00:00:00Z");
    let scope =
        ReapScope { home: None, profile_label: Some("default".into()), max_age_secs: 600, host: Some("h".into()) };
    let report = block_on(reap(&rt, T0, &scope, &FakeProcessProbe::default(), false)).unwrap();
    let mut removed: Vec<&str> = report.removed.iter().map(|o| o.id.as_str()).collect();
    removed.sort();
    let mut want = vec![stale.as_str(), dead.as_str()];
    want.sort();
    assert_eq!(removed, want);
    assert_eq!(rt.inner.containers().into_iter().map(|c| c.id).collect::<Vec<_>>(), [live]);
}

#[test]
fn a_container_labelled_with_the_legacy_fingerprint_is_reused_without_recreate() {
    let rt = FakeRuntime::new(T0);
    let req = request("abc", "default", &settings(true), 0);
    // A sandbox an older berth made: the same spec, its fingerprint label in the v1 encoding.
    let mut old = req.spec.clone();
    old.labels.insert(crate::label::LABEL_FINGERPRINT.to_owned(), req.spec.legacy_fingerprint());
    let id = rt.insert(old, ContainerState::Running, T0, "");
    let got = block_on(acquire(&rt, &req)).unwrap();
    assert_eq!((got.action, &got.id), (AcquireAction::Attached, &id));
    assert!(!rt.calls().iter().any(|c| c == "create" || c == "remove"), "{:?}", rt.calls());
    // A label that is neither encoding of this spec is drift.
    let rt = FakeRuntime::new(T0);
    let mut drifted = req.spec.clone();
    drifted.labels.insert(crate::label::LABEL_FINGERPRINT.to_owned(), "0123456789abcdef0123456789abcdef".to_owned());
    rt.insert(drifted, ContainerState::Running, T0, "");
    assert_eq!(block_on(acquire(&rt, &req)).unwrap().action, AcquireAction::Recreated);
}

/// Interaction tests on `MockContainerRuntime`: every call not expected fails the test, so each asserts what
/// the service does *not* do as much as what it does.
mod interactions {
    use mockall::Sequence;
    use mockall::predicate::eq;

    use super::*;
    use crate::label::{LABEL_MODE, LABEL_OWNER};
    use crate::ports::MockContainerRuntime;

    fn summary(id: &str, spec: &CreateSpec, state: ContainerState, created: Timestamp) -> ContainerSummary {
        ContainerSummary {
            id: id.to_owned(),
            name: spec.name.clone(),
            labels: spec.labels.clone(),
            state,
            created,
            network_mode: Some("bridge".to_owned()),
        }
    }

    fn details(summary: ContainerSummary, finished_at: Timestamp) -> ContainerDetails {
        ContainerDetails {
            summary,
            finished_at_raw: finished_at.to_rfc3339(),
            started_at_raw: String::new(),
            exit_code: Some(0),
            oom_killed: false,
            env: Vec::new(),
        }
    }

    fn expect_inspect(rt: &mut MockContainerRuntime, c: &ContainerSummary) {
        let d = details(c.clone(), c.created);
        rt.expect_inspect().with(eq(c.id.clone())).returning(move |_| Ok(d.clone()));
    }

    fn expect_no_container_named(rt: &mut MockContainerRuntime, req: &AcquireRequest) {
        rt.expect_inspect()
            .with(eq(req.spec.name.clone()))
            .returning(|name| Err(RuntimeError::NotFound(name.to_owned())));
    }

    #[test]
    fn reuse_of_a_running_sandbox_is_one_inspect_by_its_name_and_never_lists_creates_or_starts() {
        let req = request("abc", "default", &settings(true), 0);
        let running = summary("cid-running", &req.spec, ContainerState::Running, T0);
        let mut rt = MockContainerRuntime::new();
        let d = details(running.clone(), T0);
        rt.expect_inspect().with(eq(req.spec.name.clone())).times(1).returning(move |_| Ok(d.clone()));
        rt.expect_list().never();
        rt.expect_create().never();
        rt.expect_start().never();
        rt.expect_remove().never();
        let got = block_on(acquire(&rt, &req)).unwrap();
        assert_eq!((got.action, got.id.as_str()), (AcquireAction::Attached, "cid-running"));
    }

    #[test]
    fn a_running_sandbox_under_another_name_is_found_by_listing_and_never_created_or_started() {
        let req = request("abc", "default", &settings(true), 0);
        // hermes-agent's container of the same identity: its own name, upstream's labels.
        let mut running = summary("cid-hermes", &req.spec, ContainerState::Running, T0);
        running.name = "hermes-abc".to_owned();
        let mut rt = MockContainerRuntime::new();
        expect_no_container_named(&mut rt, &req);
        let listed = vec![running.clone()];
        rt.expect_list().times(1).returning(move |_| Ok(listed.clone()));
        expect_inspect(&mut rt, &running);
        rt.expect_create().never();
        rt.expect_start().never();
        rt.expect_remove().never();
        let got = block_on(acquire(&rt, &req)).unwrap();
        assert_eq!((got.action, got.id.as_str()), (AcquireAction::Attached, "cid-hermes"));
    }

    #[test]
    fn an_exec_that_finds_the_container_gone_reacquires_once_and_retries_once() {
        let req = request("abc", "default", &settings(true), 0);
        let old = summary("cid-old", &req.spec, ContainerState::Running, T0);
        let new = summary("cid-new", &req.spec, ContainerState::Running, T0);
        let mut rt = MockContainerRuntime::new();
        let mut seq = Sequence::new();
        expect_no_container_named(&mut rt, &req);
        let listed = vec![old.clone()];
        rt.expect_list().times(1).in_sequence(&mut seq).returning(move |_| Ok(listed.clone()));
        expect_inspect(&mut rt, &old);
        rt.expect_exec()
            .withf(|id, _, _| id == "cid-old")
            .times(1)
            .in_sequence(&mut seq)
            .returning(|id, _, _| Err(RuntimeError::NotFound(id.to_owned())));
        // The one re-acquire: list (now empty), create, start.
        rt.expect_list().times(1).in_sequence(&mut seq).returning(|_| Ok(Vec::new()));
        rt.expect_create().times(1).in_sequence(&mut seq).returning(|_| Ok("cid-new".to_owned()));
        rt.expect_start().with(eq("cid-new")).times(1).in_sequence(&mut seq).returning(|_| Ok(()));
        expect_inspect(&mut rt, &new);
        rt.expect_exec()
            .withf(|id, _, _| id == "cid-new")
            .times(1)
            .in_sequence(&mut seq)
            .returning(|_, _, _| Ok(ExecOutcome::Exited(0)));
        rt.expect_remove().never();
        let mut out = CapturedOutput::default();
        let exec = ExecSpec { argv: vec!["true".into()], ..ExecSpec::default() };
        let (acquired, outcome) = block_on(run(&rt, &req, &exec, &mut out)).unwrap();
        assert_eq!((acquired.id.as_str(), outcome), ("cid-new", ExecOutcome::Exited(0)));
        assert!(acquired.notes[0].contains("vanished before exec"), "{:?}", acquired.notes);
    }

    #[test]
    fn the_reaper_forces_removal_only_of_an_ephemeral_sandbox_whose_owner_is_gone() {
        let old = Timestamp::from_secs(T0.as_secs() - 10_000);
        let persist = request("p", "default", &settings(true), 0);
        let stopped = summary("cid-stopped", &persist.spec, ContainerState::Exited, old);
        let mut eph = request("e", "default", &settings(false), 7);
        eph.spec.labels.insert(LABEL_OWNER.to_owned(), "h:7:7".to_owned());
        assert_eq!(eph.spec.labels.get(LABEL_MODE).map(String::as_str), Some("ephemeral"));
        let orphaned = summary("cid-eph", &eph.spec, ContainerState::Running, old);
        let mut rt = MockContainerRuntime::new();
        let listed = vec![stopped.clone(), orphaned.clone()];
        rt.expect_list().times(1).returning(move |_| Ok(listed.clone()));
        expect_inspect(&mut rt, &stopped);
        expect_inspect(&mut rt, &orphaned);
        rt.expect_remove().with(eq("cid-stopped"), eq(false)).times(1).returning(|_, _| Ok(()));
        rt.expect_remove().with(eq("cid-eph"), eq(true)).times(1).returning(|_, _| Ok(()));
        rt.expect_stop().never();
        let scope = ReapScope {
            home: None,
            profile_label: None,
            max_age_secs: reaper_max_age_secs(Some(300)),
            host: Some("h".into()),
        };
        let report = block_on(reap(&rt, T0, &scope, &FakeProcessProbe::default(), false)).unwrap();
        let mut removed: Vec<&str> = report.removed.iter().map(|o| o.id.as_str()).collect();
        removed.sort_unstable();
        assert_eq!(removed, ["cid-eph", "cid-stopped"]);
    }

    #[test]
    fn a_failed_start_is_followed_by_exactly_one_remove() {
        let req = request("abc", "default", &settings(true), 0);
        let mut rt = MockContainerRuntime::new();
        expect_no_container_named(&mut rt, &req);
        rt.expect_list().times(1).returning(|_| Ok(Vec::new()));
        rt.expect_create().times(1).returning(|_| Ok("cid-new".to_owned()));
        rt.expect_start()
            .with(eq("cid-new"))
            .times(1)
            .returning(|_| Err(RuntimeError::Api { status: 500, message: "no such device".into() }));
        rt.expect_remove().with(eq("cid-new"), mockall::predicate::always()).times(1).returning(|_, _| Ok(()));
        let err = block_on(acquire(&rt, &req)).unwrap_err();
        assert!(matches!(err, SandboxError::StartFailed { .. }), "{err:?}");
    }
}

fn homed(mut req: AcquireRequest, home: &str, st: &SandboxSettings) -> AcquireRequest {
    let identity = req.identity.clone().in_home(home);
    let host = HostFacts::default();
    req.spec = build_create_spec(&identity, SandboxMode::Persist, identity.persistent_name(), st, &host, &NoExtraArgs)
        .unwrap()
        .spec;
    req.identity = identity;
    req
}

#[test]
fn drift_never_recreates_a_sandbox_with_a_command_running() {
    let rt = FakeRuntime::new(T0);
    let mut st = settings(true);
    let a = block_on(acquire(&rt, &request("abc", "default", &st, 0))).unwrap();
    rt.set_busy(&a.id, true);
    st.image = "img:2".into();
    let err = block_on(acquire(&rt, &request("abc", "default", &st, 0))).unwrap_err();
    assert!(matches!(&err, SandboxError::Busy { changed, .. } if changed.contains("image")), "{err}");
    assert_eq!(rt.containers().len(), 1);
    assert!(!rt.calls().iter().any(|c| c.starts_with("stop") || c.starts_with("remove")), "{:?}", rt.calls());
    // Once the command is over, the drift is applied.
    rt.set_busy(&a.id, false);
    let b = block_on(acquire(&rt, &request("abc", "default", &st, 0))).unwrap();
    assert_eq!(b.action, AcquireAction::Recreated);
}

#[test]
fn two_homes_never_share_reuse_or_recreate_a_sandbox() {
    let rt = FakeRuntime::new(T0);
    let st = settings(true);
    let a = block_on(acquire(&rt, &homed(request("abc", "default", &st, 0), "aaaa", &st))).unwrap();
    let mut other = settings(true);
    other.image = "img:2".into();
    let b = block_on(acquire(&rt, &homed(request("abc", "default", &other, 0), "bbbb", &other))).unwrap();
    assert_eq!(b.action, AcquireAction::Created, "the second home makes its own sandbox");
    assert_ne!((&a.id, &a.name), (&b.id, &b.name));
    assert_eq!(a.labels["berth.home"], "aaaa");
    assert_eq!(rt.containers().len(), 2);
    let again = block_on(acquire(&rt, &homed(request("abc", "default", &st, 0), "aaaa", &st))).unwrap();
    assert_eq!((again.action, again.id), (AcquireAction::Attached, a.id));
}

#[test]
fn a_sandbox_from_before_homes_is_reused_by_a_home() {
    let rt = FakeRuntime::new(T0);
    let st = settings(true);
    // An older berth: no home in the identity, no `berth.home` label.
    let old = block_on(acquire(&rt, &request("abc", "default", &st, 0))).unwrap();
    assert!(!old.labels.contains_key("berth.home"));
    let now = block_on(acquire(&rt, &homed(request("abc", "default", &st, 0), "aaaa", &st))).unwrap();
    assert_eq!((now.action, now.id), (AcquireAction::Attached, old.id));
}
