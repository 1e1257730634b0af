//! The gateway's ticks on a thread of their own: every board read and write of a tick (and of its housekeeping)
//! runs there, on that thread's own runtime, so a board that is slow or away delays the next tick but never the
//! gateway's runtime, which serves the dashboard, `/healthz`, `/metrics`, signals and the stops under way.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use domain::ids::BoardSlug;
use domain::ports::Clock;
use tokio::sync::oneshot;

use crate::board::{self, DispatchArgs};
use crate::edge::context::{Ctx, SystemClock};
use crate::edge::error::Failure;
use crate::edge::process;
use crate::gateway::engine_backoff::EngineBackoff;
use crate::gateway::status::BoardTick;
use crate::gateway::task_log::TaskLog;

/// How long a failing board sits out before it is tried again.
const QUARANTINE: Duration = Duration::from_secs(300);

/// One tick's summary across boards.
pub(super) struct TickSummary {
    pub(super) boards: BTreeMap<String, BoardTick>,
    pub(super) spawned: usize,
    /// Some board had work a worker could have started.
    pub(super) pending: bool,
    /// The soonest a task waiting for its time is due, or a recurring schedule's next slot, on any board.
    pub(super) next_due: Option<domain::time::Timestamp>,
}

/// What a tick hands back to the gateway's loop.
pub(super) struct Ticked {
    pub(super) summary: TickSummary,
    /// Workers housekeeping took tasks from: the loop stops them beside itself (each waits a grace period).
    pub(super) stops: Vec<process::Worker>,
    /// When to tick next: the deadline the loop asked for, or sooner when the engine's back-off ends first.
    pub(super) next: Instant,
    pub(super) took: Duration,
}

/// The tick thread's handle: one tick at a time, asked for by [`Ticker::tick`].
pub(super) struct Ticker {
    jobs: std::sync::mpsc::Sender<Job>,
}

/// One tick asked for: when the loop would tick again after it, the settings read again since the last one (from
/// this tick on), and where to answer.
type Job = (Instant, Option<Box<Ctx>>, oneshot::Sender<Ticked>);

impl Ticker {
    /// Starts the thread with the state ticks carry from one to the next (the kept board connection, quarantined
    /// boards, this gateway's workers, the engine's back-off). It ends when the handle is dropped.
    ///
    /// # Errors
    /// A failure when the thread or its runtime cannot start.
    pub(super) fn start(ctx: &Ctx) -> Result<Self, Failure> {
        let (jobs, rx) = std::sync::mpsc::channel::<Job>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::other(format!("cannot start the tick thread's runtime: {e}")))?;
        let mut ctx = ctx.clone();
        std::thread::Builder::new()
            .name("berth-tick".into())
            .spawn(move || {
                let mut state = TickState::default();
                for (deadline, settings, reply) in rx {
                    if let Some(new) = settings {
                        ctx = *new;
                    }
                    let ticked = rt.block_on(state.tick(&ctx, deadline));
                    let _ = reply.send(ticked);
                }
            })
            .map_err(|e| Failure::other(format!("cannot start the tick thread: {e}")))?;
        Ok(Self { jobs })
    }

    /// Asks for a tick; `next` is when the loop would tick again after it, `settings` the context read again since
    /// the last tick, if any. The answer comes when the tick is done.
    pub(super) fn tick(&self, next: Instant, settings: Option<Ctx>) -> oneshot::Receiver<Ticked> {
        let (tx, rx) = oneshot::channel();
        // The thread lives as long as the handle; a send can fail only if it panicked, and then the receiver says so.
        let _ = self.jobs.send((next, settings.map(Box::new), tx));
        rx
    }
}

/// What ticks carry from one to the next.
#[derive(Default)]
struct TickState {
    kept: KeptBoard,
    quarantined: BTreeMap<String, Instant>,
    backoff: EngineBackoff,
    task_log: TaskLog,
}

