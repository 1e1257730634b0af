//! `berth gateway run|status`: the long-running service that reaps once, then dispatches every board each interval,
//! quarantines a failing board, warns when work is stuck, and shuts down cleanly on SIGTERM/SIGINT.

pub mod engine_backoff;
pub mod housekeeping;
pub mod overview;
pub mod status;
pub mod task_log;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use domain::ids::BoardSlug;
use domain::ports::Clock;
use tokio::task::JoinSet;

use crate::board::{self, DispatchArgs};
use crate::edge::context::{Ctx, SystemClock};
use crate::edge::error::{Exit, Failure};
use crate::edge::watch::BoardWatch;
use crate::gateway::status::{BoardTick, GatewayState, GatewayStatus, LastTick};
use crate::gateway::task_log::TaskLog;
use crate::{edge::output, edge::process, sandbox};

/// Ticks with spawnable work and nothing spawned before the "stuck" warning.
const HEALTH_WINDOW: u32 = 6;
/// At most one "stuck" warning per this long.
const STUCK_WARN_EVERY: Duration = Duration::from_secs(300);
/// How long a failing board sits out before it is tried again.
const QUARANTINE: Duration = Duration::from_secs(300);
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
fn lock_held(home: &Path) -> bool {
    let Ok(file) = std::fs::OpenOptions::new().read(true).write(true).open(lock_path(home)) else { return false };
    // A successful probe is released at once.
    if process::try_lock(&file) {
        process::unlock(&file);
        false
    } else {
        true
    }
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
    tracing::info!("kanban dispatcher: embedded in gateway (interval={interval:.1}s)");
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
    let mut quarantined: BTreeMap<String, Instant> = BTreeMap::new();
    let mut stopping = JoinSet::new();
    let mut health = Health::default();
    // Wake at once on events (a worker's exit, any change to the board by another process); the interval stays the
    // fallback for what no event announces (time-based housekeeping).
    let mut watch = BoardWatch::new(ctx);
    if let Some(d) = &dashboard {
        // What changed before the watch began (during the reaper) was seen by no watch: pages fetch once now.
        d.changed();
    }
    let mut kept = KeptBoard::default();
    let mut poll = tokio::time::interval(WAKE_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).ok();
    let (mut backoff, mut task_log) = (crate::gateway::engine_backoff::EngineBackoff::default(), TaskLog::default());
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
            sig = &mut stop => {
                // Stops already under way finish (each is bounded by its grace period), so no worker is left
                // with a SIGTERM it ignored and no SIGKILL to follow.
                while stopping.join_next().await.is_some() {}
                return Ok(finish(ctx, &mut state, sig));
            }
        }
        backoff.observe(&task_log.ended(), SystemClock.now());
        task_log.failures_blocked(ctx).await;
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
        let tick_started = Instant::now();
        let until = backoff.until(SystemClock.now());
        let tick = tick_all(ctx, &mut kept, &mut quarantined, &mut stopping, until, &mut task_log).await;
        let took = tick_started.elapsed();
        crate::web::metrics::observe_tick(took);
        watch.seen = before.or(watch.seen);
        next = backoff.sooner(Instant::now() + jittered(period), SystemClock.now());
        health.after(&tick);
        tracing::debug!(
            "gateway: tick done in {:.1} ms ({} stop(s) under way)",
            took.as_secs_f64() * 1000.0,
            stopping.len()
        );
        record_tick(ctx, &mut state, tick);
    }
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
fn interval_secs(ctx: &Ctx) -> f64 {
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

/// One tick's summary across boards.
struct TickSummary {
    boards: BTreeMap<String, BoardTick>,
    spawned: usize,
    /// Some board had work a worker could have started.
    pending: bool,
}

/// The gateway's connection to a PostgreSQL board, kept from tick to tick (connecting and checking the schema cost
/// more than an idle tick). A SQLite board is opened afresh each tick, as before: that costs little, and a board file
/// replaced or moved aside between ticks is then seen, not written through an old handle.
#[derive(Default)]
struct KeptBoard(Option<crate::edge::open::Board>);

impl KeptBoard {
    /// The boards to dispatch, listed on the kept connection when there is one; a kept connection that fails (the
    /// server restarted, an idle connection was dropped) is replaced by a new one at once, so it costs no tick.
    fn boards(&mut self, ctx: &Ctx) -> Result<Vec<kanban_core::Board>, Failure> {
        if let Some(kept) = &self.0 {
            match kept.boards() {
                Ok(boards) => return Ok(boards),
                Err(e) => tracing::info!("gateway: the board connection failed ({e}); connecting again"),
            }
            self.0 = None;
        }
        let store = crate::edge::open::open_store(ctx)?;
        let boards = store.boards()?;
        if ctx.database_url().is_some() {
            self.0 = Some(store);
        }
        Ok(boards)
    }
}

async fn tick_all(
    ctx: &Ctx,
    kept: &mut KeptBoard,
    quarantined: &mut BTreeMap<String, Instant>,
    stopping: &mut JoinSet<process::StopOutcome>,
    engine_backoff_until: Option<domain::time::Timestamp>,
    task_log: &mut TaskLog,
) -> TickSummary {
    let mut summary = TickSummary { boards: BTreeMap::new(), spawned: 0, pending: false };
    // Boards are re-listed every tick, so new boards need no restart.
    let boards = match kept.boards(ctx) {
        Ok(b) => b,
        Err(e) => {
            tracing::error!("kanban dispatcher: cannot list boards: {}", e.message);
            summary.boards.insert("*".into(), BoardTick::failed(e.message, false));
            return summary;
        }
    };
    for board in boards {
        if quarantined.get(&board.slug).is_some_and(|since| since.elapsed() < QUARANTINE) {
            summary.boards.insert(board.slug.clone(), BoardTick { quarantined: Some(true), ..BoardTick::default() });
            continue;
        }
        let Ok(slug) = BoardSlug::parse(&board.slug) else { continue };
        let held = task_log.unreaped(&board.slug);
        let args = DispatchArgs { detach_stops: true, engine_backoff_until, held, ..DispatchArgs::default() };
        let dispatched = match kept.0.as_mut() {
            Some(store) => board::dispatch_on(ctx, store, &slug, &args).await,
            None => board::dispatch(ctx, &slug, &args).await,
        };
        match dispatched {
            Ok(mut r) => {
                // Stops wait up to a grace period each; they run beside the loop, never inside a tick.
                for w in std::mem::take(&mut r.stops) {
                    stopping.spawn(process::stop(w, process::STOP_GRACE));
                }
                quarantined.remove(&board.slug);
                crate::board::never_run::warn_once(ctx, &r);
                let spawned = r.spawned.len();
                summary.spawned += spawned;
                summary.pending |= r.had_spawnable();
                let v = board::report_json(&r, false);
                crate::web::metrics::record_report(&v);
                task_log.tick(&board.slug, &v);
                if spawned > 0 {
                    tracing::info!(
                        "kanban dispatcher [{}]: spawned={spawned} reclaimed={} crashed={} timed_out={} promoted={} auto_blocked={}",
                        board.slug,
                        v["reclaimed"],
                        v["crashed"].as_array().map_or(0, Vec::len),
                        v["timed_out"].as_array().map_or(0, Vec::len),
                        v["promoted"],
                        v["auto_blocked"].as_array().map_or(0, Vec::len)
                    );
                }
                let tick = BoardTick {
                    spawned: Some(spawned),
                    crashed: Some(v["crashed"].clone()),
                    reclaimed: Some(v["reclaimed"].clone()),
                    ..BoardTick::default()
                };
                summary.boards.insert(board.slug.clone(), tick);
            }
            // The board away (a server restart, a cut connection) is waited out, not quarantined: the next tick
            // connects again, and nothing is judged meanwhile (the workers keep running and retry their writes).
            Err(e) if e.transient => {
                tracing::warn!("kanban dispatcher [{}]: {}; retrying at the next tick", board.slug, e.message);
                kept.0 = None;
                summary.boards.insert(board.slug.clone(), BoardTick::failed(e.message, false));
            }
            Err(e) => {
                tracing::error!(
                    "kanban dispatcher [{}]: {}; board quarantined for {}s",
                    board.slug,
                    e.message,
                    QUARANTINE.as_secs()
                );
                quarantined.insert(board.slug.clone(), Instant::now());
                summary.boards.insert(board.slug.clone(), BoardTick::failed(e.message, true));
            }
        }
    }
    summary
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
