//! `/metrics` in the Prometheus text format (prometheus-client): the board's tasks by board, status and assignee,
//! running workers against their caps, the ready tasks a start-rate limit holds back (when one is set), this home's
//! sandboxes by state (one listing of the engine per scrape), and counters of what this process saw since it started:
//! its dispatch ticks' claims, spawns, crashes, lease expiries, timeouts, reclaims and give-ups (from each tick's
//! report), completions and failures (from the board, compared scrape to scrape), its cleanup's reaped and idle-stopped
//! sandboxes and removed folders, and the tick duration as a histogram.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use domain::board::TaskStatus;
use domain::ids::BoardSlug;
use domain::ports::Clock;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::edge::context::{Ctx, SystemClock};
use crate::edge::error::Failure;

/// The process's counters; gauges are read from the board at each scrape.
struct Counters {
    claims: Counter,
    spawns: Counter,
    spawn_failures: Counter,
    crashes: Counter,
    lease_expiries: Counter,
    timeouts: Counter,
    reclaims: Counter,
    gave_up: Counter,
    completions: Counter,
    failures: Counter,
    reaped: Counter,
    idle_stopped: Counter,
    folders_removed: Counter,
    tick: Histogram,
    /// Each task's status and failure count at the last scrape, to count what changed since.
    seen: Mutex<HashMap<String, (TaskStatus, i64)>>,
    started_ms: i64,
}

static COUNTERS: LazyLock<Counters> = LazyLock::new(|| Counters {
    claims: Counter::default(),
    spawns: Counter::default(),
    spawn_failures: Counter::default(),
    crashes: Counter::default(),
    lease_expiries: Counter::default(),
    timeouts: Counter::default(),
    reclaims: Counter::default(),
    gave_up: Counter::default(),
    completions: Counter::default(),
    failures: Counter::default(),
    reaped: Counter::default(),
    idle_stopped: Counter::default(),
    folders_removed: Counter::default(),
    // 1 ms to about 16 s.
    tick: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
    seen: Mutex::new(HashMap::new()),
    started_ms: SystemClock.now().as_millis(),
});

/// Counts one tick: its claims, spawns, crashes, lease expiries, timeouts, reclaims (no heartbeat, stale claims)
/// and give-ups.
pub fn record_tally(t: &crate::board::TickTally<'_>) {
    let c = &*COUNTERS;
    let n = |len: usize| len as u64;
    c.claims.inc_by(n(t.spawned.len() + t.spawn_failed.len()));
    c.spawns.inc_by(n(t.spawned.len()));
    c.spawn_failures.inc_by(n(t.spawn_failed.len()));
    c.crashes.inc_by(n(t.crashed.len()));
    c.lease_expiries.inc_by(n(t.lease_expired.len()));
    c.timeouts.inc_by(n(t.timed_out.len()));
    c.reclaims.inc_by(n(t.reclaimed + t.stale.len()));
    c.gave_up.inc_by(n(t.auto_blocked.len()));
}

/// Sandboxes the orphan reaper removed (the gateway's passes, and the sweep before a process's first acquire).
pub fn count_reaped(n: usize) {
    COUNTERS.reaped.inc_by(n as u64);
}

/// A sandbox idle stop stopped.
pub fn count_idle_stopped() {
    COUNTERS.idle_stopped.inc();
}

/// Sandbox folders the cleanup removed (their sandbox and task gone).
pub fn count_folders_removed(n: usize) {
    COUNTERS.folders_removed.inc_by(n as u64);
}

/// As [`record_tally`] from the report itself.
pub(crate) fn record_tick(r: &crate::board::DispatchReport) {
    record_tally(&r.tally());
}

/// One tick's duration (every board of it).
pub fn observe_tick(took: Duration) {
    COUNTERS.tick.observe(took.as_secs_f64());
}

