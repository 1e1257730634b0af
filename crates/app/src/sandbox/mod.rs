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
pub mod run;
pub mod run_io;

pub use cost::summary_json;
use engine::identity_containers;
pub use engine::{
    TEARDOWN_WAIT, connect, connect_remembered, forwarded_env, identity, identity_of, maybe_reap, profile_label,
    request, stop_marked,
};
pub use folders::shared_key;
pub use run::run;

use domain::policy::cleanup::{CleanupPlan, ReleaseMode};
use domain::policy::reaper::{ReapScope, reaper_max_age_secs};
use domain::ports::Clock;
use domain::service::{self, ReapReport};
use serde_json::json;

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
        SandboxCmd::Ensure(t) => {
            ctx.require_profile()?;
            let identity = identity(ctx, &t.task)?;
            let rt = connect(ctx).await?;
            let req = request(ctx, &rt, identity).await?;
            maybe_reap(ctx, &rt).await;
            let got = output::with_progress(
                ctx.json,
                &format!("acquiring sandbox {}", req.spec.name),
                service::acquire(&rt, &req),
            )
            .await?;
            for note in &got.notes {
                tracing::warn!("{note}");
            }
            if ctx.json {
                output::json(
                    &json!({"id": got.id, "name": got.name, "action": got.action.as_str(), "labels": got.labels, "notes": got.notes}),
                );
            } else {
                output::line(&format!("{} {} ({})", got.action.as_str(), got.name, &got.id[..12.min(got.id.len())]));
            }
            Ok(Exit::OK)
        }
        SandboxCmd::Ls { all_profiles, size } => crate::sandbox::cost::ls(ctx, *all_profiles, *size).await,
        SandboxCmd::Denials { task, tail } => crate::egress::denials(ctx, task.as_deref(), *tail),
        SandboxCmd::Top { id, all_profiles } => crate::sandbox::cost::top(ctx, id, *all_profiles).await,
        SandboxCmd::Logs { id, task, all_profiles, tail, follow } => {
            crate::sandbox::logs::logs(ctx, id.as_deref(), task.as_deref(), *all_profiles, *tail, *follow).await
        }
        SandboxCmd::Release { task, force, keep_files } => release(ctx, &task.task, *force, *keep_files).await,
        SandboxCmd::Rm { id: None, task, keep_files } => release(ctx, &task.task, true, *keep_files).await,
        SandboxCmd::Rm { id: Some(id), keep_files, .. } => {
            // A sandbox named by id or name is its task's: removed as `--task` would, with its folder.
            let rt = connect(ctx).await?;
            let found = crate::sandbox::logs::find(ctx, &rt, Some(id), None, false).await?;
            let Some(task) = found.labels.get(domain::label::LABEL_TASK) else {
                return Err(Failure::usage(format!(
                    "{id:?} is not a task's sandbox (no {} label)",
                    domain::label::LABEL_TASK
                )));
            };
            release(ctx, task, true, *keep_files).await
        }
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
            let sweep = service::reap(&rt, SystemClock.now(), &scope, &ProcProbe, *dry_run);
            let report = output::with_progress(ctx.json, "sweeping stale sandboxes", sweep).await?;
            // Then the host folders whose sandbox (in any state) and task are both gone, by the same age threshold;
            // a dry run counts the containers it would remove as gone, as the real sweep will find them.
            let reaped: std::collections::BTreeSet<String> = report.removed.iter().map(|o| o.id.clone()).collect();
            let folders = crate::sandbox::folders::Folders::from_ctx(ctx)
                .sweep(&rt, scope.profile_label.as_deref(), max_age_secs, *dry_run, &reaped)
                .await?;
            print_reap(ctx, &report, &folders);
            let failed = !report.failed.is_empty() || folders.iter().any(|f| f.error.is_some());
            Ok(if failed { 1 } else { 0 })
        }
    }
}

async fn release(ctx: &Ctx, task: &str, force: bool, keep_files: bool) -> Result<u8, Failure> {
    let identity = identity(ctx, task)?;
    let rt = connect(ctx).await?;
    let persist = ctx.settings.terminal.docker_persist_across_processes;
    let targets = identity_containers(&rt, &identity).await?;
    let mut results = Vec::new();
    for c in &targets {
        // An ephemeral container always goes at release; a persistent one only when forced or in opt-out mode.
        let ephemeral = c.label(domain::label::LABEL_MODE) == Some("ephemeral");
        let mode = ReleaseMode::new(persist && !ephemeral, force);
        let plan =
            output::with_progress(ctx.json, &format!("releasing {}", c.name), service::release(&rt, Some(&c.id), mode))
                .await?;
        results.push((c, plan));
    }
    // The host folder goes with the last sandbox that used it, unless kept.
    let removed_any = results.iter().any(|(_, p)| !matches!(p, CleanupPlan::Keep { .. }));
    let folders = crate::sandbox::folders::Folders::from_ctx(ctx);
    let host_dir = folders.of(&identity).display().to_string();
    let folder = if removed_any && !keep_files { folders.remove_for(&rt, &identity).await } else { None };
    if ctx.json {
        // One row per container; the folder's fate (one folder per identity) is on each row.
        let folder_json = match &folder {
            Some(Ok(note)) => json!({"path": host_dir, "note": note}),
            Some(Err(e)) => json!({"path": host_dir, "error": e}),
            None if keep_files => json!({"path": host_dir, "note": "kept (--keep-files)"}),
            None => serde_json::Value::Null,
        };
        let rows: Vec<serde_json::Value> = results
            .iter()
            .map(|(c, p)| json!({"id": c.id, "name": c.name, "action": match p { CleanupPlan::Keep { .. } => "kept", _ => "removed" }, "plan": p, "folder": folder_json}))
            .collect();
        output::json(&json!(rows));
    } else if results.is_empty() {
        output::line(&format!("no sandbox for task {task:?} (profile {})", ctx.profile));
    } else {
        for (c, p) in &results {
            match p {
                CleanupPlan::Keep { .. } => {
                    output::line(&format!("kept {} running (persist mode; use --force to remove)", c.name))
                }
                _ => output::line(&format!("removed {}", c.name)),
            }
        }
        if let Some(Ok(note)) = &folder {
            output::line(note);
        }
    }
    if let Some(Err(e)) = &folder {
        eprintln!("berth: {e}");
        return Ok(Exit::FAILURE);
    }
    Ok(Exit::OK)
}

fn print_reap(ctx: &Ctx, report: &ReapReport, folders: &[crate::sandbox::folders::SweptFolder]) {
    if ctx.json {
        output::json(&json!({
            "dry_run": report.dry_run,
            "removed": report.removed,
            "skipped": report.skipped,
            "failed": report.failed.iter().map(|(id, e)| json!({"id": id, "error": e})).collect::<Vec<_>>(),
            "folders": folders,
        }));
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
    output::table(&["CONTAINER", "ACTION", "REASON"], &rows);
}