impl TickState {
    async fn tick(&mut self, ctx: &Ctx, next: Instant) -> Ticked {
        self.backoff.observe(&self.task_log.ended(), SystemClock.now());
        self.task_log.failures_blocked(ctx).await;
        let started = Instant::now();
        let until = self.backoff.until(SystemClock.now());
        let mut stops = Vec::new();
        let summary = tick_all(ctx, self, until, &mut stops).await;
        let took = started.elapsed();
        crate::web::metrics::observe_tick(took);
        let now = SystemClock.now();
        let mut next = self.backoff.sooner(next, now);
        if let Some(due) = summary.next_due {
            // A millisecond past it: a task is due once its time is no longer ahead.
            let wait = Duration::from_millis(u64::try_from(due.as_millis() - now.as_millis() + 1).unwrap_or(0));
            next = next.min(Instant::now() + wait);
        }
        Ticked { summary, stops, next, took }
    }
}

/// The gateway's connection to a PostgreSQL board, kept from tick to tick (connecting and checking the schema cost
/// more than an idle tick). A SQLite board is opened afresh each tick, as before: that costs little, and a board file
/// replaced or moved aside between ticks is then seen, not written through an old handle.
#[derive(Default)]
struct KeptBoard(Option<crate::edge::open::Board>);

impl KeptBoard {
    /// The boards to dispatch, listed on the kept connection when there is one; a kept connection that fails (the
    /// server restarted, an idle connection was dropped) is replaced by a new one at once, so it costs no tick.
    fn boards(&mut self, ctx: &Ctx) -> Result<Vec<domain::board::Board>, Failure> {
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
    state: &mut TickState,
    engine_backoff_until: Option<domain::time::Timestamp>,
    stops: &mut Vec<process::Worker>,
) -> TickSummary {
    let TickState { kept, quarantined, task_log, .. } = state;
    let mut summary = TickSummary { boards: BTreeMap::new(), spawned: 0, pending: false, next_due: None };
    // Ready tasks waiting on a cap, in plan order, board after board: `kanban.prewarm` warms the first of them.
    let mut waiting = Vec::new();
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
        let args =
            DispatchArgs { detach_stops: true, engine_backoff_until, held, recurring: true, ..DispatchArgs::default() };
        let dispatched = match kept.0.as_mut() {
            Some(store) => board::dispatch_on(ctx, store, &slug, &args).await,
            None => board::dispatch(ctx, &slug, &args).await,
        };
        match dispatched {
            Ok(mut r) => {
                // Stops wait up to a grace period each; they run beside the loop, never inside a tick.
                stops.append(&mut r.stops);
                quarantined.remove(&board.slug);
                crate::board::never_run::warn_once(ctx, &r);
                let spawned = r.spawned.len();
                summary.spawned += spawned;
                summary.pending |= r.had_spawnable();
                // The soonest of a task waiting for its time and a recurring schedule's next slot, on any board.
                summary.next_due = [summary.next_due, r.plan.next_due, r.next_slot].into_iter().flatten().min();
                waiting.extend(super::prewarm::waiting(&r.plan.decisions));
                let t = r.tally();
                crate::web::metrics::record_tally(&t);
                task_log.tick(&board.slug, &t);
                if spawned > 0 {
                    tracing::info!(
                        "kanban dispatcher [{}]: spawned={spawned} reclaimed={} crashed={} timed_out={} promoted={} auto_blocked={}",
                        board.slug,
                        t.reclaimed,
                        t.crashed.len(),
                        t.timed_out.len(),
                        t.promoted,
                        t.auto_blocked.len()
                    );
                }
                let tick = BoardTick {
                    spawned: Some(spawned),
                    crashed: Some(t.crashed.iter().map(|id| (*id).to_owned()).collect()),
                    reclaimed: Some(t.reclaimed),
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
    super::prewarm::start(ctx, waiting);
    summary
}
