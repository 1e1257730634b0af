//! `kanban dispatch`: one tick through the domain's dispatcher service, and its upstream-shaped report.

use std::collections::BTreeSet;

use domain::dispatcher::{self, DispatchError, DispatchOptions, SpawnedWorker};
use domain::ids::BoardSlug;
use domain::kanban::TickConfig;
use domain::policy::dispatch::{Decision, Housekeeping, TickPlan};
use domain::ports::{Clock, ProfileResolver};
use kanban_store::{StoreError, TickRequest};
use serde_json::{Value as Json, json};

use super::{open_read_only, open_store};
use crate::context::{Ctx, ProcProbe, SystemClock};
use crate::error::Failure;
use crate::launcher::ProcessLauncher;
use crate::output;
use crate::process;
use crate::worker;

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
}

impl DispatchReport {
    /// Whether ready work could have started (for the gateway's stuck warning).
    pub fn had_spawnable(&self) -> bool {
        self.plan.spawns().next().is_some()
    }
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
        stale_timeout_secs: ctx.settings.kanban.dispatch_stale_timeout_seconds.get().cast_signed(),
        only_task: args.task.clone(),
        sandbox_affinity_secs: ctx.settings.kanban.sandbox_affinity_seconds.get().cast_signed(),
    }
}

/// Runs one tick on `board` through the domain's dispatcher: this only wires the store, the launcher, the clock and
/// the probe, and reshapes the result for printing.
///
/// # Errors
/// Store failures, or a usage failure for an unknown board or task.
pub async fn dispatch(ctx: &Ctx, board: &BoardSlug, args: &DispatchArgs) -> Result<DispatchReport, Failure> {
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
    let mut store = if args.dry_run {
        match open_read_only(ctx)? {
            Some(store) => store,
            None if board.as_str() == "default" => return Ok(report),
            None => return Err(StoreError::NoBoard(board.as_str().to_owned()).into()),
        }
    } else {
        open_store(ctx)?
    };
    let tick =
        dispatcher::dispatch(&mut store, &ProcessLauncher { ctx }, &clock, &req, opts).await.map_err(|e| match e {
            DispatchError::Store(e) => Failure::from(e),
            wrong @ DispatchError::WrongBoard { .. } => Failure::usage(wrong.to_string()),
        })?;
    report.plan = tick.plan;
    report.spawned = tick.spawned;
    report.spawn_failed = tick.spawn_failed;
    report.auto_blocked = tick.auto_blocked;
    report.not_considered = tick.not_considered;
    report.stops = tick.stops.iter().filter_map(|w| process::Worker::from_row(Some(w.pid), w.start)).collect();
    Ok(report)
}

fn ids_where(plan: &TickPlan, f: impl Fn(&Housekeeping) -> bool) -> Vec<String> {
    plan.housekeeping.iter().filter(|(_, h)| f(h)).map(|(id, _)| id.clone()).collect()
}

/// The report as JSON: the eleven upstream keys first, then berth's own.
pub fn report_json(r: &DispatchReport, explain: bool) -> Json {
    let p = &r.plan;
    let by = |want: &Decision| -> Vec<String> {
        p.decisions.iter().filter(|d| d.decision == *want).map(|d| d.task_id.clone()).collect()
    };
    let mut auto_blocked = ids_where(p, Housekeeping::gave_up);
    for id in &r.auto_blocked {
        if !auto_blocked.contains(id) {
            auto_blocked.push(id.clone());
        }
    }
    let mut v = json!({
        "reclaimed": p.housekeeping.iter().filter(|(_, h)| matches!(h, Housekeeping::Reclaim { .. })).count(),
        "crashed": ids_where(p, |h| matches!(h, Housekeeping::Crashed { .. })),
        "timed_out": ids_where(p, |h| matches!(h, Housekeeping::TimedOut { .. })),
        "stale": ids_where(p, |h| matches!(h, Housekeeping::Stale { .. })),
        "auto_blocked": auto_blocked,
        "promoted": p.promoted.len(),
        "spawned": r.spawned.iter().map(|w| json!({"task_id": w.task_id, "assignee": w.assignee, "workspace": w.sandbox})).collect::<Vec<_>>(),
        "skipped_unassigned": by(&Decision::SkippedUnassigned),
        "skipped_nonspawnable": by(&Decision::SkippedNonspawnable),
        "skipped_per_profile_capped": p.decisions.iter().filter_map(|d| match d.decision {
            Decision::SkippedPerProfileCapped { current, .. } => Some(json!({"task_id": d.task_id, "assignee": d.assignee, "current": current})),
            _ => None,
        }).collect::<Vec<_>>(),
        "auto_assigned_default": p.decisions.iter().filter(|d| d.auto_assigned).map(|d| d.task_id.clone()).collect::<Vec<_>>(),
    });
    let extra = json!({
        "board": r.board,
        "dry_run": r.dry_run,
        "claim_extended": ids_where(p, |h| matches!(h, Housekeeping::ExtendClaim)),
        "lease_expired": ids_where(p, |h| matches!(h, Housekeeping::LeaseExpired { .. })),
        "deferred": p.decisions.iter().filter(|d| matches!(d.decision, Decision::DeferredMaxInProgress { .. } | Decision::DeferredMaxSpawn { .. } | Decision::DeferredSandboxElsewhere { .. }))
            .map(|d| json!({"task_id": d.task_id, "assignee": d.assignee, "reason": d.decision.code()})).collect::<Vec<_>>(),
        "spawn_failed": r.spawn_failed.iter().map(|(t, e)| json!({"task_id": t, "error": e})).collect::<Vec<_>>(),
        "workers": r.spawned.iter().filter_map(|w| w.pid.map(|p| json!({"task_id": w.task_id, "pid": p}))).collect::<Vec<_>>(),
    });
    if let (Json::Object(m), Json::Object(e)) = (&mut v, extra) {
        m.extend(e);
        if explain || r.not_considered.is_some() {
            let mut reasons: Vec<Json> = p
                .decisions
                .iter()
                .map(|d| json!({"task_id": d.task_id, "code": d.decision.code(), "assignee": d.assignee, "detail": d.decision}))
                .collect();
            if let Some((id, why)) = &r.not_considered {
                reasons.push(json!({"task_id": id, "code": why.code(), "assignee": null, "detail": why.reason()}));
            }
            m.insert("explain".into(), Json::Array(reasons));
        }
    }
    v
}

