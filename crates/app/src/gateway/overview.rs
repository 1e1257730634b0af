//! `berth status`: one screen on everything an operator checks first — the gateway, the hosts of the board, each
//! board's tasks by status, this home's sandboxes, and the last problems (blocked tasks, gone workers, failed runs
//! waiting for their retry). Read-only; the engine is asked within a bound, and an unreachable one is said, not
//! fatal. `--json` has the same fields.

use std::collections::BTreeMap;
use std::time::Duration;

use domain::ids::BoardSlug;
use serde::Serialize;
use serde_json::Value as Json;

use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::edge::open::open_read_only;
use crate::edge::output;
use crate::edge::redact::redact;
use crate::gateway::status::GatewayStatus;
use crate::web::views::{Diagnostic, HostsView};

/// How long the overview waits for the engine's list of sandboxes.
const ENGINE_BOUND: Duration = Duration::from_secs(3);
/// The problems shown at most (the newest first).
const PROBLEMS: usize = 10;

/// Each board's task counts, by status.
type Counts = BTreeMap<String, BTreeMap<String, u64>>;

/// This home's sandboxes by state, or why the engine could not say.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum SandboxTally {
    Counts { total: usize, by_state: BTreeMap<String, u64> },
    Error { error: String },
}

/// `berth status`: what `--json` prints and the text reads.
#[derive(Debug, Serialize)]
struct Overview {
    gateway: GatewayStatus,
    hosts: HostsView,
    boards: Counts,
    sandboxes: SandboxTally,
    /// The newest first, at most [`PROBLEMS`].
    problems: Vec<Diagnostic>,
}

/// Each board's task counts by status, and the tasks whose last run failed and that wait for a retry.
fn boards(ctx: &Ctx) -> Result<(Counts, Vec<Diagnostic>), Failure> {
    let mut counts = BTreeMap::new();
    let mut failed = Vec::new();
    let Some(store) = open_read_only(ctx)? else { return Ok((counts, failed)) };
    for b in store.boards()? {
        let Ok(slug) = BoardSlug::parse(&b.slug) else { continue };
        let mut by_status: BTreeMap<String, u64> = BTreeMap::new();
        for t in store.tasks(&slug, None, None)? {
            *by_status.entry(t.status.to_string()).or_default() += 1;
            if t.consecutive_failures > 0 && t.status == domain::board::TaskStatus::Ready {
                let reason = t.last_failure_error.as_deref().map(redact).unwrap_or_default();
                failed.push(Diagnostic {
                    reason: format!("failed {}x: {reason}", t.consecutive_failures),
                    title: redact(&t.title),
                    kind: "failed",
                    task: t.id,
                    board: t.board,
                });
            }
        }
        counts.insert(b.slug, by_status);
    }
    Ok((counts, failed))
}

/// This home's sandboxes, every profile's, by state; `{"error": …}` when the engine does not answer in time.
async fn sandboxes(ctx: &Ctx) -> SandboxTally {
    let listed = tokio::time::timeout(ENGINE_BOUND, async {
        let rt = crate::sandbox::connect::connect(ctx).await.map_err(|f| f.message)?;
        domain::service::list_managed(&*rt, None, Some(&ctx.home_id())).await.map_err(|e| e.to_string())
    })
    .await;
    match listed {
        Ok(Ok(list)) => {
            let mut by_state: BTreeMap<String, u64> = BTreeMap::new();
            for c in &list {
                *by_state.entry(format!("{:?}", c.state).to_lowercase()).or_default() += 1;
            }
            SandboxTally::Counts { total: list.len(), by_state }
        }
        Ok(Err(error)) => SandboxTally::Error { error },
        Err(_) => {
            SandboxTally::Error { error: format!("the engine did not answer within {}s", ENGINE_BOUND.as_secs()) }
        }
    }
}

/// `berth status`.
///
/// # Errors
/// An unreadable board.
pub async fn command(ctx: &Ctx) -> Result<u8, Failure> {
    let gateway = crate::gateway::status_view(ctx);
    let (counts, failed) = boards(ctx)?;
    let hosts = crate::web::views::hosts(ctx)?;
    let mut problems = crate::web::views::diagnostics(ctx)?;
    problems.extend(failed);
    problems.truncate(PROBLEMS);
    let sandboxes = sandboxes(ctx).await;
    let v = Overview { gateway, hosts, boards: counts, sandboxes, problems };
    if ctx.json {
        output::json(&v);
    } else {
        print_text(&v);
    }
    Ok(0)
}

/// A value as its JSON text (`null` when unset).
fn json_text<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v).unwrap_or(Json::Null).to_string()
}

fn print_text(v: &Overview) {
    let g = &v.gateway;
    let gateway = if g.running {
        format!(
            "running (pid {}), {} ticks, last at {}",
            json_text(&g.pid),
            json_text(&g.ticks),
            g.last_tick.as_ref().map_or("-", |t| t.at.as_str())
        )
    } else {
        "stopped (`berth gateway run` starts it)".to_owned()
    };
    output::painted_line(&format!("gateway:    {gateway}"));
    let hosts: Vec<String> = v
        .hosts
        .hosts
        .iter()
        .map(|h| format!("{} ({}, {} running)", h.id, if h.alive { "alive" } else { "silent" }, h.running.len()))
        .collect();
    let this = &v.hosts.this_host;
    let hosts = if hosts.is_empty() { format!("{this} (this host; no shared board)") } else { hosts.join(", ") };
    output::painted_line(&format!("hosts:      {hosts}"));
    if v.boards.is_empty() {
        output::line("boards:     none yet (`berth kanban create` makes the default one)");
    }
    for (slug, counts) in &v.boards {
        let parts: Vec<String> = counts.iter().map(|(status, n)| format!("{n} {status}")).collect();
        let parts = if parts.is_empty() { "empty".to_owned() } else { parts.join(", ") };
        output::painted_line(&format!("board {slug}: {parts}"));
    }
    let sandboxes = match &v.sandboxes {
        SandboxTally::Error { error } => format!("engine unreachable: {error}"),
        SandboxTally::Counts { by_state, .. } => {
            let states: Vec<String> = by_state.iter().map(|(state, n)| format!("{n} {state}")).collect();
            if states.is_empty() { "none".to_owned() } else { states.join(", ") }
        }
    };
    output::painted_line(&format!("sandboxes:  {sandboxes}"));
    output::line(if v.problems.is_empty() { "problems:   none" } else { "problems:" });
    for p in &v.problems {
        output::painted_line(&format!("  {} [{}] {}: {}", p.task, p.board, p.kind, p.reason));
    }
}
