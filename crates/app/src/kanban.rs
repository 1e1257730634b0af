//! `berth kanban …`: boards, tasks, and the dispatch tick with its upstream-shaped report.

use std::collections::BTreeSet;
use std::time::Duration;

use domain::ids::{BoardSlug, ProfileName};
use domain::kanban::{FailureOutcome, TaskStatus, TickConfig};
use domain::policy::dispatch::{Decision, Housekeeping, TickPlan};
use domain::ports::Clock;
use kanban_store::{NewTask, SpawnRecord, SqliteKanbanStore, StoreError, Task, TickRequest};
use serde_json::{Value as Json, json};

use crate::cli::{BoardCmd, KanbanCmd};
use crate::context::{Ctx, ProcProbe, SystemClock};
use crate::error::Failure;
use crate::output;
use crate::process;
use crate::worker;

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NoTask(_) | StoreError::NoBoard(_) | StoreError::Transition { .. } | StoreError::Invalid(_) => {
                Failure::usage_of(e)
            }
            StoreError::Sqlite(inner) => Failure::other(format!("board database error: {inner}")),
            other => Failure::other(other.to_string()),
        }
    }
}

/// Opens the board database for writing (created when missing).
///
/// # Errors
/// A failure naming the file when it is corrupt or foreign (left untouched).
pub fn open_store(ctx: &Ctx) -> Result<SqliteKanbanStore, Failure> {
    match kanban_store::adopt_legacy_board(&ctx.home) {
        Ok(Some(old)) => tracing::info!(
            "moved berth's board {} to {} (hermes-agent keeps its own kanban.db)",
            old.display(),
            kanban_store::BOARD_FILE
        ),
        Ok(None) => {}
        Err(e) => return Err(Failure::other(format!("cannot move berth's board out of kanban.db: {e}"))),
    }
    Ok(SqliteKanbanStore::open(&ctx.db_path())?)
}

/// Opens the board database read-only; `None` when it does not exist yet.
pub(crate) fn open_read_only(ctx: &Ctx) -> Result<Option<SqliteKanbanStore>, Failure> {
    let path = ctx.db_path();
    if !path.exists() || std::fs::metadata(&path).map(|m| m.len() == 0).unwrap_or(true) {
        return Ok(None);
    }
    Ok(Some(SqliteKanbanStore::open_read_only(&path)?))
}

fn slug(raw: &str) -> Result<BoardSlug, Failure> {
    BoardSlug::parse(raw).map_err(Failure::usage_of)
}

/// A fresh task id: `t_` and 12 hex digits (48 random bits: collisions stay negligible on large boards).
fn new_task_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(u128::try_from(SystemClock.now().as_millis()).unwrap_or(0));
    h.write_u32(std::process::id());
    format!("t_{:012x}", h.finish() & 0xffff_ffff_ffff)
}

fn ms(t: Option<i64>) -> String {
    t.map(|m| domain::time::Timestamp::from_millis(m).to_rfc3339()).unwrap_or_else(|| "-".to_owned())
}

fn task_json(t: &Task) -> Json {
    serde_json::to_value(t).unwrap_or(Json::Null)
}

/// Whether a running task's worker is alive, judged as the dispatch tick judges it (read-only): a claim no worker
/// confirmed is gone once its spawn lease is over; otherwise the recorded pid must be alive with its recorded start
/// fingerprint. `None` when the task is not running, or while an unconfirmed claim waits inside its lease.
fn worker_alive(t: &Task, now: domain::time::Timestamp) -> Option<bool> {
    if t.status != TaskStatus::Running {
        return None;
    }
    let lease_over = t.confirmed_at.is_none() && t.claim_expires.is_none_or(|e| e < now.as_millis());
    if lease_over {
        return Some(false);
    }
    let pid = t.worker_pid.and_then(|p| u32::try_from(p).ok())?;
    Some(domain::ports::ProcessProbe::is_alive(&ProcProbe, pid, t.worker_start.and_then(|s| u64::try_from(s).ok())))
}

