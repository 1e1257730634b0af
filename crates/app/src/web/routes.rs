//! The dashboard's routes: pages, `/api/…` (the same views as JSON), the event stream, `/metrics`, `/healthz` and
//! the two assets, all behind the token middleware.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, Uri, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;

use super::actions;
use super::bounded::{Answer, answer};
use super::{Web, auth, live, pages, sandboxes, views};
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
        .route("/chart", get(chart))
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
        .route("/api/chart", get(api_chart))
        .route("/api/sandboxes/{id}/{action}", post(sandboxes::act))
        .route("/api/dispatch", post(actions::dispatch))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
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

const HTML: &str = "text/html; charset=utf-8";

/// A view as a page (or its live fragment alone), or the page with its one-line error.
fn page<T>(view: Result<T, Failure>, fragment: bool, render: impl FnOnce(&T, bool) -> maud::Markup) -> Answer {
    match view {
        Ok(v) => Answer::new(StatusCode::OK, HTML, render(&v, fragment).into_string()),
        Err(f) => Answer::new(status_of(&f), HTML, pages::error(&f.message).into_string()),
    }
}

/// A view as JSON, or `{"error": …}`.
fn api<T: Serialize>(view: Result<T, Failure>) -> Answer {
    let (status, body) = match view {
        Ok(v) => (StatusCode::OK, serde_json::to_string(&v)),
        Err(f) => (status_of(&f), serde_json::to_string(&views::ApiError { error: f.message })),
    };
    match body {
        Ok(body) => Answer::new(status, "application/json", body),
        Err(e) => Answer::new(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", format!("cannot encode: {e}\n")),
    }
}

/// The request's path and query: what an answer is kept under.
fn key_of(uri: &Uri) -> String {
    uri.path_and_query().map_or_else(|| uri.path().to_owned(), ToString::to_string)
}

fn wants_fragment(q: &HashMap<String, String>) -> bool {
    q.get("fragment").is_some_and(|v| v == "1")
}

/// The board a request names (at most `shown` cards a column), its ready cards explained as the dashboard last
/// explained the unchanged board.
fn board_view(web: &Web, q: &HashMap<String, String>, shown: Option<usize>) -> Result<views::BoardView, Failure> {
    let slug = q.get("board").map_or("default", String::as_str);
    let archived = q.get("archived").is_some_and(|v| v == "1" || v == "true");
    let version = web.version();
    views::board(&web.ctx, slug, archived, shown, &|store, b| web.explained.waiting(version, &web.ctx, store, b))
}

async fn board_page(State(web): State<Arc<Web>>, uri: Uri, Query(q): Params) -> Response {
    let w = Arc::clone(&web);
    answer(&web, key_of(&uri), move |_| {
        let view = board_view(&w, &q, Some(pages::CARDS_PER_COLUMN));
        page(view, wants_fragment(&q), |v, frag| if frag { pages::columns(v) } else { pages::board(v) })
    })
    .await
}

async fn api_board(State(web): State<Arc<Web>>, uri: Uri, Query(q): Params) -> Response {
    let w = Arc::clone(&web);
    answer(&web, key_of(&uri), move |_| api(board_view(&w, &q, None))).await
}

async fn api_board_names(State(web): State<Arc<Web>>, uri: Uri) -> Response {
    answer(&web, key_of(&uri), |ctx| api(views::boards(ctx))).await
}

async fn task_page(State(web): State<Arc<Web>>, uri: Uri, Path(id): Path<String>, Query(q): Params) -> Response {
    answer(&web, key_of(&uri), move |ctx| {
        page(
            views::task(ctx, &id),
            wants_fragment(&q),
            |v, frag| {
                if frag { pages::task_detail(v) } else { pages::task(&id, v) }
            },
        )
    })
    .await
}

async fn api_task(State(web): State<Arc<Web>>, uri: Uri, Path(id): Path<String>) -> Response {
    answer(&web, key_of(&uri), move |ctx| api(views::task(ctx, &id))).await
}

/// `GET /api/tasks/{id}/log?offset=N`: the log from byte N on, and the offset to ask for next.
/// An id that would name another file (`..%2F..%2Fx`: the log is `<logs>/<id>.log`) is no task's: 404.
async fn api_log(State(web): State<Arc<Web>>, uri: Uri, Path(id): Path<String>, Query(q): Params) -> Response {
    if domain::ids::TaskId::parse(&id).ok().and_then(|t| t.as_file_stem().map(str::to_owned)).is_none() {
        let error = format!("no task {:?}: a task id names no path", crate::edge::redact::redact(&id));
        return (StatusCode::NOT_FOUND, axum::Json(views::ApiError { error })).into_response();
    }
    let offset = match q.get("offset").map(|o| o.parse::<u64>()) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            let error = "offset: expected a byte offset, a whole number 0 or more".to_owned();
            return (StatusCode::BAD_REQUEST, axum::Json(views::ApiError { error })).into_response();
        }
    };
    answer(&web, key_of(&uri), move |ctx| api(Ok(views::log_from(ctx, &id, offset)))).await
}

