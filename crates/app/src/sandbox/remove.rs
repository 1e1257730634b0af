//! Stopping and removing one sandbox: `berth sandbox stop|rm|release` and the dashboard's sandbox actions call these
//! same functions, which return what they did; the CLI prints it, the dashboard answers with it.

use std::time::Duration;

use domain::container::ContainerSummary;
use domain::ids::{ProfileName, TaskId};
use domain::policy::cleanup::{CleanupPlan, ReleaseMode};
use domain::ports::Engine;
use domain::sandbox::SandboxIdentity;
use domain::service;

use crate::edge::context::Ctx;
use crate::edge::error::{Exit, Failure};
use crate::edge::output;
use crate::sandbox::engine::identity_containers;
use crate::sandbox::views::{FolderFate, ReleasedRow, Stopped};
use crate::sandbox::{connect, identity, identity_of, profile_label};

/// How long a stopping sandbox gets before the engine kills it (its keep-alive exits on SIGTERM at once).
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// What releasing one task's sandboxes did: each container with its plan, and the fate of their host folder.
pub struct Released {
    pub task: String,
    pub rows: Vec<(ContainerSummary, CleanupPlan)>,
    /// The folder's removal note or error; `None` when it was kept or nothing was removed.
    pub folder: Option<Result<String, String>>,
    pub host_dir: String,
    pub keep_files: bool,
    /// The sandbox's container name (a suspended one has no container row).
    pub sandbox: String,
    /// The sandbox's snapshot images removed with it (`berth sandbox snapshot|suspend`).
    pub snapshots: Vec<String>,
}

impl Released {
    /// One line for the dashboard: what was removed (and the folder's note), or the folder's error.
    ///
    /// # Errors
    /// A failure when the folder could not be removed, or when there was no sandbox.
    pub fn message(&self) -> Result<String, Failure> {
        if let Some(Err(e)) = &self.folder {
            return Err(Failure::other(e.clone()));
        }
        if self.rows.is_empty() && self.snapshots.is_empty() {
            return Err(Failure::usage(format!("no sandbox for task {:?}", self.task)));
        }
        let names: Vec<&str> = self.rows.iter().map(|(c, _)| c.name.as_str()).collect();
        let mut line = format!("removed {}", names.join(", "));
        if !self.snapshots.is_empty() {
            line.push_str(&format!(
                "{}{} snapshot(s)",
                if names.is_empty() { "" } else { " and " },
                self.snapshots.len()
            ));
        }
        if let Some(Ok(note)) = &self.folder {
            line.push_str(&format!("; {note}"));
        }
        Ok(line)
    }
}

/// Releases `identity`'s containers (forced: stopped and removed in any mode) and, unless kept, their host folder
/// once the last user of it is gone.
///
/// # Errors
/// Engine failures.
pub async fn release_identity(
    ctx: &Ctx,
    rt: &dyn Engine,
    identity: &SandboxIdentity,
    force: bool,
    keep_files: bool,
) -> Result<Released, Failure> {
    let persist = ctx.settings.terminal.docker_persist_across_processes;
    let targets = identity_containers(rt, identity).await?;
    let mut rows = Vec::new();
    for c in targets {
        // An ephemeral container always goes at release; a persistent one only when forced or in opt-out mode.
        let ephemeral = c.label(domain::label::LABEL_MODE) == Some("ephemeral");
        let mode = ReleaseMode::new(persist && !ephemeral, force);
        let plan =
            output::with_progress(ctx.json, &format!("releasing {}", c.name), service::release(rt, Some(&c.id), mode))
                .await?;
        rows.push((c, plan));
    }
    // Its snapshots go with it (a suspended sandbox, no container, is its snapshots): whenever a container was
    // removed, or, with none, when the release removes in any mode.
    let removed_any = rows.iter().any(|(_, p)| !matches!(p, CleanupPlan::Keep { .. }));
    let snapshots = if removed_any || (rows.is_empty() && (force || !persist)) {
        crate::sandbox::snapshots::remove_all_named(rt, &identity.persistent_name()).await?
    } else {
        Vec::new()
    };
    // The host folder goes with the last sandbox that used it, unless kept.
    let removed_any = removed_any || !snapshots.is_empty();
    let folders = crate::sandbox::folders::Folders::from_ctx(ctx);
    let host_dir = folders.of(identity).display().to_string();
    let folder = if removed_any && !keep_files { folders.remove_for(rt, identity).await } else { None };
    let sandbox = identity.persistent_name();
    Ok(Released { task: identity.task.as_str().to_owned(), rows, folder, host_dir, keep_files, snapshots, sandbox })
}