/// A task for listings: its JSON with `worker_alive`, and its status as text (`running (worker gone)` when the
/// tick would not count it as running, `running (starting)` before its worker confirmed).
///
/// A read is not atomic with the process check (the tick holds its write lock across both): a worker that
/// finished its task and exited between the two would look gone, so a gone worker is judged again on a fresh read.
pub(crate) fn listed(store: &SqliteKanbanStore, t: &Task, now: domain::time::Timestamp) -> (Json, Task, String) {
    let mut t = t.clone();
    let mut alive = worker_alive(&t, now);
    if alive == Some(false)
        && let Ok(fresh) = store.task(&t.id)
    {
        alive = worker_alive(&fresh, now);
        t = fresh;
    }
    let mut v = task_json(&t);
    if let Json::Object(m) = &mut v {
        m.insert("worker_alive".into(), json!(alive));
    }
    let status = match (t.status, alive) {
        (TaskStatus::Running, Some(false)) => "running (worker gone)".to_owned(),
        (TaskStatus::Running, None) => "running (starting)".to_owned(),
        (s, _) => s.to_string(),
    };
    (v, t, status)
}

/// `berth kanban …`.
///
/// # Errors
/// Usage failures (2) for bad input, others (1) for store failures.
/// How many of the log's last lines `kanban show` prints.
const SHOW_LOG_LINES: usize = 10;

