//! The sandboxes view: every profile's sandboxes with state, egress policy, age, idle time, memory and CPU, exactly as
//! `berth --json sandbox ls --all-profiles` reports them. It runs that command (this binary, this home, the
//! dashboard's resolved settings in its environment) rather than a second copy of its engine calls: the engine's
//! stats take about a second, and the listing stays one implementation.

use std::sync::Arc;

use axum::extract::State;
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

/// `GET /sandboxes`.
pub(crate) async fn page(State(web): State<Arc<Web>>) -> Response {
    let rows = match list(&web).await {
        Ok(rows) => rows,
        Err(f) => {
            return (StatusCode::INTERNAL_SERVER_ERROR, Html(super::pages::error(&f.message).into_string()))
                .into_response();
        }
    };
    let s = |v: &Json, k: &str| v[k].as_str().unwrap_or("-").to_owned();
    let body = html! {
        h1 { "Sandboxes" }
        @if rows.is_empty() { p { "No sandbox." } }
        table {
            tr { th { "name" } th { "task" } th { "profile" } th { "state" } th { "egress" } th { "age" } th { "idle" } th { "memory" } th { "cpu" } }
            @for r in &rows {
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
                }
            }
        }
    };
    Html(layout("sandboxes", body).into_string()).into_response()
}
