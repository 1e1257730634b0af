//! The board page's operator tools, kept apart from the board's own markup: why each waiting card waits (the
//! planner's decisions of a dry run, as `kanban dispatch --dry-run --explain` prints them), the filter and bulk bar,
//! and the throughput and failures chart (inline SVG from the board's events, no script library).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use domain::ids::BoardSlug;
use domain::policy::dispatch::{Decision, DecisionRef, Housekeeping, PlanSink};
use maud::{Markup, html};
use serde::Serialize;

use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::edge::open::{Board, open_read_only};

/// Why a card waits: the planner's code (as `--explain` prints it) and the same in words.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Waiting {
    pub code: &'static str,
    pub reason: String,
}

/// The dry run's decision for each ready task, collected as the plan streams by.
#[derive(Default)]
struct Decisions(HashMap<String, Waiting>);

impl PlanSink for Decisions {
    fn housekeeping(&mut self, _task_id: &str, _action: &Housekeeping) {}
    fn promoted(&mut self, _task_id: &str) {}
    fn decision(&mut self, d: &DecisionRef<'_>) {
        let waiting = Waiting { code: d.decision.code(), reason: crate::board::why::words(&d.decision, d.assignee) };
        self.0.insert(d.task_id.to_owned(), waiting);
    }
}

/// Why each ready task of `board` waits, from the plan a tick now would make (a dry run: nothing written).
fn waiting(ctx: &Ctx, store: &Board, board: &BoardSlug) -> Result<HashMap<String, Waiting>, Failure> {
    let cfg = crate::board::tick_config(ctx, &crate::board::DispatchArgs::default(), &ctx.profiles());
    let mut sink = Decisions::default();
    crate::board::report::plan_dry(ctx, store, board, &cfg, &mut sink)?;
    Ok(sink.0)
}

/// How long a board's explanations are given again while the board is unchanged (their waits are in seconds).
const EXPLAINED_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// The last explanations per board, with the dashboard's change count they were made at: the board page and
/// `/api/board` of an unchanged board reuse them for [`EXPLAINED_FOR`] rather than plan again.
#[derive(Default)]
pub(crate) struct Explained(Mutex<HashMap<String, (super::bounded::Version, Instant, Why)>>);

/// Why each ready task of a board waits, by task id.
pub(crate) type Why = Arc<HashMap<String, Waiting>>;

impl Explained {
    /// [`waiting`] for `board` at the board's change count `version`, reused while that count holds.
    pub(crate) fn waiting(
        &self,
        version: super::bounded::Version,
        ctx: &Ctx,
        store: &Board,
        board: &BoardSlug,
    ) -> Result<Why, Failure> {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner).get(board.as_str()).cloned();
        if let Some((v, at, why)) = kept
            && v == version
            && at.elapsed() < EXPLAINED_FOR
        {
            return Ok(why);
        }
        let why = Arc::new(waiting(ctx, store, board)?);
        let entry = (version, Instant::now(), Arc::clone(&why));
        self.0.lock().unwrap_or_else(PoisonError::into_inner).insert(board.as_str().to_owned(), entry);
        Ok(why)
    }
}

/// A todo task's reason, as `--explain --task ID` gives it (it is not planned until its parents are done).
pub(crate) fn waiting_on_parents() -> Waiting {
    let d = Decision::WaitingOnParents;
    Waiting { code: d.code(), reason: "waits for its parents to be done".to_owned() }
}

/// The filter, the bulk actions over the cards that are selected (the script does the rest), and the archived
/// column shown or hidden.
pub(crate) fn tools(board: &str, archived: bool) -> Markup {
    html! {
        div #tools {
            @if archived {
                a #archived-toggle href={ "/?board=" (board) } { "hide archived" }
            } @else {
                a #archived-toggle href={ "/?board=" (board) "&archived=1" } { "show archived" }
            }
            input #filter type="search" placeholder="filter: title, id, profile, status" aria-label="filter the cards";
            label { input #select-all type="checkbox"; " select shown" }
            span #selected-n { "0 selected" }
            button type="button" data-bulk="retry" { "retry selected" }
            button type="button" data-bulk="archive" { "archive selected" }
        }
    }
}

