//! The dashboard's HTML: maud templates (compiled into the binary, every value escaped) over the typed views. A
//! page's live part is also served alone (`?fragment=1`), which the script swaps in when the board changes.

use maud::{DOCTYPE, Markup, html};

use super::views::{BoardView, Card, Diagnostic, HostsView, ProfilesView, TaskView};

pub(crate) use crate::edge::output::age;

/// Every page's head, the 401 shell's too: its title, the stylesheet and the script.
fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) }
            link rel="stylesheet" href="/assets/app.css";
            script src="/assets/app.js" defer {}
        }
    }
}

/// The frame every page shares: navigation, the line where actions answer, the page itself.
pub(crate) fn layout(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(&format!("{title} · berth")))
            body {
                nav {
                    strong { "berth" }
                    a href="/" { "Board" }
                    a href="/profiles" { "Profiles" }
                    a href="/hosts" { "Hosts" }
                    a href="/diagnostics" { "Diagnostics" }
                    a href="/sandboxes" { "Sandboxes" }
                    a href="/metrics" { "Metrics" }
                    span #live title="live updates" { "○" }
                }
                div #flash role="status" {}
                main { (body) }
            }
        }
    }
}

/// The page a browser gets when it opens an address without the token (`auth.rs`): no data, the script that fetches
/// the page with the token it keeps, and `message` for when it keeps none.
pub(crate) fn shell(message: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head("berth"))
            body data-shell="1" {
                p #shell-message { (message) }
            }
        }
    }
}

/// An error line in place of a page.
pub(crate) fn error(message: &str) -> Markup {
    layout("error", html! { p.err { (message) } })
}

/// The buttons of the transitions a task in `status` can take (`remove` only on its own page).
fn actions(id: &str, status: domain::kanban::TaskStatus, remove: bool) -> Markup {
    use domain::kanban::TaskStatus as S;
    let mut acts: Vec<&str> = Vec::new();
    match status {
        S::Blocked => acts.push("unblock"),
        S::Triage => acts.extend(["promote", "block"]),
        S::Running => acts.extend(["block", "reclaim"]),
        S::Done | S::Archived => {}
        _ => acts.push("block"),
    }
    if status != S::Archived {
        acts.push("archive");
    }
    if remove {
        acts.push("remove");
    }
    html! {
        div.acts {
            @for a in acts {
                button type="button" data-action=(a) data-task=(id) { (a) }
            }
        }
    }
}

fn card(c: &Card) -> Markup {
    html! {
        div.card #{ "card-" (c.id) } data-task=(c.id) data-status=(c.status.as_str()) {
            a.title href={ "/tasks/" (c.id) } { (c.title) }
            div.meta {
                span.id { (c.id) }
                span { "@" (c.assignee.as_deref().unwrap_or("-")) }
                span title="age" { (age(c.age_secs)) }
                @if c.failures > 0 { span.bad title="consecutive failures" { "✗" (c.failures) } }
                @if let Some(h) = &c.host { span title="worker host" { "⌂" (h) } }
                @if let Some(r) = c.running_secs { span.timer data-since=(r) title="running for" { (age(r)) } }
            }
            @if c.shown_status != c.status.as_str() { div.warn { (c.shown_status) } }
            @if let Some(e) = &c.last_error { div.err title="last error" { (e) } }
            @if let Some(s) = c.starts_in_secs { div.muted title="waits for its time" { "starts in " (s) " s" } }
            (actions(&c.id, c.status, false))
        }
    }
}

/// Cards a column shows on the page (the first, by priority then age); `/api/board` has them all. A browser lays out
/// a few hundred cards at once, not ten thousand.
const CARDS_PER_COLUMN: usize = 200;

/// The columns alone (the live part of the board page).
pub(crate) fn columns(v: &BoardView) -> Markup {
    html! {
        @for col in &v.columns {
            section.col data-status=(col.status.as_str()) {
                h2 { (col.status.as_str()) " " span.n { (col.tasks.len()) } }
                @for c in col.tasks.iter().take(CARDS_PER_COLUMN) { (card(c)) }
                @if col.tasks.len() > CARDS_PER_COLUMN {
                    p.more { "… and " (col.tasks.len() - CARDS_PER_COLUMN) " more (all of them: " a href={ "/api/board?board=" (v.board) } { "/api/board" } ")" }
                }
            }
        }
    }
}

pub(crate) fn board(v: &BoardView) -> Markup {
    layout(
        &v.board,
        html! {
            div.bar {
                span { "Boards:" }
                @for b in &v.boards {
                    @if *b == v.board { strong { (b) } } @else { a href={ "/?board=" (b) } { (b) } }
                }
                button type="button" #dispatch data-board=(v.board) { "dispatch now" }
            }
            form #create data-board=(v.board) {
                input name="title" placeholder="new task title" required;
                input name="assignee" placeholder="assignee";
                input name="command" placeholder="command";
                input name="priority" type="number" value="0" title="priority";
                button type="submit" { "create" }
            }
            div #columns data-fragment={ "/?board=" (v.board) "&fragment=1" } { (columns(v)) }
        },
    )
}

