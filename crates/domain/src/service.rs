//! The sandbox service: acquire, exec, release and reap, wiring the pure policies to a [`ContainerRuntime`].
//!
//! It is async glue over the port with no runtime of its own: timeouts and retries of single calls live in the
//! adapter, and tests drive it over [`crate::test_util::FakeRuntime`] with a trivial executor.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use thiserror::Error;

use crate::container::{ContainerState, ContainerSummary};
use crate::label::{LABEL_AGENT, LABEL_PROFILE};
use crate::policy::cleanup::{CleanupPlan, ReleaseMode, plan_cleanup};
use crate::policy::reuse::{ReuseDecision, ReusePolicy, select_reusable};
use crate::ports::{ContainerRuntime, ExecOutcome, ExecSpec, ListQuery, OutputSink, RuntimeError};
use crate::sandbox::{CreateSpec, FINGERPRINT_VERSION, SandboxIdentity};

/// Errors of sandbox operations.
#[derive(Debug, Error)]
pub enum SandboxError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The sandbox kept changing under us (removed or replaced by others) on every attempt.
    #[error("sandbox {name} did not settle after {attempts} attempts")]
    Unsettled { name: String, attempts: u32 },
    /// Its spec drifted, but a command runs in it (a live exec, maybe another process's): it is left alone.
    #[error(
        "sandbox {name} has a command running, so it is not recreated for config drift ({changed}); retry when it finishes, or remove it with `berth sandbox rm`"
    )]
    Busy { name: String, changed: String },
    /// A freshly created container would not start; it was removed again.
    #[error("container {name} was created but would not start")]
    StartFailed {
        name: String,
        #[source]
        source: RuntimeError,
    },
}

/// What acquire did to get a running container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AcquireAction {
    Created,
    Attached,
    Started,
    Recreated,
    /// Created from its snapshot (a suspended sandbox, or a fork's start).
    Resumed,
}

impl AcquireAction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Attached => "attached",
            Self::Started => "started",
            Self::Recreated => "recreated",
            Self::Resumed => "resumed",
        }
    }
}

/// A running sandbox handle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Acquired {
    pub id: String,
    pub name: String,
    pub action: AcquireAction,
    pub labels: BTreeMap<String, String>,
    /// Warnings met on the way (a container that would not start, …).
    pub notes: Vec<String>,
}

/// What acquire needs: the identity, the spec it would create, and the reuse policy.
#[derive(Clone, Debug)]
pub struct AcquireRequest {
    pub identity: SandboxIdentity,
    pub spec: CreateSpec,
    pub persist_across_processes: bool,
    pub recreate_on_config_change: bool,
}

/// How long a loser of the create race follows the winner's container without seeing progress (appearing, then
/// leaving `created`) before acting itself. Progress restarts it, so a slow engine is followed however long it takes
/// while a creator killed between create and start costs at most this much.
pub const SETTLE_STALL: std::time::Duration = std::time::Duration::from_secs(15);

/// A livelock guard, not a retry budget: every round either acts or follows the winner's progress, so only a sandbox
/// that others keep removing and recreating under us exhausts it.
const MAX_ROUNDS: u32 = 64;

/// Acquires the sandbox of `req.identity`: attach, start, recreate or create, race-free.
///
/// A loser of the name race (create says the name is taken) never fails for it: it follows the winner's container
/// until it runs ([`ContainerRuntime::await_settled`]) and attaches. A `created` container with our own
/// deterministic name is likewise followed once before being started here, since its creator is most likely
/// starting it right now and two starts racing fail on some engines.
///
/// # Errors
/// A [`SandboxError`] when the runtime fails or the sandbox does not settle.
pub async fn acquire(rt: &dyn ContainerRuntime, req: &AcquireRequest) -> Result<Acquired, SandboxError> {
    match attach_running(rt, req).await? {
        Some(found) => Ok(found),
        None => acquire_listed(rt, req).await,
    }
}

fn reuse_policy(req: &AcquireRequest) -> ReusePolicy {
    let fingerprint = req.spec.labels.get(crate::label::LABEL_FINGERPRINT).cloned().unwrap_or_default();
    ReusePolicy {
        persist_across_processes: req.persist_across_processes,
        recreate_on_config_change: req.recreate_on_config_change,
        fingerprint,
        legacy_fingerprint: None,
        air_gapped: req.spec.network_mode.as_deref() == Some("none"),
        egress_network: req
            .spec
            .labels
            .get(crate::label::LABEL_EGRESS)
            .filter(|v| v.starts_with(crate::egress::BERTH_EGRESS_PREFIX))
            .and(req.spec.network_mode.clone()),
        fields: req.spec.labels.get(crate::label::LABEL_FIELDS).cloned().unwrap_or_default(),
    }
}

