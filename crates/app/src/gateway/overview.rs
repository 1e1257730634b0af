//! `berth status`: one screen on everything an operator checks first — the gateway, the hosts of the board, each
//! board's tasks by status, this home's sandboxes, and the last problems (blocked tasks, gone workers, failed runs
//! waiting for their retry). Read-only; the engine is asked within a bound, and an unreachable one is said, not
//! fatal. `--json` has the same fields.

use std::collections::BTreeMap;
use std::time::Duration;

use domain::ids::BoardSlug;
use serde_json::{Value as Json, json};

use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::edge::open::open_read_only;
use crate::edge::output;
use crate::edge::redact::redact;

/// How long the overview waits for the engine's list of sandboxes.
const ENGINE_BOUND: Duration = Duration::from_secs(3);
/// The problems shown at most (the newest first).
const PROBLEMS: usize = 10;

/// Each board's task counts, by status.
type Counts = BTreeMap<String, BTreeMap<String, u64>>;

/// Each board's task counts by status, and the tasks whose last run failed and that wait for a retry.
fn boards(ctx: &Ctx) -> Result<(Counts, Vec<Json>), Failure> {
    let mut counts = BTreeMap::new();
    let mut failed = Vec::new();
    let Some(store) = open_read_only(ctx)? else { return Ok((counts, failed)) };
    for b in store.boards()? {
        let Ok(slug) = BoardSlug::parse(&b.slug) else { continue };
        let mut by_status: BTreeMap<String, u64> = BTreeMap::new();
        for t in store.tasks(&slug, None, None)? {
            *by_status.entry(t.status.to_string()).or_default() += 1;
            if t.consecutive_failures > 0 && t.status == domain::kanban::TaskStatus::Ready {
                let reason = t.last_failure_error.as_deref().map(redact).unwrap_or_default();
                failed.push(json!({"task": t.id, "board": t.board, "title": redact(&t.title), "kind": "failed",
                    "reason": format!("failed {}x: {reason}", t.consecutive_failures)}));
            }
        }
        counts.insert(b.slug, by_status);
    }
    Ok((counts, failed))
}

/// This home's sandboxes, every profile's, by state; `{"error": …}` when the engine does not answer in time.
async fn sandboxes(ctx: &Ctx) -> Json {
    let listed = tokio::time::timeout(ENGINE_BOUND, async {
        let rt = crate::sandbox::connect::connect(ctx).await.map_err(|f| f.message)?;
        domain::service::list_managed(&rt, None, Some(&ctx.home_id())).await.map_err(|e| e.to_string())
    })
    .await;
    match listed {
        Ok(Ok(list)) => {
            let mut by_state: BTreeMap<String, u64> = BTreeMap::new();
            for c in &list {
                *by_state.entry(format!("{:?}", c.state).to_lowercase()).or_default() += 1;
            }
            json!({"total": list.len(), "by_state": by_state})
        }
        Ok(Err(e)) => json!({"error": e}),
        Err(_) => json!({"error": format!("the engine did not answer within {}s", ENGINE_BOUND.as_secs())}),
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
    let mut problems: Vec<Json> = crate::web::views::diagnostics(ctx)?.into_iter().map(|d| json!(d)).collect();
    problems.extend(failed);
    problems.truncate(PROBLEMS);
    let sandboxes = sandboxes(ctx).await;
    let v = json!({"gateway": gateway, "hosts": hosts, "boards": counts, "sandboxes": sandboxes, "problems": problems});
    if ctx.json {
        output::json(&v);
    } else {
        print_text(&v);
    }
    Ok(0)
}

fn print_text(v: &Json) {
    let g = &v["gateway"];
    let gateway = if g["running"] == true {
        format!(
            "running (pid {}), {} ticks, last at {}",
            g["pid"],
            g["ticks"],
            g["last_tick"]["at"].as_str().unwrap_or("-")
        )
    } else {
        "stopped (`berth gateway run` starts it)".to_owned()
    };
    output::painted_line(&format!("gateway:    {gateway}"));
    let hosts: Vec<String> = v["hosts"]["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| {
            let alive = if h["alive"] == true { "alive" } else { "silent" };
            let running = h["running"].as_array().map_or(0, Vec::len);
            format!("{} ({alive}, {running} running)", h["id"].as_str().unwrap_or("?"))
        })
        .collect();
    let this = v["hosts"]["this_host"].as_str().unwrap_or("-");
    let hosts = if hosts.is_empty() { format!("{this} (this host; no shared board)") } else { hosts.join(", ") };
    output::painted_line(&format!("hosts:      {hosts}"));
    let boards = v["boards"].as_object().cloned().unwrap_or_default();
    if boards.is_empty() {
        output::line("boards:     none yet (`berth kanban create` makes the default one)");
    }
    for (slug, counts) in &boards {
        let parts: Vec<String> =
            counts.as_object().into_iter().flatten().map(|(status, n)| format!("{n} {status}")).collect();
        let parts = if parts.is_empty() { "empty".to_owned() } else { parts.join(", ") };
        output::painted_line(&format!("board {slug}: {parts}"));
    }
    let s = &v["sandboxes"];
    let sandboxes = match s["error"].as_str() {
        Some(e) => format!("engine unreachable: {e}"),
        None => {
            let states: Vec<String> =
                s["by_state"].as_object().into_iter().flatten().map(|(state, n)| format!("{n} {state}")).collect();
            if states.is_empty() { "none".to_owned() } else { states.join(", ") }
        }
    };
    output::painted_line(&format!("sandboxes:  {sandboxes}"));
    let problems = v["problems"].as_array().cloned().unwrap_or_default();
    if problems.is_empty() {
        output::line("problems:   none");
    } else {
        output::line("problems:");
    }
    for p in &problems {
        let line = format!(
            "  {} [{}] {}: {}",
            p["task"].as_str().unwrap_or("?"),
            p["board"].as_str().unwrap_or("?"),
            p["kind"].as_str().unwrap_or("?"),
            p["reason"].as_str().unwrap_or("")
        );
        output::painted_line(&line);
    }
}
