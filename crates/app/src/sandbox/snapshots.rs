//! Sandboxes that sleep and wake, the core every surface shares: snapshot images (made, listed, kept, removed), the
//! suspend of one sandbox, and the transparent resume of a suspended one by whatever acquires it (`berth run`, a
//! task's worker, `sandbox ensure`). The commands are `snapshot.rs`.
//!
//! A snapshot is a local image (`berth-snapshot/<sandbox>:<name>`, never pushed) committed from the sandbox's
//! container, carrying the sandbox's own labels and the snapshot's (`berth.snapshot`, `berth.snapshot.of`, …): the
//! labels are what make it listable as the sandbox's. A sandbox is its container, or, with no container, its newest
//! snapshot: state `suspended`. Whatever removes a sandbox for good (`sandbox rm`, a release that removes it, the
//! orphan reaper removing its stale container) removes its snapshots with it; suspend is the one removal of a
//! container that keeps them, and a suspended sandbox (no container) is never reaped. Host folders are bind mounts,
//! never in a snapshot: suspend keeps them where they are, fork copies them.

use std::collections::BTreeMap;

use domain::container::ContainerSummary;
use domain::label::{
    LABEL_HOME, LABEL_MODE, LABEL_PROFILE, LABEL_SNAPSHOT, LABEL_SNAPSHOT_AT, LABEL_SNAPSHOT_BYTES, LABEL_SNAPSHOT_OF,
    LABEL_TASK,
};
use domain::policy::cleanup::ReleaseMode;
use domain::policy::idle::is_keep_alive;
use domain::policy::reuse::is_candidate;
use domain::ports::{Clock, Engine, RuntimeError, SnapshotImage};
use domain::service::{self, AcquireAction, AcquireRequest, Acquired};
use serde::Serialize;

use crate::edge::context::{Ctx, SystemClock};
use crate::edge::error::Failure;
use crate::edge::output;

/// The repository every snapshot image is under (a local name: berth never pushes it).
pub const SNAPSHOT_REPO: &str = "berth-snapshot";

/// The image repository of `container`'s snapshots: its name lower-cased, anything but letters and digits a `-`
/// (berth's names start with `berth` and end with hex digits, so the component is always valid).
pub fn repo_of(container: &str) -> String {
    let name: String =
        container.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    format!("{SNAPSHOT_REPO}/{}", name.trim_matches('-'))
}

/// A snapshot name is an image tag: a letter, digit or `_`, then up to 127 of those, `.` and `-`.
pub(crate) fn check_name(name: &str) -> Result<(), Failure> {
    let ok_first = name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let ok_rest = name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok_first && ok_rest && name.len() <= 128 {
        Ok(())
    } else {
        Err(Failure::usage(format!(
            "snapshot name {name:?} is not valid: up to 128 letters, digits, `_`, `.` and `-`, starting with a letter, \
             digit or `_`"
        )))
    }
}

/// A snapshot as `sandbox snapshots` lists it.
#[derive(Clone, Debug, Serialize)]
pub struct SnapshotRow {
    /// The image id.
    pub id: String,
    /// The snapshot's name (its tag).
    pub name: String,
    /// `berth-snapshot/<sandbox>:<name>`.
    pub image: String,
    /// The sandbox's container name.
    pub sandbox: String,
    pub task: Option<String>,
    pub profile: Option<String>,
    /// When it was taken, RFC 3339.
    pub created: String,
    pub age_secs: i64,
    /// The whole image, its base included.
    pub size_bytes: i64,
    /// What it adds to its base: the sandbox's writable layer when it was taken.
    pub layer_bytes: Option<i64>,
}

/// What `sandbox snapshot|suspend|fork` did.
#[derive(Clone, Debug, Serialize)]
pub struct SnapshotDone {
    /// `snapshot`, `suspended` or `forked`.
    pub action: &'static str,
    pub sandbox: String,
    pub snapshot: SnapshotRow,
    /// Older snapshots of the sandbox removed by `terminal.docker_snapshot_keep`.
    pub removed: Vec<String>,
    /// For a fork: the new sandbox's container, once started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
}