pub async fn command(ctx: &Ctx, cmd: &KanbanCmd) -> Result<u8, Failure> {
    let now = SystemClock.now();
    match cmd {
        KanbanCmd::Board(BoardCmd::Create { slug: raw, name }) => {
            let s = slug(raw)?;
            let (board, created) = open_store(ctx)?.create_board(&s, name.as_deref(), now)?;
            if ctx.json {
                output::json(&json!({"board": board, "created": created}));
            } else {
                output::line(&format!("{} board {}", if created { "created" } else { "kept existing" }, board.slug));
            }
        }
        KanbanCmd::Board(BoardCmd::Ls) => {
            let store = open_store(ctx)?;
            let boards = store.boards()?;
            if ctx.json {
                output::json(&json!(boards));
            } else {
                let rows: Vec<Vec<String>> =
                    boards.iter().map(|b| vec![b.slug.clone(), b.name.clone(), ms(Some(b.created_at))]).collect();
                output::table(&["SLUG", "NAME", "CREATED"], &rows);
            }
        }
        KanbanCmd::Create {
            title,
            assignee,
            body,
            command,
            parents,
            priority,
            triage,
            max_runtime,
            max_retries,
            board,
        } => {
            let b = slug(&board.board)?;
            if let Some(a) = assignee.as_deref().filter(|a| !a.trim().is_empty()) {
                // Unknown assignees are allowed (control-plane lanes); a malformed one is not.
                ProfileName::parse(a.trim()).map_err(Failure::usage_of)?;
            }
            if max_runtime.is_some_and(|m| m < 1) || max_retries.is_some_and(|m| m < 1) {
                return Err(Failure::usage("--max-runtime and --max-retries must be at least 1"));
            }
            let new = NewTask {
                title: title.clone(),
                body: body.clone(),
                command: command.clone(),
                assignee: assignee.clone(),
                parents: parents.clone(),
                priority: *priority,
                triage: *triage,
                max_runtime_seconds: *max_runtime,
                max_retries: *max_retries,
                created_by: Some(ctx.profile.as_str().to_owned()),
            };
            let task = open_store(ctx)?.create_task(&b, &new_task_id(), &new, now)?;
            if ctx.json {
                output::json(&task_json(&task));
            } else {
                output::line(&format!("{}  {}  {}", task.id, task.status, task.title));
            }
        }
        KanbanCmd::Ls { all_boards: true, status, assignee, .. } => {
            crate::kanban_boards::ls_all(ctx, status.as_deref(), assignee.as_deref(), now)?;
        }
        KanbanCmd::Ls { status, assignee, board, .. } => {
            let b = slug(&board.board)?;
            let status = status.as_deref().map(str::parse::<TaskStatus>).transpose().map_err(Failure::usage)?;
            let shown: Vec<(Json, Task, String)> = match open_read_only(ctx)? {
                Some(store) => {
                    store.board(&b)?;
                    let tasks = store.tasks(&b, status, assignee.as_deref())?;
                    tasks.iter().map(|t| listed(&store, t, now)).collect()
                }
                None if b.as_str() == "default" => Vec::new(),
                None => return Err(StoreError::NoBoard(b.as_str().to_owned()).into()),
            };
            if ctx.json {
                output::json(&json!(shown.into_iter().map(|(v, _, _)| v).collect::<Vec<_>>()));
            } else {
                let rows: Vec<Vec<String>> = shown
                    .into_iter()
                    .map(|(_, t, status)| {
                        vec![
                            t.id.clone(),
                            status,
                            t.assignee.clone().unwrap_or_else(|| "-".into()),
                            t.priority.to_string(),
                            t.title.clone(),
                        ]
                    })
                    .collect();
                output::table(&["ID", "STATUS", "ASSIGNEE", "PRIORITY", "TITLE"], &rows);
            }
        }
        KanbanCmd::Show { id } => {
            let store = open_read_only(ctx)?.ok_or_else(|| Failure::usage(format!("no task {id}")))?;
            let (shown, task, status) = listed(&store, &store.task(id)?, now);
            let events = store.events(id, 0)?;
            let runs = store.runs(id)?;
            let log = crate::kanban_logs::log_path(ctx, id).display().to_string();
            let last = crate::kanban_logs::last_lines(ctx, id, SHOW_LOG_LINES);
            let ws = crate::kanban_logs::workspace_path(ctx, id, task.assignee.as_deref());
            if ctx.json {
                let log = json!({"path": log, "last_lines": last});
                output::json(&json!({"task": shown, "events": events, "runs": runs, "log": log, "workspace": ws}));
            } else {
                show_text(&task, &status, &events, &runs);
                crate::kanban_logs::show_text(&log, &last, ws.as_deref());
            }
        }
        KanbanCmd::Logs { id, follow, tail, run } => {
            return crate::kanban_logs::logs(ctx, id, *follow, *tail, *run).await;
        }
        KanbanCmd::Edit { .. } | KanbanCmd::Rm { .. } => return crate::kanban_edit::command(ctx, cmd, now).await,
        KanbanCmd::Assign { id, profile, allow_unknown_assignee } => {
            if let Some(p) = profile {
                ProfileName::parse(p).map_err(Failure::usage_of)?;
                crate::kanban_edit::check_assignee(ctx, p, *allow_unknown_assignee)?;
            }
            let t = open_store(ctx)?.assign(id, profile.as_deref(), now)?;
            done(ctx, &t, &format!("assigned {} to {}", t.id, t.assignee.as_deref().unwrap_or("nobody")));
        }
        KanbanCmd::Complete { id, result } => {
            let mut store = open_store(ctx)?;
            let before = store.task(id)?;
            let t = store.complete(id, None, result.as_deref(), None, now)?;
            // A worker command completing its own task is its caller: the verified stop leaves it alone.
            worker::stop(before.worker_pid, before.worker_start).await;
            release_finished(ctx, &store, &t).await?;
            done(ctx, &t, &format!("completed {}", t.id));
        }
        KanbanCmd::Block { id, reason } => {
            let mut store = open_store(ctx)?;
            let w = store.block(id, reason.as_deref(), now)?;
            worker::stop(w.map(|w| w.pid), w.and_then(|w| w.start)).await;
            done(ctx, &store.task(id)?, &format!("blocked {id}"));
        }
        KanbanCmd::Unblock { id } => {
            let t = open_store(ctx)?.unblock(id, now)?;
            done(ctx, &t, &format!("unblocked {} ({})", t.id, t.status));
        }
        KanbanCmd::Archive { id } => {
            let mut store = open_store(ctx)?;
            let w = store.archive(id, now)?;
            worker::stop(w.map(|w| w.pid), w.and_then(|w| w.start)).await;
            let t = store.task(id)?;
            release_finished(ctx, &store, &t).await?;
            done(ctx, &t, &format!("archived {id}"));
        }
        KanbanCmd::Reclaim { id, reason } => {
            let mut store = open_store(ctx)?;
            let w = store.reclaim(id, reason.as_deref(), now)?;
            worker::stop(w.map(|w| w.pid), w.and_then(|w| w.start)).await;
            done(ctx, &store.task(id)?, &format!("reclaimed {id}"));
        }
        KanbanCmd::Heartbeat { id, note } => {
            let mut store = open_store(ctx)?;
            store.heartbeat(id, note.as_deref(), now)?;
            done(ctx, &store.task(id)?, &format!("heartbeat recorded for {id}"));
        }
        KanbanCmd::Tail { id, interval, no_follow } => tail(ctx, id, *interval, *no_follow).await?,
        KanbanCmd::Dispatch { dry_run, max, failure_limit, explain, all_boards: true, .. } => {
            let args = DispatchArgs {
                dry_run: *dry_run,
                max: *max,
                failure_limit: *failure_limit,
                task: None,
                detach_stops: false,
            };
            crate::kanban_boards::dispatch_all(ctx, &args, *explain).await?;
        }
        KanbanCmd::Dispatch { dry_run, max, failure_limit, explain, task, board, .. } => {
            let b = slug(&board.board)?;
            let report = dispatch(
                ctx,
                &b,
                &DispatchArgs {
                    dry_run: *dry_run,
                    max: *max,
                    failure_limit: *failure_limit,
                    task: task.clone(),
                    detach_stops: false,
                },
            )
            .await?;
            print_dispatch(ctx, &report, *explain);
        }
    }
    Ok(0)
}

