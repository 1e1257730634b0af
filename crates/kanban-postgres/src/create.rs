//! Creating tasks on PostgreSQL: one task (`kanban create`) or a batch (`kanban create --from`), each one
//! transaction with its `created` events. A batch is a fixed number of round trips whatever its size: its parents
//! and the tasks its idempotency keys name in one query each, then its tasks, links and events each as one
//! `INSERT … SELECT FROM unnest(…)`. The unique index on (board, idempotency_key) settles a race between hosts.

use std::collections::HashMap;

use domain::board::TaskStatus;
use domain::board::rules::{Creation, assignee_of, created, keys_of, plan_creation};
use domain::board::{Created, NewTask, StoreError, Task};
use domain::ids::BoardSlug;
use domain::time::Timestamp;

use crate::board::{read_board, read_task, status_of};
use crate::client::{GenericClient as _, Transaction};
use crate::{PgErr, PgResult};

/// Creates one task (see `BoardStore::create_task`): a batch of one, then the task it names (a new one, or the one
/// its idempotency key already named).
pub(crate) fn create_task(
    c: &mut crate::client::Client,
    board: &BoardSlug,
    id: &str,
    new: &NewTask,
    now: Timestamp,
) -> PgResult<Task> {
    let created = create_tasks(c, board, &[(id.to_owned(), new.clone())], now).map_err(|e| match e.0 {
        StoreError::Batch { error, .. } => PgErr(*error),
        other => PgErr(other),
    })?;
    read_task(c, created.first().map_or(id, |t| t.id.as_str()))
}

/// The batch's new tasks; a key another transaction wrote first is skipped (`ON CONFLICT … DO NOTHING` waits for
/// that transaction, so the count says whether this one lost a race). A batch without keys, which can lose no such
/// race, inserts without the clause ([`ON_KEY_CONFLICT`]) and its speculative insertion a row.
const INSERT_TASKS: &str = "INSERT INTO berth.tasks (id, board, title, body, command, assignee, status, priority, \
    created_by, created_at, max_runtime_seconds, max_retries, not_before, idempotency_key, review) \
    SELECT u.id, $2, u.title, u.body, u.command, u.assignee, u.status, u.priority, u.author, $4, u.runtime, \
    u.retries, u.not_before, u.key, u.review FROM unnest($1::text[], $3::text[], $5::text[], $6::text[], $7::text[], \
    $8::text[], $9::text[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::text[], $15::bigint[]) \
    WITH ORDINALITY \
    AS u(id, author, title, body, command, assignee, status, priority, runtime, retries, not_before, key, review, n) \
    ORDER BY u.n";

const ON_KEY_CONFLICT: &str = " ON CONFLICT (board, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING";

const INSERT_LINKS: &str = "INSERT INTO berth.task_links (parent_id, child_id) \
    SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING";

const INSERT_CREATED: &str = "INSERT INTO berth.task_events (task_id, run_id, kind, payload, created_at) \
    SELECT u.id, NULL, 'created', u.payload, $3 FROM unnest($1::text[], $2::text[]) WITH ORDINALITY \
    AS u(id, payload, n) ORDER BY u.n";

/// How many times a batch is tried again after losing a race for an idempotency key. Each loss means another create
/// committed that key, which the next try reads; only keys removed meanwhile could make it lose again.
const KEY_RACES: usize = 3;

/// Creates a batch of tasks in one transaction, all or none (see `BoardStore::create_tasks`). A transaction that
/// loses a race for a key (another create committed it after this one looked) is rolled back and tried again, and
/// then finds the winner's task.
pub(crate) fn create_tasks(
    c: &mut crate::client::Client,
    board: &BoardSlug,
    tasks: &[(String, NewTask)],
    now: Timestamp,
) -> PgResult<Vec<Created>> {
    for _ in 0..KEY_RACES {
        if let Some(created) = try_create_tasks(c, board, tasks, now)? {
            return Ok(created);
        }
    }
    try_create_tasks(c, board, tasks, now)?
        .ok_or_else(|| PgErr(StoreError::Backend("the batch's idempotency keys kept changing; try again".into())))
}

/// What `rules::plan_creation` needs of the board: the statuses of a batch's parents, and the tasks its idempotency
/// keys name on `board`.
fn creation_reads(
    tx: &mut Transaction<'_>,
    board: &BoardSlug,
    tasks: &[(String, NewTask)],
) -> PgResult<(HashMap<String, TaskStatus>, HashMap<String, String>)> {
    let wanted: Vec<&str> = tasks.iter().flat_map(|(_, new)| new.parents.iter().map(String::as_str)).collect();
    let mut found = HashMap::new();
    if !wanted.is_empty() {
        for row in tx.query("SELECT id, status FROM berth.tasks WHERE id = ANY($1)", &[&wanted])? {
            found.insert(row.try_get::<_, String>(0)?, status_of(row.try_get(1)?)?);
        }
    }
    let keys = keys_of(tasks);
    let mut keyed = HashMap::new();
    if !keys.is_empty() {
        let sql = "SELECT idempotency_key, id FROM berth.tasks WHERE board = $1 AND idempotency_key = ANY($2)";
        for row in tx.query(sql, &[&board.as_str(), &keys])? {
            keyed.insert(row.try_get::<_, String>(0)?, row.try_get::<_, String>(1)?);
        }
    }
    Ok((found, keyed))
}

