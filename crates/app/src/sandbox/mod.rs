//! `berth sandbox …` and `berth run`: acquire, exec, release and reap on the Docker Engine.

pub mod connect;
pub mod cost;
pub mod engine;
pub mod fault;
pub mod folders;
pub mod lease;
pub mod logs;
pub mod mounts;
pub mod reap_words;
pub mod remove;
pub mod run;
pub mod run_io;
pub mod snapshot;
pub mod snapshots;
pub mod views;

pub use engine::{
    TEARDOWN_WAIT, admit_credentials, connect, connect_remembered, forwarded_env, identity, identity_of,
    kill_marked_confirmed, maybe_reap, profile_label, request, stop_marked,
};
pub use folders::shared_key;
pub use remove::STOP_GRACE;
pub use run::run;

use domain::policy::reaper::{ReapScope, reaper_max_age_secs};
use domain::ports::Clock;
use domain::service::{self, ReapReport};

use crate::cli::SandboxCmd;
use crate::edge::context::{Ctx, ProcProbe, SystemClock};
use crate::edge::error::{Exit, Failure};
use crate::edge::output;

/// `berth sandbox …`.
///
/// # Errors
/// Usage (2) or engine (125) failures.
pub async fn command(ctx: &Ctx, cmd: &SandboxCmd) -> Result<u8, Failure> {
    match cmd {
        SandboxCmd::Ensure(t) => ensure(ctx, &t.task).await,
        SandboxCmd::Ls { all_profiles, size } => crate::sandbox::cost::ls(ctx, *all_profiles, *size).await,
        SandboxCmd::Denials { task, tail } => crate::egress::denials(ctx, task.as_deref(), *tail),
        SandboxCmd::Top { id, all_profiles } => crate::sandbox::cost::top(ctx, id, *all_profiles).await,
        SandboxCmd::Logs { id, task, all_profiles, tail, follow } => {
            crate::sandbox::logs::logs(ctx, id.as_deref(), task.as_deref(), *all_profiles, *tail, *follow).await
        }
        // Releasing what is not there is done (a release is idempotent); removing it is not (see `Removal`).
        SandboxCmd::Release { task, force, keep_files } => {
            release(ctx, &task.task, Removal { force: *force, keep_files: *keep_files, must_exist: false }).await
        }
        SandboxCmd::Rm { id: None, task: None, .. } => Err(Failure::usage(
            "sandbox rm needs a sandbox: pass its id or name (`berth sandbox ls`), or --task ID (`--task default` for \
             the default task's)",
        )),
        // Removing nothing is a failure here, as `docker rm` of a missing container is: the id was wrong.
        SandboxCmd::Rm { id: None, task: Some(task), keep_files } => {
            release(ctx, task, Removal { force: true, keep_files: *keep_files, must_exist: true }).await
        }
        SandboxCmd::Rm { id: Some(id), keep_files, .. } => {
            // A sandbox named by id or name is its task's: removed as `--task` would, with its folder.
            let released = remove::remove_by_id(ctx, id, false, *keep_files).await?;
            Ok(remove::print_released(ctx, &released))
        }
        SandboxCmd::Stop { id: None, task: None, .. } => {
            Err(Failure::usage("sandbox stop needs a sandbox: pass its id or name (`berth sandbox ls`), or --task ID"))
        }
        SandboxCmd::Stop { id, task, all_profiles } => {
            let stopped = remove::stop_named(ctx, id.as_deref(), task.as_deref(), *all_profiles).await?;
            remove::print_stopped(ctx, &stopped);
            Ok(Exit::OK)
        }
        SandboxCmd::Snapshot { .. }
        | SandboxCmd::Snapshots { .. }
        | SandboxCmd::Suspend { .. }
        | SandboxCmd::Fork { .. } => snapshot::command(ctx, cmd).await,
        SandboxCmd::Reap { dry_run, all_profiles, max_age } => {
            let rt = connect(ctx).await?;
            let max_age_secs = max_age.unwrap_or_else(|| {
                reaper_max_age_secs(Some(ctx.settings.terminal.lifetime_seconds.get().cast_signed()))
            });
            let profile = profile_label(ctx);
            let host = Some(crate::edge::context::hostname());
            let scope = ReapScope {
                home: Some(ctx.home_id()),
                profile_label: (!all_profiles).then_some(profile),
                max_age_secs,
                host,
            };
            let sweep = service::reap(&*rt, SystemClock.now(), &scope, &ProcProbe, *dry_run);
            let report = output::with_progress(ctx.json, "sweeping stale sandboxes", sweep).await?;
            // A reaped sandbox's snapshots go with it.
            if !report.dry_run {
                snapshots::reaped(&*rt, report.removed.iter().map(|o| o.name.clone()).collect()).await;
            }
            // Then the host folders whose sandbox (in any state) and task are both gone, by the same age threshold;
            // a dry run counts the containers it would remove as gone, as the real sweep will find them.
            let reaped: std::collections::BTreeSet<String> = report.removed.iter().map(|o| o.id.clone()).collect();
            let folders = crate::sandbox::folders::Folders::from_ctx(ctx)
                .sweep(&*rt, scope.profile_label.as_deref(), max_age_secs, *dry_run, &reaped)
                .await?;
            print_reap(ctx, &report, &folders);
            let failed = !report.failed.is_empty() || folders.iter().any(|f| f.error.is_some());
            Ok(if failed { 1 } else { 0 })
        }
    }
}