pub(crate) fn print_dispatch(ctx: &Ctx, r: &DispatchReport, explain: bool) {
    if ctx.json {
        output::json(&report_json(r, explain));
        return;
    }
    let v = report_json(r, explain);
    let list = |k: &str| -> Vec<String> {
        v[k].as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect()).unwrap_or_default()
    };
    let counted = |label: &str, ids: Vec<String>| {
        output::line(&format!("{label:<14}{}", ids.len()));
        if !ids.is_empty() {
            output::line(&format!("  {}", ids.join(", ")));
        }
    };
    output::line(&format!("{:<14}{}", "Reclaimed:", v["reclaimed"]));
    counted("Crashed:", list("crashed"));
    counted("Timed out:", list("timed_out"));
    counted("Stale:", list("stale"));
    counted("Lease lapsed:", list("lease_expired"));
    counted("Auto-blocked:", list("auto_blocked"));
    output::line(&format!("{:<14}{}", "Promoted:", v["promoted"]));
    output::line(&format!("{:<14}{}", "Spawned:", r.spawned.len()));
    for w in &r.spawned {
        let ws = if w.sandbox.is_empty() { "-" } else { &w.sandbox };
        output::line(&format!(
            "  - {}  ->  {}  @ {ws}{}",
            w.task_id,
            w.assignee,
            if r.dry_run { " (dry)" } else { "" }
        ));
    }
    let auto = list("auto_assigned_default");
    if !auto.is_empty() {
        output::line(&format!(
            "Auto-assigned to kanban.default_assignee='{}': {}",
            r.default_assignee.as_deref().unwrap_or(""),
            auto.join(", ")
        ));
    }
    let unassigned = list("skipped_unassigned");
    if !unassigned.is_empty() {
        output::line(&format!("Skipped (unassigned): {}", unassigned.join(", ")));
    }
    for c in v["skipped_per_profile_capped"].as_array().into_iter().flatten() {
        output::line(&format!(
            "Deferred ({} at per-profile cap, {} running): {}",
            c["assignee"].as_str().unwrap_or(""),
            c["current"],
            c["task_id"].as_str().unwrap_or("")
        ));
    }
    let nonspawnable = list("skipped_nonspawnable");
    if !nonspawnable.is_empty() {
        output::line(&format!("Skipped (non-spawnable assignee — terminal lane, OK): {}", nonspawnable.join(", ")));
    }
    for d in v["deferred"].as_array().into_iter().flatten() {
        output::line(&format!(
            "Deferred ({}): {} ({})",
            d["reason"].as_str().unwrap_or(""),
            d["task_id"].as_str().unwrap_or(""),
            d["assignee"].as_str().unwrap_or("unassigned")
        ));
    }
    for f in &r.spawn_failed {
        output::line(&format!("Spawn failed: {}: {}", f.0, f.1));
    }
    if let Some(reasons) = v["explain"].as_array() {
        output::line("");
        let rows: Vec<Vec<String>> = reasons
            .iter()
            .map(|e| {
                vec![
                    e["task_id"].as_str().unwrap_or("").to_owned(),
                    e["code"].as_str().unwrap_or("").to_owned(),
                    e["assignee"].as_str().unwrap_or("-").to_owned(),
                ]
            })
            .collect();
        output::table(&["TASK", "REASON", "ASSIGNEE"], &rows);
    }
}
