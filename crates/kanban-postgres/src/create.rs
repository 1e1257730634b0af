//! Creating tasks on PostgreSQL: one task (`kanban create`) or a batch (`kanban create --from`), each one
//! transaction with its `created` events. A batch is a fixed number of round trips whatever its size: its parents
//! in one query, then its tasks, links and events each as one `INSERT … SELECT FROM unnest(…)`.

use std::collections::HashMap;

use domain::ids::BoardSlug;
use domain::kanban::TaskStatus;
use domain::time::Timestamp;
use kanban_core::rules::{assignee_of, created, initial_status, initial_statuses};
use kanban_core::{NewTask, Task};

use crate::PgResult;
use crate::board::{event, read_board, read_task, status_of};
use crate::client::GenericClient as _;

const INSERT_TASK: &str = "INSERT INTO berth.tasks (id, board, title, body, command, assignee, status, priority, \
    created_by, created_at, max_runtime_seconds, max_retries, not_before) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";

/// Creates one task (see `BoardStore::create_task`).
pub(crate) fn create_task(
    c: &mut crate::client::Client,
    board: &BoardSlug,
    id: &str,
    new: &NewTask,
    now: Timestamp,
) -> PgResult<Task> {
    kanban_core::rules::check_title(&new.title)?;
    let mut tx = c.transaction()?;
    read_board(&mut tx, board.as_str())?;
    let mut parents = Vec::with_capacity(new.parents.len());
    for p in &new.parents {
        let row = tx.query_opt("SELECT status FROM berth.tasks WHERE id = $1", &[p])?;
        let status = row.map(|r| r.try_get::<_, String>(0)).transpose()?;
        parents.push((p.as_str(), status.as_deref().map(status_of).transpose()?));
    }
    let status = initial_status(new, &parents)?;
    tx.execute(
        INSERT_TASK,
        &[
            &id,
            &board.as_str(),
            &new.title,
            &new.body,
            &new.command,
            &assignee_of(new),
            &status.as_str(),
            &new.priority,
            &new.created_by,
            &now.as_millis(),
            &new.max_runtime_seconds,
            &new.max_retries,
            &new.not_before,
        ],
    )?;
    for p in &new.parents {
        tx.execute(
            "INSERT INTO berth.task_links (parent_id, child_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[p, &id],
        )?;
    }
    event(&mut tx, id, None, &created(new, status, board.as_str()), now)?;
    let t = read_task(&mut tx, id)?;
    tx.commit()?;
    Ok(t)
}

const INSERT_TASKS: &str = "INSERT INTO berth.tasks (id, board, title, body, command, assignee, status, priority, \
    created_by, created_at, max_runtime_seconds, max_retries, not_before) \
    SELECT u.id, $2, u.title, u.body, u.command, u.assignee, u.status, u.priority, u.author, $4, u.runtime, \
    u.retries, u.not_before FROM unnest($1::text[], $3::text[], $5::text[], $6::text[], $7::text[], $8::text[], \
    $9::text[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[]) WITH ORDINALITY \
    AS u(id, author, title, body, command, assignee, status, priority, runtime, retries, not_before, n) ORDER BY u.n";

const INSERT_LINKS: &str = "INSERT INTO berth.task_links (parent_id, child_id) \
    SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING";

const INSERT_CREATED: &str = "INSERT INTO berth.task_events (task_id, run_id, kind, payload, created_at) \
    SELECT u.id, NULL, 'created', u.payload, $3 FROM unnest($1::text[], $2::text[]) WITH ORDINALITY \
    AS u(id, payload, n) ORDER BY u.n";

/// Creates a batch of tasks in one transaction, all or none (see `BoardStore::create_tasks`).
pub(crate) fn create_tasks(
    c: &mut crate::client::Client,
    board: &BoardSlug,
    tasks: &[(String, NewTask)],
    now: Timestamp,
) -> PgResult<Vec<TaskStatus>> {
    let mut tx = c.transaction()?;
    read_board(&mut tx, board.as_str())?;
    let wanted: Vec<&str> = tasks.iter().flat_map(|(_, new)| new.parents.iter().map(String::as_str)).collect();
    let mut found = HashMap::new();
    if !wanted.is_empty() {
        for row in tx.query("SELECT id, status FROM berth.tasks WHERE id = ANY($1)", &[&wanted])? {
            found.insert(row.try_get::<_, String>(0)?, status_of(row.try_get(1)?)?);
        }
    }
    let statuses = initial_statuses(tasks, &found)?;
    let col =
        |f: &dyn Fn(&NewTask) -> Option<String>| -> Vec<Option<String>> { tasks.iter().map(|(_, n)| f(n)).collect() };
    let ids: Vec<&str> = tasks.iter().map(|(id, _)| id.as_str()).collect();
    let titles = col(&|n| Some(n.title.clone()));
    let bodies = col(&|n| n.body.clone());
    let commands = col(&|n| n.command.clone());
    let assignees = col(&|n| assignee_of(n).map(str::to_owned));
    let status_text: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
    let priorities: Vec<i64> = tasks.iter().map(|(_, n)| n.priority).collect();
    let runtimes: Vec<Option<i64>> = tasks.iter().map(|(_, n)| n.max_runtime_seconds).collect();
    let retries: Vec<Option<i64>> = tasks.iter().map(|(_, n)| n.max_retries).collect();
    let not_before: Vec<Option<i64>> = tasks.iter().map(|(_, n)| n.not_before).collect();
    let created_by = col(&|n| n.created_by.clone());
    tx.execute(
        INSERT_TASKS,
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
        ],
    )?;
    let (mut parents, mut children) = (Vec::new(), Vec::new());
    for (id, new) in tasks {
        for p in &new.parents {
            parents.push(p.as_str());
            children.push(id.as_str());
        }
    }
    if !parents.is_empty() {
        tx.execute(INSERT_LINKS, &[&parents, &children])?;
    }
    let payloads: Vec<String> =
        tasks.iter().zip(&statuses).map(|((_, new), status)| created(new, *status, board.as_str()).payload()).collect();
    tx.execute(INSERT_CREATED, &[&ids, &payloads, &now.as_millis()])?;
    tx.commit()?;
    Ok(statuses)
}
