//! `berth kanban create`: one task from the flags, or a batch from a file of JSON lines (`--from FILE`, `-` for
//! stdin) in one transaction. Every line gets the checks one task gets (a title, an assignee that is a profile, a
//! command for the built-in worker, limits of at least 1, a good idempotency key) before anything is written; the
//! first bad line is refused with its number and nothing is created. A task whose idempotency key the board already
//! holds is that task, printed as a create prints it (the store writes nothing for it).

use std::collections::HashMap;
use std::io::Read;

use domain::board::{NewTask, StoreError};
use domain::ids::{BoardSlug, ProfileName};
use domain::time::Timestamp;
use serde::Deserialize;

use super::open_store;
use crate::board::edit::{check_assignee, check_command};
use crate::cli::KanbanCmd;
use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::edge::output;

/// `kanban create` on `board`: the batch of `--from`, or the one task of the flags.
///
/// # Errors
/// As [`one`] and [`from_file`].
pub(crate) fn command(ctx: &Ctx, board: &BoardSlug, cmd: &KanbanCmd, now: Timestamp) -> Result<(), Failure> {
    let KanbanCmd::Create {
        title,
        assignee,
        allow_unknown_assignee,
        body,
        command,
        parents,
        priority,
        triage,
        review,
        max_runtime,
        max_retries,
        when,
        idempotency_key,
        from,
        board: _,
    } = cmd
    else {
        return Ok(());
    };
    if let Some(from) = from {
        return from_file(ctx, board, from, *allow_unknown_assignee, now);
    }
    let new = NewTask {
        title: String::new(),
        body: body.clone(),
        command: command.clone(),
        assignee: assignee.clone(),
        parents: parents.clone(),
        priority: *priority,
        triage: *triage,
        review: *review,
        max_runtime_seconds: *max_runtime,
        max_retries: *max_retries,
        created_by: Some(ctx.profile.as_str().to_owned()),
        not_before: when.at(now).map(Timestamp::as_millis),
        idempotency_key: idempotency_key.clone(),
    };
    let flags =
        Flags { title: title.as_deref().unwrap_or_default(), new, allow_unknown_assignee: *allow_unknown_assignee };
    one(ctx, board, flags, now)
}

/// One line of a `--from` file: the flags of `kanban create`, by their long names.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    title: String,
    body: Option<String>,
    command: Option<String>,
    assignee: Option<String>,
    #[serde(default)]
    priority: i64,
    #[serde(default)]
    parents: Vec<String>,
    max_runtime_seconds: Option<i64>,
    max_retries: Option<i64>,
    #[serde(default)]
    triage: bool,
    #[serde(default)]
    review: bool,
    idempotency_key: Option<String>,
}

/// What `kanban create` checks on every task before the store sees it.
struct Checks<'a> {
    ctx: &'a Ctx,
    allow_unknown_assignee: bool,
    /// Assignees already found to be profiles (a batch names few, many times).
    known: HashMap<String, ()>,
}

impl Checks<'_> {
    fn task(&mut self, new: &NewTask) -> Result<(), Failure> {
        if let Some(a) = new.assignee.as_deref().map(str::trim).filter(|a| !a.is_empty())
            && !self.known.contains_key(a)
        {
            ProfileName::parse(a).map_err(Failure::usage_of)?;
            check_assignee(self.ctx, a, self.allow_unknown_assignee)?;
            self.known.insert(a.to_owned(), ());
        }
        check_command(self.ctx, new.command.as_deref())?;
        // The flags are range-checked where they are parsed; this is for `--from` lines, named by their fields.
        if new.max_runtime_seconds.is_some_and(|m| m < 1) {
            return Err(Failure::usage("max_runtime_seconds must be at least 1"));
        }
        if new.max_retries.is_some_and(|m| m < 1) {
            return Err(Failure::usage("max_retries must be at least 1"));
        }
        if let Some(key) = &new.idempotency_key {
            crate::cli_values::idempotency_key(key).map_err(Failure::usage)?;
        }
        Ok(())
    }
}

/// The flags of one `kanban create`.
pub(crate) struct Flags<'a> {
    pub title: &'a str,
    pub new: NewTask,
    pub allow_unknown_assignee: bool,
}

/// `kanban create TITLE …`: one task.
///
/// # Errors
/// A usage failure for a bad flag, or the store's.
pub(crate) fn one(ctx: &Ctx, board: &BoardSlug, flags: Flags<'_>, now: Timestamp) -> Result<(), Failure> {
    let mut checks = Checks { ctx, allow_unknown_assignee: flags.allow_unknown_assignee, known: HashMap::new() };
    checks.task(&flags.new)?;
    let new = NewTask { title: flags.title.to_owned(), ..flags.new };
    let task = open_store(ctx)?.create_task(board, &super::task_id::new_task_id(), &new, now)?;
    if ctx.json {
        output::json(&task);
    } else {
        output::line(&format!("{}  {}  {}", task.id, task.status, task.title));
    }
    Ok(())
}

