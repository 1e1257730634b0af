//! `berth kanban …`: the board commands (parse → call the store or the dispatcher → print). The dispatch tick and
//! its report are in `report.rs`, listings, `show` and `tail` in `show.rs`.

pub mod boards;
mod create;
mod cron;
pub mod edit;
mod exit_outcome;
mod external;
mod gate;
pub mod handoff;
pub mod launcher;
mod log_sink;
mod log_stream;
pub mod logs;
pub mod never_run;
pub mod outage;
pub mod prefix;
mod profile_env;
pub mod relay;
pub mod release;
pub(crate) mod report;
pub mod retention;
mod run_outcome;
pub mod runner;
mod script;
pub(crate) mod show;
mod stream;
pub(crate) mod task_id;
pub(crate) mod views;
pub(crate) mod why;
pub mod worker;

pub use report::{DispatchArgs, DispatchReport, TickTally, dispatch, dispatch_on, report_json, tick_config};
pub(crate) use task_id::new_task_id;

use domain::board::TaskStatus;
use domain::board::{StoreError, Task};
use domain::ids::{BoardSlug, ProfileName};
use domain::ports::Clock;

pub(crate) use self::show::listed;
use self::show::{show_text, tail};
use crate::cli::{BoardCmd, KanbanCmd};
use crate::cli_kanban::ReviewCmd;
use crate::edge::context::{Ctx, SystemClock};
use crate::edge::error::Failure;
use crate::edge::output;

use self::show::ms;
use self::views::{LogTail, RunRow, TaskRow, TaskShow};
use crate::edge::open::{Board, check_sqlite_board, copy_sqlite_board, open_read_only, open_store};

/// `berth kanban check`: the full, read-only integrity check of the board file. Exit 1 when it finds damage.
fn check(ctx: &Ctx) -> Result<u8, Failure> {
    let path = ctx.db_path();
    if !path.exists() {
        return Err(Failure::other(format!("no board database at {} yet", path.display())));
    }
    let findings = check_sqlite_board(&path)?;
    let ok = findings.len() == 1 && findings[0] == "ok";
    if ctx.json {
        output::json(&views::Checked { path: path.clone(), ok, findings: findings.clone() });
    } else if ok {
        output::line(&format!("{}: ok", path.display()));
    } else {
        for f in &findings {
            output::line(&format!("{}: {f}", path.display()));
        }
    }
    if ok {
        Ok(0)
    } else {
        Err(Failure::other(format!(
            "{} is damaged ({} finding(s) above); it was left untouched — move it aside to start a new board",
            path.display(),
            findings.len()
        )))
    }
}

fn slug(raw: &str) -> Result<BoardSlug, Failure> {
    BoardSlug::parse(raw).map_err(Failure::usage_of)
}

/// How many of the log's last lines `kanban show` prints.
const SHOW_LOG_LINES: usize = 10;

/// `berth kanban …`.
///
/// # Errors
/// Usage failures (2) for bad input, others (1) for store failures.
pub async fn command(ctx: &Ctx, cmd: &KanbanCmd) -> Result<u8, Failure> {
    commanded(ctx, cmd).await.map_err(|f| with_board_hint(ctx, f))
}

/// A refusal naming a board that does not exist (`StoreError::NoBoard`, whichever store and call made it) gets the
/// nearest board's name: `no board "alpah" (did you mean alpha?) (create it with …)`.
fn with_board_hint(ctx: &Ctx, mut f: Failure) -> Failure {
    let Some(rest) = f.message.strip_prefix("no board \"") else { return f };
    let Some((name, tail)) = rest.split_once('"') else { return f };
    let boards = match open_read_only(ctx) {
        Ok(Some(store)) => store.boards().unwrap_or_default().into_iter().map(|b| b.slug).collect::<Vec<_>>(),
        _ => Vec::new(),
    };
    let hint = domain::suggest::did_you_mean(name, boards.iter().map(String::as_str));
    if !hint.is_empty() {
        f.message = format!("no board {name:?}{hint}{tail}");
    }
    f
}

