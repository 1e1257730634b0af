//! `kanban dispatch`: one tick through the domain's dispatcher service, and its upstream-shaped report.

use std::collections::BTreeSet;

use domain::board::TickConfig;
use domain::board::{StoreError, TickRequest};
use domain::dispatcher::{self, DispatchError, DispatchOptions, SpawnedWorker};
use domain::ids::BoardSlug;
use domain::policy::dispatch::{Decision, TickPlan};
use domain::ports::{Clock, ProfileResolver};
use serde_json::Value as Json;
use std::io::Write;

use super::stream::{Extras, ReportWriter};
use crate::board::launcher::ProcessLauncher;
use crate::board::worker;
use crate::edge::context::{Ctx, ProcProbe, SystemClock};
use crate::edge::error::Failure;
use crate::edge::open::{Board, open_read_only, open_store};
use crate::edge::process;

/// The options of one dispatch.
#[derive(Clone, Debug, Default)]
pub struct DispatchArgs {
    pub dry_run: bool,
    pub max: Option<u32>,
    pub failure_limit: Option<u32>,
    pub task: Option<String>,
    /// Leave the workers housekeeping took tasks from in [`DispatchReport::stops`] for the caller to stop off the
    /// tick path (the gateway), instead of stopping them before returning.
    pub detach_stops: bool,
    /// The gateway's backoff after its workers found the engine unreachable: nothing is claimed before then.
    pub engine_backoff_until: Option<domain::time::Timestamp>,
    /// Tasks whose worker from this gateway is still to be reaped: not claimed again yet.
    pub held: BTreeSet<String>,
    /// Make the task of each recurring schedule's due slot first (the gateway; never a dry run).
    pub recurring: bool,
}

/// What a dispatch did (or, dry, would do): the dispatcher's report and what the printer adds.
#[derive(Clone, Debug, Default)]
pub struct DispatchReport {
    pub board: String,
    pub dry_run: bool,
    pub plan: TickPlan,
    pub spawned: Vec<SpawnedWorker>,
    pub spawn_failed: Vec<(String, String)>,
    pub auto_blocked: Vec<String>,
    pub default_assignee: Option<String>,
    /// For `--task`: why it was not dispatched, when it was not even considered.
    pub not_considered: Option<(String, Decision)>,
    /// Workers still to stop (only with [`DispatchArgs::detach_stops`]).
    pub stops: Vec<process::Worker>,
    /// The soonest next slot of the board's recurring schedules (with [`DispatchArgs::recurring`]).
    pub next_slot: Option<domain::time::Timestamp>,
}

impl DispatchReport {
    /// Whether ready work could have started (for the gateway's stuck warning).
    pub fn had_spawnable(&self) -> bool {
        self.plan.spawns().next().is_some()
    }

    /// What the tick did, by kind, read off the typed report (what the gateway logs and `/metrics` counts).
    pub fn tally(&self) -> TickTally<'_> {
        use domain::policy::dispatch::Housekeeping as H;
        let ids = |f: fn(&H) -> bool| -> Vec<&str> {
            self.plan.housekeeping.iter().filter(|(_, h)| f(h)).map(|(id, _)| id.as_str()).collect()
        };
        let mut auto_blocked = ids(H::gave_up);
        for id in &self.auto_blocked {
            if !auto_blocked.contains(&id.as_str()) {
                auto_blocked.push(id);
            }
        }
        TickTally {
            spawned: &self.spawned,
            spawn_failed: &self.spawn_failed,
            crashed: ids(|h| matches!(h, H::Crashed { .. })),
            timed_out: ids(|h| matches!(h, H::TimedOut { .. })),
            lease_expired: ids(|h| matches!(h, H::LeaseExpired { .. })),
            stale: ids(|h| matches!(h, H::Stale { .. })),
            reclaimed: ids(|h| matches!(h, H::Reclaim { .. })).len(),
            promoted: self.plan.promoted.len(),
            auto_blocked,
        }
    }
}

/// One tick by kind: the workers it started, the claims it could not start, the tasks housekeeping took (crashed,
/// timed out, lease expired, stale; reclaimed counted), the children it promoted and the tasks the breaker blocked.
#[derive(Debug)]
pub struct TickTally<'a> {
    pub spawned: &'a [SpawnedWorker],
    pub spawn_failed: &'a [(String, String)],
    pub crashed: Vec<&'a str>,
    pub timed_out: Vec<&'a str>,
    pub lease_expired: Vec<&'a str>,
    pub stale: Vec<&'a str>,
    pub reclaimed: usize,
    pub promoted: usize,
    pub auto_blocked: Vec<&'a str>,
}