/// A task finished by hand (completed or archived) no longer needs its sandbox; one that never ran has none, so the
/// engine is only asked when the task has runs.
async fn release_finished(ctx: &Ctx, store: &SqliteKanbanStore, t: &Task) -> Result<(), Failure> {
    if let Some(assignee) = &t.assignee
        && !store.runs(&t.id)?.is_empty()
    {
        worker::remove_task_sandbox(ctx, &t.id, assignee).await;
    }
    Ok(())
}

fn done(ctx: &Ctx, t: &Task, text: &str) {
    if ctx.json {
        output::json(&task_json(t));
    } else {
        output::line(text);
    }
}

fn show_text(task: &Task, status: &str, events: &[kanban_store::Event], runs: &[kanban_store::Run]) {
    output::line(&format!("{}  {}", task.id, task.title));
    output::line(&format!("  board:     {}", task.board));
    output::line(&format!("  status:    {status}"));
    if task.status == TaskStatus::Running {
        let pid = task.worker_pid.map(|p| format!("pid {p}")).unwrap_or_else(|| "no pid yet".to_owned());
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
    output::line(&format!("  failures:  {}", task.consecutive_failures));
    if let Some(r) = &task.result {
        output::line(&format!("  result:    {r}"));
    }
    if let Some(e) = &task.last_failure_error {
        output::line(&format!("  last error: {e}"));
    }
    output::line("");
    output::line("Events:");
    for e in events {
        output::line(&format!("  {}  {:<16} {}", ms(Some(e.created_at)), e.kind, e.payload));
    }
    output::line("");
    output::line("Runs:");
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.id.to_string(),
                r.assignee.clone().unwrap_or_default(),
                r.worker_pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
                ms(Some(r.started_at)),
                ms(r.ended_at),
                r.outcome.clone().unwrap_or_else(|| "running".into()),
                r.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    output::table(&["RUN", "ASSIGNEE", "PID", "STARTED", "ENDED", "OUTCOME", "EXIT"], &rows);
}

async fn tail(ctx: &Ctx, id: &str, interval: f64, no_follow: bool) -> Result<(), Failure> {
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
                output::line(&format!("{}  {:<16} {}", ms(Some(e.created_at)), e.kind, e.payload));
            }
        }
        if no_follow || matches!(task.status, TaskStatus::Done | TaskStatus::Archived | TaskStatus::Blocked) {
            return Ok(());
        }
        drop(store);
        tokio::time::sleep(interval).await;
    }
}