/// One try of [`create_tasks`]: `None` when it lost a race for a key (rolled back, nothing written).
fn try_create_tasks(
    c: &mut crate::client::Client,
    board: &BoardSlug,
    tasks: &[(String, NewTask)],
    now: Timestamp,
) -> PgResult<Option<Vec<Created>>> {
    let mut tx = c.transaction()?;
    read_board(&mut tx, board.as_str())?;
    let (found, keyed) = creation_reads(&mut tx, board, tasks)?;
    let plan = plan_creation(tasks, &found, &keyed)?;
    let fresh: Vec<(&(String, NewTask), TaskStatus)> = tasks
        .iter()
        .zip(&plan)
        .filter_map(|(entry, p)| match p {
            Creation::New(status) => Some((entry, *status)),
            Creation::Existing(_) => None,
        })
        .collect();
    let col = |f: &dyn Fn(&NewTask) -> Option<String>| -> Vec<Option<String>> {
        fresh.iter().map(|((_, n), _)| f(n)).collect()
    };
    let ids: Vec<&str> = fresh.iter().map(|((id, _), _)| id.as_str()).collect();
    let titles = col(&|n| Some(n.title.clone()));
    let bodies = col(&|n| n.body.clone());
    let commands = col(&|n| n.command.clone());
    let assignees = col(&|n| assignee_of(n).map(str::to_owned));
    let keys = col(&|n| n.idempotency_key.clone());
    let status_text: Vec<&str> = fresh.iter().map(|(_, s)| s.as_str()).collect();
    let priorities: Vec<i64> = fresh.iter().map(|((_, n), _)| n.priority).collect();
    let runtimes: Vec<Option<i64>> = fresh.iter().map(|((_, n), _)| n.max_runtime_seconds).collect();
    let retries: Vec<Option<i64>> = fresh.iter().map(|((_, n), _)| n.max_retries).collect();
    let not_before: Vec<Option<i64>> = fresh.iter().map(|((_, n), _)| n.not_before).collect();
    let created_by = col(&|n| n.created_by.clone());
    let review: Vec<i64> = fresh.iter().map(|((_, n), _)| i64::from(n.review)).collect();
    let keyed = keys.iter().any(Option::is_some);
    let insert = if keyed { format!("{INSERT_TASKS}{ON_KEY_CONFLICT}") } else { INSERT_TASKS.to_owned() };
    let inserted = tx.execute(
        insert.as_str(),
        &[
            &ids,
            &board.as_str(),
            &created_by,
            &now.as_millis(),
            &titles,
            &bodies,
            &commands,
            &assignees,
            &status_text,
            &priorities,
            &runtimes,
            &retries,
            &not_before,
            &keys,
            &review,
        ],
    )?;
    if inserted != ids.len() as u64 {
        // Dropped, the transaction rolls back.
        return Ok(None);
    }
    let (mut parents, mut children) = (Vec::new(), Vec::new());
    for ((id, new), _) in &fresh {
        for p in &new.parents {
            parents.push(p.as_str());
            children.push(id.as_str());
        }
    }
    if !parents.is_empty() {
        tx.execute(INSERT_LINKS, &[&parents, &children])?;
    }
    let payloads: Vec<String> =
        fresh.iter().map(|((_, new), status)| created(new, *status, board.as_str()).payload()).collect();
    tx.execute(INSERT_CREATED, &[&ids, &payloads, &now.as_millis()])?;
    let created = outcome(&mut tx, tasks, plan)?;
    tx.commit()?;
    Ok(Some(created))
}

/// Each entry's task as the batch left it: a new one in its first status, or the one its key named, read now (an
/// earlier entry of the batch included).
fn outcome(tx: &mut Transaction<'_>, tasks: &[(String, NewTask)], plan: Vec<Creation>) -> PgResult<Vec<Created>> {
    let mut out = Vec::with_capacity(plan.len());
    for ((id, _), p) in tasks.iter().zip(plan) {
        out.push(match p {
            Creation::New(status) => Created { id: id.clone(), status, existing: false },
            Creation::Existing(existing) => {
                let row = tx.query_one("SELECT status FROM berth.tasks WHERE id = $1", &[&existing])?;
                Created { status: status_of(row.try_get(0)?)?, id: existing, existing: true }
            }
        });
    }
    Ok(out)
}