/// The tick configuration from the settings, the flags and the profiles (read once, here at the edge).
pub fn tick_config(ctx: &Ctx, args: &DispatchArgs, profiles: &dyn ProfileResolver) -> TickConfig {
    let mut caps = ctx.settings.caps();
    if let Some(m) = args.max {
        caps.max_spawn = Some(m);
    }
    let failure_limit = args.failure_limit.filter(|n| *n >= 1).unwrap_or(ctx.settings.kanban.failure_limit.get());
    TickConfig {
        caps,
        default_assignee: ctx.settings.default_assignee(),
        profiles: profiles.list().into_iter().collect::<BTreeSet<_>>(),
        failure_limit,
        retry_backoff: ctx.settings.retry_backoffs(),
        stale_timeout_secs: ctx.settings.kanban.dispatch_stale_timeout_seconds.get().cast_signed(),
        only_task: args.task.clone(),
        sandbox_affinity_secs: ctx.settings.kanban.sandbox_affinity_seconds.get().cast_signed(),
        host: ctx.host_id(),
        host_timeout: ctx.settings.kanban.host_timeout_seconds.duration(),
        engine_backoff_until: args.engine_backoff_until,
        held: args.held.clone(),
    }
}

/// Runs one tick on `board` through the domain's dispatcher: this only wires the store, the launcher, the clock and
/// the probe, and reshapes the result for printing.
///
/// # Errors
/// Store failures, or a usage failure for an unknown board or task.
pub async fn dispatch(ctx: &Ctx, board: &BoardSlug, args: &DispatchArgs) -> Result<DispatchReport, Failure> {
    dispatch_with(ctx, board, args, None, None).await
}

/// [`dispatch`] (a real tick) through a store the caller keeps open (the gateway's PostgreSQL connection).
///
/// # Errors
/// As [`dispatch`].
pub async fn dispatch_on(
    ctx: &Ctx,
    store: &mut Board,
    board: &BoardSlug,
    args: &DispatchArgs,
) -> Result<DispatchReport, Failure> {
    dispatch_with(ctx, board, args, None, Some(store)).await
}

/// [`dispatch`]; with `sink`, a real tick streams its whole plan there and the report's plan keeps only what the
/// tick applied; with `store`, it runs on that store instead of opening the board.
async fn dispatch_with(
    ctx: &Ctx,
    board: &BoardSlug,
    args: &DispatchArgs,
    sink: Option<&mut ReportWriter>,
    store: Option<&mut Board>,
) -> Result<DispatchReport, Failure> {
    let cfg = tick_config(ctx, args, &ctx.profiles());
    let claimer = format!("{}:{}", ctx.host_id(), std::process::id());
    let spawn_lease = ctx.settings.kanban.spawn_lease_seconds.duration();
    let clock = SystemClock;
    let req = TickRequest {
        board,
        cfg: &cfg,
        now: clock.now(),
        probe: &ProcProbe,
        claimer: &claimer,
        claim_ttl: worker::claim_ttl(ctx),
        spawn_lease,
    };
    let mut report = DispatchReport {
        board: board.as_str().to_owned(),
        dry_run: args.dry_run,
        default_assignee: cfg.default_assignee.clone(),
        ..DispatchReport::default()
    };
    let opts = DispatchOptions { dry_run: args.dry_run, detach_stops: args.detach_stops };
    let mut opened;
    let store = match store {
        Some(store) => store,
        None if args.dry_run => match open_read_only(ctx)? {
            Some(store) => {
                opened = store;
                &mut opened
            }
            None if board.as_str() == "default" => return Ok(report),
            None => return Err(StoreError::NoBoard(board.as_str().to_owned()).into()),
        },
        None => {
            opened = open_store(ctx)?;
            &mut opened
        }
    };
    if args.recurring && !args.dry_run {
        // A schedule's slot becomes a ready task before the tick plans, so it starts in this tick.
        match crate::board::cron::make_due(store, board, clock.now()) {
            Ok(next) => report.next_slot = next,
            Err(e) => tracing::warn!("kanban cron [{board}]: {e}; the due slots are made at the next tick"),
        }
    }
    // The workers apply the breaker to their own outcomes: `--failure-limit` goes to them too.
    let launcher = ProcessLauncher::new(ctx, args.failure_limit.filter(|n| *n >= 1));
    let tick = match sink {
        Some(sink) if !args.dry_run => dispatcher::dispatch_into(store, &launcher, &clock, &req, opts, sink).await,
        _ => dispatcher::dispatch(store, &launcher, &clock, &req, opts).await,
    }
    .map_err(dispatch_failure)?;
    report.plan = tick.plan;
    report.spawned = tick.spawned;
    report.spawn_failed = tick.spawn_failed;
    report.auto_blocked = tick.auto_blocked;
    report.not_considered = tick.not_considered;
    report.stops = tick.stops.iter().filter_map(|w| process::Worker::from_row(Some(w.pid), w.start)).collect();
    Ok(report)
}

