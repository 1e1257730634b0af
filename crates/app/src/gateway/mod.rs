//! `berth gateway run|status`: the long-running service that reaps once, then dispatches every board each interval,
//! quarantines a failing board, warns when work is stuck, and shuts down cleanly on SIGTERM/SIGINT.

pub mod engine_backoff;
pub mod housekeeping;
pub mod overview;
mod prewarm;
mod reload;
pub mod status;
pub mod task_log;
mod ticker;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use domain::ports::Clock;
use tokio::task::JoinSet;

use crate::edge::context::{Ctx, SystemClock};
use crate::edge::error::{Exit, Failure};
use crate::edge::watch::BoardWatch;
use crate::gateway::status::{GatewayState, GatewayStatus, LastTick};
use crate::gateway::ticker::{TickSummary, Ticked, Ticker};
use crate::{edge::output, edge::process, sandbox};

/// Ticks with spawnable work and nothing spawned before the "stuck" warning.
const HEALTH_WINDOW: u32 = 6;
/// At most one "stuck" warning per this long.
const STUCK_WARN_EVERY: Duration = Duration::from_secs(300);
/// How long a stopping gateway waits for a tick under way to finish (a board that is away holds it).
const TICK_AT_STOP: Duration = Duration::from_secs(10);
/// How often the gateway looks for a change to the board made by another process (a task created, unblocked,
/// completed by its worker, …): SQLite's `data_version`, or the count of PostgreSQL's notifications, neither of which
/// costs a read of the board. Events in between are one tick.
const WAKE_POLL: Duration = Duration::from_millis(10);

