//! The sandboxes view: this home's sandboxes of every profile (see `Ours`) with state, egress policy, age, idle time, memory and CPU, the very
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
use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::edge::redact::redact;
use crate::sandbox::views::SandboxRow;
use domain::label::{LABEL_HOME, LabelValue};

/// Every profile's sandboxes as `sandbox ls --all-profiles` lists them, but only this home's (see [`Ours`]), every
/// text masked.
async fn list(web: &Arc<Web>) -> Result<Vec<SandboxRow>, Failure> {
    let ours = Ours::of(&web.ctx);
    match crate::sandbox::cost::rows(&web.ctx, true, false).await {
        Ok(rows) => Ok(rows
            .into_iter()
            .filter(|r| ours.holds(r.sandbox.labels.get(LABEL_HOME).map(String::as_str), r.sandbox.profile.as_deref()))
            .map(masked)
            .collect()),
        Err(f) => Err(Failure { message: redact(&f.message), ..f }),
    }
}

/// Which sandboxes the dashboard lists and acts on: this home's (its `berth.home` label), and unlabelled ones
/// (hermes-made, or an older berth's) whose `hermes-profile` is one of this home's profiles. Another home's
/// sandbox, and another user's hermes sandbox on the same engine, are neither listed nor stopped nor removed here
/// (`berth sandbox … --all-profiles` still reaches an unlabelled one, as hermes compatibility asks).
struct Ours {
    home: String,
    profiles: Vec<String>,
}

impl Ours {
    fn of(ctx: &Ctx) -> Self {
        let mut profiles: Vec<String> =
            ctx.profiles().list().iter().map(|p| LabelValue::sanitize(p).as_str().to_owned()).collect();
        profiles.push(crate::sandbox::engine::profile_label(ctx));
        Self { home: ctx.home_id(), profiles }
    }

    fn holds(&self, home: Option<&str>, profile: Option<&str>) -> bool {
        match home {
            Some(h) => h == self.home,
            None => profile.is_some_and(|p| self.profiles.iter().any(|mine| mine == p)),
        }
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
        if !matches!(action.as_str(), "stop" | "remove") {
            return Err(Failure::usage(format!("no sandbox action {action:?}: stop or remove")));
        }
        // The sandbox named must be one the page lists: another home's or another user's is no sandbox here.
        let found = rt.block_on(async {
            let engine = crate::sandbox::connect::connect(ctx).await?;
            crate::sandbox::logs::find(ctx, &*engine, Some(&id), None, true).await
        })?;
        if !Ours::of(ctx).holds(found.home(), found.profile_label()) {
            return Err(Failure::usage(format!(
                "no sandbox {id:?} of this home (it belongs to another home or to a profile this home does not have)"
            )));
        }
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
        p.muted { "This home's sandboxes, and hermes-made ones of its profiles; fetched again every few seconds." }
        div.scroll data-refresh="/sandboxes?fragment=1" data-every="5" { (table) }
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
                            button data-sandbox=(s.id) data-sandbox-action="stop" data-confirm={ "Stop sandbox " (s.name) "?" } { "stop" }
                        }
                        button data-sandbox=(s.id) data-sandbox-action="remove" data-confirm={ "Remove sandbox " (s.name) " and its folder?" } { "remove" }
                    }
                }
            }
        }
    }
}
