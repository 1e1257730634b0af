//! Retention of finished tasks' output (their workspace folder and worker log): `berth kanban prune`, the removal
//! at `kanban archive`/`kanban rm`, and the gateway's cleanup pass. Which tasks' output goes is the domain's
//! `expired_outputs`; this module finds the files and removes them.

use std::path::{Path, PathBuf};

use domain::ids::BoardSlug;
use domain::policy::retention::{Expiry, TaskOutput, expired_outputs};
use domain::ports::Engine;
use domain::time::Timestamp;
use serde::Serialize;

use crate::edge::context::Ctx;
use crate::sandbox::folders::Folders;

/// One task whose output goes (or, in a dry run, would go).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pruned {
    pub task: String,
    pub board: String,
    pub status: String,
    /// Why: `expired` (with its age and the retention) or `archived`.
    pub reason: Expiry,
    /// The task's sandbox folder (its workspace and /root), when it exists.
    pub folder: Option<String>,
    /// Its worker log files (the log and its rotated copies) that exist.
    pub logs: Vec<String>,
    /// What could not be removed; `None` when everything went (or, in a dry run, would).
    pub error: Option<String>,
}

/// The sandbox folder of a task run by `assignee` (where its worker's work lands; `kanban show` prints its
/// `workspace/`).
pub fn task_folder(folders: &Folders, task: &str, assignee: Option<&str>) -> Option<PathBuf> {
    Some(folders.of(&folders.task_identity(task, assignee)?))
}

/// A task's worker log and its rotated copies (`<task>.log`, `<task>.log.1`, …) that exist.
pub fn log_files(home: &Path, task: &str) -> Vec<PathBuf> {
    let dir = home.join("kanban").join("logs");
    let base = format!("{task}.log");
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name == base.as_str()
                || name.strip_prefix(&base).and_then(|r| r.strip_prefix('.')).is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// `kanban.retention_days` in seconds; `None` when 0 (kept until archived).
pub fn retention_secs(ctx: &Ctx) -> Option<i64> {
    ctx.settings.kanban.retention_days.seconds()
}

/// The tasks of every board in `home` whose output has expired (`retention_secs` past done, or archived) and still
/// has a folder or a log on disk. A board that cannot be read contributes nothing (it is reported by the board
/// commands, not here).
///
/// # Errors
/// One line when the board file cannot be opened.
pub fn plan(folders: &Folders, now: Timestamp, retention_secs: Option<i64>) -> Result<Vec<Pruned>, String> {
    let Some(store) = folders.open_board().map_err(|e| e.to_string())? else { return Ok(Vec::new()) };
    let boards = store.boards().map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for b in boards {
        let Ok(slug) = BoardSlug::parse(&b.slug) else { continue };
        let tasks = store.tasks(&slug, None, None).map_err(|e| e.to_string())?;
        let outputs: Vec<TaskOutput> = tasks
            .iter()
            .map(|t| TaskOutput {
                id: t.id.clone(),
                status: t.status,
                finished_at: t.completed_at.map(Timestamp::from_millis),
            })
            .collect();
        for (id, reason) in expired_outputs(now, &outputs, retention_secs) {
            let Some(t) = tasks.iter().find(|t| t.id == id) else { continue };
            let folder = task_folder(folders, &t.id, t.assignee.as_deref()).filter(|d| d.symlink_metadata().is_ok());
            let logs = log_files(&folders.home, &t.id);
            if folder.is_none() && logs.is_empty() {
                continue;
            }
            out.push(Pruned {
                task: t.id.clone(),
                board: b.slug.clone(),
                status: t.status.to_string(),
                reason,
                folder: folder.map(|d| d.display().to_string()),
                logs: logs.iter().map(|l| l.display().to_string()).collect(),
                error: None,
            });
        }
    }
    Ok(out)
}

/// Removes what `pruned` lists, recording failures on each entry.
pub async fn apply(folders: &Folders, rt: Option<&dyn Engine>, pruned: &mut [Pruned]) {
    for p in pruned {
        let mut errors = Vec::new();
        if let Some(dir) = &p.folder {
            let dir = PathBuf::from(dir);
            let profile = dir.parent().and_then(|d| d.file_name()).map(|n| n.to_string_lossy().into_owned());
            if let Err(e) = folders.remove(rt, &dir, profile.as_deref().unwrap_or("unknown")).await {
                errors.push(e);
            }
        }
        for log in &p.logs {
            match std::fs::remove_file(log) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => errors.push(format!("cannot remove {log}: {e}")),
            }
        }
        p.error = (!errors.is_empty()).then(|| errors.join("; "));
    }
}

/// Removes one task's folder and logs now (at `kanban archive` and `kanban rm`), best effort: what could not be
/// removed is said in one warning line.
pub async fn remove_task_output(ctx: &Ctx, task: &str, assignee: Option<&str>) {
    let folders = Folders::from_ctx(ctx);
    let folder = task_folder(&folders, task, assignee).filter(|d| d.symlink_metadata().is_ok());
    let logs = log_files(&ctx.home, task);
    if folder.is_none() && logs.is_empty() {
        return;
    }
    // The engine is only needed for files the sandbox's root user left; without it, the plain removal still runs.
    let rt = if folder.is_some() { crate::sandbox::connect(ctx).await.ok() } else { None };
    let mut one = [Pruned {
        task: task.to_owned(),
        board: String::new(),
        status: String::new(),
        reason: Expiry::Archived,
        folder: folder.map(|d| d.display().to_string()),
        logs: logs.iter().map(|l| l.display().to_string()).collect(),
        error: None,
    }];
    apply(&folders, rt.as_deref(), &mut one).await;
    if let Some(e) = &one[0].error {
        tracing::warn!("the output of {task} was not all removed: {e}");
    }
}

/// `Expiry` in words, for `kanban prune` and the gateway's line.
pub fn reason_words(reason: &Expiry) -> String {
    match reason {
        Expiry::Archived => "archived".to_owned(),
        Expiry::Expired { age_secs, retention_secs } => {
            format!("done {} ago, past the {} retention", days(*age_secs), days(*retention_secs))
        }
    }
}

/// A retention in words: `7.0d`, `1.5h`, `3s`.
pub fn span(secs: i64) -> String {
    days(secs)
}

/// `90061` → `1.0d`, `3600` → `1.0h`, `5` → `5s`.
fn days(secs: i64) -> String {
    match secs {
        s if s >= 86_400 => format!("{:.1}d", s as f64 / 86_400.0),
        s if s >= 3600 => format!("{:.1}h", s as f64 / 3600.0),
        s if s >= 60 => format!("{:.1}m", s as f64 / 60.0),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_tasks_own_logs_are_found() {
        let tmp = tempfile::tempdir().unwrap();
        let logs = tmp.path().join("kanban").join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        for name in ["t1.log", "t1.log.1", "t1.log.2", "t10.log", "t1.log.bak", "t1.logx"] {
            std::fs::write(logs.join(name), "x").unwrap();
        }
        let found: Vec<String> =
            log_files(tmp.path(), "t1").iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(found, ["t1.log", "t1.log.1", "t1.log.2"]);
        assert!(log_files(tmp.path(), "none").is_empty());
    }

    #[test]
    fn reasons_read_as_words() {
        assert_eq!(reason_words(&Expiry::Archived), "archived");
        assert_eq!(
            reason_words(&Expiry::Expired { age_secs: 8 * 86_400, retention_secs: 7 * 86_400 }),
            "done 8.0d ago, past the 7.0d retention"
        );
    }
}
