//! `kanban edit` and `kanban rm`, and the assignee check that catches a typo where it is made (`assign`, `edit`):
//! a task assigned to a profile that does not exist would otherwise wait forever as "non-spawnable".

use domain::board::TaskEdit;
use domain::board::TaskStatus;
use domain::ids::ProfileName;
use domain::ports::ProfileResolver;
use domain::time::Timestamp;

use crate::cli::KanbanCmd;
use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::{board::worker, edge::output};

/// Refuses an assignee that is not a profile of this home, unless `allow` (profiles made later).
///
/// # Errors
/// A usage failure naming the profile and the way out.
pub fn check_assignee(ctx: &Ctx, assignee: &str, allow: bool) -> Result<(), Failure> {
    let name = assignee.trim();
    if allow || name.is_empty() || ctx.profiles().exists(name) {
        return Ok(());
    }
    let profiles = ctx.profiles().list();
    let hint = domain::suggest::did_you_mean(name, profiles.iter().map(String::as_str));
    Err(Failure::usage(format!(
        "no profile {name:?}{hint}: its tasks would never run; create it (`berth profile create {name}`) or pass \
         --allow-unknown-assignee"
    )))
}

/// Says on stderr why a listing filtered by `assignee` came out empty when no profile has that name (a typo shows
/// as an empty table otherwise), with the nearest profile.
pub fn note_unknown_assignee(ctx: &Ctx, assignee: Option<&str>, listed_none: bool) {
    let Some(name) = assignee.map(str::trim).filter(|a| listed_none && !ctx.profiles().exists(a)) else {
        return;
    };
    let profiles = ctx.profiles().list();
    let hint = domain::suggest::did_you_mean(name, profiles.iter().map(String::as_str));
    eprintln!("berth: no task is assigned to {name:?} and no profile has that name{hint}");
}

/// Refuses a task the built-in worker could never run: no command (or a blank one) while `kanban.worker_command` is
/// empty. Such a task would be dispatched, fail at once and be retried until the breaker blocks it.
///
/// # Errors
/// A usage failure saying what to give.
pub fn check_command(ctx: &Ctx, command: Option<&str>) -> Result<(), Failure> {
    if !ctx.settings.kanban.worker_command.trim().is_empty() || command.is_some_and(|c| !c.trim().is_empty()) {
        return Ok(());
    }
    Err(Failure::usage(
        "a task for the built-in worker needs a command: give --command 'CMD' (or set kanban.worker_command for an \
         external worker)",
    ))
}

/// `kanban edit` / `kanban rm`.
///
/// # Errors
/// Bad input (exit 2) or a store failure.
pub async fn command(ctx: &Ctx, cmd: &KanbanCmd, now: Timestamp) -> Result<u8, Failure> {
    match cmd {
        KanbanCmd::Edit { id, title, body, command, priority, assignee, allow_unknown_assignee, max_runtime } => {
            if let Some(a) = assignee.as_deref().map(str::trim).filter(|a| !a.is_empty()) {
                ProfileName::parse(a).map_err(Failure::usage_of)?;
                check_assignee(ctx, a, *allow_unknown_assignee)?;
            }
            if max_runtime.is_some_and(|m| m < 1) {
                return Err(Failure::usage("--max-runtime must be at least 1"));
            }
            let edit = TaskEdit {
                title: title.clone(),
                body: body.clone(),
                command: command.clone(),
                priority: *priority,
                assignee: assignee.clone(),
                max_runtime_seconds: *max_runtime,
            };
            if title.is_none()
                && body.is_none()
                && command.is_none()
                && priority.is_none()
                && assignee.is_none()
                && max_runtime.is_none()
            {
                return Err(Failure::usage(
                    "nothing to change: give --title, --body, --command, --priority, --assignee or --max-runtime",
                ));
            }
            let mut store = crate::edge::open::open_store(ctx)?;
            // An edit that leaves an unfinished task without the command the built-in worker needs is refused,
            // whether it clears the command or keeps a missing one.
            let before = store.task(id)?;
            if !matches!(before.status, TaskStatus::Done | TaskStatus::Archived) {
                check_command(ctx, command.as_deref().or(before.command.as_deref()))?;
            }
            let t = store.edit(id, &edit, now)?;
            if ctx.json {
                output::json(&serde_json::to_value(&t).unwrap_or_default());
            } else if t.status == TaskStatus::Blocked {
                // An edit is often the fix for why it was blocked; it still waits for an unblock.
                output::line(&format!(
                    "edited {0}; it is still blocked: `berth kanban unblock {0}` runs it again",
                    t.id
                ));
            } else {
                output::line(&format!("edited {}", t.id));
            }
        }
        KanbanCmd::Rm { id } => {
            let mut store = crate::edge::open::open_store(ctx)?;
            let had_runs = !store.runs(id)?.is_empty();
            let (t, w) = store.remove(id, now)?;
            worker::stop_shown(ctx, id, w.map(|w| w.pid), w.and_then(|w| w.start)).await;
            if let Some(assignee) = t.assignee.as_deref().filter(|_| had_runs) {
                super::release::remove_task_sandbox_shown(ctx, &t.id, assignee).await;
            }
            // Off the board, its output (workspace folder, log) has no owner any more.
            crate::board::retention::remove_task_output(ctx, &t.id, t.assignee.as_deref()).await;
            if ctx.json {
                output::json(&crate::board::views::Removed { removed: t.id.clone(), board: t.board.clone() });
            } else {
                output::line(&format!("removed {}", t.id));
            }
        }
        _ => {}
    }
    Ok(0)
}
