//! `berth sandbox snapshot|snapshots|suspend|fork`: the commands over `snapshots.rs`, which also holds the suspend
//! the gateway applies and the resume every acquire goes through.

use std::path::Path;

use domain::container::ContainerSummary;
use domain::ports::{Clock, Engine};

use crate::cli::SandboxCmd;
use crate::edge::context::{Ctx, SystemClock};
use crate::edge::error::{Exit, Failure};
use crate::edge::output;
use crate::sandbox::engine::{connect, identity, identity_containers, profile_label, request};
use crate::sandbox::snapshots::{
    SnapshotDone, SnapshotRow, check_name, commit, in_home, keep_newest, keep_of, of_sandbox, resume_if_suspended,
    suspend_container,
};

/// `berth sandbox snapshot|snapshots|suspend|fork`.
///
/// # Errors
/// Usage (2) or engine (125) failures.
pub async fn command(ctx: &Ctx, cmd: &SandboxCmd) -> Result<u8, Failure> {
    match cmd {
        SandboxCmd::Snapshot { id, task, name } => snapshot(ctx, id.as_deref(), task.as_deref(), name.as_deref()).await,
        SandboxCmd::Snapshots { all_profiles } => list(ctx, *all_profiles).await,
        SandboxCmd::Suspend { id, task } => suspend(ctx, id.as_deref(), task.as_deref()).await,
        SandboxCmd::Fork { task, to } => fork(ctx, task, to).await,
        _ => Err(Failure::usage("not a snapshot command")),
    }
}

/// The sandbox named by `id` or `task`, with a clear word when it is suspended (no container, a snapshot).
async fn find(ctx: &Ctx, rt: &dyn Engine, id: Option<&str>, task: Option<&str>) -> Result<ContainerSummary, Failure> {
    match crate::sandbox::logs::find(ctx, rt, id, task, false).await {
        Ok(c) => Ok(c),
        Err(e) => {
            if let Some(task) = task {
                let name = identity(ctx, task)?.persistent_name();
                if !of_sandbox(rt, &name).await?.is_empty() {
                    return Err(Failure::usage(format!(
                        "sandbox {name} of task {task:?} is suspended: its snapshot is all there is (`berth sandbox \
                         ensure --task {task}` resumes it)"
                    )));
                }
            }
            Err(e)
        }
    }
}

fn need_one<'a>(id: Option<&'a str>, task: Option<&'a str>, verb: &str) -> Result<(), Failure> {
    if id.is_none() && task.is_none() {
        return Err(Failure::usage(format!(
            "sandbox {verb} needs a sandbox: pass its id or name (`berth sandbox ls`), or --task ID"
        )));
    }
    Ok(())
}

/// `berth sandbox snapshot ID|--task T [--name N]`.
///
/// # Errors
/// Usage failures (no such sandbox, a bad name), engine failures (one line where the engine cannot commit).
pub async fn snapshot(ctx: &Ctx, id: Option<&str>, task: Option<&str>, name: Option<&str>) -> Result<u8, Failure> {
    need_one(id, task, "snapshot")?;
    if let Some(n) = name {
        check_name(n)?;
    }
    let rt = connect(ctx).await?;
    let c = find(ctx, &*rt, id, task).await?;
    let text = format!("snapshotting {}", c.name);
    let snap = output::with_progress(ctx.json, &text, commit(&*rt, &c, &c.name, &c.labels, name)).await?;
    let removed = keep_newest(keep_of(ctx), &*rt, &c.name).await;
    print_done(
        ctx,
        SnapshotDone {
            action: "snapshot",
            sandbox: c.name.clone(),
            snapshot: SnapshotRow::of(&snap, SystemClock.now()),
            removed,
            started: None,
        },
    );
    Ok(Exit::OK)
}

/// `berth sandbox suspend ID|--task T`.
///
/// # Errors
/// As [`suspend_container`].
pub async fn suspend(ctx: &Ctx, id: Option<&str>, task: Option<&str>) -> Result<u8, Failure> {
    need_one(id, task, "suspend")?;
    let rt = connect(ctx).await?;
    let c = find(ctx, &*rt, id, task).await?;
    let text = format!("suspending {}", c.name);
    let done = output::with_progress(ctx.json, &text, suspend_container(keep_of(ctx), &*rt, &c)).await?;
    print_done(ctx, done);
    Ok(Exit::OK)
}