/// Counts completions and failures since the last scrape: a task now done that was not (or, seen for the first time,
/// finished after this process started), and every rise of a task's consecutive failures.
fn observe_tasks(tasks: &[domain::board::Task]) {
    let c = &*COUNTERS;
    let Ok(mut seen) = c.seen.lock() else { return };
    // Rebuilt at each scrape, so a task taken off the board leaves the map too.
    let last = std::mem::take(&mut *seen);
    for t in tasks {
        seen.insert(t.id.clone(), (t.status, t.consecutive_failures));
        let before = last.get(&t.id).copied();
        let new = t.created_at >= c.started_ms;
        let was_done = before.map_or(!new && t.completed_at.is_some_and(|at| at < c.started_ms), |(s, _)| {
            s == TaskStatus::Done || s == TaskStatus::Archived
        });
        if t.status == TaskStatus::Done && !was_done && t.completed_at.is_some_and(|at| at >= c.started_ms) {
            c.completions.inc();
        }
        let failures_before = before.map_or(if new { 0 } else { t.consecutive_failures }, |(_, f)| f);
        if let Ok(rise) = u64::try_from(t.consecutive_failures - failures_before) {
            c.failures.inc_by(rise);
        }
    }
}

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// The board's gauges: tasks by board, status and assignee; running and caps per profile.
fn board_gauges(ctx: &Ctx, reg: &mut Registry) -> Result<(), Failure> {
    let tasks = Family::<Labels, Gauge>::default();
    if let Some(store) = crate::edge::open::open_read_only(ctx)? {
        let asked = std::time::Instant::now();
        let boards = store.boards()?;
        let round_trip = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        round_trip.set(asked.elapsed().as_secs_f64());
        reg.register(
            "berth_board_round_trip_seconds",
            "One read of the board (its list of boards) at this scrape",
            round_trip,
        );
        let mut all = Vec::new();
        let limited = ctx.settings.caps().rate_limited();
        let rate_limited = Family::<Labels, Gauge>::default();
        for b in boards {
            let Ok(slug) = BoardSlug::parse(&b.slug) else { continue };
            all.extend(store.tasks(&slug, None, None)?);
            if limited {
                rate_limited_tasks(ctx, &store, &slug, &rate_limited)?;
            }
        }
        if limited {
            reg.register(
                "berth_rate_limited_tasks",
                "Ready tasks a start-rate limit holds back now, by board and assignee; next_task names the first",
                rate_limited,
            );
        }
        for t in &all {
            let l = labels(&[
                ("board", &t.board),
                ("status", t.status.as_str()),
                ("assignee", t.assignee.as_deref().unwrap_or("")),
            ]);
            tasks.get_or_create(&l).inc();
        }
        observe_tasks(&all);
    }
    reg.register("berth_tasks", "Tasks on the board by board, status and assignee", tasks);
    let view = super::views::profiles(ctx)?;
    let running = Family::<Labels, Gauge>::default();
    let caps = Family::<Labels, Gauge>::default();
    for p in &view.profiles {
        running.get_or_create(&labels(&[("profile", &p.name)])).set(p.running);
        if let Some(cap) = p.cap {
            caps.get_or_create(&labels(&[("profile", &p.name)])).set(i64::from(cap));
        }
    }
    reg.register("berth_running", "Running workers per profile, all boards", running);
    reg.register("berth_running_cap", "Per-profile cap on running workers (absent: no cap)", caps);
    if let Some(max) = view.max_in_progress {
        let g = Gauge::<i64>::default();
        g.set(i64::from(max));
        reg.register("berth_max_in_progress", "The cap on running workers, all profiles", g);
    }
    Ok(())
}

/// Counts the ready tasks of `board` a start-rate limit holds back, from the plan a tick now would make (a dry run,
/// as the dashboard's "why it waits"): one gauge per assignee, labelled with its first such task.
fn rate_limited_tasks(
    ctx: &Ctx,
    store: &crate::edge::open::Board,
    board: &BoardSlug,
    family: &Family<Labels, Gauge>,
) -> Result<(), Failure> {
    use domain::policy::dispatch::{Decision, DecisionRef, Housekeeping, PlanSink};
    #[derive(Default)]
    struct Held(std::collections::BTreeMap<String, (String, i64)>);
    impl PlanSink for Held {
        fn housekeeping(&mut self, _: &str, _: &Housekeeping) {}
        fn promoted(&mut self, _: &str) {}
        fn decision(&mut self, d: &DecisionRef<'_>) {
            if matches!(d.decision, Decision::DeferredRateLimited { .. }) {
                let who = d.assignee.unwrap_or_default().to_owned();
                self.0.entry(who).or_insert_with(|| (d.task_id.to_owned(), 0)).1 += 1;
            }
        }
    }
    let cfg = crate::board::tick_config(ctx, &crate::board::DispatchArgs::default(), &ctx.profiles());
    let mut held = Held::default();
    crate::board::report::plan_dry(ctx, store, board, &cfg, &mut held)?;
    for (who, (first, n)) in held.0 {
        family.get_or_create(&labels(&[("board", board.as_str()), ("assignee", &who), ("next_task", &first)])).set(n);
    }
    Ok(())
}