/// `berth sandbox ensure --task T`: acquire the task's sandbox (resumed from its snapshot when suspended).
async fn ensure(ctx: &Ctx, task: &str) -> Result<u8, Failure> {
    ctx.require_profile()?;
    let identity = identity(ctx, task)?;
    let rt = connect(ctx).await?;
    let req = request(ctx, &*rt, identity).await?;
    maybe_reap(ctx, &*rt).await;
    // A suspended sandbox is resumed from its snapshot (its own progress line); any other acquired as always.
    let got = match snapshots::resume_if_suspended(ctx, &*rt, &req).await? {
        Some(got) => got,
        None => {
            output::with_progress(
                ctx.json,
                &format!("acquiring sandbox {}", req.spec.name),
                service::acquire(&*rt, &req),
            )
            .await?
        }
    };
    admit_credentials(ctx, &*rt, &req, &got).await?;
    for note in &got.notes {
        tracing::warn!("{note}");
    }
    if ctx.json {
        output::json(&views::Ensured {
            id: got.id.clone(),
            name: got.name.clone(),
            action: got.action.as_str().to_owned(),
            labels: got.labels.clone(),
            notes: got.notes.clone(),
        });
    } else {
        output::line(&format!("{} {} ({})", got.action.as_str(), got.name, &got.id[..12.min(got.id.len())]));
    }
    Ok(Exit::OK)
}

/// How `sandbox release` and `sandbox rm` remove a task's sandbox.
struct Removal {
    /// Stop and remove in any mode.
    force: bool,
    /// Keep the host folder.
    keep_files: bool,
    /// No sandbox to remove is a failure (`sandbox rm`, as `docker rm` of a missing container: the id was wrong).
    must_exist: bool,
}

async fn release(ctx: &Ctx, task: &str, how: Removal) -> Result<u8, Failure> {
    let Removal { force, keep_files, must_exist } = how;
    let identity = identity(ctx, task)?;
    let rt = connect(ctx).await?;
    let released = remove::release_identity(ctx, &*rt, &identity, force, keep_files).await?;
    if must_exist && released.rows.is_empty() && released.snapshots.is_empty() {
        return Err(Failure::other(format!(
            "no sandbox for task {task:?} (profile {}); `berth sandbox ls` lists them",
            ctx.profile
        )));
    }
    Ok(remove::print_released(ctx, &released))
}

fn print_reap(ctx: &Ctx, report: &ReapReport, folders: &[crate::sandbox::folders::SweptFolder]) {
    if ctx.json {
        output::json(&views::Reaped {
            dry_run: report.dry_run,
            removed: &report.removed,
            skipped: &report.skipped,
            failed: report
                .failed
                .iter()
                .map(|(id, e)| views::ReapFailure { id: id.clone(), error: e.clone() })
                .collect(),
            folders,
        });
        return;
    }
    let verb = if report.dry_run { "would remove" } else { "removed" };
    let mut rows: Vec<Vec<String>> = report
        .removed
        .iter()
        .map(|o| vec![o.name.clone(), verb.to_owned(), crate::sandbox::reap_words::removed(o.reason, o.age_secs)])
        .collect();
    rows.extend(
        report
            .skipped
            .iter()
            .map(|s| vec![s.name.clone(), "kept".to_owned(), crate::sandbox::reap_words::kept(&s.reason)]),
    );
    rows.extend(
        report.failed.iter().map(|(id, e)| vec![id[..12.min(id.len())].to_owned(), "failed".to_owned(), e.clone()]),
    );
    rows.extend(folders.iter().map(|f| match &f.error {
        None => vec![f.path.clone(), verb.to_owned(), crate::sandbox::reap_words::folder_gone(f.age_secs)],
        Some(e) => vec![f.path.clone(), "failed".to_owned(), e.clone()],
    }));
    if rows.is_empty() {
        output::line("nothing to reap");
        return;
    }
    // Host folders are listed with the containers, so the column names both.
    output::table(&["CONTAINER OR FOLDER", "ACTION", "REASON"], &rows);
}