/// The next SIGCHLD (a worker the gateway started has ended), or never when the signal cannot be watched.
async fn child_exited(sig: &mut Option<tokio::signal::unix::Signal>) {
    match sig {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

fn lock_path(home: &Path) -> PathBuf {
    home.join("gateway.lock")
}

fn state_path(home: &Path) -> PathBuf {
    home.join("gateway.json")
}

/// Takes the home's gateway lock (flock), or says who holds it.
fn take_lock(home: &Path) -> Result<File, Failure> {
    let path = lock_path(home);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| Failure::other(format!("cannot open {}: {e}", path.display())))?;
    if !process::try_lock(&file) {
        let holder = read_state(home).and_then(|s| s.pid);
        let who = holder.map(|p| format!(" (pid {p})")).unwrap_or_default();
        return Err(Failure::other(format!(
            "another gateway{who} is already dispatching {}; not starting a second one",
            home.display()
        )));
    }
    Ok(file)
}

/// Whether a gateway holds the home's lock right now.
pub(crate) fn lock_held(home: &Path) -> bool {
    process::lock_held(&lock_path(home))
}

fn write_state(home: &Path, state: &GatewayState) {
    let text = serde_json::to_string(state).unwrap_or_default();
    crate::edge::state_file::write_atomically(&state_path(home), text.as_bytes());
}

/// The state the gateway last wrote, when `gateway.json` is a small regular file of that shape.
fn read_state(home: &Path) -> Option<GatewayState> {
    serde_json::from_str(&crate::edge::state_file::read_small(&state_path(home), 1 << 20)?).ok()
}

/// Logs the effective dispatcher configuration, as upstream's watcher does.
fn log_config(ctx: &Ctx, interval: f64) {
    let caps = ctx.settings.caps();
    if let Some(d) = ctx.settings.default_assignee() {
        tracing::info!("kanban dispatcher: default_assignee={d:?} (unassigned ready tasks will route to this profile)");
    }
    match caps.per_profile {
        Some(n) => tracing::info!("kanban dispatcher: max_in_progress_per_profile={n}"),
        None => tracing::info!("kanban dispatcher: max_in_progress_per_profile unset (no per-profile cap)"),
    }
    if !caps.per_profile_overrides.is_empty() {
        tracing::info!("kanban dispatcher: max_in_progress_per_profile_overrides={:?}", caps.per_profile_overrides);
    }
    if let Some(n) = caps.max_in_progress {
        tracing::info!("kanban dispatcher: max_in_progress={n}");
    }
    if let Some(n) = caps.max_spawn {
        tracing::info!("kanban dispatcher: max_spawn={n}");
    }
    // The first tick waits as upstream's does (at most 5 s, less with a shorter interval), or until the board changes.
    let first = interval.min(5.0);
    tracing::info!("kanban dispatcher: embedded in gateway (interval={interval:.1}s, first tick in {first:.0}s)");
}

async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        std::future::pending::<()>().await;
        return "none";
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

/// `berth gateway run`.
///
/// # Errors
/// A failure when another gateway holds this home.
pub async fn run(ctx: &Ctx) -> Result<u8, Failure> {
    let _lock = take_lock(&ctx.home)?;
    // Its workers, their logs, the board and the dashboard's connections each hold descriptors: the usual soft limit
    // (1024) is reached long before the hard one.
    crate::edge::process::raise_open_files_limit();
    // The dashboard, when asked for (`kanban.dashboard_port`), fed by this loop's board watch.
    let dashboard = crate::web::for_gateway(ctx).await?;
    let interval = interval_secs(ctx);
    let dispatching = ctx.settings.kanban.dispatch_in_gateway;
    let mut state = started(ctx, interval, dispatching);
    let stop = shutdown_signal();
    tokio::pin!(stop);
    tokio::select! {
        () = reap_once(ctx) => {}
        sig = &mut stop => return Ok(finish(ctx, &mut state, sig)),
    }

    // Idle stop and the periodic reaper run in a task of their own beside the ticks (`housekeeping`).
    let _cleanup = crate::gateway::housekeeping::Housekeeper::from_ctx(ctx).spawn();
    start_host_heartbeat(ctx);
    // Its workers' board writes on its kept connection (PostgreSQL), not on one new connection each.
    let _relay = crate::board::relay::Relay::start(ctx);

    if !dispatching {
        tracing::info!("kanban dispatcher: disabled via config kanban.dispatch_in_gateway=false");
        if let Some(d) = &dashboard {
            d.watch_alone(ctx);
        }
        let sig = stop.await;
        return Ok(finish(ctx, &mut state, sig));
    }
    log_config(ctx, interval);
    // The table bounds the setting; the fallback only guards a value that slipped past it.
    let period = Duration::try_from_secs_f64(interval).unwrap_or(Duration::from_secs(60));
    let mut next = Instant::now() + period.min(Duration::from_secs(5));
    let mut stopping = JoinSet::new();
    let mut health = Health::default();
    // Wake at once on events (a worker's exit, any change to the board by another process); the interval stays the
    // fallback for what no event announces (time-based housekeeping).
    let mut watch = BoardWatch::new(ctx);
    if let Some(d) = &dashboard {
        // What changed before the watch began (during the reaper) was seen by no watch: pages fetch once now.
        d.changed();
    }
    let ticker = Ticker::start(ctx)?;
    let mut settings = reload::Reloader::new(ctx, period); // the config files watched, and SIGHUP
    let mut poll = tokio::time::interval(WAKE_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).ok();
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next.into()) => {}
            _ = poll.tick() => {
                if !watch.changed() {
                    continue;
                }
                if let Some(d) = &dashboard {
                    d.changed();
                }
                tracing::debug!("gateway: the board changed; ticking now");
            }
            () = child_exited(&mut sigchld) => tracing::debug!("gateway: a worker ended; ticking now"),
            () = settings.due() => {}
            sig = &mut stop => return Ok(stopped(ctx, &mut state, &mut stopping, None, sig).await),
        }
        // A config file changed (or SIGHUP): read it now, applied from this tick, or the old settings kept.
        let reread = settings.apply_if_due(&ctx.home, &mut state);
        while stopping.try_join_next().is_some() {}
        // Read before the tick: a change another process makes while it runs wakes the next one.
        let before = watch.version();
        // A change the poll has not reported yet (the tick woke first) is the dashboard's news too.
        if let Some(d) = &dashboard
            && before.is_some()
            && before != watch.seen
        {
            d.changed();
        }
        // The tick runs on its own thread; this runtime goes on serving the dashboard and the stops meanwhile.
        let mut pending = ticker.tick(Instant::now() + jittered(settings.period), reread);
        let ticked = tokio::select! {
            t = &mut pending => t,
            sig = &mut stop => return Ok(stopped(ctx, &mut state, &mut stopping, Some(pending), sig).await),
        };
        let Ok(Ticked { summary, stops, next: after, took }) = ticked else {
            return Err(Failure::other("the gateway's tick thread stopped unexpectedly"));
        };
        for w in stops {
            stopping.spawn(process::stop(w, process::STOP_GRACE));
        }
        watch.seen = before.or(watch.seen);
        next = after;
        health.after(&summary);
        tracing::debug!(
            "gateway: tick done in {:.1} ms ({} stop(s) under way)",
            took.as_secs_f64() * 1000.0,
            stopping.len()
        );
        record_tick(ctx, &mut state, summary);
    }
}

