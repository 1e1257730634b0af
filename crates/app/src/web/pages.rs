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
            link rel="icon" href="data:,";
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

/// The buttons of the transitions a task in `status` can take (`remove` only on its own page). On a card they act
/// on the card's task (its `data-task`); on the task's page each names it.
fn actions(id: &str, status: domain::board::TaskStatus, remove: bool) -> Markup {
    use domain::board::TaskStatus as S;
    let mut acts: Vec<&str> = Vec::new();
    match status {
        S::Blocked => acts.extend(["unblock", "retry"]),
        S::Triage => acts.extend(["promote", "block"]),
        S::Running => acts.extend(["block", "reclaim"]),
        S::Review => acts.extend(["approve", "request-changes"]),
        S::Done | S::Archived => {}
        _ => acts.push("block"),
    }
    // A task in review is approved, not completed again.
    if !matches!(status, S::Done | S::Archived | S::Review) {
        acts.push("complete");
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
                // In no form: a button, never a submit.
                @if remove { button data-action=(a) data-task=(id) { (a) } }
                @else { button data-action=(a) { (a) } }
            }
        }
    }
}

fn card(c: &Card) -> Markup {
    html! {
        div.card #{ "card-" (c.id) } data-task=(c.id) data-status=(c.status.as_str()) data-assignee=(c.assignee.as_deref().unwrap_or("")) {
            input.pick type="checkbox" aria-label={ "select " (c.id) };
            a.title href={ "/tasks/" (c.id) } { (c.title) }
            div.meta {
                span.id { (c.id) }
                span { "@" (c.assignee.as_deref().unwrap_or("-")) }
                span { "age " (age(c.age_secs)) }
                @if c.failures > 0 { span.bad title="consecutive failures" { "failed ×" (c.failures) } }
                @if let Some(h) = &c.host { span title="worker host" { "on " (h) } }
                @if let Some(r) = c.running_secs { span title="running for" { "running " span.timer data-since=(r) { (age(r)) } } }
            }
            @if c.shown_status != c.status.as_str() { div.warn { (c.shown_status) } }
            @if let Some(e) = &c.last_error { div.err title="last error" { (e) } }
            @if let Some(s) = c.starts_in_secs { div.muted title="waits for its time" { "starts in " (s) " s" } }
            @if let Some(b) = &c.block { div.warn title="block" { (b) } }
            @if let Some(n) = &c.review_note { div.muted title="changes requested" { "changes: " (n) } }
            @if let Some(w) = &c.waiting { div.why { code { (w.code) } " " (w.reason) } }
            (actions(&c.id, c.status, false))
        }
    }
}

/// Cards a column shows on the page (the first, by priority then age; the view has only these); `/api/board` has
/// them all. A browser lays out a few hundred cards at once, not ten thousand.
pub(crate) const CARDS_PER_COLUMN: usize = 200;

/// The columns alone (the live part of the board page).
pub(crate) fn columns(v: &BoardView) -> Markup {
    html! {
        @for col in &v.columns {
            section.col data-status=(col.status.as_str()) {
                @let waits = matches!(col.status, domain::board::TaskStatus::Ready | domain::board::TaskStatus::Todo);
                h2 title=[waits.then_some("each card says why it waits (kanban dispatch --dry-run --explain)")] {
                    (col.status.as_str()) " " span.n { (col.total) }
                }
                @for c in col.tasks.iter().take(CARDS_PER_COLUMN) { (card(c)) }
                @if col.total > col.tasks.len().min(CARDS_PER_COLUMN) {
                    p.more { "… and " (col.total - col.tasks.len().min(CARDS_PER_COLUMN)) " more (all of them: " a href={ "/api/board?board=" (v.board) } { "/api/board" } ")" }
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
                input name="priority" type="number" placeholder="priority (0)" title="priority: higher runs first";
                button type="submit" { "create" }
            }
            (super::console::tools(&v.board, v.archived))
            div #columns data-fragment={ "/?board=" (v.board) "&fragment=1" (if v.archived { "&archived=1" } else { "" }) } { (columns(v)) }
            div #chart-box data-chart={ "/chart?board=" (v.board) } {}
        },
    )
}

/// A task's details (the live part of its page; the log below it is tailed by the script).
pub(crate) fn task_detail(v: &TaskView) -> Markup {
    let t = &v.task;
    let field = |k: &str| t.get(k).and_then(|x| x.as_str()).unwrap_or("-").to_owned();
    let status = t["status"].as_str().and_then(domain::board::TaskStatus::from_db);
    html! {
        h1 { (field("title")) }
        @if let Some(s) = status { (actions(&field("id"), s, true)) }
        dl {
            dt { "id" } dd { (field("id")) }
            dt { "board" } dd { a href={ "/?board=" (field("board")) } { (field("board")) } }
            dt { "status" } dd { (v.shown_status) }
            dt { "assignee" } dd { (field("assignee")) }
            dt { "command" } dd { code { (field("command")) } }
            @if let Some(name) = t["schedule"].as_str() { dt { "schedule" } dd { (name) " (kanban cron)" } }
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
                    td { (when(r.started_at)) }
                    td { (r.outcome.as_deref().unwrap_or("running")) }
                    td { (r.exit_code.map(|c| c.to_string()).unwrap_or_default()) }
                }
            }
        }
        h2 { "Events" }
        table.events {
            @for e in &v.events {
                tr {
                    td { (when(e.created_at)) }
                    td { (e.kind) }
                    td { (payload(e)) }
                }
            }
        }
    }
}

