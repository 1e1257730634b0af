//! Pre-warm (`kanban.prewarm` N): after each tick, the sandboxes of the next N ready tasks in plan order that wait on a
//! cap (the assignee's, `kanban.max_in_progress`, a tick's spawn limit, or a start-rate limit) are created and started,
//! or resumed when suspended, on a thread of its own, so such a task's first command starts at `berth run` speed. A
//! warm sandbox counts toward nothing but the engine: caps count running tasks. On a shared (PostgreSQL) board it is
//! off: another host may claim the task, and a sandbox warmed here would be left behind.

use std::sync::atomic::{AtomicBool, Ordering};

use domain::policy::dispatch::{Decision, TaskDecision};
use domain::service;

use crate::edge::context::Ctx;

/// One batch at a time: a tick while the last batch still works warms nothing more.
static BUSY: AtomicBool = AtomicBool::new(false);

/// Whether the task waits on a cap (and so is worth warming).
fn waits_on_cap(d: &TaskDecision) -> bool {
    matches!(
        d.decision,
        Decision::SkippedPerProfileCapped { .. }
            | Decision::DeferredMaxInProgress { .. }
            | Decision::DeferredMaxSpawn { .. }
            | Decision::DeferredRateLimited { .. }
    )
}

/// The tasks of one tick's plan worth warming, `(task, assignee)`, in plan order.
pub(super) fn waiting(decisions: &[TaskDecision]) -> impl Iterator<Item = (String, String)> + '_ {
    decisions.iter().filter(|d| waits_on_cap(d)).filter_map(|d| Some((d.task_id.clone(), d.assignee.clone()?)))
}

/// Warms the first `kanban.prewarm` of `tasks` on a thread of its own; nothing when it is 0, on a PostgreSQL board,
/// or while the last batch still runs.
pub(super) fn start(ctx: &Ctx, tasks: Vec<(String, String)>) {
    let n = usize::try_from(ctx.settings.kanban.prewarm).unwrap_or(0);
    if n == 0 || tasks.is_empty() || ctx.database_url().is_some() || BUSY.swap(true, Ordering::AcqRel) {
        return;
    }
    let ctx = ctx.clone();
    let tasks: Vec<_> = tasks.into_iter().take(n).collect();
    let spawned = std::thread::Builder::new().name("berth-prewarm".into()).spawn(move || {
        match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt.block_on(warm_all(&ctx, &tasks)),
            Err(e) => tracing::warn!("gateway pre-warm: no runtime: {e}"),
        }
        BUSY.store(false, Ordering::Release);
    });
    if let Err(e) = spawned {
        tracing::warn!("gateway pre-warm: cannot start its thread: {e}");
        BUSY.store(false, Ordering::Release);
    }
}

async fn warm_all(ctx: &Ctx, tasks: &[(String, String)]) {
    for (task, assignee) in tasks {
        match warm(ctx, task, assignee).await {
            Ok(Some(done)) => tracing::info!("gateway pre-warm: sandbox {done} for task {task} ({assignee})"),
            Ok(None) => {}
            Err(e) => tracing::warn!("gateway pre-warm: task {task} ({assignee}): {}", e.message),
        }
    }
}

/// Makes one task's sandbox run, as its worker would acquire it; `None` when it already ran.
async fn warm(ctx: &Ctx, task: &str, assignee: &str) -> Result<Option<String>, crate::edge::error::Failure> {
    let mut ctx = ctx.clone();
    ctx.profile = domain::ids::ProfileName::parse(assignee).map_err(crate::edge::error::Failure::usage_of)?;
    let identity = crate::sandbox::identity(&ctx, task)?;
    let rt = crate::sandbox::connect(&ctx).await?;
    let req = crate::sandbox::request(&ctx, &*rt, identity).await?;
    if service::attach_running(&*rt, &req).await?.is_some() {
        return Ok(None);
    }
    let got = match crate::sandbox::snapshots::resume_if_suspended(&ctx, &*rt, &req).await? {
        Some(got) => got,
        None => service::acquire(&*rt, &req).await?,
    };
    Ok(Some(format!("{} {}", got.name, got.action.as_str())))
}