/// A stop signal: a tick under way finishes first (bounded: a board that is away may hold it), then the stops
/// already under way (each bounded by its grace period), so no worker is left with a SIGTERM it ignored and no
/// SIGKILL to follow.
async fn stopped(
    ctx: &Ctx,
    state: &mut GatewayState,
    stopping: &mut JoinSet<process::StopOutcome>,
    tick: Option<tokio::sync::oneshot::Receiver<Ticked>>,
    sig: &str,
) -> u8 {
    if let Some(tick) = tick {
        match tokio::time::timeout(TICK_AT_STOP, tick).await {
            Ok(Ok(t)) => {
                for w in t.stops {
                    stopping.spawn(process::stop(w, process::STOP_GRACE));
                }
            }
            _ => tracing::warn!("gateway: the tick under way did not finish within {}s", TICK_AT_STOP.as_secs()),
        }
    }
    while stopping.join_next().await.is_some() {}
    finish(ctx, state, sig)
}

/// The state of a gateway that just started (no tick yet), written where `gateway status` reads it.
fn started(ctx: &Ctx, interval: f64, dispatching: bool) -> GatewayState {
    let state = GatewayState {
        pid: Some(std::process::id()),
        started_at: Some(SystemClock.now().to_rfc3339()),
        home: Some(ctx.home.display().to_string()),
        interval_seconds: Some(interval),
        dispatching: Some(dispatching),
        ticks: Some(0),
        last_tick: None,
        stopped_at: None,
        settings_read_at: Some(SystemClock.now().to_rfc3339()),
        ..GatewayState::default()
    };
    write_state(&ctx.home, &state);
    state
}

/// Counts a tick in the state `gateway status` reads.
fn record_tick(ctx: &Ctx, state: &mut GatewayState, tick: TickSummary) {
    state.ticks = Some(state.ticks.unwrap_or(0) + 1);
    state.last_tick = Some(LastTick { at: SystemClock.now().to_rfc3339(), boards: tick.boards, spawned: tick.spawned });
    write_state(&ctx.home, state);
}

/// The orphan reaper, once, before anything else; an unreachable engine is logged, never fatal.
async fn reap_once(ctx: &Ctx) {
    match sandbox::connect(ctx).await {
        Ok(rt) => crate::web::metrics::count_reaped(sandbox::maybe_reap(ctx, &*rt).await),
        Err(e) => tracing::warn!("orphan reaper skipped: {e}"),
    }
}

/// The stuck warning: spawnable work that sat for [`HEALTH_WINDOW`] ticks with nothing spawned, said at most every
/// [`STUCK_WARN_EVERY`].
#[derive(Default)]
struct Health {
    bad_ticks: u32,
    last_warning: Option<Instant>,
}