/// A time (ms) as a `time` element: RFC 3339 in the markup, shown by the script in the browser's local time.
pub(crate) fn when(ms: i64) -> Markup {
    let t = domain::time::Timestamp::from_millis(ms).to_rfc3339();
    html! { time datetime=(t) { (t) } }
}

/// An event's payload as `key: value` lines, its times (`expires`, `*_at`, stored as milliseconds) as times.
fn payload(e: &domain::board::Event) -> Markup {
    let Some(map) = e.payload.as_object() else {
        return html! { @if !e.payload.is_null() { code { (e.payload.to_string()) } } };
    };
    let is_time = |k: &str| k == "expires" || k.ends_with("_at");
    html! {
        @for (k, v) in map {
            @if !v.is_null() {
                span.kv {
                    span.k { (k) ": " }
                    @match (v.as_i64(), v.as_str()) {
                        (Some(ms), _) if is_time(k.as_str()) => { (when(ms)) }
                        (_, Some(text)) => { (text) }
                        _ => { code { (v.to_string()) } }
                    }
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

/// A live page: its part that changes in a `data-fragment` region (fetched again on every change of the board), or
/// that part alone for the fetch.
fn live_page(title: &str, path: &str, fragment: bool, part: Markup) -> Markup {
    if fragment {
        return part;
    }
    layout(title, html! { div data-fragment={ (path) "?fragment=1" } { (part) } })
}

pub(crate) fn profiles(v: &ProfilesView, fragment: bool) -> Markup {
    let cap = |c: Option<u32>| c.map_or_else(|| "no cap".to_owned(), |c| c.to_string());
    let part = html! {
        h1 { "Profiles" }
        p {
            "Workers running: " (v.running) " on every board; kanban.max_in_progress (all profiles together): "
            (cap(v.max_in_progress))
        }
        @if let Some(s) = &v.gateway_settings { p.settings { (s) } }
        div.scroll {
            table {
                tr { th { "profile" } th { "running" } th { "cap" } }
                @for p in &v.profiles { tr { td { (p.name) } td { (p.running) } td { (cap(p.cap)) } } }
            }
        }
    };
    live_page("profiles", "/profiles", fragment, part)
}

pub(crate) fn hosts(v: &HostsView, fragment: bool) -> Markup {
    let part = html! {
        h1 { "Hosts" }
        p { "This host: " code { (v.this_host) } "; a host silent for " (v.host_timeout_secs) " s is taken for dead." }
        @if v.hosts.is_empty() { p { "No host heartbeats this board (a board one host uses needs none)." } }
        div.scroll {
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
        }
    };
    live_page("hosts", "/hosts", fragment, part)
}

pub(crate) fn diagnostics(v: &[Diagnostic], fragment: bool) -> Markup {
    let part = html! {
        h1 { "Diagnostics" }
        @if v.is_empty() { p { "Nothing needs a look." } }
        div.scroll {
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
        }
    };
    live_page("diagnostics", "/diagnostics", fragment, part)
}