impl SnapshotRow {
    pub fn of(s: &SnapshotImage, now: domain::time::Timestamp) -> Self {
        Self {
            id: s.id.clone(),
            name: s.label(LABEL_SNAPSHOT).unwrap_or_default().to_owned(),
            image: s.tags.first().cloned().unwrap_or_else(|| s.id.clone()),
            sandbox: s.label(LABEL_SNAPSHOT_OF).unwrap_or_default().to_owned(),
            task: s.label(LABEL_TASK).map(str::to_owned),
            profile: s.label(LABEL_PROFILE).map(str::to_owned),
            created: taken_at(s).to_rfc3339(),
            age_secs: now.secs_since(taken_at(s)).floor() as i64,
            size_bytes: s.size_bytes,
            layer_bytes: s.label(LABEL_SNAPSHOT_BYTES).and_then(|b| b.parse().ok()),
        }
    }
}

/// When a snapshot was taken: its label (milliseconds), else the engine's creation time.
pub(crate) fn taken_at(s: &SnapshotImage) -> domain::time::Timestamp {
    s.label(LABEL_SNAPSHOT_AT).and_then(|t| t.parse().ok()).map_or(s.created, domain::time::Timestamp::from_millis)
}

/// Newest first.
fn newest_first(mut list: Vec<SnapshotImage>) -> Vec<SnapshotImage> {
    list.sort_by_key(|s| std::cmp::Reverse((taken_at(s), s.id.clone())));
    list
}

/// The snapshots of the sandbox whose container is (or was) named `container`, newest first.
///
/// # Errors
/// An engine failure.
pub async fn of_sandbox(rt: &dyn Engine, container: &str) -> Result<Vec<SnapshotImage>, RuntimeError> {
    let labels = BTreeMap::from([
        (LABEL_SNAPSHOT.to_owned(), String::new()),
        (LABEL_SNAPSHOT_OF.to_owned(), container.to_owned()),
    ]);
    Ok(newest_first(rt.snapshots(&labels).await?))
}

/// Every snapshot the home `home` may manage (its own, and unlabelled ones as `ContainerSummary::in_home` counts
/// them; `None`: every home's), of one profile label or of all, newest first.
///
/// # Errors
/// An engine failure.
pub async fn in_home(
    rt: &dyn Engine,
    home: Option<&str>,
    profile_label: Option<&str>,
) -> Result<Vec<SnapshotImage>, RuntimeError> {
    let mut labels = BTreeMap::from([(LABEL_SNAPSHOT.to_owned(), String::new())]);
    if let Some(p) = profile_label {
        labels.insert(LABEL_PROFILE.to_owned(), p.to_owned());
    }
    let mut listed = rt.snapshots(&labels).await?;
    if let Some(home) = home {
        listed.retain(|s| s.label(LABEL_HOME).is_none_or(|h| h == home));
    }
    Ok(newest_first(listed))
}

/// Commits `c` as a snapshot of the sandbox named `of` carrying `labels` (a sandbox's labels); returns it as listed.
pub(crate) async fn commit(
    rt: &dyn Engine,
    c: &ContainerSummary,
    of: &str,
    labels: &BTreeMap<String, String>,
    name: Option<&str>,
) -> Result<SnapshotImage, Failure> {
    let now = SystemClock.now();
    let name = match name {
        Some(n) => {
            check_name(n)?;
            if of_sandbox(rt, of).await?.iter().any(|s| s.label(LABEL_SNAPSHOT) == Some(n)) {
                return Err(Failure::usage(format!(
                    "sandbox {of} already has a snapshot named {n:?}; choose another --name"
                )));
            }
            n.to_owned()
        }
        // `20261128-163000-123`: sortable, and unique per sandbox to the millisecond.
        None => {
            let digits: String = now.to_rfc3339().chars().filter(char::is_ascii_digit).collect();
            let ms = now.as_millis().rem_euclid(1000);
            format!("{}-{}-{ms:03}", digits.get(..8).unwrap_or("0"), digits.get(8..14).unwrap_or("0"))
        }
    };
    let layer = rt.writable_size(&c.id).await.ok().flatten();
    let mut labels = labels.clone();
    labels.insert(LABEL_SNAPSHOT.to_owned(), name.clone());
    labels.insert(LABEL_SNAPSHOT_OF.to_owned(), of.to_owned());
    labels.insert(LABEL_SNAPSHOT_AT.to_owned(), now.as_millis().to_string());
    match layer {
        Some(b) => labels.insert(LABEL_SNAPSHOT_BYTES.to_owned(), b.to_string()),
        None => labels.remove(LABEL_SNAPSHOT_BYTES),
    };
    let id = rt.commit(&c.id, &repo_of(of), &name, &labels).await?;
    let listed = of_sandbox(rt, of).await?;
    listed.into_iter().find(|s| s.id == id).ok_or_else(|| {
        Failure::other(format!("the engine made image {id} for sandbox {of} but does not list it with its labels"))
    })
}