async fn commanded(ctx: &Ctx, cmd: &KanbanCmd) -> Result<u8, Failure> {
    let now = SystemClock.now();
    match cmd {
        KanbanCmd::Board(cmd) => board_command(ctx, cmd, now)?,
        KanbanCmd::Create { board, .. } => create::command(ctx, &slug(&board.board)?, cmd, now)?,
        KanbanCmd::Ls { all_boards: true, status, assignee, archived, .. } => {
            crate::board::boards::ls_all(ctx, status.as_deref(), assignee.as_deref(), *archived, now)?;
        }
        KanbanCmd::Ls { status, assignee, board, archived, .. } => {
            ls(ctx, &board.board, status.as_deref(), assignee.as_deref(), *archived, now)?
        }
        KanbanCmd::Show { id } => show(ctx, id, now)?,
        KanbanCmd::Logs { id, follow, tail, run } => {
            return crate::board::logs::logs(ctx, id, *follow, *tail, *run).await;
        }
        KanbanCmd::Edit { .. } | KanbanCmd::Rm { .. } => return crate::board::edit::command(ctx, cmd, now).await,
        KanbanCmd::Assign { id, profile, allow_unknown_assignee } => {
            if let Some(p) = profile {
                ProfileName::parse(p).map_err(Failure::usage_of)?;
                crate::board::edit::check_assignee(ctx, p, *allow_unknown_assignee)?;
            }
            let t = open_store(ctx)?.assign(id, profile.as_deref(), now)?;
            done(ctx, &t, &format!("assigned {} to {}", t.id, t.assignee.as_deref().unwrap_or("nobody")));
        }
        KanbanCmd::Complete { id, result } => complete(ctx, id, result.as_deref(), now).await?,
        KanbanCmd::Promote { id } => {
            let t = open_store(ctx)?.promote(id, now)?;
            done(ctx, &t, &format!("promoted {} out of triage ({})", t.id, t.status));
        }
        KanbanCmd::Block { id, why, reason, kind } => {
            let reason = reason.as_deref().or(why.as_deref());
            let mut store = open_store(ctx)?;
            // Masked before the board stores it, as a result is (a worker command may pass on what its agent said).
            let reason = reason.map(crate::edge::redact::redact);
            let w = store.block(id, *kind, reason.as_deref(), now)?;
            worker::stop_shown(ctx, id, w.map(|w| w.pid), w.and_then(|w| w.start)).await;
            let t = store.task(id)?;
            let said = match t.status {
                TaskStatus::Blocked => format!("blocked {id}"),
                TaskStatus::Todo => format!("blocked {id}: back to todo until its parents are done"),
                other => format!("blocked {id} the same way a second time: {other}"),
            };
            done(ctx, &t, &said);
        }
        KanbanCmd::Review(cmd) => review(ctx, cmd, now).await?,
        KanbanCmd::Cron(cmd) => cron::command(ctx, cmd, now)?,
        KanbanCmd::Schedule { id, when, now: _ } => {
            let at = when.at(now);
            let t = open_store(ctx)?.schedule(id, at, now)?;
            let when = at.map_or_else(|| "as soon as it can".to_owned(), |at| format!("not before {at}"));
            done(ctx, &t, &format!("scheduled {}: {when}", t.id));
        }
        KanbanCmd::Unblock { id } => {
            let t = open_store(ctx)?.unblock(id, now)?;
            done(ctx, &t, &format!("unblocked {} ({})", t.id, t.status));
        }
        KanbanCmd::Archive { id } => {
            let mut store = open_store(ctx)?;
            let w = store.archive(id, now)?;
            worker::stop_shown(ctx, id, w.map(|w| w.pid), w.and_then(|w| w.start)).await;
            let t = store.task(id)?;
            release_finished(ctx, &store, &t).await?;
            // An archived task's output goes with it (retention's "or until archived").
            crate::board::retention::remove_task_output(ctx, &t.id, t.assignee.as_deref()).await;
            done(ctx, &t, &format!("archived {id}"));
        }
        KanbanCmd::Reclaim { id, reason } => {
            let mut store = open_store(ctx)?;
            let w = store.reclaim(id, reason.as_deref(), now)?;
            worker::stop_shown(ctx, id, w.map(|w| w.pid), w.and_then(|w| w.start)).await;
            done(ctx, &store.task(id)?, &format!("reclaimed {id}"));
        }
        KanbanCmd::Heartbeat { id, note } => {
            let mut store = open_store(ctx)?;
            store.heartbeat(id, note.as_deref(), now)?;
            // A worker command's own beat also says its host is alive (it may run where no gateway does).
            if crate::board::outage::own_run(ctx, id).is_some() {
                store.renew_host(&ctx.host_id(), now)?;
            }
            done(ctx, &store.task(id)?, &format!("heartbeat recorded for {id}"));
        }
        KanbanCmd::Prune { dry_run } => return prune(ctx, *dry_run, now).await,
        KanbanCmd::Check => return check(ctx),
        KanbanCmd::Migrate { to } => migrate(ctx, &migrate_target(ctx, to.as_deref())?)?,
        KanbanCmd::Tail { id, interval, no_follow } => tail(ctx, id, *interval, *no_follow).await?,
        KanbanCmd::Dispatch { .. } => boards::dispatch_command(ctx, cmd).await?,
    }
    Ok(0)
}