/// `berth sandbox fork --task T --to T2`: T2's sandbox starts from T's current files. T's container (running or
/// stopped) is committed as T2's snapshot, or T's newest snapshot is used when T is suspended; T's host folder is
/// copied into T2's; then T2's sandbox is resumed from it. T is untouched (a commit pauses it for its duration).
///
/// # Errors
/// Usage failures (no sandbox of T, T2 already has one); engine and file failures.
pub async fn fork(ctx: &Ctx, task: &str, to: &str) -> Result<u8, Failure> {
    ctx.require_profile()?;
    if task == to {
        return Err(Failure::usage(format!("sandbox fork needs two tasks; --to {to:?} is the source itself")));
    }
    if !ctx.settings.terminal.docker_persist_across_processes {
        return Err(Failure::usage(
            "sandbox fork needs persistent sandboxes (terminal.docker_persist_across_processes: true)",
        ));
    }
    let rt = connect(ctx).await?;
    let (source, target) = (identity(ctx, task)?, identity(ctx, to)?);
    let target_name = target.persistent_name();
    if !identity_containers(&*rt, &target).await?.is_empty() || !of_sandbox(&*rt, &target_name).await?.is_empty() {
        return Err(Failure::usage(format!(
            "task {to:?} already has a sandbox ({target_name}); remove it first (`berth sandbox rm --task {to}`)"
        )));
    }
    let containers = identity_containers(&*rt, &source).await?;
    let source_snaps = of_sandbox(&*rt, &source.persistent_name()).await?;
    if containers.is_empty() && source_snaps.is_empty() {
        return Err(Failure::usage(format!("no sandbox of task {task:?} in profile {} to fork", ctx.profile)));
    }
    let req = request(ctx, &*rt, target.clone()).await?;
    let folders = crate::sandbox::folders::Folders::from_ctx(ctx);
    copy_tree(&folders.of(&source), &folders.of(&target))?;
    let text = format!("forking task {task}'s sandbox into {target_name}");
    let work = async {
        let snap = match containers.first() {
            Some(c) => commit(&*rt, c, &target_name, &req.spec.labels, None).await?,
            // A suspended source: its newest snapshot, tagged again as the target's with the target's labels, by a
            // commit of a stopped container made from it (labels cannot change on an image).
            None => {
                let mut from = req.clone();
                from.spec.image.clone_from(&source_snaps[0].id);
                from.spec.name = format!("{target_name}-fork");
                let id = rt.create(&from.spec).await?;
                let c = ContainerSummary {
                    id: id.clone(),
                    name: from.spec.name.clone(),
                    labels: req.spec.labels.clone(),
                    state: domain::container::ContainerState::Created,
                    created: SystemClock.now(),
                    network_mode: None,
                };
                let snap = commit(&*rt, &c, &target_name, &req.spec.labels, None).await;
                let _ = rt.remove(&id, true).await;
                snap?
            }
        };
        let started = resume_if_suspended(ctx, &*rt, &req).await?;
        Ok::<_, Failure>((snap, started))
    };
    let (snap, started) = output::with_progress(ctx.json, &text, work).await?;
    print_done(
        ctx,
        SnapshotDone {
            action: "forked",
            sandbox: target_name,
            snapshot: SnapshotRow::of(&snap, SystemClock.now()),
            removed: Vec::new(),
            started: started.map(|a| a.name),
        },
    );
    Ok(Exit::OK)
}

/// Copies the folder `from` into `to` (made as needed): files with their permissions, symlinks as symlinks, never
/// followed. A missing `from` copies nothing.
fn copy_tree(from: &Path, to: &Path) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |what: &Path, e: std::io::Error| Failure::other(format!("cannot copy {}: {e}", what.display()));
    let Ok(meta) = std::fs::symlink_metadata(from) else { return Ok(()) };
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(from).map_err(|e| fail(from, e))?;
        return std::os::unix::fs::symlink(target, to).map_err(|e| fail(to, e));
    }
    if meta.is_dir() {
        std::fs::create_dir_all(to).map_err(|e| fail(to, e))?;
        for entry in std::fs::read_dir(from).map_err(|e| fail(from, e))? {
            let entry = entry.map_err(|e| fail(from, e))?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
    } else if meta.is_file() {
        std::fs::copy(from, to).map_err(|e| fail(from, e))?;
    }
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(meta.permissions().mode())).map_err(|e| fail(to, e))
}

fn print_done(ctx: &Ctx, done: SnapshotDone) {
    if ctx.json {
        output::json(&done);
        return;
    }
    let s = &done.snapshot;
    let size = human_layer(s);
    match done.action {
        "suspended" => output::line(&format!(
            "suspended {} (snapshot {}, {size}); its host folder stays, the next run resumes it",
            done.sandbox, s.name
        )),
        "forked" => output::line(&format!(
            "forked into {} (snapshot {}, {size}){}",
            done.sandbox,
            s.name,
            done.started.as_deref().map_or_else(String::new, |n| format!("; started {n}"))
        )),
        _ => output::line(&format!("snapshot {} of {} ({}, {size})", s.name, done.sandbox, s.image)),
    }
    if !done.removed.is_empty() {
        output::line(&format!("removed older snapshot(s): {}", done.removed.join(", ")));
    }
}

fn human_layer(s: &SnapshotRow) -> String {
    match s.layer_bytes {
        Some(b) => format!("{} over its image", crate::sandbox::cost::human_bytes(u64::try_from(b).ok())),
        None => crate::sandbox::cost::human_bytes(u64::try_from(s.size_bytes).ok()),
    }
}

/// `berth sandbox snapshots [--all-profiles]`.
///
/// # Errors
/// An engine failure.
pub async fn list(ctx: &Ctx, all_profiles: bool) -> Result<u8, Failure> {
    let rt = connect(ctx).await?;
    let profile = profile_label(ctx);
    let listed = in_home(&*rt, Some(&ctx.home_id()), (!all_profiles).then_some(profile.as_str())).await?;
    let now = SystemClock.now();
    let rows: Vec<SnapshotRow> = listed.iter().map(|s| SnapshotRow::of(s, now)).collect();
    if ctx.json {
        output::json(&rows);
        return Ok(Exit::OK);
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.sandbox.clone(),
                r.task.clone().unwrap_or_default(),
                crate::sandbox::cost::human_bytes(r.layer_bytes.and_then(|b| u64::try_from(b).ok())),
                crate::sandbox::cost::human_bytes(u64::try_from(r.size_bytes).ok()),
                output::age(r.age_secs),
            ]
        })
        .collect();
    if table.is_empty() {
        output::line("no snapshots");
        return Ok(Exit::OK);
    }
    output::table(&["SNAPSHOT", "SANDBOX", "TASK", "LAYER", "SIZE", "AGE"], &table);
    Ok(Exit::OK)
}