/// How long a scrape waits for the engine's listing before it leaves the sandboxes out.
const ENGINE_BOUND: Duration = Duration::from_secs(2);

/// This home's sandboxes by state (every profile's), from one listing of the engine, and whether the engine answered
/// (`berth_engine_up`); without an answer within [`ENGINE_BOUND`] the states are left out, not reported as zero.
fn sandbox_gauges(ctx: &Ctx, reg: &mut Registry) {
    let listed = tokio::runtime::Builder::new_current_thread().enable_all().build().ok().and_then(|rt| {
        rt.block_on(async {
            let work = async {
                let engine = crate::sandbox::connect(ctx).await.ok()?;
                domain::service::list_managed(&*engine, None, Some(&ctx.home_id())).await.ok()
            };
            tokio::time::timeout(ENGINE_BOUND, work).await.ok().flatten()
        })
    });
    let up = Gauge::<i64>::default();
    up.set(i64::from(listed.is_some()));
    reg.register("berth_engine_up", "Whether the container engine answered this scrape's listing", up);
    let Some(listed) = listed else { return };
    let states = Family::<Labels, Gauge>::default();
    for s in ["running", "exited", "created"] {
        states.get_or_create(&labels(&[("state", s)])).set(0);
    }
    for c in &listed {
        states.get_or_create(&labels(&[("state", c.state.as_str())])).inc();
    }
    reg.register("berth_sandboxes", "This home's sandboxes (every profile's) by state", states);
}

/// The whole exposition.
pub(crate) fn render(ctx: &Ctx) -> Result<String, Failure> {
    let mut reg = Registry::default();
    board_gauges(ctx, &mut reg)?;
    sandbox_gauges(ctx, &mut reg);
    let c = &*COUNTERS;
    let counters = [
        ("berth_claims", "Tasks claimed by this process's dispatch ticks", &c.claims),
        ("berth_spawns", "Workers started by this process's dispatch ticks", &c.spawns),
        ("berth_spawn_failures", "Claims whose worker could not be started", &c.spawn_failures),
        ("berth_crashes", "Runs whose worker was found gone (crashed)", &c.crashes),
        (
            "berth_lease_expiries",
            "Claims whose spawn lease lapsed with no worker confirming the run",
            &c.lease_expiries,
        ),
        ("berth_timeouts", "Runs stopped past their max runtime", &c.timeouts),
        ("berth_reclaims", "Claims housekeeping took back (no heartbeat, stale claims)", &c.reclaims),
        ("berth_gave_up", "Tasks blocked by the failure breaker (gave_up)", &c.gave_up),
        ("berth_completions", "Tasks seen finishing (done) since this process started", &c.completions),
        ("berth_failures", "Task failures seen since this process started", &c.failures),
        ("berth_sandboxes_reaped", "Stale sandboxes the orphan reaper removed", &c.reaped),
        ("berth_sandboxes_idle_stopped", "Sandboxes idle stop stopped", &c.idle_stopped),
        (
            "berth_sandbox_folders_removed",
            "Sandbox folders removed once their sandbox and task were gone",
            &c.folders_removed,
        ),
    ];
    for (name, help, counter) in counters {
        reg.register(name, help, counter.clone());
    }
    reg.register("berth_tick_duration_seconds", "Duration of a dispatch tick over every board", c.tick.clone());
    let mut out = String::new();
    encode(&mut out, &reg).map_err(|e| Failure::other(format!("cannot encode the metrics: {e}")))?;
    Ok(out)
}