/// Removes one snapshot image: by each of its tags, then by id when untagged; `Ok(false)` when a container still
/// runs from it (the engine refuses: it goes with that container's sandbox).
pub(crate) async fn remove_one(rt: &dyn Engine, s: &SnapshotImage) -> Result<bool, RuntimeError> {
    let refs: Vec<&str> =
        if s.tags.is_empty() { vec![s.id.as_str()] } else { s.tags.iter().map(String::as_str).collect() };
    for r in refs {
        match rt.remove_snapshot(r).await {
            Ok(()) | Err(RuntimeError::NotFound(_)) => {}
            Err(RuntimeError::Api { status: 409, .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// `terminal.docker_snapshot_keep`: how many snapshots a sandbox keeps (at least one).
pub fn keep_of(ctx: &Ctx) -> usize {
    usize::try_from(ctx.settings.terminal.docker_snapshot_keep.get()).unwrap_or(1).max(1)
}

/// Keeps the newest `keep` snapshots of the sandbox `of`, removing the older ones (but one a
/// container still runs from); returns the names removed.
pub(crate) async fn keep_newest(keep: usize, rt: &dyn Engine, of: &str) -> Vec<String> {
    let Ok(listed) = of_sandbox(rt, of).await else { return Vec::new() };
    let mut removed = Vec::new();
    for s in listed.iter().skip(keep) {
        match remove_one(rt, s).await {
            Ok(true) => removed.push(s.label(LABEL_SNAPSHOT).unwrap_or_default().to_owned()),
            Ok(false) => tracing::debug!("snapshot {} of {of} is in use; kept", s.id),
            Err(e) => tracing::warn!("could not remove old snapshot {} of {of}: {e}", s.id),
        }
    }
    removed
}

/// Removes every snapshot of the sandbox named `of` (its container is gone, or going); returns how many went.
///
/// # Errors
/// An engine failure (the first).
pub async fn remove_all(rt: &dyn Engine, of: &str) -> Result<usize, RuntimeError> {
    let mut n = 0;
    for s in of_sandbox(rt, of).await? {
        if remove_one(rt, &s).await? {
            n += 1;
        }
    }
    Ok(n)
}

/// [`remove_all`] naming what went (each image's reference), as `sandbox rm|release` print it.
///
/// # Errors
/// An engine failure.
pub async fn remove_all_named(rt: &dyn Engine, of: &str) -> Result<Vec<String>, Failure> {
    let mut gone = Vec::new();
    for s in of_sandbox(rt, of).await? {
        if remove_one(rt, &s).await? {
            gone.push(s.tags.first().cloned().unwrap_or_else(|| s.id.clone()));
        }
    }
    Ok(gone)
}

/// A suspended sandbox of the home `home` (of one profile label, or of all) named `name` (as `sandbox ls` shows it), as a container summary with no id,
/// carrying the labels its newest snapshot holds; `None` when there is none.
///
/// # Errors
/// An engine failure.
pub async fn suspended_named(
    rt: &dyn Engine,
    home: &str,
    profile_label: Option<&str>,
    name: &str,
) -> Result<Option<ContainerSummary>, Failure> {
    let listed = in_home(rt, Some(home), profile_label).await?;
    Ok(listed.iter().find(|s| s.label(LABEL_SNAPSHOT_OF) == Some(name)).map(suspended_summary))
}

/// A suspended sandbox as listings show it: the sandbox's labels from its snapshot, state `suspended`, no container.
pub fn suspended_summary(s: &SnapshotImage) -> ContainerSummary {
    let mut labels = s.labels.clone();
    for key in [LABEL_SNAPSHOT, LABEL_SNAPSHOT_OF, LABEL_SNAPSHOT_AT, LABEL_SNAPSHOT_BYTES] {
        labels.remove(key);
    }
    ContainerSummary {
        id: String::new(),
        name: s.label(LABEL_SNAPSHOT_OF).unwrap_or_default().to_owned(),
        labels,
        state: domain::container::ContainerState::Other(SUSPENDED.to_owned()),
        created: taken_at(s),
        network_mode: None,
    }
}

/// The state `sandbox ls` shows for a sandbox that is only its snapshot.
pub const SUSPENDED: &str = "suspended";

/// After the reaper removed stale containers: their snapshots go too (it never leaves a snapshot whose container it
/// removed). Best effort, logged.
pub async fn reaped(rt: &dyn Engine, names: Vec<String>) {
    for name in &names {
        match remove_all(rt, name).await {
            Ok(0) => {}
            Ok(n) => tracing::info!("removed {n} snapshot(s) of reaped sandbox {name}"),
            Err(e) => tracing::warn!("could not remove the snapshots of reaped sandbox {name}: {e}"),
        }
    }
}

/// Snapshots `c` and removes its container, keeping its newest `keep` snapshots; its host folder stays. Refused for a throw-away sandbox, one berth did not
/// make, and one with a command running inside.
///
/// # Errors
/// Usage failures as above; engine failures.
pub async fn suspend_container(keep: usize, rt: &dyn Engine, c: &ContainerSummary) -> Result<SnapshotDone, Failure> {
    if c.label(LABEL_MODE) == Some("ephemeral") {
        return Err(Failure::usage(format!(
            "sandbox {} is a throw-away one (terminal.docker_persist_across_processes: false): nothing resumes it",
            c.name
        )));
    }
    if c.identity().is_none() {
        return Err(Failure::usage(format!(
            "sandbox {} was not made by berth (no {} label): berth could not resume it",
            c.name,
            domain::label::LABEL_IDENTITY
        )));
    }
    if c.state.is_live() {
        let procs = rt.processes(&c.id).await?;
        if let Some(p) = procs.iter().find(|p| !is_keep_alive(&p.command)) {
            return Err(Failure::other(format!(
                "sandbox {} has a command running ({}); suspend it when that finishes",
                c.name, p.command
            )));
        }
    }
    let snap = commit(rt, c, &c.name, &c.labels, None).await?;
    service::release(rt, Some(&c.id), ReleaseMode::Force).await?;
    let removed = keep_newest(keep, rt, &c.name).await;
    Ok(SnapshotDone {
        action: "suspended",
        sandbox: c.name.clone(),
        snapshot: SnapshotRow::of(&snap, SystemClock.now()),
        removed,
        started: None,
    })
}

/// The transparent resume: when `req`'s sandbox has no container but a snapshot, creates it from its newest snapshot
/// with `req`'s spec and labels (a progress line on a terminal) and returns it; `None` when there is nothing to resume
/// (the caller acquires as always). Concurrent resumes race on the deterministic name as creates do: one container.
///
/// # Errors
/// Engine and acquire failures.
pub async fn resume_if_suspended(
    ctx: &Ctx,
    rt: &dyn Engine,
    req: &AcquireRequest,
) -> Result<Option<Acquired>, Failure> {
    if !req.persist_across_processes {
        return Ok(None);
    }
    let snaps = of_sandbox(rt, &req.spec.name).await?;
    let Some(newest) = snaps.first() else { return Ok(None) };
    let query = domain::ports::ListQuery { labels: req.identity.upstream_labels(), states: Vec::new() };
    let listed = rt.list(&query).await?;
    if listed.iter().any(|c| is_candidate(&req.identity, c) || req.identity.owns(c)) {
        return Ok(None);
    }
    let mut from = req.clone();
    from.spec.image.clone_from(&newest.id);
    let text = format!(
        "resuming sandbox {} from snapshot {}",
        req.spec.name,
        newest.label(LABEL_SNAPSHOT).unwrap_or_default()
    );
    let mut got = output::with_progress(ctx.json, &text, service::acquire(rt, &from)).await?;
    if got.action == AcquireAction::Created {
        got.action = AcquireAction::Resumed;
    }
    Ok(Some(got))
}