/// The sandbox named by `id` (a container id of at least 4 characters, or a name) in this home: this profile's, or
/// any profile's with `all_profiles`.
async fn named(ctx: &Ctx, rt: &dyn Engine, id: &str, all_profiles: bool) -> Result<ContainerSummary, Failure> {
    crate::sandbox::logs::find(ctx, rt, Some(id), None, all_profiles).await
}

/// `berth sandbox stop ID` and the dashboard's stop: the engine stops the container (SIGTERM, then SIGKILL after
/// [`STOP_GRACE`]); the container and its folder stay for the next acquire, which starts it again.
///
/// # Errors
/// A usage failure when no sandbox (or several) match `id`; engine failures.
pub async fn stop_by_id(ctx: &Ctx, id: &str, all_profiles: bool) -> Result<ContainerSummary, Failure> {
    stop_named(ctx, Some(id), None, all_profiles).await
}

/// `berth sandbox stop ID|--task T`: as [`stop_by_id`], the sandbox named by its id or name, or by its task.
///
/// # Errors
/// A usage failure when no sandbox (or several) match; engine failures.
pub async fn stop_named(
    ctx: &Ctx,
    id: Option<&str>,
    task: Option<&str>,
    all_profiles: bool,
) -> Result<ContainerSummary, Failure> {
    let rt = connect(ctx).await?;
    let found = crate::sandbox::logs::find(ctx, &*rt, id, task, all_profiles).await?;
    rt.stop(&found.id, STOP_GRACE).await?;
    Ok(found)
}

/// `berth sandbox rm ID` and the dashboard's remove: the sandbox named by `id` is its task's, removed as
/// `sandbox rm --task` would, with its folder (unless `keep_files`). With `all_profiles` the task's identity is
/// taken under the profile the sandbox carries.
///
/// # Errors
/// A usage failure when no sandbox matches or it carries no task label; engine failures.
pub async fn remove_by_id(ctx: &Ctx, id: &str, all_profiles: bool, keep_files: bool) -> Result<Released, Failure> {
    let rt = connect(ctx).await?;
    let found = match named(ctx, &*rt, id, all_profiles).await {
        Ok(found) => found,
        // A suspended sandbox, named as `sandbox ls` shows it: its snapshot carries the sandbox's labels.
        Err(e) => match crate::sandbox::snapshots::suspended_named(
            &*rt,
            &ctx.home_id(),
            (!all_profiles).then(|| profile_label(ctx)).as_deref(),
            id,
        )
        .await?
        {
            Some(found) => found,
            None => return Err(e),
        },
    };
    let Some(task) = found.labels.get(domain::label::LABEL_TASK) else {
        return Err(Failure::usage(format!("{id:?} is not a task's sandbox (no {} label)", domain::label::LABEL_TASK)));
    };
    let mine = profile_label(ctx);
    let identity = match found.profile_label().filter(|p| *p != mine).map(ProfileName::parse) {
        Some(Ok(profile)) => identity_of(ctx, TaskId::parse(task).map_err(Failure::usage_of)?, profile),
        _ => identity(ctx, task)?,
    };
    if found.identity().is_some_and(|d| d != identity.digest()) {
        // The label holds the sanitized task id (`a b!` is `a_b_`), so the identity cannot be rebuilt from it: remove
        // this very container; its folder, which no container claims then, is left to `sandbox reap`.
        let plan = if found.id.is_empty() {
            CleanupPlan::Nothing
        } else {
            service::release(&*rt, Some(&found.id), ReleaseMode::new(false, true)).await?
        };
        let sandbox_dir = crate::sandbox::folders::Folders::from_ctx(ctx).sandbox_dir;
        let digest = found.identity().unwrap_or_default().chars().take(12).collect::<String>();
        let profile = found.profile_label().unwrap_or_default();
        let host_dir = format!("{}/docker/{profile}/{task}-{digest}", sandbox_dir.trim_end_matches('/'));
        let note = "its folder stays: the task's id is not in its labels (`sandbox rm --task ID` with the exact id \
                    removes both; `sandbox reap` removes a folder no sandbox claims)";
        let folder = (!keep_files).then(|| Ok(note.to_owned()));
        let snapshots = crate::sandbox::snapshots::remove_all_named(&*rt, &found.name).await?;
        let (sandbox, task) = (found.name.clone(), task.clone());
        let rows = if found.id.is_empty() { Vec::new() } else { vec![(found, plan)] };
        return Ok(Released { task, rows, folder, host_dir, keep_files, snapshots, sandbox });
    }
    release_identity(ctx, &*rt, &identity, true, keep_files).await
}

