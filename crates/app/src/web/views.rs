//! The dashboard's typed views, read through the `BoardStore` trait: the pages render them as HTML and `/api/…`
//! returns them as JSON, so both always show the same thing. Every text that could carry a secret goes through
//! `redact` (forwarded environment values, the board password), and no setting value is ever part of a view.

use domain::board::TaskStatus;
use domain::board::{Event, Run, Task};
use domain::ids::BoardSlug;
use domain::ports::Clock;
use domain::time::Timestamp;
use serde::Serialize;
use serde_json::Value as Json;

use crate::edge::context::{Ctx, SystemClock};
use crate::edge::error::Failure;
use crate::edge::open::{Board, open_read_only};
use crate::edge::redact::redact;

/// One card on the board.
#[derive(Debug, Serialize)]
pub(crate) struct Card {
    pub id: String,
    pub title: String,
    pub status: TaskStatus,
    /// The status as `kanban ls` words it (`running (worker gone)`, …).
    pub shown_status: String,
    pub assignee: Option<String>,
    pub priority: i64,
    pub age_secs: i64,
    /// Seconds since its worker started, while it runs (the card's timer counts on from it).
    pub running_secs: Option<i64>,
    pub failures: i64,
    pub host: Option<String>,
    pub last_error: Option<String>,
    /// Seconds until it may start, while it waits for its time (scheduled, a retry's backoff, a snooze).
    pub starts_in_secs: Option<i64>,
    /// While blocked (or back in todo or triage by a block): the block's kind and reason.
    pub block: Option<String>,
    /// The last request for changes' note, until the task is done.
    pub review_note: Option<String>,
    /// Why it waits, while ready or todo: the planner's decision of a dry run (`kanban dispatch --dry-run --explain`).
    pub waiting: Option<super::console::Waiting>,
}

/// A status column.
#[derive(Debug, Serialize)]
pub(crate) struct Column {
    pub status: TaskStatus,
    /// Its tasks: every one, or the first a page shows (by priority, then age).
    pub tasks: Vec<Card>,
    /// How many tasks it holds.
    pub total: usize,
}

/// A board by status.
#[derive(Debug, Serialize)]
pub(crate) struct BoardView {
    pub board: String,
    /// Whether the archived column is shown (`?archived=1`).
    pub archived: bool,
    pub boards: Vec<String>,
    pub columns: Vec<Column>,
}

/// A task with its events and runs.
#[derive(Debug, Serialize)]
pub(crate) struct TaskView {
    pub task: Json,
    pub shown_status: String,
    pub events: Vec<Event>,
    pub runs: Vec<Run>,
    pub workspace: Option<String>,
}