/// The options of one dispatch.
#[derive(Clone, Debug, Default)]
pub struct DispatchArgs {
    pub dry_run: bool,
    pub max: Option<u32>,
    pub failure_limit: Option<u32>,
    pub task: Option<String>,
    /// Leave the workers housekeeping took tasks from in [`DispatchReport::stops`] for the caller to stop off the
    /// tick path (the gateway), instead of stopping them before returning.
    pub detach_stops: bool,
}

/// What a dispatch did (or, dry, would do).
#[derive(Clone, Debug, Default)]
pub struct DispatchReport {
    pub board: String,
    pub dry_run: bool,
    pub plan: TickPlan,
    /// Started workers: task, assignee, sandbox name, pid.
    pub spawned: Vec<(String, String, String, Option<u32>)>,
    pub spawn_failed: Vec<(String, String)>,
    pub auto_blocked: Vec<String>,
    pub default_assignee: Option<String>,
    /// For `--task`: why it was not dispatched, when it was not even considered.
    pub not_considered: Option<(String, String)>,
    /// Workers still to stop (only with [`DispatchArgs::detach_stops`]).
    pub stops: Vec<process::Worker>,
}

impl DispatchReport {
    /// Whether ready work could have started (for the gateway's stuck warning).
    pub fn had_spawnable(&self) -> bool {
        self.plan.spawns().next().is_some()
    }
}

/// The tick configuration from the settings and flags.
pub fn tick_config(ctx: &Ctx, args: &DispatchArgs) -> TickConfig {
    let mut caps = ctx.settings.caps();
    if let Some(m) = args.max {
        caps.max_spawn = Some(m);
    }
    let failure_limit = args
        .failure_limit
        .filter(|n| *n >= 1)
        .unwrap_or_else(|| u32::try_from(ctx.settings.int("kanban.failure_limit")).unwrap_or(2));
    TickConfig {
        caps,
        default_assignee: ctx.settings.default_assignee(),
        profiles: ctx.profiles().list().into_iter().collect::<BTreeSet<_>>(),
        failure_limit,
        stale_timeout_secs: ctx.settings.int("kanban.dispatch_stale_timeout_seconds"),
        only_task: args.task.clone(),
    }
}