/// A task's details (the live part of its page; the log below it is tailed by the script).
pub(crate) fn task_detail(v: &TaskView) -> Markup {
    let t = &v.task;
    let field = |k: &str| t.get(k).and_then(|x| x.as_str()).unwrap_or("-").to_owned();
    let status = t["status"].as_str().and_then(domain::kanban::TaskStatus::from_db);
    html! {
        h1 { (field("title")) }
        @if let Some(s) = status { (actions(&field("id"), s, true)) }
        dl {
            dt { "id" } dd { (field("id")) }
            dt { "board" } dd { a href={ "/?board=" (field("board")) } { (field("board")) } }
            dt { "status" } dd { (v.shown_status) }
            dt { "assignee" } dd { (field("assignee")) }
            dt { "command" } dd { code { (field("command")) } }
            dt { "failures" } dd { (t["consecutive_failures"]) }
            dt { "workspace" } dd { code { (v.workspace.as_deref().unwrap_or("-")) } }
            @if let Some(r) = t["result"].as_str() { dt { "result" } dd { (r) } }
            @if let Some(e) = t["last_failure_error"].as_str() { dt { "last error" } dd.err { (e) } }
        }
        h2 { "Runs" }
        table {
            tr { th { "run" } th { "assignee" } th { "host" } th { "pid" } th { "started" } th { "outcome" } th { "exit" } }
            @for r in &v.runs {
                tr {
                    td { (r.id) }
                    td { (r.assignee.as_deref().unwrap_or("-")) }
                    td { (r.worker_host.as_deref().unwrap_or("-")) }
                    td { (r.worker_pid.map(|p| p.to_string()).unwrap_or_default()) }
                    td { (domain::time::Timestamp::from_millis(r.started_at).to_rfc3339()) }
                    td { (r.outcome.as_deref().unwrap_or("running")) }
                    td { (r.exit_code.map(|c| c.to_string()).unwrap_or_default()) }
                }
            }
        }
        h2 { "Events" }
        table {
            @for e in &v.events {
                tr {
                    td { (domain::time::Timestamp::from_millis(e.created_at).to_rfc3339()) }
                    td { (e.kind) }
                    td { code { (serde_json::to_string(&e.payload).unwrap_or_default()) } }
                }
            }
        }
    }
}

pub(crate) fn task(id: &str, v: &TaskView) -> Markup {
    layout(
        id,
        html! {
            div #detail data-fragment={ "/tasks/" (id) "?fragment=1" } { (task_detail(v)) }
            form #edit data-task=(id) {
                input name="title" placeholder="new title";
                input name="assignee" placeholder="new assignee";
                input name="command" placeholder="new command";
                input name="priority" type="number" placeholder="priority";
                button type="submit" { "edit" }
            }
            h2 { "Log " small { "(live)" } }
            pre #log data-task=(id) {}
        },
    )
}

pub(crate) fn profiles(v: &ProfilesView) -> Markup {
    let cap = |c: Option<u32>| c.map_or_else(|| "no cap".to_owned(), |c| c.to_string());
    layout(
        "profiles",
        html! {
            h1 { "Profiles" }
            p { "Running " (v.running) " of " (cap(v.max_in_progress)) " (all boards)" }
            @if let Some(s) = &v.gateway_settings { p.settings { (s) } }
            table {
                tr { th { "profile" } th { "running" } th { "cap" } }
                @for p in &v.profiles { tr { td { (p.name) } td { (p.running) } td { (cap(p.cap)) } } }
            }
        },
    )
}

pub(crate) fn hosts(v: &HostsView) -> Markup {
    layout(
        "hosts",
        html! {
            h1 { "Hosts" }
            p { "This host: " code { (v.this_host) } "; a host silent for " (v.host_timeout_secs) " s is taken for dead." }
            @if v.hosts.is_empty() { p { "No host heartbeats this board (a board one host uses needs none)." } }
            table {
                tr { th { "host" } th { "silent" } th { "state" } th { "running" } }
                @for h in &v.hosts {
                    tr {
                        td { (h.id) }
                        td { (format!("{:.1}s", h.silent_secs)) }
                        td { @if h.alive { "alive" } @else { span.err { "lost" } } }
                        td { @for t in &h.running { a href={ "/tasks/" (t) } { (t) } " " } }
                    }
                }
            }
        },
    )
}

pub(crate) fn diagnostics(v: &[Diagnostic]) -> Markup {
    layout(
        "diagnostics",
        html! {
            h1 { "Diagnostics" }
            @if v.is_empty() { p { "Nothing needs a look." } }
            table {
                tr { th { "task" } th { "board" } th { "kind" } th { "reason" } th { "title" } }
                @for d in v {
                    tr {
                        td { a href={ "/tasks/" (d.task) } { (d.task) } }
                        td { (d.board) }
                        td.bad { (d.kind) }
                        td { (d.reason) }
                        td { (d.title) }
                    }
                }
            }
        },
    )
}
