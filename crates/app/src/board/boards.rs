//! `--all-boards` for `kanban ls` and `kanban dispatch`: every board of the home at once, as the gateway ticks them.
//! (Task ids are unique across boards, so `kanban show`/`logs` already find a task on any board.)

use domain::board::TaskStatus;
use domain::time::Timestamp;

use crate::board::report::{DispatchArgs, dispatch, print_dispatch, report_json};
use crate::board::show::listed;
use crate::board::views::BoardReport;
use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::edge::open::open_read_only;
use crate::edge::output;

/// The slugs of every board (just `default` when there is no board file yet).
fn board_slugs(ctx: &Ctx) -> Result<Vec<domain::ids::BoardSlug>, Failure> {
    let Some(store) = open_read_only(ctx)? else {
        return Ok(vec![domain::ids::BoardSlug::parse("default").map_err(Failure::usage_of)?]);
    };
    store.boards()?.into_iter().map(|b| domain::ids::BoardSlug::parse(&b.slug).map_err(Failure::usage_of)).collect()
}

/// `kanban ls --all-boards`.
///
/// # Errors
/// A bad `--status`, or an unreadable board file.
pub fn ls_all(
    ctx: &Ctx,
    status: Option<&str>,
    assignee: Option<&str>,
    archived: bool,
    now: Timestamp,
) -> Result<(), Failure> {
    let status = status.map(str::parse::<TaskStatus>).transpose().map_err(Failure::usage)?;
    let mut shown = Vec::new();
    if let Some(store) = open_read_only(ctx)? {
        for b in board_slugs(ctx)? {
            for t in store.tasks(&b, status, assignee)? {
                if !archived && status.is_none() && t.status == TaskStatus::Archived {
                    continue;
                }
                shown.push(listed(ctx, &store, &t, now));
            }
        }
    }
    crate::board::edit::note_unknown_assignee(ctx, assignee, shown.is_empty());
    if ctx.json {
        output::json(&shown);
        return Ok(());
    }
    let rows: Vec<Vec<String>> =
        shown.iter().map(|row| crate::board::show::ls_row(row, Some(&row.task.board), now)).collect();
    output::table(&crate::board::show::ls_header(true), &rows);
    Ok(())
}

/// `kanban dispatch`, on one board or (`--all-boards`) on every board.
///
/// # Errors
/// As [`dispatch_all`], or a usage failure for a bad board slug.
pub(crate) async fn dispatch_command(ctx: &Ctx, cmd: &crate::cli::KanbanCmd) -> Result<(), Failure> {
    let crate::cli::KanbanCmd::Dispatch { dry_run, max, failure_limit, explain, all_boards, task, board, .. } = cmd
    else {
        return Ok(());
    };
    let args = DispatchArgs {
        dry_run: *dry_run,
        max: *max,
        failure_limit: *failure_limit,
        task: if *all_boards { None } else { task.clone() },
        detach_stops: false,
        engine_backoff_until: None,
        held: std::collections::BTreeSet::new(),
        // A dispatch by hand (or from the system's cron) makes the recurring schedules' due tasks as a gateway does.
        recurring: task.is_none() || *all_boards,
    };
    if *all_boards {
        return dispatch_all(ctx, &args, *explain).await;
    }
    let b = domain::ids::BoardSlug::parse(&board.board).map_err(Failure::usage_of)?;
    crate::board::report::dispatch_and_print(ctx, &b, &args, *explain).await
}

/// `kanban dispatch --all-boards`: one tick per board, in slug order; JSON is one `{board, report}` per board.
///
/// # Errors
/// The first board whose tick fails (the boards before it were dispatched).
pub async fn dispatch_all(ctx: &Ctx, args: &DispatchArgs, explain: bool) -> Result<(), Failure> {
    let mut reports = Vec::new();
    for b in board_slugs(ctx)? {
        let report = dispatch(ctx, &b, args).await?;
        reports.push((b, report));
    }
    if ctx.json {
        let all: Vec<BoardReport<'_>> =
            reports.iter().map(|(b, r)| BoardReport { board: b.as_str(), report: report_json(r, explain) }).collect();
        output::json(&all);
        return Ok(());
    }
    for (i, (b, r)) in reports.iter().enumerate() {
        if i > 0 {
            output::line("");
        }
        output::line(&format!("Board {b}:"));
        print_dispatch(ctx, r, explain);
    }
    Ok(())
}