/// `kanban create --from FILE`: every task of the file in one transaction, all or none.
///
/// # Errors
/// A usage failure naming the first bad line (nothing written), or the store's.
pub(crate) fn from_file(
    ctx: &Ctx,
    board: &BoardSlug,
    from: &str,
    allow_unknown_assignee: bool,
    now: Timestamp,
) -> Result<(), Failure> {
    let text = read_source(from)?;
    let mut checks = Checks { ctx, allow_unknown_assignee, known: HashMap::new() };
    let mut lines = Vec::new();
    let mut tasks = Vec::new();
    for (n, raw) in text.lines().enumerate().map(|(i, l)| (i + 1, l)) {
        if raw.trim().is_empty() {
            continue;
        }
        let at = |e: Failure| Failure { message: format!("line {n}: {}", e.message), ..e };
        let line: Line = serde_json::from_str(raw).map_err(|e| {
            // serde's own position counts lines within this one line; the file's line number replaces it.
            let text = e.to_string();
            let what = text.rsplit_once(" at line ").map_or(text.as_str(), |(what, _)| what);
            let shape = if e.is_syntax() || e.is_eof() {
                r#" (not JSON: each line is one object, e.g. {"title": "build", "command": "make"})"#
            } else {
                ""
            };
            Failure::usage(format!("line {n}, column {}: {what}{shape}", e.column()))
        })?;
        if line.title.trim().is_empty() {
            return Err(Failure::usage(format!("line {n}: a task needs a non-empty title")));
        }
        let new = NewTask {
            title: line.title,
            body: line.body,
            command: line.command,
            assignee: line.assignee,
            parents: line.parents,
            priority: line.priority,
            triage: line.triage,
            review: line.review,
            max_runtime_seconds: line.max_runtime_seconds,
            max_retries: line.max_retries,
            created_by: Some(ctx.profile.as_str().to_owned()),
            not_before: None,
            idempotency_key: line.idempotency_key,
        };
        checks.task(&new).map_err(at)?;
        lines.push(n);
        tasks.push(new);
    }
    if tasks.is_empty() {
        // Not an error (a generated file may be empty), but never silence: said on stderr, `--json` gets `[]`.
        eprintln!("berth: {from} holds no task (one JSON object a line): nothing was created");
    }
    let tasks: Vec<(String, NewTask)> = batch_ids(tasks.len()).into_iter().zip(tasks).collect();
    let mut store = open_store(ctx)?;
    let created = match store.create_tasks(board, &tasks, now) {
        Ok(c) => c,
        Err(StoreError::Batch { index, error }) => {
            let n = lines.get(index).copied().unwrap_or(index + 1);
            return Err(Failure::usage(format!("line {n}: {error}")));
        }
        Err(e) => return Err(e.into()),
    };
    if ctx.json {
        output::json(&created.iter().map(|c| c.id.as_str()).collect::<Vec<_>>());
    } else {
        let mut out = String::new();
        for ((_, new), c) in tasks.iter().zip(&created) {
            // A line whose key named a task already there shows that task's own title.
            let title = if c.existing { store.task(&c.id)?.title } else { new.title.clone() };
            out += &format!("{}  {}  {title}\n", c.id, c.status);
        }
        print!("{out}");
    }
    Ok(())
}

/// The whole of FILE, or of stdin for `-`.
fn read_source(from: &str) -> Result<String, Failure> {
    let mut text = String::new();
    let read = if from == "-" {
        std::io::stdin().read_to_string(&mut text).map(drop)
    } else {
        std::fs::File::open(from).and_then(|mut f| f.read_to_string(&mut text)).map(drop)
    };
    read.map_err(|e| Failure::usage(format!("cannot read {from}: {e}")))?;
    Ok(text)
}

/// `n` new task ids, consecutive from one random start: the board orders tasks of equal priority and creation
/// time by id, so a batch is dispatched in the file's order.
fn batch_ids(n: usize) -> Vec<String> {
    const MAX: u64 = 0xffff_ffff_ffff;
    let count = u64::try_from(n).unwrap_or(MAX);
    let base = super::task_id::new_task_bits();
    let base = if base > MAX - count { base - count } else { base };
    (0..count).map(|i| super::task_id::task_id_of(base + i)).collect()
}

#[cfg(test)]
mod tests {
    use super::batch_ids;

    #[test]
    fn a_batch_s_ids_are_distinct_and_sort_in_its_order() {
        let ids = batch_ids(1000);
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, ids);
        assert!(ids.iter().all(|id| id.len() == 14 && id.starts_with("t_")));
    }
}
