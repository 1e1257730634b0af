//! The dashboard's writes: create, edit, assign, block, unblock, promote, retry, complete, reclaim, archive, remove
//! and dispatch now, each through the same `BoardStore` calls and checks as its `berth kanban` command, answering
//! `{"ok": true, "message": …}` or `{"error": …}` (one line) with a 4xx/5xx status.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, OptionalFromRequest, Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use domain::board::{NewTask, TaskEdit, WorkerRef};
use domain::ids::{BoardSlug, ProfileName};
use domain::ports::Clock;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::Web;
use crate::edge::context::SystemClock;
use crate::edge::error::Failure;

/// The answer to a write.
pub(super) fn answer(result: Result<String, Failure>) -> Response {
    match result {
        Ok(message) => Json(super::views::ApiDone { ok: true, message }).into_response(),
        Err(f) => {
            let status = if f.code == crate::edge::error::Exit::USAGE {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            };
            (status, Json(super::views::ApiError { error: f.message })).into_response()
        }
    }
}

/// A write's JSON body. A body that is not JSON, lacks the JSON content type or misses a field is refused as any
/// write is, `{"error": …}`, with the status axum gives it (400, 415 or 422), not axum's plain text.
pub(crate) struct Body<T>(pub T);

fn refused(e: &JsonRejection) -> Response {
    (e.status(), Json(super::views::ApiError { error: e.body_text() })).into_response()
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        let body = <Json<T> as FromRequest<S>>::from_request(req, state).await;
        body.map(|Json(v)| Self(v)).map_err(|e| refused(&e))
    }
}

/// A body that may be left out (no content type at all).
impl<S: Send + Sync, T: DeserializeOwned> OptionalFromRequest<S> for Body<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Option<Self>, Response> {
        let body = <Json<T> as OptionalFromRequest<S>>::from_request(req, state).await;
        body.map(|b| b.map(|Json(v)| Self(v))).map_err(|e| refused(&e))
    }
}

/// Runs a store write off the runtime's thread (a write may wait on the board's lock, which must not hold up the
/// gateway's ticks or other requests).
pub(super) async fn blocking<T: Send + 'static>(
    web: &Arc<Web>,
    f: impl FnOnce(&crate::edge::context::Ctx) -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    let web = Arc::clone(web);
    tokio::task::spawn_blocking(move || {
        let done = f(&web.ctx);
        // A read from now on sees the write: it joins and reuses nothing read before it.
        web.wrote();
        done
    })
    .await
    .map_err(|e| Failure::other(format!("the dashboard's write did not finish: {e}")))?
}