/// Prints what a release did, as `sandbox release|rm` always have; exit 1 when the folder could not be removed.
pub fn print_released(ctx: &Ctx, r: &Released) -> u8 {
    if ctx.json {
        // One row per container; the folder's fate (one folder per identity) is on each row.
        let fate = |note: Option<&str>, error: Option<&String>| FolderFate {
            path: r.host_dir.clone(),
            note: note.map(str::to_owned),
            error: error.cloned(),
        };
        let folder = match &r.folder {
            Some(Ok(note)) => Some(fate(Some(note), None)),
            Some(Err(e)) => Some(fate(None, Some(e))),
            None if r.keep_files => Some(fate(Some("kept (--keep-files)"), None)),
            None => None,
        };
        let mut rows: Vec<ReleasedRow> = r
            .rows
            .iter()
            .map(|(c, p)| ReleasedRow {
                id: c.id.clone(),
                name: c.name.clone(),
                action: if matches!(p, CleanupPlan::Keep { .. }) { "kept" } else { "removed" },
                plan: p.clone(),
                folder: folder.clone(),
                snapshots: r.snapshots.clone(),
            })
            .collect();
        // A suspended sandbox: no container to stop, its snapshots removed.
        if rows.is_empty() && !r.snapshots.is_empty() {
            rows.push(ReleasedRow {
                id: String::new(),
                name: r.sandbox.clone(),
                action: "removed",
                plan: CleanupPlan::Nothing,
                folder,
                snapshots: r.snapshots.clone(),
            });
        }
        output::json(&rows);
    } else if r.rows.is_empty() && r.snapshots.is_empty() {
        output::line(&format!("no sandbox for task {:?} (profile {})", r.task, ctx.profile));
    } else {
        for (c, p) in &r.rows {
            match p {
                CleanupPlan::Keep { .. } => {
                    output::line(&format!("kept {} running (persist mode; use --force to remove)", c.name))
                }
                _ => output::line(&format!("removed {}", c.name)),
            }
        }
        if !r.snapshots.is_empty() {
            let of = if r.rows.is_empty() { format!(" of suspended sandbox {}", r.sandbox) } else { String::new() };
            output::line(&format!("removed {} snapshot(s){of}: {}", r.snapshots.len(), r.snapshots.join(", ")));
        }
        if let Some(Ok(note)) = &r.folder {
            output::line(note);
        }
    }
    if let Some(Err(e)) = &r.folder {
        eprintln!("berth: {e}");
        return Exit::FAILURE;
    }
    Exit::OK
}

/// `berth sandbox stop ID`.
pub fn print_stopped(ctx: &Ctx, c: &ContainerSummary) {
    if ctx.json {
        output::json(&Stopped { id: c.id.clone(), name: c.name.clone(), action: "stopped" });
    } else {
        output::line(&format!("stopped {}", c.name));
    }
}
