//! `PgBoardListener`: a connection of its own that `LISTEN`s on the board's channel (which migration 3's triggers
//! notify), on a thread that counts the notifications, so a gateway wakes the moment another process or host
//! changes the board instead of at its next interval.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use domain::board::StoreError;
use tokio_postgres::Config;

use crate::client::GenericClient as _;
use crate::open::config;
use crate::schema::BOARD_CHANNEL;

/// How long the thread blocks on the connection before it looks whether the listener was dropped.
const STOP_CHECK: Duration = Duration::from_secs(1);
/// How long the connection may stay quiet before the thread asks the server whether it still answers (an empty
/// query, bounded like every call): a server gone silent, or a network that lost it, ends the session within this and
/// the bound instead of leaving the gateway deaf for good.
const PROBE_AFTER: Duration = Duration::from_secs(30);
/// The wait before the first reconnection; it doubles with each failure, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Counts the notifications of a PostgreSQL board on a thread of its own, reconnecting (with backoff) when its
/// connection drops; the thread ends within a second of the listener being dropped.
pub struct PgBoardListener {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    version: AtomicU64,
    listening: AtomicBool,
    stop: AtomicBool,
}

impl PgBoardListener {
    /// Starts listening to the board at `url`. An unreachable server is not an error here: the thread keeps trying
    /// (logging the first failure of each outage, and the recovery), and [`version`](Self::version) stays put until
    /// it listens.
    ///
    /// # Errors
    /// [`StoreError::Server`] when `url` is not a PostgreSQL URL or the thread cannot be started.
    pub fn start(url: &str) -> Result<Self, StoreError> {
        Self::start_within(url, crate::DEFAULT_TIMEOUT)
    }

    /// [`start`](Self::start) with every round trip to the server bounded by `bound`
    /// (`kanban.database_timeout_seconds`).
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_within(url: &str, bound: Duration) -> Result<Self, StoreError> {
        let (config, shown) = config(url, "berth-listen")?;
        let shared = Arc::new(Shared::default());
        let theirs = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("berth-board-listen".to_owned())
            .spawn(move || run(&config, &shown, bound, &theirs))
            .map_err(|e| StoreError::Server(format!("cannot start the board listener: {e}")))?;
        Ok(Self { shared })
    }

    /// A number that grows whenever the board may have changed: by one for each notification, and for each
    /// connection made (changes made while nothing listened were announced to no one, so a new connection counts as
    /// one). Compare two readings; the value itself means nothing.
    pub fn version(&self) -> u64 {
        self.shared.version.load(Ordering::SeqCst)
    }

    /// Whether it is listening right now (connected, `LISTEN` done).
    pub fn listening(&self) -> bool {
        self.shared.listening.load(Ordering::SeqCst)
    }
}

impl Drop for PgBoardListener {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

/// The thread: one session after another until the listener is dropped.
fn run(config: &Config, shown: &str, bound: Duration, shared: &Shared) {
    let mut backoff = FIRST_BACKOFF;
    let mut outage = false;
    let mut ever = false;
    while !shared.stop.load(Ordering::SeqCst) {
        let on_listening = || {
            if outage {
                tracing::info!("listening for board changes on {shown} again");
            } else if !ever {
                tracing::info!("listening for board changes on {shown} (LISTEN {BOARD_CHANNEL})");
            }
        };
        match session(config, shown, bound, shared, on_listening) {
            Ok(()) => return,
            Err((listened, why)) => {
                shared.listening.store(false, Ordering::SeqCst);
                ever |= listened;
                if listened {
                    outage = false;
                    backoff = FIRST_BACKOFF;
                }
                if !outage {
                    tracing::warn!(
                        "cannot listen for board changes on {shown} ({why}); retrying, and until then the gateway \
                         sees changes at its interval"
                    );
                    outage = true;
                }
            }
        }
        let until = Instant::now() + backoff;
        while Instant::now() < until && !shared.stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100).min(until.saturating_duration_since(Instant::now())));
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One connection: `LISTEN`, then count notifications until the listener is dropped (`Ok`) or the connection fails
/// or stops answering (`Err` with whether it got as far as listening, and why).
fn session(
    config: &Config,
    shown: &str,
    bound: Duration,
    shared: &Shared,
    on_listening: impl FnOnce(),
) -> Result<(), (bool, String)> {
    let mut client = match crate::open::connect(config, shown, bound) {
        Ok((c, _)) => c,
        Err(e) => return Err((false, e.to_string())),
    };
    client.batch_execute(&format!("LISTEN {BOARD_CHANNEL}")).map_err(|e| (false, e.0.to_string()))?;
    shared.listening.store(true, Ordering::SeqCst);
    shared.version.fetch_add(1, Ordering::SeqCst);
    on_listening();
    let mut heard = Instant::now();
    while !shared.stop.load(Ordering::SeqCst) {
        match client.notification(STOP_CHECK) {
            Ok(Some(_)) => {
                shared.version.fetch_add(1, Ordering::SeqCst);
                heard = Instant::now();
            }
            Ok(None) if heard.elapsed() >= PROBE_AFTER => {
                client.simple_query("").map_err(|e| (true, e.0.to_string()))?;
                heard = Instant::now();
            }
            Ok(None) => {}
            Err(()) => return Err((true, "the server closed the connection".to_owned())),
        }
    }
    Ok(())
}