/// A worker a transition took its task from is stopped, as the CLI does (verified pid and start).
async fn stop(worker: Option<WorkerRef>) {
    if let Some(w) = worker {
        let _ = crate::board::worker::stop(Some(w.pid), w.start).await;
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct Create {
    #[serde(default = "default_board")]
    board: String,
    title: String,
    #[serde(default)]
    assignee: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    priority: i64,
}

fn default_board() -> String {
    "default".to_owned()
}

fn blank_to_none(s: Option<String>) -> Option<String> {
    s.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// `POST /api/tasks`: `kanban create`.
pub(crate) async fn create(State(web): State<Arc<Web>>, Body(c): Body<Create>) -> Response {
    answer(
        blocking(&web, move |ctx| {
            let b = BoardSlug::parse(&c.board).map_err(Failure::usage_of)?;
            if c.title.trim().is_empty() {
                return Err(Failure::usage("a task needs a title"));
            }
            let assignee = blank_to_none(c.assignee);
            if let Some(a) = &assignee {
                ProfileName::parse(a).map_err(Failure::usage_of)?;
                crate::board::edit::check_assignee(ctx, a, false)?;
            }
            let command = blank_to_none(c.command);
            crate::board::edit::check_command(ctx, command.as_deref())?;
            let new = NewTask {
                title: c.title,
                body: blank_to_none(c.body),
                command,
                assignee,
                priority: c.priority,
                created_by: Some(ctx.profile.as_str().to_owned()),
                ..NewTask::default()
            };
            let id = crate::board::new_task_id();
            let t = crate::edge::open::open_store(ctx)?.create_task(&b, &id, &new, SystemClock.now())?;
            Ok(format!("created {} ({})", t.id, t.status))
        })
        .await,
    )
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Reason {
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    profile: Option<String>,
    /// For `request-changes`: what to change (its next run is given it).
    #[serde(default)]
    note: Option<String>,
    /// For `complete`: what came of it.
    #[serde(default)]
    result: Option<String>,
    /// For `edit`: the fields to change.
    #[serde(flatten)]
    edit: Edit,
}

/// `POST /api/tasks/{id}/{action}`: assign, block, unblock, promote, retry, complete, approve, request-changes,
/// reclaim, archive, remove, edit.
pub(crate) async fn act(
    State(web): State<Arc<Web>>,
    Path((id, action)): Path<(String, String)>,
    body: Option<Body<Reason>>,
) -> Response {
    let Body(r) = body.unwrap_or(Body(Reason::default()));
    let reason = blank_to_none(r.reason);
    let profile = blank_to_none(r.profile);
    let result = match action.as_str() {
        "assign" => {
            blocking(&web, move |ctx| {
                if let Some(p) = &profile {
                    ProfileName::parse(p).map_err(Failure::usage_of)?;
                    crate::board::edit::check_assignee(ctx, p, false)?;
                }
                let t = crate::edge::open::open_store(ctx)?.assign(&id, profile.as_deref(), SystemClock.now())?;
                Ok(format!("assigned {} to {}", t.id, t.assignee.as_deref().unwrap_or("nobody")))
            })
            .await
        }
        "unblock" => {
            blocking(&web, move |ctx| {
                let t = crate::edge::open::open_store(ctx)?.unblock(&id, SystemClock.now())?;
                Ok(format!("unblocked {} ({})", t.id, t.status))
            })
            .await
        }
        "promote" => {
            blocking(&web, move |ctx| {
                let t = crate::edge::open::open_store(ctx)?.promote(&id, SystemClock.now())?;
                Ok(format!("promoted {} out of triage ({})", t.id, t.status))
            })
            .await
        }
        "approve" => {
            blocking(&web, move |ctx| {
                let t = crate::edge::open::open_store(ctx)?.approve(&id, SystemClock.now())?;
                Ok(format!("approved {}: done", t.id))
            })
            .await
        }
        "request-changes" => {
            let note = blank_to_none(r.note).map(|n| crate::edge::redact::redact(&n));
            blocking(&web, move |ctx| {
                let note = note.ok_or_else(|| Failure::usage("a request for changes needs a note"))?;
                let t = crate::edge::open::open_store(ctx)?.request_changes(&id, &note, SystemClock.now())?;
                Ok(format!("changes requested on {} ({})", t.id, t.status))
            })
            .await
        }
        "retry" => blocking(&web, move |ctx| retry(ctx, &id)).await,
        "complete" => complete(&web, id, blank_to_none(r.result)).await,
        "block" | "reclaim" | "archive" | "remove" => stopping(&web, id, action, reason).await,
        "edit" => blocking(&web, move |ctx| edit(ctx, &id, r.edit)).await,
        other => Err(Failure::usage(format!("no action {other:?}"))),
    };
    answer(result)
}

/// `retry`: a blocked task unblocked, and a waiting one (blocked, ready or todo) no longer held back by its time (a
/// retry's backoff, a schedule): the next tick may start it.
fn retry(ctx: &crate::edge::context::Ctx, id: &str) -> Result<String, Failure> {
    use domain::board::TaskStatus as S;
    let mut store = crate::edge::open::open_store(ctx)?;
    let now = SystemClock.now();
    let before = store.task(id)?;
    let t = match before.status {
        S::Blocked => store.unblock(id, now)?,
        S::Ready | S::Todo => before,
        other => {
            return Err(Failure::usage(format!(
                "task {id} is {other}; retry takes a blocked task or one waiting for its time"
            )));
        }
    };
    let t = if t.not_before.is_some_and(|at| at > now.as_millis()) { store.schedule(id, None, now)? } else { t };
    Ok(format!("retrying {} ({})", t.id, t.status))
}

/// `complete`, as `kanban complete ID` by hand: the task done at once, its worker stopped, its sandbox released.
async fn complete(web: &Arc<Web>, id: String, result: Option<String>) -> Result<String, Failure> {
    let (before, t, had_runs) = blocking(web, move |ctx| {
        let mut store = crate::edge::open::open_store(ctx)?;
        let before = store.task(&id)?;
        let result = result.as_deref().map(crate::edge::redact::redact);
        let ending = domain::board::RunEnding::Completed { result: result.as_deref(), exit_code: None };
        let breaker = domain::board::Breaker::at_once(1);
        let t = match domain::board::record_run_end(&mut *store, &id, None, &ending, breaker, SystemClock.now())? {
            domain::board::RunRecorded::Done(t) => *t,
            _ => store.task(&id)?,
        };
        let had_runs = !store.runs(&id)?.is_empty();
        Ok((before, t, had_runs))
    })
    .await?;
    let _ = crate::board::worker::stop(before.worker_pid, before.worker_start).await;
    if let Some(a) = t.assignee.as_deref().filter(|_| had_runs) {
        crate::board::release::remove_task_sandbox(&web.ctx, &t.id, a).await;
    }
    Ok(format!("completed {} ({})", t.id, t.status))
}

/// The transitions that may take a task from its worker: the write, then the verified stop (and for archive and
/// remove, the task's sandbox and output, as `kanban archive` and `kanban rm` do).
async fn stopping(web: &Arc<Web>, id: String, action: String, reason: Option<String>) -> Result<String, Failure> {
    let (worker, t, had_runs) = blocking(web, {
        let (id, action) = (id.clone(), action.clone());
        move |ctx| {
            let mut store = crate::edge::open::open_store(ctx)?;
            let now = SystemClock.now();
            let had_runs = !store.runs(&id)?.is_empty();
            let (w, t) = match action.as_str() {
                "block" => (store.block(&id, None, reason.as_deref(), now)?, store.task(&id)?),
                "reclaim" => (store.reclaim(&id, reason.as_deref(), now)?, store.task(&id)?),
                "archive" => (store.archive(&id, now)?, store.task(&id)?),
                _ => {
                    let (t, w) = store.remove(&id, now)?;
                    (w, t)
                }
            };
            Ok((w, t, had_runs))
        }
    })
    .await?;
    stop(worker).await;
    if action == "archive" || action == "remove" {
        if let Some(a) = t.assignee.as_deref().filter(|_| had_runs) {
            crate::board::release::remove_task_sandbox(&web.ctx, &t.id, a).await;
        }
        crate::board::retention::remove_task_output(&web.ctx, &t.id, t.assignee.as_deref()).await;
    }
    let verb = match action.as_str() {
        "block" => "blocked",
        "reclaim" => "reclaimed",
        "archive" => "archived",
        _ => "removed",
    };
    Ok(format!("{verb} {id}"))
}

/// What `POST /api/tasks/{id}/edit` may change (absent fields stay as they are).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Edit {
    title: Option<String>,
    body: Option<String>,
    command: Option<String>,
    priority: Option<i64>,
    assignee: Option<String>,
}

/// `kanban edit`, with its checks: the assignee is a profile, and an unfinished task keeps the command the built-in
/// worker needs.
fn edit(ctx: &crate::edge::context::Ctx, id: &str, e: Edit) -> Result<String, Failure> {
    if let Some(a) = e.assignee.as_deref().map(str::trim).filter(|a| !a.is_empty()) {
        ProfileName::parse(a).map_err(Failure::usage_of)?;
        crate::board::edit::check_assignee(ctx, a, false)?;
    }
    if e.title.is_none() && e.body.is_none() && e.command.is_none() && e.priority.is_none() && e.assignee.is_none() {
        return Err(Failure::usage("nothing to change: give title, body, command, priority or assignee"));
    }
    let mut store = crate::edge::open::open_store(ctx)?;
    let before = store.task(id)?;
    if !matches!(before.status, domain::board::TaskStatus::Done | domain::board::TaskStatus::Archived) {
        crate::board::edit::check_command(ctx, e.command.as_deref().or(before.command.as_deref()))?;
    }
    let edit = TaskEdit {
        title: e.title,
        body: e.body,
        command: e.command,
        priority: e.priority,
        assignee: e.assignee,
        max_runtime_seconds: None,
    };
    let t = store.edit(id, &edit, SystemClock.now())?;
    Ok(format!("edited {}", t.id))
}

#[derive(Debug, Deserialize)]
pub(crate) struct Dispatch {
    #[serde(default = "default_board")]
    board: String,
}

/// `POST /api/dispatch`: one tick of a board now, as `kanban dispatch` (the store's tick lock keeps it and the
/// gateway's own ticks from overlapping). The tick runs on a runtime of its own on a blocking thread: the dispatcher's
/// future is not `Send`, which a handler's must be.
pub(crate) async fn dispatch(State(web): State<Arc<Web>>, Body(d): Body<Dispatch>) -> Response {
    let result = blocking(&web, move |ctx| {
        let b = BoardSlug::parse(&d.board).map_err(Failure::usage_of)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::other(format!("cannot start a dispatch: {e}")))?;
        let r = rt.block_on(crate::board::dispatch(ctx, &b, &crate::board::DispatchArgs::default()))?;
        super::metrics::record_tick(&r);
        Ok(format!("dispatched {}: {} spawned", b.as_str(), r.spawned.len()))
    })
    .await;
    answer(result)
}
