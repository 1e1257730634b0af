//! `berth kanban cron add|ls|rm`, and the gateway's making of each due slot's task ([`make_due`]). Which slot is due
//! is the board core's one rule (`domain::board::recurring::due_slot`); each slot's task is created under the key
//! `cron:NAME:<slot>`, so of several gateways seeing one slot, on any host, one makes the task and the others find it.

use domain::board::recurring::{self, due_slot};
use domain::board::{Cron, NewCron, NewTask, StoreError};
use domain::ids::{BoardSlug, ProfileName};
use domain::time::Timestamp;
use serde::Serialize;

use crate::cli_kanban::CronCmd;
use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::edge::open::{Board, open_read_only, open_store};
use crate::edge::output;

/// A schedule as `kanban cron ls` gives it: its row and its next slot.
#[derive(Serialize)]
struct CronRow {
    #[serde(flatten)]
    cron: Cron,
    /// The next slot after now (RFC 3339); `null` when none is found within nine years.
    next_slot: Option<String>,
}

/// A schedule's refusal as one line (the store's `Invalid` without its task wording).
fn refusal(e: StoreError) -> Failure {
    match e {
        StoreError::Invalid(why) => Failure::usage(why),
        other => other.into(),
    }
}

/// `kanban cron …`.
///
/// # Errors
/// Bad input (exit 2) or a store failure.
pub(crate) fn command(ctx: &Ctx, cmd: &CronCmd, now: Timestamp) -> Result<(), Failure> {
    match cmd {
        CronCmd::Add { name, every, cron, assignee, allow_unknown_assignee, command, board } => {
            let board = BoardSlug::parse(board).map_err(Failure::usage_of)?;
            recurring::check_name(name).map_err(refusal)?;
            ProfileName::parse(assignee).map_err(Failure::usage_of)?;
            crate::board::edit::check_assignee(ctx, assignee, *allow_unknown_assignee)?;
            if command.trim().is_empty() {
                return Err(Failure::usage("--command must not be empty"));
            }
            domain::board::rules::check_text("command", command).map_err(refusal)?;
            let every_seconds = every.map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            if let Some(secs) = every_seconds {
                recurring::Recurrence::every(secs).map_err(refusal)?;
            }
            let new = NewCron {
                name: name.clone(),
                every_seconds,
                cron: cron.clone(),
                assignee: assignee.clone(),
                command: command.clone(),
            };
            let added = open_store(ctx)?.add_cron(&board, &new, now).map_err(refusal)?;
            let row = row(added, now);
            if ctx.json {
                output::json(&row);
            } else {
                let next = row.next_slot.as_deref().unwrap_or("never");
                output::line(&format!("added schedule {} on board {board}; next slot {next}", row.cron.name));
            }
        }
        CronCmd::Ls { board } => {
            let board = BoardSlug::parse(board).map_err(Failure::usage_of)?;
            let rows: Vec<CronRow> = match open_read_only(ctx)? {
                Some(store) => {
                    store.board(&board)?;
                    store.crons(&board)?.into_iter().map(|c| row(c, now)).collect()
                }
                None if board.as_str() == "default" => Vec::new(),
                None => return Err(StoreError::NoBoard(board.as_str().to_owned()).into()),
            };
            if ctx.json {
                output::json(&rows);
            } else {
                let lines: Vec<Vec<String>> = rows
                    .iter()
                    .map(|r| {
                        let when = match (&r.cron.cron, r.cron.every_seconds) {
                            (Some(expr), _) => format!("cron {expr}"),
                            (None, Some(s)) => format!("every {s}s"),
                            (None, None) => "-".to_owned(),
                        };
                        let last = r
                            .cron
                            .last_slot
                            .map_or_else(|| "-".to_owned(), |ms| Timestamp::from_millis(ms).to_rfc3339());
                        vec![
                            r.cron.name.clone(),
                            when,
                            r.cron.assignee.clone(),
                            last,
                            r.next_slot.clone().unwrap_or_else(|| "-".to_owned()),
                            crate::edge::terminal_text::sanitize(&r.cron.command).into_owned(),
                        ]
                    })
                    .collect();
                output::table(&["NAME", "WHEN", "ASSIGNEE", "LAST SLOT", "NEXT SLOT", "COMMAND"], &lines);
            }
        }
        CronCmd::Rm { name, board } => {
            let board = BoardSlug::parse(board).map_err(Failure::usage_of)?;
            let removed = open_store(ctx)?.remove_cron(&board, name).map_err(refusal)?;
            if ctx.json {
                output::json(&removed);
            } else {
                output::line(&format!("removed schedule {} from board {board}", removed.name));
            }
        }
    }
    Ok(())
}

fn row(cron: Cron, now: Timestamp) -> CronRow {
    let next_slot = cron.recurrence().ok().and_then(|r| r.next_after(now)).map(Timestamp::to_rfc3339);
    CronRow { cron, next_slot }
}

/// Makes the task of each schedule's due slot on `board` (one task per slot, whoever else makes it too) and returns
/// the soonest next slot of its schedules, for the gateway's wake. A schedule whose row no longer parses is skipped
/// with a warning.
///
/// # Errors
/// A store failure (the slots are made at the next tick).
pub(crate) fn make_due(store: &mut Board, board: &BoardSlug, now: Timestamp) -> Result<Option<Timestamp>, StoreError> {
    let mut next: Option<Timestamp> = None;
    for cron in store.crons(board)? {
        let rec = match cron.recurrence() {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("kanban cron [{board}] {}: {e}; skipped", cron.name);
                continue;
            }
        };
        let added = Timestamp::from_millis(cron.created_at);
        if let Some(slot) = due_slot(&rec, added, cron.last_slot.map(Timestamp::from_millis), now) {
            let new = NewTask {
                title: format!("{} {}", cron.name, slot.to_rfc3339()),
                command: Some(cron.command.clone()),
                assignee: Some(cron.assignee.clone()),
                created_by: Some(recurring::made_by(&cron.name)),
                idempotency_key: Some(recurring::slot_key(&cron.name, slot)),
                ..NewTask::default()
            };
            let id = super::task_id::new_task_id();
            let task = store.create_task(board, &id, &new, now)?;
            if task.id == id {
                tracing::info!("kanban cron [{board}] {}: made task {id} for the slot {slot}", cron.name);
            }
            store.cron_made(board, &cron.name, slot)?;
        }
        if let Some(n) = rec.next_after(now) {
            next = Some(next.map_or(n, |m| m.min(n)));
        }
    }
    Ok(next)
}
