//! The sandboxes view: every profile's sandboxes with state, egress policy, age, idle time, memory and CPU, exactly as
//! `berth --json sandbox ls --all-profiles` reports them. It runs that command (this binary, this home, the
//! dashboard's resolved settings in its environment) rather than a second copy of its engine calls: the engine's
//! stats take about a second, and the listing stays one implementation. Its actions, stop and remove, call the
//! functions `berth sandbox stop|rm ID --all-profiles` call (`sandbox::remove`).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::html;
use serde_json::{Value as Json, json};

use super::Web;
use super::pages::{age, layout};
use crate::edge::error::Failure;
use crate::edge::redact::redact;

/// Runs the listing on a blocking thread. The gateway (and `berth dashboard`) reap every exited child with
/// `waitpid(-1)`, which may take this one's status first: so the output is read to its end and the answer judged by
/// it (a JSON array, else the last line of stderr), never by the exit status.
async fn list(web: &Arc<Web>) -> Result<Vec<Json>, Failure> {
    super::actions::blocking(web, |ctx| {
        use std::io::{Read, Seek};
        let fail = |e: std::io::Error| Failure::other(format!("cannot list the sandboxes: {e}"));
        let exe = std::env::current_exe().map_err(fail)?;
        let mut err = tempfile::tempfile().map_err(fail)?;
        let mut child = std::process::Command::new(exe)
            .arg("--home")
            .arg(&ctx.home)
            .args(["--json", "sandbox", "ls", "--all-profiles"])
            .envs(ctx.resolved.worker_env())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(err.try_clone().map_err(fail)?)
            .spawn()
            .map_err(fail)?;
        let mut out = Vec::new();
        child.stdout.take().map(|mut o| o.read_to_end(&mut out));
        let _ = child.wait();
        if let Ok(Json::Array(rows)) = serde_json::from_slice::<Json>(&out) {
            return Ok(rows.into_iter().map(super::views::masked).collect());
        }
        let mut text = String::new();
        let _ = err.rewind().and_then(|()| err.read_to_string(&mut text));
        let line = text.lines().last().unwrap_or("the sandbox listing failed").trim_start_matches("berth: ");
        Err(Failure::other(redact(line)))
    })
    .await
}

/// `GET /api/sandboxes`.
pub(crate) async fn api(State(web): State<Arc<Web>>) -> Response {
    match list(&web).await {
        Ok(rows) => axum::Json(rows).into_response(),
        Err(f) => (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(json!({"error": f.message}))).into_response(),
    }
}

fn mib(v: &Json) -> String {
    v.as_u64().map_or_else(|| "-".to_owned(), |b| format!("{:.1} MiB", b as f64 / 1_048_576.0))
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

fn table(rows: &[Json]) -> maud::Markup {
    let s = |v: &Json, k: &str| v[k].as_str().unwrap_or("-").to_owned();
    html! {
        @if rows.is_empty() { p { "No sandbox." } }
        table {
            tr { th { "name" } th { "task" } th { "profile" } th { "state" } th { "egress" } th { "age" } th { "idle" } th { "memory" } th { "cpu" } th {} }
            @for r in rows {
                tr {
                    td { code { (s(r, "name")) } }
                    td { (s(r, "task")) }
                    td { (s(r, "profile")) }
                    td { (s(r, "state")) }
                    td { (s(r, "egress")) }
                    td { (r["age_secs"].as_i64().map_or_else(|| "-".to_owned(), age)) }
                    td { @if r["busy"] == json!(true) { "busy" } @else { (r["idle_secs"].as_i64().map_or_else(|| "-".to_owned(), age)) } }
                    td { (mib(&r["memory_bytes"])) }
                    td { (r["cpu_percent"].as_f64().map_or_else(|| "-".to_owned(), |p| format!("{p:.1}%"))) }
                    td {
                        @if r["state"] == json!("running") {
                            button data-sandbox=(s(r, "id")) data-sandbox-action="stop" { "stop" }
                        }
                        button data-sandbox=(s(r, "id")) data-sandbox-action="remove" { "remove" }
                    }
                }
            }
        }
    }
}