/// Runs one tick on `board`: plan (read-only when dry), claim, spawn workers, stop reclaimed ones.
///
/// # Errors
/// Store failures, or a usage failure for an unknown board or task.
pub async fn dispatch(ctx: &Ctx, board: &BoardSlug, args: &DispatchArgs) -> Result<DispatchReport, Failure> {
    let cfg = tick_config(ctx, args);
    let claimer = format!("{}:{}", crate::context::hostname(), std::process::id());
    let ttl = worker::claim_ttl(ctx);
    let spawn_lease =
        Duration::from_secs(u64::try_from(ctx.settings.int("kanban.spawn_lease_seconds")).unwrap_or(20).max(1));
    let mut report = DispatchReport {
        board: board.as_str().to_owned(),
        dry_run: args.dry_run,
        default_assignee: cfg.default_assignee.clone(),
        ..DispatchReport::default()
    };
    let probe = ProcProbe;
    let now = SystemClock.now();
    let req = TickRequest { board, cfg: &cfg, now, probe: &probe, claimer: &claimer, claim_ttl: ttl, spawn_lease };
    if args.dry_run {
        let Some(store) = open_read_only(ctx)? else {
            if board.as_str() != "default" {
                return Err(StoreError::NoBoard(board.as_str().to_owned()).into());
            }
            return Ok(report);
        };
        check_only_task(&store, board, args, &mut report)?;
        report.plan = store.plan_tick(&req)?;
        for d in report.plan.spawns() {
            report.spawned.push((d.task_id.clone(), d.assignee.clone().unwrap_or_default(), String::new(), None));
        }
        return Ok(report);
    }
    let mut store = open_store(ctx)?;
    check_only_task(&store, board, args, &mut report)?;
    let outcome = store.tick(&req)?;
    report.plan = outcome.plan;
    for (id, h) in &report.plan.housekeeping {
        if kanban_store::gave_up(h) {
            report.auto_blocked.push(id.clone());
        }
    }
    report.stops =
        outcome.stop_workers.iter().filter_map(|w| process::Worker::from_row(Some(w.pid), w.start)).collect();
    if !args.detach_stops {
        // Concurrently: one worker that ignores SIGTERM costs one grace period, not one per worker.
        process::stop_all(std::mem::take(&mut report.stops)).await;
    }
    // Tasks the breaker just blocked are finished with their sandboxes.
    for (id, h) in &report.plan.housekeeping {
        if kanban_store::gave_up(h)
            && let Ok(t) = store.task(id)
            && let Some(assignee) = &t.assignee
        {
            worker::remove_task_sandbox(ctx, id, assignee).await;
        }
    }
    // Start every worker, then record them all in one transaction.
    let mut started = Vec::new();
    for claimed in &outcome.claimed {
        let task = &claimed.task;
        match worker::spawn(ctx, board, task, claimed.run_id) {
            Ok(spawned) => {
                let start = spawned.start;
                started.push((claimed, spawned, start));
            }
            Err(e) => {
                tracing::warn!("cannot start a worker for {}: {e}", task.id);
                let res = store.record_spawn_failure(&task.id, &e, cfg.failure_limit, SystemClock.now())?;
                if matches!(res, FailureOutcome::GiveUp { .. }) {
                    report.auto_blocked.push(task.id.clone());
                }
                report.spawn_failed.push((task.id.clone(), e));
            }
        }
    }
    let logs: Vec<String> = started.iter().map(|(_, s, _)| s.log.display().to_string()).collect();
    let records: Vec<SpawnRecord<'_>> = started
        .iter()
        .zip(&logs)
        .map(|((c, s, start), log)| SpawnRecord { task: &c.task.id, run_id: c.run_id, pid: s.pid, start: *start, log })
        .collect();
    store.record_spawned(&records, spawn_lease, SystemClock.now())?;
    for (c, s, _) in started {
        report.spawned.push((c.task.id.clone(), c.task.assignee.clone().unwrap_or_default(), s.sandbox, Some(s.pid)));
    }
    Ok(report)
}

/// For `--task ID`: the task must exist on this board; when it is not ready, say why.
fn check_only_task(
    store: &SqliteKanbanStore,
    board: &BoardSlug,
    args: &DispatchArgs,
    report: &mut DispatchReport,
) -> Result<(), Failure> {
    store.board(board)?;
    let Some(id) = &args.task else { return Ok(()) };
    let t = store.task(id)?;
    if t.board != board.as_str() {
        return Err(Failure::usage(format!(
            "task {id} is on board {:?}, not {:?} (pass --board {})",
            t.board,
            board.as_str(),
            t.board
        )));
    }
    if t.status != TaskStatus::Ready && t.status != TaskStatus::Todo && t.status != TaskStatus::Running {
        report.not_considered = Some((id.clone(), format!("not_ready: the task is {}", t.status)));
    } else if t.status == TaskStatus::Running {
        report.not_considered = Some((id.clone(), "already_running".to_owned()));
    } else if t.status == TaskStatus::Todo {
        report.not_considered = Some((id.clone(), "waiting_on_parents".to_owned()));
    }
    Ok(())
}