/// `kanban board create|ls`.
fn board_command(ctx: &Ctx, cmd: &BoardCmd, now: domain::time::Timestamp) -> Result<(), Failure> {
    match cmd {
        BoardCmd::Create { slug: raw, name } => {
            let s = slug(raw)?;
            let (board, created) = open_store(ctx)?.create_board(&s, name.as_deref(), now)?;
            if ctx.json {
                output::json(&views::BoardCreated { board, created });
            } else {
                output::line(&format!("{} board {}", if created { "created" } else { "kept existing" }, board.slug));
            }
        }
        BoardCmd::Ls => {
            let store = open_store(ctx)?;
            let boards = store.boards()?;
            if ctx.json {
                output::json(&boards);
            } else {
                let rows: Vec<Vec<String>> =
                    boards.iter().map(|b| vec![b.slug.clone(), b.name.clone(), ms(Some(b.created_at))]).collect();
                output::table(&["SLUG", "NAME", "CREATED"], &rows);
            }
        }
    }
    Ok(())
}

/// `kanban ls` on one board.
fn ls(
    ctx: &Ctx,
    board: &str,
    status: Option<&str>,
    assignee: Option<&str>,
    archived: bool,
    now: domain::time::Timestamp,
) -> Result<(), Failure> {
    let b = slug(board)?;
    let status = status.map(str::parse::<TaskStatus>).transpose().map_err(Failure::usage)?;
    let shown: Vec<TaskRow> = match open_read_only(ctx)? {
        Some(store) => {
            store.board(&b)?;
            let tasks = store.tasks(&b, status, assignee)?;
            let keep = |t: &&Task| archived || status.is_some() || t.status != TaskStatus::Archived;
            tasks.iter().filter(keep).map(|t| listed(ctx, &store, t, now)).collect()
        }
        None if b.as_str() == "default" => Vec::new(),
        None => return Err(StoreError::NoBoard(b.as_str().to_owned()).into()),
    };
    crate::board::edit::note_unknown_assignee(ctx, assignee, shown.is_empty());
    if ctx.json {
        output::json(&shown);
    } else {
        let rows: Vec<Vec<String>> = shown.iter().map(|row| crate::board::show::ls_row(row, None, now)).collect();
        output::table(&crate::board::show::ls_header(false), &rows);
    }
    Ok(())
}

/// `kanban show`.
fn show(ctx: &Ctx, id: &str, now: domain::time::Timestamp) -> Result<(), Failure> {
    let store = open_read_only(ctx)?.ok_or_else(|| Failure::usage(format!("no task {id}")))?;
    let task = listed(ctx, &store, &store.task(id)?, now);
    let assignee = task.task.assignee.clone();
    let shown = TaskShow {
        events: store.events(id, 0)?,
        runs: RunRow::numbered(store.runs(id)?),
        log: LogTail {
            path: crate::board::logs::log_path(ctx, id).display().to_string(),
            last_lines: crate::board::logs::last_lines(ctx, id, SHOW_LOG_LINES),
        },
        workspace: crate::board::logs::workspace_path(ctx, id, assignee.as_deref()),
        // The egress policy the task's sandbox gets under its assignee (what a worker would start it with now).
        egress: assignee.as_deref().map(|a| ctx.settings.egress_for(a).to_string()),
        task,
    };
    if ctx.json {
        output::json(&shown);
    } else {
        show_text(&shown);
        crate::board::logs::show_text(
            &shown.log.path,
            &shown.log.last_lines,
            shown.workspace.as_deref(),
            shown.egress.as_deref(),
        );
    }
    Ok(())
}