/// A profile with its cap and how many of its workers run.
#[derive(Debug, Serialize)]
pub(crate) struct ProfileRow {
    pub name: String,
    pub running: i64,
    /// Its per-profile cap (override or default); `None` is no cap.
    pub cap: Option<u32>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ProfilesView {
    pub profiles: Vec<ProfileRow>,
    pub running: i64,
    pub max_in_progress: Option<u32>,
    /// The running gateway's settings: when it read them, or why it kept them (`null` without a gateway).
    pub gateway_settings: Option<String>,
}

/// A host of a shared board.
#[derive(Debug, Serialize)]
pub(crate) struct HostRow {
    pub id: String,
    pub silent_secs: f64,
    pub alive: bool,
    /// The tasks its workers run.
    pub running: Vec<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct HostsView {
    pub this_host: String,
    pub host_timeout_secs: u64,
    pub hosts: Vec<HostRow>,
}

/// A task that needs a look.
#[derive(Debug, Serialize)]
pub(crate) struct Diagnostic {
    pub task: String,
    pub board: String,
    pub title: String,
    /// `gave_up`, `blocked` or `worker_gone`.
    pub kind: &'static str,
    pub reason: String,
}

fn now() -> Timestamp {
    SystemClock.now()
}

fn secs_since(now: Timestamp, ms: i64) -> i64 {
    (now.as_millis().saturating_sub(ms) / 1000).max(0)
}

/// Every string in a JSON value with secrets masked.
pub(crate) fn masked(v: Json) -> Json {
    match v {
        Json::String(s) => Json::String(redact(&s)),
        Json::Array(a) => Json::Array(a.into_iter().map(masked).collect()),
        Json::Object(m) => Json::Object(m.into_iter().map(|(k, v)| (k, masked(v))).collect()),
        other => other,
    }
}

fn card(ctx: &Ctx, store: &Board, t: &Task, now: Timestamp) -> Card {
    // Only a running task needs its worker judged (a probe); the others' status is the row's.
    let shown_status = if t.status == TaskStatus::Running {
        crate::board::listed(ctx, store, t, now).shown_status
    } else {
        t.status.to_string()
    };
    Card {
        id: t.id.clone(),
        title: redact(&t.title),
        status: t.status,
        shown_status,
        assignee: t.assignee.clone(),
        priority: t.priority,
        age_secs: secs_since(now, t.created_at),
        running_secs: (t.status == TaskStatus::Running).then(|| t.started_at.map(|s| secs_since(now, s))).flatten(),
        failures: t.consecutive_failures,
        host: t.worker_host.clone(),
        last_error: t.last_failure_error.as_deref().map(redact),
        starts_in_secs: t
            .not_before
            .filter(|at| *at > now.as_millis() && t.status != TaskStatus::Running)
            .map(|at| (at - now.as_millis() + 999) / 1000),
        block: crate::board::show::block_line(t).map(|b| redact(&b)),
        review_note: t.review_note.as_deref().filter(|_| t.status != TaskStatus::Done).map(redact),
        waiting: (t.status == TaskStatus::Todo).then(super::console::waiting_on_parents),
    }
}

/// The names of every board (`GET /api/boards`).
pub(crate) fn boards(ctx: &Ctx) -> Result<Vec<String>, Failure> {
    board_names(open_read_only(ctx)?.as_ref())
}

/// The names of every board (`default` alone before the board exists).
fn board_names(store: Option<&Board>) -> Result<Vec<String>, Failure> {
    Ok(match store {
        Some(s) => s.boards()?.into_iter().map(|b| b.slug).collect(),
        None => vec!["default".to_owned()],
    })
}

/// Why each ready task of a board waits (`console::Explained::waiting`).
pub(crate) type Explain<'a> = &'a dyn Fn(&Board, &BoardSlug) -> Result<super::console::Why, Failure>;

/// One board by status; archived tasks only when asked for; at most `shown` cards a column (every task without);
/// each ready card with why it waits (`explain`).
pub(crate) fn board(
    ctx: &Ctx,
    slug: &str,
    archived: bool,
    shown: Option<usize>,
    explain: Explain<'_>,
) -> Result<BoardView, Failure> {
    let b = BoardSlug::parse(slug).map_err(Failure::usage_of)?;
    let store = open_read_only(ctx)?;
    let boards = board_names(store.as_ref())?;
    let now = now();
    let mut columns: Vec<Column> = TaskStatus::ALL
        .into_iter()
        .filter(|s| archived || *s != TaskStatus::Archived)
        .map(|status| Column { status, tasks: Vec::new(), total: 0 })
        .collect();
    if let Some(store) = &store {
        store.board(&b)?;
        for t in store.tasks(&b, None, None)? {
            if let Some(col) = columns.iter_mut().find(|c| c.status == t.status) {
                col.total += 1;
                if shown.is_none_or(|n| col.tasks.len() < n) {
                    col.tasks.push(card(ctx, store, &t, now));
                }
            }
        }
        if let Some(ready) = columns.iter_mut().find(|c| c.status == TaskStatus::Ready && !c.tasks.is_empty()) {
            let why = explain(store, &b)?;
            for c in &mut ready.tasks {
                c.waiting = why.get(&c.id).cloned();
            }
        }
    }
    Ok(BoardView { board: b.as_str().to_owned(), archived, boards, columns })
}

/// One task with its events, runs and workspace.
pub(crate) fn task(ctx: &Ctx, id: &str) -> Result<TaskView, Failure> {
    let store = open_read_only(ctx)?.ok_or_else(|| Failure::usage(format!("no task {id}")))?;
    let row = crate::board::listed(ctx, &store, &store.task(id)?, now());
    let mut events = store.events(id, 0)?;
    for e in &mut events {
        e.payload = masked(std::mem::take(&mut e.payload));
    }
    let mut runs = store.runs(id)?;
    for r in &mut runs {
        r.error = r.error.as_deref().map(redact);
    }
    let workspace = crate::board::logs::workspace_path(ctx, id, row.task.assignee.as_deref());
    let task = masked(serde_json::to_value(&row).unwrap_or(Json::Null));
    Ok(TaskView { task, shown_status: row.shown_status, events, runs, workspace })
}

/// A piece of a task's worker log: its text (masked) and the byte offset to read on from.
#[derive(Debug, Serialize)]
pub(crate) struct LogChunk {
    pub offset: u64,
    pub text: String,
}

/// An API call's one-line failure.
#[derive(Debug, Serialize)]
pub(crate) struct ApiError {
    pub error: String,
}

/// The answer to a dashboard write that went through.
#[derive(Debug, Serialize)]
pub(crate) struct ApiDone {
    pub ok: bool,
    pub message: String,
}

/// The new part of a task's worker log from byte `offset` (at most 64 KiB of it), masked, and where to read on.
/// A log that shrank (rotated) is read again from its start.
pub(crate) fn log_from(ctx: &Ctx, id: &str, offset: u64) -> LogChunk {
    use std::io::{Read, Seek, SeekFrom};
    const MAX: u64 = 64 * 1024;
    let path = crate::board::logs::log_path(ctx, id);
    let Ok(mut f) = std::fs::File::open(&path) else { return LogChunk { offset: 0, text: String::new() } };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let from = if offset > len { 0 } else { offset.max(len.saturating_sub(MAX)) };
    let mut buf = Vec::new();
    let _ = f.seek(SeekFrom::Start(from)).and_then(|_| f.take(MAX).read_to_end(&mut buf));
    LogChunk { offset: from + buf.len() as u64, text: redact(&String::from_utf8_lossy(&buf)) }
}

/// Profiles with their caps and running counts (every board together, as the caps count).
pub(crate) fn profiles(ctx: &Ctx) -> Result<ProfilesView, Failure> {
    let running = match open_read_only(ctx)? {
        Some(s) => s.running_by_assignee()?,
        None => Vec::new(),
    };
    // The caps as the config files say now (a running gateway applies a change at its next tick).
    let caps = ctx.for_profile(&ctx.profile).map_or_else(|_| ctx.settings.caps(), |c| c.settings.caps());
    let mut names = ctx.profiles().list();
    names.extend(running.iter().map(|(a, _)| a.clone()).filter(|a| !a.is_empty()));
    names.sort();
    names.dedup();
    let profiles = names
        .into_iter()
        .map(|name| ProfileRow {
            running: running.iter().find(|(a, _)| *a == name).map_or(0, |(_, n)| *n),
            cap: caps.per_profile_overrides.get(&name).copied().or(caps.per_profile),
            name,
        })
        .collect();
    let gateway_settings = gateway_settings(&ctx.home);
    Ok(ProfilesView {
        profiles,
        running: running.iter().map(|(_, n)| n).sum(),
        max_in_progress: caps.max_in_progress,
        gateway_settings,
    })
}

/// The running gateway's settings in one line, from the state it records in the home (`gateway.json`: when it read
/// them, or why it kept them); `None` when no gateway runs for `home`.
fn gateway_settings(home: &std::path::Path) -> Option<String> {
    if !crate::edge::process::lock_held(&home.join("gateway.lock")) {
        return None;
    }
    let text = crate::edge::state_file::read_small(&home.join("gateway.json"), 1 << 20)?;
    let state: Json = serde_json::from_str(&text).ok()?;
    let at = state["settings_read_at"].as_str().unwrap_or("its start");
    Some(match state["settings_error"].as_str() {
        Some(why) => format!("gateway settings kept from {at}: {why}"),
        None => format!("gateway settings read at {at}"),
    })
}

/// Hosts that heartbeat the board, how long each has been silent, and what its workers run.
pub(crate) fn hosts(ctx: &Ctx) -> Result<HostsView, Failure> {
    let timeout = ctx.settings.kanban.host_timeout_seconds;
    let mut rows = Vec::new();
    if let Some(store) = open_read_only(ctx)? {
        let mut running: Vec<Task> = Vec::new();
        for b in store.boards()? {
            let Ok(slug) = BoardSlug::parse(&b.slug) else { continue };
            running.extend(store.tasks(&slug, Some(TaskStatus::Running), None)?);
        }
        // A board only this host uses has no heartbeat of its gateway (a beat would wake the gateway's own board
        // watch): a gateway holding this home's lock is what says this host is alive, and it ticks.
        let this_host = ctx.host_id();
        let gateway_here = ctx.database_url().is_none()
            && ctx.settings.kanban.host_id.trim().is_empty()
            && crate::edge::process::lock_held(&ctx.home.join("gateway.lock"));
        let mut seen = store.hosts(now())?;
        if gateway_here && !seen.iter().any(|h| h.id == this_host) {
            seen.push(domain::board::HostSeen { id: this_host.clone(), silent_ms: 0 });
        }
        for h in seen {
            let tasks = running.iter().filter(|t| t.worker_host.as_deref() == Some(h.id.as_str()));
            let silent_ms = if gateway_here && h.id == this_host { 0 } else { h.silent_ms };
            rows.push(HostRow {
                silent_secs: silent_ms as f64 / 1000.0,
                alive: timeout.get() == 0 || silent_ms < i64::try_from(timeout.get() * 1000).unwrap_or(i64::MAX),
                running: tasks.map(|t| t.id.clone()).collect(),
                id: h.id,
            });
        }
    }
    Ok(HostsView { this_host: ctx.host_id(), host_timeout_secs: timeout.get(), hosts: rows })
}

/// Why a blocked task is blocked: its last `gave_up` or `blocked` event.
fn block_reason(store: &Board, id: &str) -> (&'static str, String) {
    let events = store.events(id, 0).unwrap_or_default();
    let last = events.iter().rev().find(|e| e.kind == "gave_up" || e.kind == "blocked");
    match last {
        Some(e) => {
            let why = e.payload.get("reason").or_else(|| e.payload.get("error")).and_then(Json::as_str);
            let kind = if e.kind == "gave_up" { "gave_up" } else { "blocked" };
            (kind, redact(why.unwrap_or("no reason given")))
        }
        None => ("blocked", "no reason given".to_owned()),
    }
}

/// Tasks that need a look, on every board: blocked (with the reason), gave up, running with a worker gone.
pub(crate) fn diagnostics(ctx: &Ctx) -> Result<Vec<Diagnostic>, Failure> {
    let Some(store) = open_read_only(ctx)? else { return Ok(Vec::new()) };
    let now = now();
    let mut out = Vec::new();
    for b in store.boards()? {
        let Ok(slug) = BoardSlug::parse(&b.slug) else { continue };
        for t in store.tasks(&slug, Some(TaskStatus::Blocked), None)? {
            let (kind, reason) = block_reason(&store, &t.id);
            out.push(Diagnostic { task: t.id, board: t.board, title: redact(&t.title), kind, reason });
        }
        for t in store.tasks(&slug, Some(TaskStatus::Running), None)? {
            let shown = crate::board::listed(ctx, &store, &t, now).shown_status;
            if shown != "running" && shown != "running (starting)" {
                out.push(Diagnostic {
                    task: t.id,
                    board: t.board,
                    title: redact(&t.title),
                    kind: "worker_gone",
                    reason: shown,
                });
            }
        }
    }
    Ok(out)
}
