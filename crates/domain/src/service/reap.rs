//! The orphan sweep of the sandbox service: which managed containers in scope are stale, re-checked and removed one
//! by one, and the once-per-process gate in front of it.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::join_all;
use crate::container::{ContainerDetails, ContainerState, ContainerSummary};
use crate::label::{LABEL_AGENT, LABEL_MODE, LABEL_OWNER, LABEL_PROFILE};
use crate::policy::lease::{LEASE_PATH, Lease};
use crate::policy::reaper::{
    Orphan, ReapPlan, ReapReason, ReapScope, SpareReason, Spared, find_orphans, judge_orphan, parse_owner,
};
use crate::ports::{ContainerRuntime, ListQuery, ProcessProbe, RuntimeError};
use crate::time::Timestamp;

/// The outcome of a sweep.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReapReport {
    pub removed: Vec<Orphan>,
    pub skipped: Vec<Spared>,
    /// Containers chosen for removal whose removal failed; the sweep went on.
    pub failed: Vec<(String, String)>,
    pub dry_run: bool,
}

/// Sweeps orphans: lists managed non-running containers in scope (and running ephemeral ones, whose owner may have
/// died), inspects them, and removes those old enough.
///
/// Every candidate is re-inspected right before removal and a stopped one is removed without force, so a container a
/// sibling just restarted is never killed. One failure does not stop the sweep.
///
/// # Errors
/// A [`RuntimeError`] only when listing fails.
pub async fn reap(
    rt: &dyn ContainerRuntime,
    now: Timestamp,
    scope: &ReapScope,
    probe: &dyn ProcessProbe,
    dry_run: bool,
) -> Result<ReapReport, RuntimeError> {
    let mut labels = BTreeMap::from([(LABEL_AGENT.to_owned(), "1".to_owned())]);
    if let Some(p) = &scope.profile_label {
        labels.insert(LABEL_PROFILE.to_owned(), p.clone());
    }
    // One listing by label; states are decided here, not by the engine's status filter (Podman 4.3 answers 500 to
    // `dead` and `restarting`).
    let all = rt.list(&ListQuery { labels, states: Vec::new() }).await?;
    let stopped = [ContainerState::Exited, ContainerState::Created, ContainerState::Dead];
    let mut listed = Vec::new();
    let mut gone_owners = BTreeSet::new();
    let mut lease_checks = Vec::new();
    for c in all {
        if scope.home.as_deref().is_some_and(|h| !c.in_home(Some(h))) {
            continue;
        }
        if stopped.contains(&c.state) {
            listed.push(c);
            continue;
        }
        // A live ephemeral sandbox is an orphan when its owning process on this host has exited.
        let Some(host) = &scope.host else { continue };
        if !c.state.is_live() || c.label(LABEL_MODE) != Some("ephemeral") {
            continue;
        }
        let owner = c.label(LABEL_OWNER).unwrap_or_default().to_owned();
        let Some((h, pid, start)) = parse_owner(&owner) else { continue };
        if h == host {
            if !probe.is_alive(pid, Some(start)) {
                gone_owners.insert(owner);
                listed.push(c);
            }
        } else {
            lease_checks.push((c, owner));
        }
    }
    // An owner on another host cannot be probed: its lease, renewed inside the sandbox, tells whether it still
    // lives. No lease (an older berth, or one not yet written) or an unreadable one keeps the sandbox.
    let leases = join_all(lease_checks.iter().map(|(c, _)| rt.read_file(&c.id, LEASE_PATH))).await;
    for ((c, owner), read) in lease_checks.into_iter().zip(leases) {
        let lease = read.ok().flatten().and_then(|b| Lease::parse(&String::from_utf8_lossy(&b)));
        if lease.is_some_and(|l| l.owner == owner && l.lapsed(now).is_some()) {
            gone_owners.insert(owner);
            listed.push(c);
        }
    }
    // Only an exited container created longer ago than the threshold needs its `FinishedAt` (one inspect each); for
    // the rest the listing decides: `created`/`dead` and orphaned live ones age by creation time, and a container
    // created more recently than the threshold cannot have exited longer ago than it.
    let needs_inspect = |c: &ContainerSummary| {
        c.state == ContainerState::Exited && now.secs_since(c.created) >= scope.max_age_secs as f64
    };
    let (to_inspect, settled): (Vec<ContainerSummary>, Vec<ContainerSummary>) =
        listed.into_iter().partition(|c| needs_inspect(c));
    let inspected = join_all(to_inspect.iter().map(|c| rt.inspect(&c.id))).await;
    let mut details: Vec<ContainerDetails> = inspected.into_iter().filter_map(Result::ok).collect();
    details.extend(settled.into_iter().map(|summary| ContainerDetails {
        // Creation time stands in for the finish time: it is earlier, so the age it gives is an upper bound.
        finished_at_raw: if summary.state == ContainerState::Exited {
            summary.created.to_rfc3339()
        } else {
            String::new()
        },
        summary,
        started_at_raw: String::new(),
        exit_code: None,
        oom_killed: false,
        env: Vec::new(),
    }));
    let ReapPlan { remove, spare } = find_orphans(now, &details, scope, &gone_owners);
    let mut report = ReapReport { skipped: spare, dry_run, ..ReapReport::default() };
    if dry_run {
        report.removed = remove;
        return Ok(report);
    }
    let results = join_all(remove.iter().map(|o| remove_orphan(rt, now, scope, &gone_owners, o))).await;
    for (orphan, res) in remove.into_iter().zip(results) {
        match res {
            Ok(None) => report.removed.push(orphan),
            Ok(Some(reason)) => report.skipped.push(Spared { id: orphan.id, name: orphan.name, reason }),
            Err(e) => report.failed.push((orphan.id, e.to_string())),
        }
    }
    Ok(report)
}