async fn profiles_page(State(web): State<Arc<Web>>, uri: Uri, Query(q): Params) -> Response {
    answer(&web, key_of(&uri), move |ctx| page(views::profiles(ctx), wants_fragment(&q), pages::profiles)).await
}

async fn api_profiles(State(web): State<Arc<Web>>, uri: Uri) -> Response {
    answer(&web, key_of(&uri), |ctx| api(views::profiles(ctx))).await
}

async fn hosts_page(State(web): State<Arc<Web>>, uri: Uri, Query(q): Params) -> Response {
    answer(&web, key_of(&uri), move |ctx| page(views::hosts(ctx), wants_fragment(&q), pages::hosts)).await
}

async fn api_hosts(State(web): State<Arc<Web>>, uri: Uri) -> Response {
    answer(&web, key_of(&uri), |ctx| api(views::hosts(ctx))).await
}

async fn diagnostics_page(State(web): State<Arc<Web>>, uri: Uri, Query(q): Params) -> Response {
    answer(&web, key_of(&uri), move |ctx| {
        page(views::diagnostics(ctx), wants_fragment(&q), |v, f| pages::diagnostics(v, f))
    })
    .await
}

async fn api_diagnostics(State(web): State<Arc<Web>>, uri: Uri) -> Response {
    answer(&web, key_of(&uri), |ctx| api(views::diagnostics(ctx))).await
}

/// `/chart?board=SLUG`: the board's throughput and failures chart alone (the board page fetches it).
async fn chart(State(web): State<Arc<Web>>, uri: Uri, Query(q): Params) -> Response {
    answer(&web, key_of(&uri), move |ctx| {
        page(super::console::chart(ctx, q.get("board").map_or("default", String::as_str)), true, |c, _| {
            super::console::chart_svg(c)
        })
    })
    .await
}

async fn api_chart(State(web): State<Arc<Web>>, uri: Uri, Query(q): Params) -> Response {
    answer(&web, key_of(&uri), move |ctx| {
        api(super::console::chart(ctx, q.get("board").map_or("default", String::as_str)))
    })
    .await
}

/// `/metrics`: OpenMetrics text to a scraper that asks for it (Prometheus does, in `Accept`), else the same text as
/// `text/plain`, which a browser shows rather than downloads.
async fn metrics(State(web): State<Arc<Web>>, uri: Uri, headers: axum::http::HeaderMap) -> Response {
    let open_metrics = headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    let kind = if open_metrics {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    };
    let key = format!("{}{}", key_of(&uri), if open_metrics { " (openmetrics)" } else { "" });
    answer(&web, key, move |ctx| match super::metrics::render(ctx) {
        Ok(text) => Answer::new(StatusCode::OK, kind, text),
        Err(f) => Answer::new(status_of(&f), "text/plain; charset=utf-8", format!("{}\n", f.message)),
    })
    .await
}

/// `/healthz`: `ok` while the board answers a read (its list of boards) in time, else 503 with why. Never kept:
/// a health check is about now.
async fn healthz(State(web): State<Arc<Web>>) -> Response {
    let probe = tokio::task::spawn_blocking(move || views::boards(&web.ctx).map(|_| ()));
    match tokio::time::timeout(HEALTH_DEADLINE, probe).await {
        Ok(Ok(Ok(()))) => (StatusCode::OK, "ok\n").into_response(),
        Ok(Ok(Err(f))) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("board unavailable: {}\n", f.message)).into_response()
        }
        Ok(Err(e)) => (StatusCode::SERVICE_UNAVAILABLE, format!("board unavailable: {e}\n")).into_response(),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("board unavailable: no answer within {} ms\n", HEALTH_DEADLINE.as_millis()),
        )
            .into_response(),
    }
}

/// How long `/healthz` waits for the board.
const HEALTH_DEADLINE: std::time::Duration = std::time::Duration::from_millis(100);