/// The fast path of [`acquire`]: one inspect of the identity's deterministic container name; `Some` when that
/// container runs and the reuse policy attaches to it as it is (labels, lockdown, fingerprint). Anything else
/// (missing, stopped, drifted, an engine error) is `None`, and the full path lists and decides; only an engine that
/// cannot be reached at all is an error (the full path would only fail the same way, later).
///
/// # Errors
/// [`RuntimeError::Unavailable`].
pub async fn attach_running(rt: &dyn ContainerRuntime, req: &AcquireRequest) -> Result<Option<Acquired>, RuntimeError> {
    if !req.persist_across_processes {
        return Ok(None);
    }
    attach_inspected(req, rt.inspect(&req.spec.name).await)
}

/// The decision of [`attach_running`] on an inspect of `req.spec.name` already made (a caller that overlapped it
/// with building `req`).
///
/// # Errors
/// [`RuntimeError::Unavailable`].
pub fn attach_inspected(
    req: &AcquireRequest,
    inspected: Result<crate::container::ContainerDetails, RuntimeError>,
) -> Result<Option<Acquired>, RuntimeError> {
    let d = match inspected {
        Ok(d) => d,
        Err(e @ RuntimeError::Unavailable { .. }) => return Err(e),
        Err(_) => return Ok(None),
    };
    if !req.persist_across_processes {
        return Ok(None);
    }
    let ReuseDecision::Attach { id } =
        select_reusable(&req.identity, std::slice::from_ref(&d.summary), &reuse_policy(req))
    else {
        return Ok(None);
    };
    Ok(Some(Acquired {
        id,
        name: d.summary.name.clone(),
        action: AcquireAction::Attached,
        labels: d.summary.labels.clone(),
        notes: Vec::new(),
    }))
}