/// Re-checks one orphan and removes it; `Ok(Some(reason))` when the re-check spared it.
async fn remove_orphan(
    rt: &dyn ContainerRuntime,
    now: Timestamp,
    scope: &ReapScope,
    gone_owners: &BTreeSet<String>,
    o: &Orphan,
) -> Result<Option<SpareReason>, RuntimeError> {
    let fresh = match rt.inspect(&o.id).await {
        Ok(d) => d,
        Err(RuntimeError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let checked = match judge_orphan(now, &fresh, scope, gone_owners) {
        Ok(checked) => checked,
        Err(reason) => return Ok(Some(reason)),
    };
    // Only an ephemeral container whose owner died (or whose lease lapsed) is removed while running; everything else
    // without force.
    let force = matches!(checked.reason, ReapReason::OwnerGone | ReapReason::LeaseExpired);
    match rt.remove(&o.id, force).await {
        Ok(()) | Err(RuntimeError::NotFound(_)) => Ok(None),
        Err(RuntimeError::Api { status: 409, .. }) => Ok(Some(SpareReason::Live)),
        Err(e) => Err(e),
    }
}

/// The once-per-process orphan reaper gate (upstream's `_maybe_reap_docker_orphans`).
///
/// A disabled call does not close the gate, so a later enabled call still sweeps; the gate closes before the sweep,
/// so a failing sweep is not retried; sweep errors never reach the caller, so they never block creation.
#[derive(Debug, Default)]
pub struct ReaperGate(std::sync::atomic::AtomicBool);

impl ReaperGate {
    pub const fn new() -> Self {
        Self(std::sync::atomic::AtomicBool::new(false))
    }

    /// Sweeps once when `enabled` and not yet swept; returns the report of the sweep that ran, if any.
    pub async fn run_once(
        &self,
        enabled: bool,
        rt: &dyn ContainerRuntime,
        now: Timestamp,
        scope: &ReapScope,
        probe: &dyn ProcessProbe,
    ) -> Option<Result<ReapReport, RuntimeError>> {
        if !enabled || self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        Some(reap(rt, now, scope, probe, false).await)
    }

    /// Whether the gate has closed.
    pub fn has_run(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}
