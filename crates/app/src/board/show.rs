//! `kanban ls|show|tail`: how a task and its worker are judged and shown, and the event tail.

use std::time::Duration;

use domain::board::Task;
use domain::board::TaskStatus;

use super::views::{RunRow, TaskRow, TaskShow};

use crate::edge::open::{Board, open_read_only};
use domain::board::liveness::{Liveness, WorkerFacts, judge};

use crate::edge::context::{Ctx, ProcProbe};
use crate::edge::error::Failure;
use crate::edge::output;

/// A time as RFC 3339, `-` when unset.
pub(crate) fn ms(t: Option<i64>) -> String {
    t.map(|m| domain::time::Timestamp::from_millis(m).to_rfc3339()).unwrap_or_else(|| "-".to_owned())
}

/// A running task's worker, judged as the dispatch tick judges it (read-only) by the domain's one liveness rule: on
/// this host by pid and start, on another host by that host's heartbeat. A claim no worker confirmed is gone once
/// its spawn lease is over. `None` when the task is not running.
fn worker_liveness(ctx: &Ctx, store: &Board, t: &Task, now: domain::time::Timestamp) -> Option<Liveness> {
    if t.status != TaskStatus::Running {
        return None;
    }
    let lease_over = t.confirmed_at.is_none() && t.claim_expires.is_none_or(|e| e < now.as_millis());
    if lease_over {
        return Some(Liveness::Gone { host: t.worker_host.clone() });
    }
    let host = ctx.host_id();
    let remote = !domain::board::liveness::is_local(&host, t.worker_host.as_deref());
    let host_silent = if remote {
        let hosts = store.hosts(now).unwrap_or_default();
        let seen = hosts.into_iter().find(|h| Some(h.id.as_str()) == t.worker_host.as_deref());
        seen.map(|h| Duration::from_millis(u64::try_from(h.silent_ms).unwrap_or(0)))
    } else {
        None
    };
    let facts = WorkerFacts { pid: t.worker_pid, start: t.worker_start, host: t.worker_host.as_deref(), host_silent };
    Some(judge(&host, &facts, ctx.settings.kanban.host_timeout_seconds.duration(), &ProcProbe))
}

/// A task for listings: its row with its worker judged, and its status as text (`running (worker gone)` when the
/// tick would not count it as running, `running (starting)` before its worker confirmed).
///
/// A read is not atomic with the process check (the tick holds its write lock across both): a worker that
/// finished its task and exited between the two would look gone, so a gone worker is judged again on a fresh read.
pub(crate) fn listed(ctx: &Ctx, store: &Board, t: &Task, now: domain::time::Timestamp) -> TaskRow {
    let mut t = t.clone();
    let mut seen = worker_liveness(ctx, store, &t, now);
    if seen.as_ref().and_then(Liveness::alive) == Some(false)
        && let Ok(fresh) = store.task(&t.id)
    {
        seen = worker_liveness(ctx, store, &fresh, now);
        t = fresh;
    }
    let shown_status = match (&seen, t.status) {
        (Some(Liveness::HostLost { host, silent_secs }), _) => {
            format!("running (worker's host {host} silent for {silent_secs}s)")
        }
        (Some(Liveness::Gone { .. }), _) => "running (worker gone)".to_owned(),
        (Some(Liveness::NoWorker), _) => "running (starting)".to_owned(),
        (_, s) => s.to_string(),
    };
    let schedule = domain::board::recurring::schedule_of(t.created_by.as_deref()).map(str::to_owned);
    TaskRow { worker_alive: seen.as_ref().and_then(Liveness::alive), worker: seen, schedule, task: t, shown_status }
}

/// `kanban ls`'s columns (`BOARD` with `--all-boards`).
pub(crate) fn ls_header(boards: bool) -> Vec<&'static str> {
    let mut h = vec!["ID", "STATUS", "FAILURES", "AGE", "STARTED", "ASSIGNEE", "PRIORITY", "TITLE"];
    if boards {
        h.insert(1, "BOARD");
    }
    h
}

/// One `kanban ls` row: a ready task that failed says so in its status (`ready (failed 2x)`), its age is since its
/// creation, STARTED is how long ago its current or last run started.
pub(crate) fn ls_row(row: &TaskRow, board: Option<&str>, now: domain::time::Timestamp) -> Vec<String> {
    let t = &row.task;
    let ago = |ms: i64| format!("{} ago", output::age((now.as_millis() - ms) / 1000));
    let status = match (t.status, t.consecutive_failures) {
        (TaskStatus::Ready, n) if n > 0 => format!("ready (failed {n}x)"),
        _ => row.shown_status.clone(),
    };
    let failures = if t.consecutive_failures > 0 { t.consecutive_failures.to_string() } else { "-".into() };
    let mut row = vec![
        t.id.clone(),
        status,
        failures,
        ago(t.created_at),
        t.started_at.map_or_else(|| "-".into(), ago),
        t.assignee.clone().unwrap_or_else(|| "-".into()),
        t.priority.to_string(),
        t.title.clone(),
    ];
    if let Some(b) = board {
        row.insert(1, b.to_owned());
    }
    row
}

