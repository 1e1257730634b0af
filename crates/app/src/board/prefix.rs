//! Task ids by a unique prefix: `kanban show t_c9d3` (or `c9d3`) finds the one task whose id starts so, as
//! `sandbox rm` takes a container id's prefix. At least four characters; an ambiguous prefix is refused in one line
//! naming the candidates. An exact id is used as it is, without a scan.

use crate::cli::{Command, KanbanCmd};
use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::edge::open::open_read_only;

/// The shortest prefix taken (without the `t_`).
pub const MIN_PREFIX: usize = 4;

/// The task id a kanban command names, when it names one.
fn named_id(cmd: &mut Command) -> Option<&mut String> {
    let Command::Kanban(k) = cmd else { return None };
    match k {
        KanbanCmd::Show { id }
        | KanbanCmd::Logs { id, .. }
        | KanbanCmd::Assign { id, .. }
        | KanbanCmd::Edit { id, .. }
        | KanbanCmd::Rm { id, .. }
        | KanbanCmd::Complete { id, .. }
        | KanbanCmd::Block { id, .. }
        | KanbanCmd::Unblock { id }
        | KanbanCmd::Promote { id }
        | KanbanCmd::Schedule { id, .. }
        | KanbanCmd::Archive { id, .. }
        | KanbanCmd::Reclaim { id, .. }
        | KanbanCmd::Tail { id, .. }
        | KanbanCmd::Dispatch { task: Some(id), .. } => Some(id),
        KanbanCmd::Review(r) => Some(r.id_mut()),
        _ => None,
    }
}

/// Replaces a unique prefix in the command's task id by the whole id; leaves an exact or unknown id as it is (the
/// command then says `no task …`).
///
/// # Errors
/// A usage failure for an ambiguous prefix, naming the candidates; an unreadable board.
pub fn expand(ctx: &Ctx, cmd: &mut Command) -> Result<(), Failure> {
    let Some(id) = named_id(cmd) else { return Ok(()) };
    // A worker's command naming its own task names it whole: no read (on a shared board, no connection) before its
    // one write, which waits out an outage where this read would not.
    if ctx.env.get("BERTH_KANBAN_TASK").is_some_and(|own| own == id) {
        return Ok(());
    }
    let bare = id.strip_prefix("t_").unwrap_or(id).to_owned();
    let Some(store) = open_read_only(ctx)? else { return Ok(()) };
    if store.task(id).is_ok() {
        return Ok(());
    }
    let want = format!("t_{bare}");
    let mut found = Vec::new();
    for board in store.boards()? {
        let Ok(slug) = domain::ids::BoardSlug::parse(&board.slug) else { continue };
        found.extend(store.tasks(&slug, None, None)?.into_iter().map(|t| t.id).filter(|t| t.starts_with(&want)));
    }
    if bare.len() < MIN_PREFIX {
        // Too short to pick one; say so rather than `no task …` when some task does start so.
        return match found.len() {
            0 => Ok(()),
            n => Err(Failure::usage(format!(
                "task id {id} is too short: give at least {MIN_PREFIX} characters of it ({n} task(s) start so, e.g. {})",
                found[0]
            ))),
        };
    }
    match found.len() {
        0 => Ok(()),
        1 => {
            *id = found.remove(0);
            Ok(())
        }
        n => {
            found.sort();
            let shown = found.iter().take(8).cloned().collect::<Vec<_>>().join(", ");
            let more = if n > 8 { format!(" and {} more", n - 8) } else { String::new() };
            Err(Failure::usage(format!(
                "task id {id} is ambiguous: {n} tasks start so ({shown}{more}); give more of it"
            )))
        }
    }
}
