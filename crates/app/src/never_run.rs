//! The gateway's warning about tasks that can never run as they are (assigned to a name that is no profile of this
//! home): once per task per gateway process, so the log says it without repeating it every tick.

use std::collections::BTreeSet;
use std::sync::Mutex;

use domain::policy::dispatch::Decision;

use crate::kanban::DispatchReport;

static WARNED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Warns about each task of `r` whose assignee is no profile, the first time this process sees it.
pub fn warn_once(r: &DispatchReport) {
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
}