fn ids_where(plan: &TickPlan, f: impl Fn(&Housekeeping) -> bool) -> Vec<String> {
    plan.housekeeping.iter().filter(|(_, h)| f(h)).map(|(id, _)| id.clone()).collect()
}

/// The report as JSON: the eleven upstream keys first, then berth's own.
pub fn report_json(r: &DispatchReport, explain: bool) -> Json {
    let p = &r.plan;
    let by = |code: &str| -> Vec<String> {
        p.decisions.iter().filter(|d| d.decision.code() == code).map(|d| d.task_id.clone()).collect()
    };
    let mut auto_blocked = ids_where(p, |h| {
        matches!(
            h,
            Housekeeping::Crashed { outcome: FailureOutcome::GiveUp { .. }, .. }
                | Housekeeping::TimedOut { outcome: FailureOutcome::GiveUp { .. }, .. }
                | Housekeeping::LeaseExpired { outcome: FailureOutcome::GiveUp { .. }, .. }
        )
    });
    for id in &r.auto_blocked {
        if !auto_blocked.contains(id) {
            auto_blocked.push(id.clone());
        }
    }
    let mut v = json!({
        "reclaimed": p.housekeeping.iter().filter(|(_, h)| matches!(h, Housekeeping::Reclaim { .. })).count(),
        "crashed": ids_where(p, |h| matches!(h, Housekeeping::Crashed { .. })),
        "timed_out": ids_where(p, |h| matches!(h, Housekeeping::TimedOut { .. })),
        "stale": ids_where(p, |h| matches!(h, Housekeeping::Stale { .. })),
        "auto_blocked": auto_blocked,
        "promoted": p.promoted.len(),
        "spawned": r.spawned.iter().map(|(t, a, ws, _)| json!({"task_id": t, "assignee": a, "workspace": ws})).collect::<Vec<_>>(),
        "skipped_unassigned": by("skipped_unassigned"),
        "skipped_nonspawnable": by("skipped_nonspawnable"),
        "skipped_per_profile_capped": p.decisions.iter().filter_map(|d| match d.decision {
            Decision::SkippedPerProfileCapped { current, .. } => Some(json!({"task_id": d.task_id, "assignee": d.assignee, "current": current})),
            _ => None,
        }).collect::<Vec<_>>(),
        "auto_assigned_default": p.decisions.iter().filter(|d| d.auto_assigned).map(|d| d.task_id.clone()).collect::<Vec<_>>(),
    });
    let extra = json!({
        "board": r.board,
        "dry_run": r.dry_run,
        "claim_extended": ids_where(p, |h| matches!(h, Housekeeping::ExtendClaim)),
        "lease_expired": ids_where(p, |h| matches!(h, Housekeeping::LeaseExpired { .. })),
        "deferred": p.decisions.iter().filter(|d| matches!(d.decision, Decision::DeferredMaxInProgress { .. } | Decision::DeferredMaxSpawn { .. }))
            .map(|d| json!({"task_id": d.task_id, "assignee": d.assignee, "reason": d.decision.code()})).collect::<Vec<_>>(),
        "spawn_failed": r.spawn_failed.iter().map(|(t, e)| json!({"task_id": t, "error": e})).collect::<Vec<_>>(),
        "workers": r.spawned.iter().filter_map(|(t, _, _, pid)| pid.map(|p| json!({"task_id": t, "pid": p}))).collect::<Vec<_>>(),
    });
    if let (Json::Object(m), Json::Object(e)) = (&mut v, extra) {
        m.extend(e);
        if explain || r.not_considered.is_some() {
            let mut reasons: Vec<Json> = p
                .decisions
                .iter()
                .map(|d| json!({"task_id": d.task_id, "code": d.decision.code(), "assignee": d.assignee, "detail": d.decision}))
                .collect();
            if let Some((id, why)) = &r.not_considered {
                reasons.push(json!({"task_id": id, "code": why.split(':').next().unwrap_or(why), "assignee": null, "detail": why}));
            }
            m.insert("explain".into(), Json::Array(reasons));
        }
    }
    v
}