/// The report as JSON: the eleven upstream keys first, then berth's own (the streamed report, parsed back).
pub fn report_json(r: &DispatchReport, explain: bool) -> Json {
    let mut buf = Vec::new();
    write_report(r, true, explain, &mut buf);
    serde_json::from_slice(&buf).unwrap_or(Json::Null)
}

/// Writes a finished report (a real tick, or a dry run gathered in memory) through the streaming writer.
fn write_report(r: &DispatchReport, json: bool, explain: bool, out: &mut dyn Write) {
    let mut w = ReportWriter::new(json, explain, r.not_considered.is_some());
    r.plan.replay(&mut w);
    let _ = w.finish(&extras(r, (!r.dry_run).then_some(&r.spawned[..])), out);
}

fn extras<'a>(r: &'a DispatchReport, spawned: Option<&'a [SpawnedWorker]>) -> Extras<'a> {
    Extras {
        board: &r.board,
        dry_run: r.dry_run,
        spawned,
        spawn_failed: &r.spawn_failed,
        auto_blocked: &r.auto_blocked,
        default_assignee: r.default_assignee.as_deref(),
        not_considered: r.not_considered.as_ref(),
    }
}

pub(crate) fn print_dispatch(ctx: &Ctx, r: &DispatchReport, explain: bool) {
    write_report(r, ctx.json, explain, &mut std::io::BufWriter::new(std::io::stdout().lock()));
}

/// `kanban dispatch` on one board, printed as it goes: a dry run streams its plan from the store through the
/// report writer (no per-task tree, memory bounded by the profiles and spawns); a real tick prints its report.
///
/// # Errors
/// As [`dispatch`].
pub(crate) async fn dispatch_and_print(
    ctx: &Ctx,
    board: &BoardSlug,
    args: &DispatchArgs,
    explain: bool,
) -> Result<(), Failure> {
    if !args.dry_run {
        // The tick streams its plan into the writer; the workers it started are added at the end.
        let mut writer = ReportWriter::new(ctx.json, explain, args.task.is_some());
        let report = dispatch_with(ctx, board, args, Some(&mut writer), None).await?;
        let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
        let _ = writer.finish(&extras(&report, Some(&report.spawned)), &mut out);
        return Ok(());
    }
    let cfg = tick_config(ctx, args, &ctx.profiles());
    let mut report = DispatchReport {
        board: board.as_str().to_owned(),
        dry_run: true,
        default_assignee: cfg.default_assignee.clone(),
        ..DispatchReport::default()
    };
    let mut writer = ReportWriter::new(ctx.json, explain, args.task.is_some());
    if let Some(store) = open_read_only(ctx)? {
        report.not_considered = plan_dry(ctx, &store, board, &cfg, &mut writer)?;
    } else if board.as_str() != "default" {
        return Err(StoreError::NoBoard(board.as_str().to_owned()).into());
    }
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    let _ = writer.finish(&extras(&report, None), &mut out);
    Ok(())
}

/// A dry run's plan of `board` streamed into `sink`, as a tick now would make it (the plan `kanban dispatch --dry-run
/// --explain` prints, and the dashboard's "why is it waiting" on each card); the `--task` that was not considered.
///
/// # Errors
/// The store's failure (no board, storage).
pub(crate) fn plan_dry(
    ctx: &Ctx,
    store: &Board,
    board: &BoardSlug,
    cfg: &TickConfig,
    sink: &mut dyn domain::policy::dispatch::PlanSink,
) -> Result<Option<(String, Decision)>, Failure> {
    let req = TickRequest {
        board,
        cfg,
        now: SystemClock.now(),
        probe: &ProcProbe,
        claimer: "",
        claim_ttl: worker::claim_ttl(ctx),
        spawn_lease: ctx.settings.kanban.spawn_lease_seconds.duration(),
    };
    dispatcher::dry_run_into(store, &req, sink).map_err(dispatch_failure)
}

fn dispatch_failure(e: DispatchError<StoreError>) -> Failure {
    match e {
        DispatchError::Store(e) => Failure::from(e),
        wrong @ DispatchError::WrongBoard { .. } => Failure::usage(wrong.to_string()),
    }
}