/// Hours the chart covers, one bar pair each.
const HOURS: usize = 24;

/// Event kinds the chart counts as a task finished, and as a failed attempt.
const DONE_KINDS: [&str; 1] = ["completed"];
const FAILED_KINDS: [&str; 4] = ["failed", "crashed", "timed_out", "spawn_failed"];

/// Completions and failed attempts per hour over the last day, oldest first.
#[derive(Debug, Serialize)]
pub(crate) struct Chart {
    pub board: String,
    /// The start of the first hour (ms).
    pub since: i64,
    pub completed: Vec<u32>,
    pub failed: Vec<u32>,
}

/// The chart of `slug` from its events.
pub(crate) fn chart(ctx: &Ctx, slug: &str) -> Result<Chart, Failure> {
    use domain::ports::Clock;
    let b = BoardSlug::parse(slug).map_err(Failure::usage_of)?;
    let hour = 3_600_000_i64;
    let now = crate::edge::context::SystemClock.now().as_millis();
    let since = (now / hour + 1 - HOURS as i64) * hour;
    let mut c = Chart { board: b.as_str().to_owned(), since, completed: vec![0; HOURS], failed: vec![0; HOURS] };
    if let Some(store) = open_read_only(ctx)? {
        store.board(&b)?;
        let kinds: Vec<&str> = DONE_KINDS.iter().chain(FAILED_KINDS.iter()).copied().collect();
        for (kind, at) in store.board_event_times(&b, since, &kinds)? {
            let Ok(i) = usize::try_from((at - since) / hour) else { continue };
            let Some(slot) =
                (if DONE_KINDS.contains(&kind.as_str()) { c.completed.get_mut(i) } else { c.failed.get_mut(i) })
            else {
                continue;
            };
            *slot += 1;
        }
    }
    Ok(c)
}

/// The chart as inline SVG: a green bar of completions and a red one of failures per hour, the hours' ends labelled.
pub(crate) fn chart_svg(c: &Chart) -> Markup {
    let (w, h, top) = (480_u32, 90_u32, 12_u32);
    let most = c.completed.iter().chain(c.failed.iter()).copied().max().unwrap_or(0).max(1);
    let slot = w / HOURS as u32;
    let bar = |n: u32| (n * (h - top)).div_ceil(most);
    let total = |v: &[u32]| v.iter().sum::<u32>();
    let start = domain::time::Timestamp::from_millis(c.since).to_rfc3339();
    html! {
        figure #chart data-board=(c.board) {
            figcaption {
                "Last 24 h: " span.ok { (total(&c.completed)) " completed" } ", " span.bad { (total(&c.failed)) " failed attempts" }
                " (per hour, from " time datetime=(start) { (start) } ")"
            }
            svg viewBox={ "0 0 " (w) " " (h + 14) } width="100%" height="104" role="img" aria-label="completions and failures per hour" preserveAspectRatio="none" {
                line x1="0" y1=(h) x2=(w) y2=(h) stroke="#d9dde3" {}
                @for i in 0..HOURS {
                    @let x = i as u32 * slot;
                    @let (d, f) = (c.completed[i], c.failed[i]);
                    rect.done x=(x + 2) y=(h - bar(d)) width=(slot / 2 - 2) height=(bar(d)) fill="#12b76a" {
                        title { (d) " completed" }
                    }
                    rect.failed x=(x + slot / 2) y=(h - bar(f)) width=(slot / 2 - 2) height=(bar(f)) fill="#f04438" {
                        title { (f) " failed" }
                    }
                }
                text x="0" y=(h + 12) font-size="10" fill="#6b7480" { "-24 h" }
                text x=(w) y=(h + 12) font-size="10" fill="#6b7480" text-anchor="end" { "now" }
            }
        }
    }
}