/// `kanban complete`: by hand, the task as it is, at once; from a worker's command on its own task, guarded by its
/// run (a run taken back meanwhile is not completed) and waiting out an outage of the board.
async fn complete(ctx: &Ctx, id: &str, result: Option<&str>, now: domain::time::Timestamp) -> Result<(), Failure> {
    // A worker's command completing its own task: guarded by its run (a run taken back meanwhile is not
    // completed) and waiting out an outage of the board; by hand, the task as it is, at once.
    let run = crate::board::outage::own_run(ctx, id);
    // A forwarded secret in the result is masked before the board stores it (an external worker's command passes
    // what its agent printed).
    let masked = result.map(crate::edge::redact::redact);
    let result = masked.as_deref();
    let patience = if run.is_some() { crate::board::outage::patience(ctx) } else { std::time::Duration::ZERO };
    let mut slot = if run.is_some() { None } else { Some(open_store(ctx)?) };
    // A worker command completing its own run is the worker the task records (or runs in its process
    // group): the verified stop would leave it alone, so it needs no read of the task before, and its run
    // says the task ran, so no read of the runs after: the completion is the one write it makes.
    let (before, t) = crate::board::outage::retrying(ctx, "record the completion", patience, &mut slot, |s| {
        let before = if run.is_some() { None } else { Some(s.task(id)?) };
        let ending = domain::board::RunEnding::Completed { result, exit_code: None };
        let t =
            match domain::board::record_run_end(&mut **s, id, run, &ending, domain::board::Breaker::at_once(1), now)? {
                domain::board::RunRecorded::Done(t) => *t,
                _ => s.task(id)?,
            };
        Ok((before, t))
    })
    .await?;
    let store = slot.ok_or_else(|| Failure::other("the board did not open"))?;
    if let Some(before) = before {
        worker::stop_shown(ctx, &t.id, before.worker_pid, before.worker_start).await;
        release_finished(ctx, &store, &t).await?;
    } else if let Some(assignee) = &t.assignee {
        release::remove_task_sandbox_shown(ctx, &t.id, assignee).await;
    }
    let waits = if t.status == TaskStatus::Review { ": it waits in review" } else { "" };
    done(ctx, &t, &format!("completed {}{waits}", t.id));
    Ok(())
}

/// `kanban review|approve|request-changes`: a running task's worker is stopped by the verified stop, as a block's.
async fn review(ctx: &Ctx, cmd: &ReviewCmd, now: domain::time::Timestamp) -> Result<(), Failure> {
    match cmd {
        ReviewCmd::Review { id, note } => {
            let mut store = open_store(ctx)?;
            let note = note.as_deref().map(crate::edge::redact::redact);
            let w = store.review(id, note.as_deref(), now)?;
            worker::stop_shown(ctx, id, w.map(|w| w.pid), w.and_then(|w| w.start)).await;
            done(ctx, &store.task(id)?, &format!("{id} waits in review"));
        }
        ReviewCmd::Approve { id } => {
            let t = open_store(ctx)?.approve(id, now)?;
            done(ctx, &t, &format!("approved {}: done", t.id));
        }
        ReviewCmd::RequestChanges { id, note } => {
            let note = crate::edge::redact::redact(note);
            let t = open_store(ctx)?.request_changes(id, &note, now)?;
            done(ctx, &t, &format!("changes requested on {} ({})", t.id, t.status));
        }
    }
    Ok(())
}

/// A task finished by hand (completed or archived) no longer needs its sandbox; one that never ran has none, so the
/// engine is only asked when the task has runs.
async fn release_finished(ctx: &Ctx, store: &Board, t: &Task) -> Result<(), Failure> {
    if let Some(assignee) = &t.assignee
        && !store.runs(&t.id)?.is_empty()
    {
        release::remove_task_sandbox_shown(ctx, &t.id, assignee).await;
    }
    Ok(())
}

