//! The dashboard's routes: pages, `/api/…` (the same views as JSON), the event stream, `/metrics`, `/healthz` and
//! the two assets, all behind the token middleware.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;

use super::actions::{self, blocking};
use super::{Web, auth, live, pages, sandboxes, views};
use crate::edge::context::Ctx;
use crate::edge::error::Failure;

type Params = Query<HashMap<String, String>>;

pub(crate) fn router(web: Arc<Web>) -> Router {
    Router::new()
        .route("/", get(board_page))
        .route("/tasks/{id}", get(task_page))
        .route("/profiles", get(profiles_page))
        .route("/hosts", get(hosts_page))
        .route("/diagnostics", get(diagnostics_page))
        .route("/sandboxes", get(sandboxes::page))
        .route("/events", get(live::events))
        .route("/api/boards", get(api_board_names))
        .route("/api/board", get(api_board))
        .route("/api/tasks", post(actions::create))
        .route("/api/tasks/{id}", get(api_task))
        .route("/api/tasks/{id}/log", get(api_log))
        .route("/api/tasks/{id}/{action}", post(actions::act))
        .route("/api/profiles", get(api_profiles))
        .route("/api/hosts", get(api_hosts))
        .route("/api/diagnostics", get(api_diagnostics))
        .route("/api/sandboxes", get(sandboxes::api))
        .route("/api/sandboxes/{id}/{action}", post(sandboxes::act))
        .route("/api/dispatch", post(actions::dispatch))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/assets/app.js", get(|| async { ([(header::CONTENT_TYPE, "text/javascript")], ASSET_JS) }))
        .route("/assets/app.css", get(|| async { ([(header::CONTENT_TYPE, "text/css")], ASSET_CSS) }))
        .fallback(|| async { (StatusCode::NOT_FOUND, "no such page\n") })
        .layer(middleware::from_fn_with_state(Arc::clone(&web), auth::require))
        .with_state(web)
}

/// Served from the binary: no build step, no files beside it.
const ASSET_JS: &str = include_str!("assets/app.js");
const ASSET_CSS: &str = include_str!("assets/app.css");

fn status_of(f: &Failure) -> StatusCode {
    if f.code == crate::edge::error::Exit::USAGE { StatusCode::BAD_REQUEST } else { StatusCode::INTERNAL_SERVER_ERROR }
}

/// A view as a page (or its live fragment alone), or the page with its one-line error.
fn page<T>(view: Result<T, Failure>, fragment: bool, render: impl FnOnce(&T, bool) -> maud::Markup) -> Response {
    match view {
        Ok(v) => Html(render(&v, fragment).into_string()).into_response(),
        Err(f) => (status_of(&f), Html(pages::error(&f.message).into_string())).into_response(),
    }
}

/// A view as JSON, or `{"error": …}`.
fn api<T: Serialize>(view: Result<T, Failure>) -> Response {
    match view {
        Ok(v) => axum::Json(v).into_response(),
        Err(f) => (status_of(&f), axum::Json(views::ApiError { error: f.message })).into_response(),
    }
}

/// Reads a view off the runtime's thread: a large board takes a while to read, and the gateway's ticks share the
/// runtime.
async fn read<T: Send + 'static>(
    web: &Arc<Web>,
    f: impl FnOnce(&Ctx) -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    blocking(web, f).await
}

fn wants_fragment(q: &HashMap<String, String>) -> bool {
    q.get("fragment").is_some_and(|v| v == "1")
}

async fn board_view(web: &Arc<Web>, q: &HashMap<String, String>) -> Result<views::BoardView, Failure> {
    let slug = q.get("board").cloned().unwrap_or_else(|| "default".to_owned());
    let archived = q.get("archived").is_some_and(|v| v == "1" || v == "true");
    read(web, move |ctx| views::board(ctx, &slug, archived)).await
}

async fn board_page(State(web): State<Arc<Web>>, Query(q): Params) -> Response {
    let v = board_view(&web, &q).await;
    page(v, wants_fragment(&q), |v, frag| if frag { pages::columns(v) } else { pages::board(v) })
}

async fn api_board(State(web): State<Arc<Web>>, Query(q): Params) -> Response {
    api(board_view(&web, &q).await)
}

async fn api_board_names(State(web): State<Arc<Web>>) -> Response {
    api(read(&web, views::boards).await)
}

async fn task_page(State(web): State<Arc<Web>>, Path(id): Path<String>, Query(q): Params) -> Response {
    let key = id.clone();
    let v = read(&web, move |ctx| views::task(ctx, &key)).await;
    page(v, wants_fragment(&q), |v, frag| if frag { pages::task_detail(v) } else { pages::task(&id, v) })
}

async fn api_task(State(web): State<Arc<Web>>, Path(id): Path<String>) -> Response {
    api(read(&web, move |ctx| views::task(ctx, &id)).await)
}

/// `GET /api/tasks/{id}/log?offset=N`: the log from byte N on, and the offset to ask for next.
/// An id that would name another file (`..%2F..%2Fx`: the log is `<logs>/<id>.log`) is no task's: 404.
async fn api_log(State(web): State<Arc<Web>>, Path(id): Path<String>, Query(q): Params) -> Response {
    if domain::ids::TaskId::parse(&id).ok().and_then(|t| t.as_file_stem().map(str::to_owned)).is_none() {
        let error = format!("no task {:?}: a task id names no path", crate::edge::redact::redact(&id));
        return (StatusCode::NOT_FOUND, axum::Json(views::ApiError { error })).into_response();
    }
    let offset = q.get("offset").and_then(|o| o.parse().ok()).unwrap_or(0);
    api(read(&web, move |ctx| Ok(views::log_from(ctx, &id, offset))).await)
}

async fn profiles_page(State(web): State<Arc<Web>>) -> Response {
    page(read(&web, views::profiles).await, false, |v, _| pages::profiles(v))
}

async fn api_profiles(State(web): State<Arc<Web>>) -> Response {
    api(read(&web, views::profiles).await)
}

async fn hosts_page(State(web): State<Arc<Web>>) -> Response {
    page(read(&web, views::hosts).await, false, |v, _| pages::hosts(v))
}

async fn api_hosts(State(web): State<Arc<Web>>) -> Response {
    api(read(&web, views::hosts).await)
}

async fn diagnostics_page(State(web): State<Arc<Web>>) -> Response {
    page(read(&web, views::diagnostics).await, false, |v, _| pages::diagnostics(v))
}

async fn api_diagnostics(State(web): State<Arc<Web>>) -> Response {
    api(read(&web, views::diagnostics).await)
}

async fn metrics(State(web): State<Arc<Web>>) -> Response {
    match read(&web, super::metrics::render).await {
        Ok(text) => ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text)
            .into_response(),
        Err(f) => (status_of(&f), format!("{}\n", f.message)).into_response(),
    }
}