impl Health {
    fn after(&mut self, tick: &TickSummary) {
        self.bad_ticks = if tick.pending && tick.spawned == 0 { self.bad_ticks + 1 } else { 0 };
        if self.bad_ticks >= HEALTH_WINDOW && self.last_warning.is_none_or(|t| t.elapsed() >= STUCK_WARN_EVERY) {
            tracing::warn!(
                "kanban dispatcher stuck: ready queue non-empty for {} consecutive ticks but 0 workers spawned. \
                 Check profile health and `berth kanban ls --status ready`.",
                self.bad_ticks
            );
            self.last_warning = Some(Instant::now());
        }
    }
}

/// `kanban.dispatch_interval_seconds`, at its floor of one second.
pub(super) fn interval_secs(ctx: &Ctx) -> f64 {
    let raw = ctx.settings.kanban.dispatch_interval_seconds.get();
    if raw < 1.0 {
        tracing::warn!("kanban.dispatch_interval_seconds={raw} is below the floor; using 1s");
        return 1.0;
    }
    raw
}

/// This host's heartbeat on a shared board (PostgreSQL, or a file hosts with their own `kanban.host_id` share), on a
/// thread of its own so a long tick never makes the host look dead. A board one host uses needs none: its workers
/// are judged by their pids (and a beat would wake this gateway's own board watch every few seconds).
fn start_host_heartbeat(ctx: &Ctx) {
    if ctx.database_url().is_some() || !ctx.settings.kanban.host_id.trim().is_empty() {
        host_heartbeat(crate::edge::open::BoardAt::of(ctx), ctx.settings.kanban.host_timeout_seconds.duration());
    }
}

/// Renews this host's heartbeat row every third of the host timeout (at most every 5 s, at least every 200 ms)
/// while the gateway runs, so other hosts sharing the board judge this host's workers alive; an outage of the board
/// is waited out (the store reconnects). The thread ends with the process.
fn host_heartbeat(at: crate::edge::open::BoardAt, host_timeout: Duration) -> std::thread::JoinHandle<()> {
    let every = (host_timeout / 3).clamp(Duration::from_millis(200), Duration::from_secs(5));
    std::thread::spawn(move || {
        let mut store = None;
        let mut failing = false;
        loop {
            if store.is_none() {
                store = at.open().ok();
            }
            let res = store.as_mut().map(|s: &mut crate::edge::open::Board| s.renew_host(&at.host, SystemClock.now()));
            match res {
                Some(Ok(())) if failing => {
                    tracing::info!("gateway: host heartbeat renewed again");
                    failing = false;
                }
                Some(Ok(())) => {}
                Some(Err(e)) if !failing => {
                    tracing::warn!("gateway: cannot renew this host's heartbeat ({e}); retrying");
                    failing = true;
                }
                _ => {}
            }
            std::thread::sleep(every); // the heartbeat's period, not synchronisation
        }
    })
}

/// `period` ± 10 %, drawn afresh each tick: gateways of several hosts sharing a board drift apart instead of ticking
/// in lockstep, where the same host would always find the slots just freed.
fn jittered(period: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    let unit = (h.finish() % 10_001) as f64 / 10_000.0;
    period.mul_f64(0.9 + 0.2 * unit)
}

fn finish(ctx: &Ctx, state: &mut GatewayState, signal: &str) -> u8 {
    tracing::info!("gateway: {signal} received; stopped dispatching");
    // Workers are detached processes and keep running; the gateway started no teardowns of its own to wait for.
    let _ = process::reap_children();
    state.stopped_at = Some(SystemClock.now().to_rfc3339());
    write_state(&ctx.home, state);
    0
}

/// `berth gateway status`.
///
/// # Errors
/// None in practice; the signature matches the other commands.
pub fn status(ctx: &Ctx) -> Result<u8, Failure> {
    let v = status_view(ctx);
    if ctx.json {
        output::json(&v);
    } else {
        crate::gateway::status::print_text(&v);
    }
    Ok(if v.running { Exit::OK } else { Exit::NOT_RUNNING })
}

/// What `gateway status --json` prints.
pub fn status_view(ctx: &Ctx) -> GatewayStatus {
    GatewayStatus::of(lock_held(&ctx.home), read_state(&ctx.home), crate::board::runner::serving(&ctx.home))
}