pub(crate) fn print_dispatch(ctx: &Ctx, r: &DispatchReport, explain: bool) {
    if ctx.json {
        output::json(&report_json(r, explain));
        return;
    }
    let v = report_json(r, explain);
    let list = |k: &str| -> Vec<String> {
        v[k].as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect()).unwrap_or_default()
    };
    let counted = |label: &str, ids: Vec<String>| {
        output::line(&format!("{label:<14}{}", ids.len()));
        if !ids.is_empty() {
            output::line(&format!("  {}", ids.join(", ")));
        }
    };
    output::line(&format!("{:<14}{}", "Reclaimed:", v["reclaimed"]));
    counted("Crashed:", list("crashed"));
    counted("Timed out:", list("timed_out"));
    counted("Stale:", list("stale"));
    counted("Lease lapsed:", list("lease_expired"));
    counted("Auto-blocked:", list("auto_blocked"));
    output::line(&format!("{:<14}{}", "Promoted:", v["promoted"]));
    output::line(&format!("{:<14}{}", "Spawned:", r.spawned.len()));
    for (t, who, ws, _) in &r.spawned {
        let ws = if ws.is_empty() { "-" } else { ws };
        output::line(&format!("  - {t}  ->  {who}  @ {ws}{}", if r.dry_run { " (dry)" } else { "" }));
    }
    let auto = list("auto_assigned_default");
    if !auto.is_empty() {
        output::line(&format!(
            "Auto-assigned to kanban.default_assignee='{}': {}",
            r.default_assignee.as_deref().unwrap_or(""),
            auto.join(", ")
        ));
    }
    let unassigned = list("skipped_unassigned");
    if !unassigned.is_empty() {
        output::line(&format!("Skipped (unassigned): {}", unassigned.join(", ")));
    }
    for c in v["skipped_per_profile_capped"].as_array().into_iter().flatten() {
        output::line(&format!(
            "Deferred ({} at per-profile cap, {} running): {}",
            c["assignee"].as_str().unwrap_or(""),
            c["current"],
            c["task_id"].as_str().unwrap_or("")
        ));
    }
    let nonspawnable = list("skipped_nonspawnable");
    if !nonspawnable.is_empty() {
        output::line(&format!("Skipped (non-spawnable assignee — terminal lane, OK): {}", nonspawnable.join(", ")));
    }
    for d in v["deferred"].as_array().into_iter().flatten() {
        output::line(&format!(
            "Deferred ({}): {} ({})",
            d["reason"].as_str().unwrap_or(""),
            d["task_id"].as_str().unwrap_or(""),
            d["assignee"].as_str().unwrap_or("unassigned")
        ));
    }
    for f in &r.spawn_failed {
        output::line(&format!("Spawn failed: {}: {}", f.0, f.1));
    }
    if let Some(reasons) = v["explain"].as_array() {
        output::line("");
        let rows: Vec<Vec<String>> = reasons
            .iter()
            .map(|e| {
                vec![
                    e["task_id"].as_str().unwrap_or("").to_owned(),
                    e["code"].as_str().unwrap_or("").to_owned(),
                    e["assignee"].as_str().unwrap_or("-").to_owned(),
                ]
            })
            .collect();
        output::table(&["TASK", "REASON", "ASSIGNEE"], &rows);
    }
}