/// [`acquire`] by listing the identity's containers (upstream's labels) and deciding over all of them.
async fn acquire_listed(rt: &dyn ContainerRuntime, req: &AcquireRequest) -> Result<Acquired, SandboxError> {
    let mut policy = reuse_policy(req);
    let mut notes = Vec::new();
    let mut recreated = false;
    // What the last wait saw, used instead of a fresh listing (which may lag behind inspect on Docker).
    let mut seen: Option<Vec<ContainerSummary>> = None;
    // `created` containers already followed once: the next time they are started here.
    let mut followed = BTreeSet::new();
    for _ in 0..MAX_ROUNDS {
        let listed = match seen.take() {
            Some(listed) => listed,
            None if req.persist_across_processes => {
                rt.list(&ListQuery { labels: req.identity.upstream_labels(), states: Vec::new() }).await?
            }
            None => Vec::new(),
        };
        // The legacy encoding is computed only when a container still carries a pre-v2 label (acquire's hot path
        // meets v2 labels only).
        if policy.legacy_fingerprint.is_none()
            && listed.iter().any(|c| c.fingerprint().is_some_and(|f| !f.starts_with(FINGERPRINT_VERSION)))
        {
            policy.legacy_fingerprint = Some(req.spec.legacy_fingerprint());
        }
        let done = |id: String, action| Acquired {
            id,
            name: String::new(),
            action,
            labels: BTreeMap::new(),
            notes: Vec::new(),
        };
        let ours = |id: &str| name_of(&listed, id) == Some(req.spec.name.as_str());
        let got = match select_reusable(&req.identity, &listed, &policy) {
            ReuseDecision::Attach { id } => done(id, AcquireAction::Attached),
            ReuseDecision::Start { id, prior: ContainerState::Created } if ours(&id) && !followed.contains(&id) => {
                followed.insert(id.clone());
                seen = follow(rt, &id, &mut followed).await?;
                continue;
            }
            ReuseDecision::Start { id, prior } => match rt.start(&id).await {
                Ok(()) => done(id, AcquireAction::Started),
                Err(RuntimeError::NotFound(_)) => continue,
                Err(e) => {
                    notes.push(format!(
                        "container {} ({prior}) would not start ({e}); creating a fresh one",
                        short(&id)
                    ));
                    // Our own deterministic name must be freed; a hermes-made container is left for the reaper.
                    if ours(&id) {
                        match rt.remove(&id, false).await {
                            Ok(()) | Err(RuntimeError::NotFound(_)) => {}
                            // It is running now (a sibling started it): the next round attaches.
                            Err(RuntimeError::Api { status: 409, .. }) => continue,
                            Err(e) => return Err(e.into()),
                        }
                    }
                    match create_started(rt, &req.spec).await? {
                        Some(id) => done(id, AcquireAction::Created),
                        None => {
                            seen = follow(rt, &req.spec.name, &mut followed).await?;
                            continue;
                        }
                    }
                }
            },
            ReuseDecision::Replace { id, reason } => {
                notes.push(reason);
                remove_now(rt, &id).await?;
                recreated = true;
                continue;
            }
            ReuseDecision::Recreate { id, old, new, changed } => {
                notes.push(drift_note(rt, &listed, &id, (&old, &new), &changed).await?);
                remove_now(rt, &id).await?;
                recreated = true;
                continue;
            }
            ReuseDecision::Create { .. } => match create_started(rt, &req.spec).await? {
                Some(id) => done(id, if recreated { AcquireAction::Recreated } else { AcquireAction::Created }),
                // Name conflict: another process is creating it; follow its container until it runs.
                None => {
                    seen = follow(rt, &req.spec.name, &mut followed).await?;
                    continue;
                }
            },
        };
        let details = match rt.inspect(&got.id).await {
            Ok(d) => d,
            Err(RuntimeError::NotFound(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        return Ok(Acquired {
            name: details.summary.name.clone(),
            labels: details.summary.labels.clone(),
            notes,
            ..got
        });
    }
    Err(SandboxError::Unsettled { name: req.spec.name.clone(), attempts: MAX_ROUNDS })
}

/// Follows another process's container until it settles; what it saw becomes the next round's listing (`None`:
/// gone, list again). A container still `created` after the wait is marked followed, so the next round starts it.
async fn follow(
    rt: &dyn ContainerRuntime,
    name_or_id: &str,
    followed: &mut BTreeSet<String>,
) -> Result<Option<Vec<ContainerSummary>>, RuntimeError> {
    let seen = rt.await_settled(name_or_id, SETTLE_STALL).await?;
    if let Some(c) = &seen
        && c.state == ContainerState::Created
    {
        followed.insert(c.id.clone());
    }
    Ok(seen.map(|c| vec![c]))
}

/// The warning for a sandbox about to be recreated for drift, or [`SandboxError::Busy`] when a command runs in it
/// (drift never kills a command).
async fn drift_note(
    rt: &dyn ContainerRuntime,
    listed: &[ContainerSummary],
    id: &str,
    (old, new): (&str, &str),
    changed: &[String],
) -> Result<String, SandboxError> {
    if let Some(c) = listed.iter().find(|c| c.id == id && c.state.is_live())
        && !idle_inside(rt, id).await?
    {
        let changed = if changed.is_empty() { "fingerprint".to_owned() } else { changed.join(", ") };
        return Err(SandboxError::Busy { name: c.name.clone(), changed });
    }
    Ok(if changed.is_empty() {
        // A container labelled before berth wrote per-field digests: only the fingerprint tells.
        format!(
            "config changed (fingerprint {} -> {}; the container predates per-setting labels); recreating {}",
            &old[..8.min(old.len())],
            &new[..8.min(new.len())],
            short(id)
        )
    } else {
        format!("config changed: {}; recreating {}", changed.join(", "), short(id))
    })
}

/// Whether a live container runs nothing but its keep-alive. A command running inside (another process's exec) or
/// a process list the runtime cannot give both count as busy: drift never kills what it cannot see. A container that
/// went away meanwhile counts as idle (the next round finds it gone).
async fn idle_inside(rt: &dyn ContainerRuntime, id: &str) -> Result<bool, RuntimeError> {
    match rt.processes(id).await {
        Ok(list) => Ok(list.iter().all(|p| crate::policy::idle::is_keep_alive(&p.command))),
        Err(RuntimeError::NotFound(_)) => Ok(true),
        Err(e @ RuntimeError::Unavailable { .. }) => Err(e),
        Err(_) => Ok(false),
    }
}

fn name_of<'a>(listed: &'a [ContainerSummary], id: &str) -> Option<&'a str> {
    listed.iter().find(|c| c.id == id).map(|c| c.name.as_str())
}

fn short(id: &str) -> &str {
    &id[..12.min(id.len())]
}

/// Creates and starts a container; `Ok(None)` on a name conflict. A container that will not start is removed,
/// so a failed start leaves no `created` leftover.
async fn create_started(rt: &dyn ContainerRuntime, spec: &CreateSpec) -> Result<Option<String>, SandboxError> {
    let id = match rt.create(spec).await {
        Ok(id) => id,
        Err(RuntimeError::NameConflict(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if let Err(source) = rt.start(&id).await {
        let _ = rt.remove(&id, true).await;
        return Err(SandboxError::StartFailed { name: spec.name.clone(), source });
    }
    Ok(Some(id))
}

/// Stops (with the standard grace) and removes a container; a missing one is fine.
async fn remove_now(rt: &dyn ContainerRuntime, id: &str) -> Result<(), RuntimeError> {
    match rt.stop(id, crate::policy::cleanup::STOP_GRACE).await {
        Ok(()) | Err(RuntimeError::NotFound(_)) => {}
        Err(e) => return Err(e),
    }
    match rt.remove(id, true).await {
        Ok(()) | Err(RuntimeError::NotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether an exec error means the container went away (removed or stopped out of band).
fn is_gone(e: &RuntimeError) -> bool {
    match e {
        RuntimeError::NotFound(_) => true,
        RuntimeError::Api { status: 409, message } => message.contains("not running") || message.contains("paused"),
        _ => false,
    }
}

/// Acquires and runs one command, recovering once when the container vanished between acquire and exec.
///
/// # Errors
/// A [`SandboxError`] when acquire fails, or the exec fails for another reason than a vanished container.
pub async fn run(
    rt: &dyn ContainerRuntime,
    req: &AcquireRequest,
    exec: &ExecSpec,
    sink: &mut dyn OutputSink,
) -> Result<(Acquired, ExecOutcome), SandboxError> {
    run_from(rt, req, None, exec, sink).await
}

/// [`run`] starting from a sandbox already found running ([`attach_running`]), or acquiring one when `found` is
/// `None`.
///
/// # Errors
/// As [`run`].
pub async fn run_from(
    rt: &dyn ContainerRuntime,
    req: &AcquireRequest,
    found: Option<Acquired>,
    exec: &ExecSpec,
    sink: &mut dyn OutputSink,
) -> Result<(Acquired, ExecOutcome), SandboxError> {
    let acquired = match found {
        Some(a) => a,
        None => acquire(rt, req).await?,
    };
    match rt.exec(&acquired.id, exec, sink).await {
        Ok(outcome) => Ok((acquired, outcome)),
        Err(e) if is_gone(&e) && req.persist_across_processes => {
            let mut again = acquire(rt, req).await?;
            again.notes.insert(0, format!("container {} vanished before exec ({e}); recovered", short(&acquired.id)));
            let outcome = rt.exec(&again.id, exec, sink).await?;
            Ok((again, outcome))
        }
        Err(e) => Err(e.into()),
    }
}

/// Releases a sandbox per the cleanup matrix; returns what was done.
///
/// # Errors
/// A [`RuntimeError`] other than "not found" from stop or remove.
pub async fn release(
    rt: &dyn ContainerRuntime,
    id: Option<&str>,
    mode: ReleaseMode,
) -> Result<CleanupPlan, RuntimeError> {
    let plan = plan_cleanup(id, mode);
    if let CleanupPlan::StopRemove { id, .. } = &plan {
        remove_now(rt, id).await?;
    }
    Ok(plan)
}

/// Finds the sandboxes (managed containers) of one profile label, or of all, that the home `home` may manage
/// ([`ContainerSummary::in_home`]; `None`: every home's).
///
/// # Errors
/// A [`RuntimeError`] from the list call.
pub async fn list_managed(
    rt: &dyn ContainerRuntime,
    profile_label: Option<&str>,
    home: Option<&str>,
) -> Result<Vec<ContainerSummary>, RuntimeError> {
    let mut labels = BTreeMap::from([(LABEL_AGENT.to_owned(), "1".to_owned())]);
    if let Some(p) = profile_label {
        labels.insert(LABEL_PROFILE.to_owned(), p.to_owned());
    }
    let mut listed = rt.list(&ListQuery { labels, states: Vec::new() }).await?;
    if let Some(home) = home {
        listed.retain(|c| c.in_home(Some(home)));
    }
    Ok(listed)
}

/// Polls futures concurrently and returns their outputs in order; needs no runtime (re-exported for `app`).
pub use futures_util::future::join_all;

mod reap;
pub use reap::{ReapReport, ReaperGate, reap};

#[cfg(test)]
mod tests;
