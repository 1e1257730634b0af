//! The gateway's warning about tasks that can never run as they are: assigned to a name that is no profile of this
//! home, or without a command while the built-in worker runs them. Once per task per gateway process, so the log
//! says it without repeating it every tick.

use std::collections::BTreeSet;
use std::sync::Mutex;

use domain::policy::dispatch::Decision;

use crate::board::report::DispatchReport;
use crate::edge::context::Ctx;

/// Tasks already warned about.
static WARNED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
/// Tasks whose command was already looked up (each task is read from the board once, not every tick).
static CHECKED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Warns about each task of `r` that can never run, the first time this process sees it.
pub fn warn_once(ctx: &Ctx, r: &DispatchReport) {
    let Ok(mut warned) = WARNED.lock() else { return };
    for d in &r.plan.decisions {
        if d.decision == Decision::SkippedNonspawnable && warned.insert(d.task_id.clone()) {
            let who = d.assignee.as_deref().unwrap_or("?");
            tracing::warn!(
                "task {} on board {} is assigned to {who:?}, which is no profile here: it will never run \
                 (`berth profile create {who}`, or `berth kanban assign {} PROFILE`)",
                d.task_id,
                r.board,
                d.task_id
            );
        }
    }
    if !ctx.settings.kanban.worker_command.trim().is_empty() {
        return;
    }
    let Ok(mut checked) = CHECKED.lock() else { return };
    let fresh: Vec<&str> =
        r.plan.decisions.iter().map(|d| d.task_id.as_str()).filter(|id| !checked.contains(*id)).collect();
    if fresh.is_empty() {
        return;
    }
    let Ok(Some(store)) = crate::edge::open::open_read_only(ctx) else { return };
    for id in fresh {
        checked.insert(id.to_owned());
        let Ok(task) = store.task(id) else { continue };
        if task.command.as_deref().is_none_or(|c| c.trim().is_empty()) && warned.insert(id.to_owned()) {
            tracing::warn!(
                "task {id} on board {} has no command and the built-in worker runs its task's command: it will \
                 fail every run (`berth kanban edit {id} --command CMD`, or set kanban.worker_command)",
                r.board
            );
        }
    }
}
