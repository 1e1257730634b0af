//! Removing the sandboxes of finished tasks: one task's (its worker, `kanban complete`, `archive`, the dashboard) or
//! a batch of them with one listing of the engine (the gateway's relay, `relay.rs`, and the runner, `runner.rs`).

use domain::ids::{ProfileName, TaskId};
use domain::policy::cleanup::ReleaseMode;
use domain::service;

use crate::edge::context::Ctx;
use crate::sandbox;

/// [`remove_task_sandbox`] with a progress note on a terminal.
pub async fn remove_task_sandbox_shown(ctx: &Ctx, task: &str, assignee: &str) {
    let note = format!("removing the sandbox of {task}");
    crate::edge::output::with_progress(ctx.json, &note, remove_task_sandbox(ctx, task, assignee)).await;
}

/// Removes a task's sandbox (any mode) when its task is finished with it; best effort, bounded.
pub async fn remove_task_sandbox(ctx: &Ctx, task: &str, assignee: &str) {
    remove_task_sandboxes(ctx, &[(task.to_owned(), assignee.to_owned())]).await;
}

/// Removes the sandboxes of finished tasks `(task, assignee)` with one listing of the engine (one task lists by its
/// own labels); best effort, bounded.
pub async fn remove_task_sandboxes(ctx: &Ctx, tasks: &[(String, String)]) {
    let mut engine = None;
    remove_task_sandboxes_on(ctx, &mut engine, tasks).await;
}

/// [`remove_task_sandboxes`] on a kept engine connection (made when `None`, dropped when the engine failed): the
/// gateway's releaser, which removes what queued meanwhile as one batch.
pub async fn remove_task_sandboxes_on(
    ctx: &Ctx,
    engine: &mut Option<std::sync::Arc<dyn domain::ports::Engine>>,
    tasks: &[(String, String)],
) {
    let identities: Vec<_> = tasks
        .iter()
        .filter_map(|(t, a)| Some(sandbox::identity_of(ctx, TaskId::parse(t).ok()?, ProfileName::parse(a).ok()?)))
        .collect();
    let labels = match identities.as_slice() {
        [] => return,
        [one] => one.upstream_labels(),
        _ => std::collections::BTreeMap::from([(domain::label::LABEL_AGENT.to_owned(), "1".to_owned())]),
    };
    let work = async {
        if engine.is_none() {
            *engine = sandbox::connect(ctx).await.ok();
        }
        let rt = engine.clone()?;
        let query = domain::ports::ListQuery { labels, states: vec![] };
        let Ok(listed) = domain::ports::ContainerRuntime::list(&*rt, &query).await else {
            *engine = None;
            return None;
        };
        for c in listed.iter().filter(|c| identities.iter().any(|i| i.owns(c))) {
            let _ = service::release(&*rt, Some(&c.id), ReleaseMode::Force).await;
        }
        // Their snapshots go with them (a suspended sandbox is only its snapshots): one listing for the batch.
        let names: std::collections::BTreeSet<String> = identities.iter().map(|i| i.persistent_name()).collect();
        if let Ok(snaps) = sandbox::snapshots::in_home(&*rt, Some(&ctx.home_id()), None).await {
            let theirs =
                snaps.iter().filter(|s| s.label(domain::label::LABEL_SNAPSHOT_OF).is_some_and(|n| names.contains(n)));
            for s in theirs {
                let _ = sandbox::snapshots::remove_one(&*rt, s).await;
            }
        }
        Some(())
    };
    if tokio::time::timeout(sandbox::TEARDOWN_WAIT, work).await.is_err() {
        *engine = None;
        tracing::warn!(
            "removing the sandboxes of {} finished task(s) did not finish in time; the reaper will take them",
            tasks.len()
        );
    }
}

/// A finished task's sandbox to remove, `(task, assignee)`, and what follows its removal (given whether it was tried).
pub type Removal = ((String, String), Box<dyn FnOnce(bool) + Send>);

/// A remover of finished tasks' sandboxes on a thread of its own: what is queued while it works is removed together,
/// with one listing of the engine (a drain of trivial tasks would otherwise ask the engine once per task), and only
/// then does each removal's sequel run. Without a runtime for it, the sequels run at once, told nothing was removed.
/// Batches start at least `pace` apart (more removals a listing when nothing waits for them).
pub fn remover(ctx: &Ctx, pace: std::time::Duration) -> std::sync::mpsc::Sender<Removal> {
    let (tx, rx) = std::sync::mpsc::channel::<Removal>();
    let ctx = ctx.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok();
        let mut engine = None;
        while let Ok(first) = rx.recv() {
            let began = std::time::Instant::now();
            let mut batch = vec![first];
            batch.extend(rx.try_iter());
            let tasks: Vec<(String, String)> = batch.iter().map(|(t, _)| t.clone()).collect();
            if let Some(rt) = &rt {
                rt.block_on(remove_task_sandboxes_on(&ctx, &mut engine, &tasks));
            }
            for (_, then) in batch {
                then(rt.is_some());
            }
            std::thread::sleep(pace.saturating_sub(began.elapsed())); // the pace between listings
        }
    });
    tx
}