/// `kanban prune`: finished tasks' expired output (workspace folders and logs), removed unless `dry_run`.
async fn prune(ctx: &Ctx, dry_run: bool, now: domain::time::Timestamp) -> Result<u8, Failure> {
    let folders = crate::sandbox::folders::Folders::from_ctx(ctx);
    let retention = crate::board::retention::retention_secs(ctx);
    let mut plan = crate::board::retention::plan(&folders, now, retention).map_err(Failure::other)?;
    if !dry_run && !plan.is_empty() {
        let rt = if plan.iter().any(|p| p.folder.is_some()) { crate::sandbox::connect(ctx).await.ok() } else { None };
        crate::board::retention::apply(&folders, rt.as_deref(), &mut plan).await;
    }
    let failed = plan.iter().any(|p| p.error.is_some());
    if ctx.json {
        output::json(&views::PruneReport { dry_run, retention_secs: retention, tasks: plan });
    } else if plan.is_empty() {
        output::line("nothing to prune");
    } else {
        let verb = if dry_run { "would remove" } else { "removed" };
        let rows: Vec<Vec<String>> = plan
            .iter()
            .map(|p| {
                let what = [p.folder.as_deref().map(|_| "workspace"), (!p.logs.is_empty()).then_some("log")];
                let what: Vec<&str> = what.into_iter().flatten().collect();
                match &p.error {
                    None => vec![
                        p.task.clone(),
                        format!("{verb} {}", what.join(" and ")),
                        crate::board::retention::reason_words(&p.reason),
                    ],
                    Some(e) => vec![p.task.clone(), "failed".to_owned(), e.clone()],
                }
            })
            .collect();
        output::table(&["TASK", "ACTION", "REASON"], &rows);
    }
    Ok(if failed { 1 } else { 0 })
}

/// `kanban migrate --to URL`: copies the SQLite board of this home into an empty PostgreSQL board.
/// The URL `kanban migrate` copies into: `--to URL`, the first line of stdin for `--to -`, else
/// `kanban.database_url` (the two last keep the password out of the process's arguments; a `--to URL` holding a
/// password is refused).
fn migrate_target(ctx: &Ctx, to: Option<&str>) -> Result<String, Failure> {
    match to {
        Some("-") => {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .map_err(|e| Failure::usage(format!("cannot read the board URL from stdin: {e}")))?;
            let url = line.trim();
            if url.is_empty() {
                return Err(Failure::usage("--to - read no board URL from stdin"));
            }
            Ok(url.to_owned())
        }
        // Any local user reads a process's arguments (`ps`, /proc/<pid>/cmdline): a password there is given away.
        Some(url) if kanban_postgres::redact_url(url) != url => Err(Failure::usage(
            "refusing a board password in the command line, where any local user can read it: give the URL on stdin \
             with --to - or in kanban.database_url (KANBAN_DATABASE_URL); nothing was changed",
        )),
        Some(url) => Ok(url.to_owned()),
        None => ctx.database_url().map(str::to_owned).ok_or_else(|| {
            Failure::usage("give the board to copy into: --to URL, --to - (the URL on stdin) or kanban.database_url")
        }),
    }
}

fn migrate(ctx: &Ctx, to: &str) -> Result<(), Failure> {
    let source = ctx.db_path();
    if !source.exists() {
        return Err(Failure::usage(format!("there is no SQLite board to copy at {}", source.display())));
    }
    // One store dumps, the other loads: the file is opened read-only (and verified) and never changed.
    let (target, report) = copy_sqlite_board(&source, to, &ctx.host_id(), ctx.database_timeout())?;
    if ctx.json {
        output::json(&views::Migrated { from: source.display().to_string(), to: target, copied: report.to_json() });
    } else {
        let counts: Vec<String> = report
            .tables
            .iter()
            // Every table's name is a plural: one row is "1 board".
            .map(|(t, n)| if *n == 1 { format!("1 {}", t.strip_suffix('s').unwrap_or(t)) } else { format!("{n} {t}") })
            .collect();
        output::line(&format!("copied {} into {} ({}); counts verified", source.display(), target, counts.join(", ")));
        output::line("to use it: berth config set kanban.database_url - (the URL given to --to, on standard input)");
    }
    Ok(())
}

fn done(ctx: &Ctx, t: &Task, text: &str) {
    if ctx.json {
        output::json(t);
    } else {
        output::line(text);
    }
}
