//! The sandboxes view: every profile's sandboxes with state, egress policy, age, idle time, memory and CPU, the very
//! rows `berth --json sandbox ls --all-profiles` prints (`sandbox::cost::rows`, one implementation of the engine
//! calls), masked. Its actions, stop and remove, call the functions `berth sandbox stop|rm ID --all-profiles` call
//! (`sandbox::remove`).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::html;

use super::Web;
use super::pages::{age, layout};
use crate::edge::error::Failure;
use crate::edge::redact::redact;
use crate::sandbox::views::SandboxRow;

/// Every profile's sandboxes as `sandbox ls --all-profiles` lists them, every text masked.
async fn list(web: &Arc<Web>) -> Result<Vec<SandboxRow>, Failure> {
    match crate::sandbox::cost::rows(&web.ctx, true, false).await {
        Ok(rows) => Ok(rows.into_iter().map(masked).collect()),
        Err(f) => Err(Failure { message: redact(&f.message), ..f }),
    }
}

/// A row with every text that could carry a secret masked (labels included).
fn masked(mut r: SandboxRow) -> SandboxRow {
    let s = &mut r.sandbox;
    for text in [&mut s.id, &mut s.name, &mut s.state, &mut s.created, &mut s.egress] {
        *text = redact(text);
    }
    for text in [&mut s.task, &mut s.profile, &mut s.mode, &mut r.finished].into_iter().flatten() {
        *text = redact(text);
    }
    for v in s.labels.values_mut() {
        *v = redact(v);
    }
    r
}

/// `GET /api/sandboxes`.
pub(crate) async fn api(State(web): State<Arc<Web>>) -> Response {
    match list(&web).await {
        Ok(rows) => axum::Json(rows).into_response(),
        Err(f) => {
            (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(super::views::ApiError { error: f.message })).into_response()
        }
    }
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "-".to_owned(), |b| format!("{:.1} MiB", b as f64 / 1_048_576.0))
}

/// `POST /api/sandboxes/{id}/{action}`: `stop` (`sandbox stop ID --all-profiles`) or `remove` (`sandbox rm ID`, with
/// its folder, under the profile the sandbox carries), answering with the result or the one-line error. The engine
/// calls run on a runtime of their own on a blocking thread, as "dispatch now" does.
pub(crate) async fn act(State(web): State<Arc<Web>>, Path((id, action)): Path<(String, String)>) -> Response {
    let result = super::actions::blocking(&web, move |ctx| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::other(format!("cannot reach the engine: {e}")))?;
        match action.as_str() {
            "stop" => {
                rt.block_on(crate::sandbox::remove::stop_by_id(ctx, &id, true)).map(|c| format!("stopped {}", c.name))
            }
            "remove" => rt.block_on(crate::sandbox::remove::remove_by_id(ctx, &id, true, false))?.message(),
            other => Err(Failure::usage(format!("no sandbox action {other:?}: stop or remove"))),
        }
    })
    .await;
    super::actions::answer(result.map_err(|f| Failure { message: redact(&f.message), ..f }))
}

/// `GET /sandboxes` (`?fragment=1`: the table alone, fetched again after an action).
pub(crate) async fn page(
    State(web): State<Arc<Web>>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let rows = match list(&web).await {
        Ok(rows) => rows,
        Err(f) => {
            return (StatusCode::INTERNAL_SERVER_ERROR, Html(super::pages::error(&f.message).into_string()))
                .into_response();
        }
    };
    let table = table(&rows);
    if q.get("fragment").is_some_and(|v| v == "1") {
        return Html(table.into_string()).into_response();
    }
    let body = html! {
        h1 { "Sandboxes" }
        div data-refresh="/sandboxes?fragment=1" { (table) }
    };
    Html(layout("sandboxes", body).into_string()).into_response()
}

fn table(rows: &[SandboxRow]) -> maud::Markup {
    let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
    html! {
        @if rows.is_empty() { p { "No sandbox." } }
        table {
            tr { th { "name" } th { "task" } th { "profile" } th { "state" } th { "egress" } th { "age" } th { "idle" } th { "memory" } th { "cpu" } th {} }
            @for r in rows {
                @let s = &r.sandbox;
                tr {
                    td { code { (s.name) } }
                    td { (or_dash(&s.task)) }
                    td { (or_dash(&s.profile)) }
                    td { (s.state) }
                    td { (s.egress) }
                    td { (age(r.age_secs)) }
                    td { @if r.busy == Some(true) { "busy" } @else { (r.idle_secs.map_or_else(|| "-".to_owned(), age)) } }
                    td { (mib(r.memory_bytes)) }
                    td { (r.cpu_percent.map_or_else(|| "-".to_owned(), |p| format!("{p:.1}%"))) }
                    td {
                        @if s.state == "running" {
                            button data-sandbox=(s.id) data-sandbox-action="stop" { "stop" }
                        }
                        button data-sandbox=(s.id) data-sandbox-action="remove" { "remove" }
                    }
                }
            }
        }
    }
}