/// The last block of a task that waits because of it (blocked, or sent to todo or triage by a block): its kind and
/// reason (`needs-input: the API key`).
pub(crate) fn block_line(t: &Task) -> Option<String> {
    if !matches!(t.status, TaskStatus::Blocked | TaskStatus::Todo | TaskStatus::Triage) {
        return None;
    }
    match (t.block_kind, t.block_reason.as_deref()) {
        (Some(k), Some(r)) => Some(format!("{k}: {r}")),
        (Some(k), None) => Some(k.to_string()),
        (None, Some(r)) => Some(r.to_owned()),
        (None, None) => None,
    }
}

pub(super) fn show_text(shown: &TaskShow) {
    let (task, status, events) = (&shown.task.task, &shown.task.shown_status, &shown.events);
    output::line(&format!("{}  {}", task.id, task.title));
    output::line(&format!("  board:     {}", task.board));
    output::line(&format!("  status:    {status}"));
    if task.status == TaskStatus::Running {
        let pid = task.worker_pid.map(|p| format!("pid {p}")).unwrap_or_else(|| "no pid yet".to_owned());
        let pid = match &task.worker_host {
            Some(host) => format!("{pid} on {host}"),
            None => pid,
        };
        let how = match task.confirmed_at {
            Some(at) => format!("confirmed {}", ms(Some(at))),
            None => format!("unconfirmed, spawn lease until {}", ms(task.claim_expires)),
        };
        output::line(&format!("  worker:    {pid} ({how})"));
    }
    output::line(&format!("  assignee:  {}", task.assignee.as_deref().unwrap_or("-")));
    output::line(&format!("  priority:  {}", task.priority));
    if let Some(c) = &task.command {
        output::line(&format!("  command:   {c}"));
    }
    if !task.parents.is_empty() {
        output::line(&format!("  parents:   {}", task.parents.join(", ")));
    }
    output::line(&format!("  created:   {}", ms(Some(task.created_at))));
    if let Some(key) = &task.idempotency_key {
        output::line(&format!("  key:       {key}"));
    }
    if let Some(name) = &shown.task.schedule {
        output::line(&format!("  schedule:  {name} (kanban cron)"));
    }
    if let Some(at) = task.not_before.filter(|_| task.status != TaskStatus::Running) {
        // Scheduled, a retry's backoff, or a snooze: when the next try may start.
        output::line(&format!("  next try:  not before {}", ms(Some(at))));
    }
    output::line(&format!("  failures:  {}", task.consecutive_failures));
    if let Some(b) = block_line(task) {
        output::line(&format!("  block:     {b}"));
    }
    if task.review {
        output::line("  review:    a successful run waits in review (kanban approve | request-changes)");
    }
    if let Some(n) = &task.review_note {
        output::line(&format!("  changes:   {n}"));
    }
    if let Some(r) = &task.result {
        output::line(&format!("  result:    {r}"));
    }
    if let Some(e) = &task.last_failure_error {
        output::line(&format!("  last error: {e}"));
    }
    output::line("");
    output::line("Events:");
    for e in events {
        // The payload as `--json` shows it (its timestamps in RFC 3339).
        let payload = serde_json::to_value(e).map(|v| v["payload"].clone()).unwrap_or_default();
        output::line(&format!("  {}  {:<16} {payload}", ms(Some(e.created_at)), e.kind));
    }
    output::line("");
    output::line("Runs:");
    let rows: Vec<Vec<String>> = shown
        .runs
        .iter()
        .map(|RunRow { run: r, .. }| {
            vec![
                r.id.to_string(),
                r.assignee.clone().unwrap_or_default(),
                r.worker_host.clone().unwrap_or_else(|| "-".into()),
                r.worker_pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
                ms(Some(r.started_at)),
                ms(r.ended_at),
                r.outcome.clone().unwrap_or_else(|| "running".into()),
                r.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    output::table(&["RUN", "ASSIGNEE", "HOST", "PID", "STARTED", "ENDED", "OUTCOME", "EXIT"], &rows);
}

pub(super) async fn tail(ctx: &Ctx, id: &str, interval: f64, no_follow: bool) -> Result<(), Failure> {
    if !interval.is_finite() || interval <= 0.0 {
        return Err(Failure::usage(format!("--interval must be a positive number of seconds, got {interval}")));
    }
    let interval = Duration::from_secs_f64(interval.clamp(0.1, 60.0));
    let mut last = 0;
    loop {
        let store = open_read_only(ctx)?.ok_or_else(|| Failure::usage(format!("no task {id}")))?;
        let task = store.task(id)?;
        for e in store.events(id, last)? {
            last = e.id;
            if ctx.json {
                output::line(&serde_json::to_string(&e).unwrap_or_default());
            } else {
                // The payload as `--json` shows it (its timestamps in RFC 3339).
                let payload = serde_json::to_value(&e).map(|v| v["payload"].clone()).unwrap_or_default();
                output::line(&format!("{}  {:<16} {payload}", ms(Some(e.created_at)), e.kind));
            }
        }
        if no_follow || matches!(task.status, TaskStatus::Done | TaskStatus::Archived | TaskStatus::Blocked) {
            return Ok(());
        }
        drop(store);
        tokio::time::sleep(interval).await;
    }
}
