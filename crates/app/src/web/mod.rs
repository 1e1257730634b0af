//! The dashboard: the board in a browser, its JSON API, `/metrics` and `/healthz`, served by `berth gateway run`
//! (when `kanban.dashboard_port` is set) or by `berth dashboard` alone, on the tokio runtime the command already runs.
//!
//! Every route needs the home's token (`auth.rs`); pages are compiled maud templates (`pages.rs`) over the typed
//! views the API returns as JSON (`views.rs`); writes go through the same store calls as the CLI (`actions.rs`);
//! the event stream is fed by the gateway's board watch (`live.rs`).

mod actions;
mod auth;
mod bounded;
mod console;
mod live;
pub mod metrics;
mod pages;
mod routes;
mod sandboxes;
mod serve;
pub mod views;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::edge::context::Ctx;
use crate::edge::error::Failure;

/// What the handlers share: a copy of the invocation context, the home's token and the board's change counter.
pub(crate) struct Web {
    pub(crate) ctx: Ctx,
    pub(crate) token: auth::Token,
    pub(crate) live: watch::Receiver<u64>,
    /// Board reads bounded in time, and the answers kept for when the board does not answer (`bounded.rs`).
    pub(crate) reads: Arc<bounded::Reads>,
    /// The board page's explanations, reused while the board is unchanged (`console.rs`).
    pub(crate) explained: console::Explained,
    /// The dashboard's own writes so far: a read after one never joins or reuses what was read before it.
    pub(crate) writes: std::sync::atomic::AtomicU64,
    /// Event streams open now (`live.rs`), at most half the connections.
    pub(crate) streams: Arc<std::sync::atomic::AtomicUsize>,
}

impl Web {
    /// The board's change count as the dashboard knows it (`bounded::Version`).
    pub(crate) fn version(&self) -> bounded::Version {
        (*self.live.borrow(), self.writes.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// A write of the dashboard's went to the board (or may have).
    pub(crate) fn wrote(&self) {
        self.writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A running dashboard. The board watch that feeds it calls [`Dashboard::changed`] on every change to the board.
pub struct Dashboard {
    live: watch::Sender<u64>,
    /// The URL with the token, as printed once at start.
    pub url: String,
}

impl Dashboard {
    /// The board changed: every open event stream tells its page to fetch again.
    pub fn changed(&self) {
        self.live.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Feeds the dashboard from a board watch of its own (`berth dashboard`, or a gateway that does not dispatch and
    /// so runs no watch loop), polled every 50 ms on a thread of its own.
    pub fn watch_alone(&self, ctx: &Ctx) {
        let live = self.live.clone();
        let mut watch = crate::edge::watch::BoardWatch::new(ctx);
        std::thread::spawn(move || {
            // What changed before this watch began was seen by no watch: pages fetch once now.
            live.send_modify(|v| *v = v.wrapping_add(1));
            while !live.is_closed() {
                if watch.changed() {
                    live.send_modify(|v| *v = v.wrapping_add(1));
                }
                std::thread::sleep(Duration::from_millis(50)); // the poll's period, not synchronisation
            }
        });
    }
}

/// A copy of the context for the server's tasks, which outlive the borrow the command holds.
fn copy_ctx(ctx: &Ctx) -> Ctx {
    Ctx {
        home: ctx.home.clone(),
        profile: ctx.profile.clone(),
        env: ctx.env.clone(),
        settings: ctx.settings.clone(),
        resolved: ctx.resolved.clone(),
        json: ctx.json,
        overrides: ctx.overrides.clone(),
    }
}

/// The address to listen on: `bind` (else `kanban.dashboard_bind`) and `port`. An address that is not loopback is
/// refused unless `kanban.dashboard_allow_remote` is true: the token is the only lock, and the page is not meant to
/// be exposed by accident.
///
/// # Errors
/// A usage failure for an address that does not parse or is not allowed.
pub fn listen_addr(ctx: &Ctx, bind: Option<&str>, port: u16) -> Result<SocketAddr, Failure> {
    let raw = bind.unwrap_or(&ctx.settings.kanban.dashboard_bind).trim();
    let ip: IpAddr = match raw {
        "localhost" => IpAddr::from([127, 0, 0, 1]),
        other => other.trim_matches(['[', ']']).parse().map_err(|_| {
            Failure::usage(format!("dashboard address {other:?} is not an IP address (kanban.dashboard_bind)"))
        })?,
    };
    if !ip.is_loopback() && !ctx.settings.kanban.dashboard_allow_remote {
        return Err(Failure::usage(format!(
            "refusing to serve the dashboard on {ip}, which is not loopback: set kanban.dashboard_allow_remote=true to allow it"
        )));
    }
    Ok(SocketAddr::new(ip, port))
}

/// Starts serving at `addr`: the home's kept token (`<home>/dashboard.token`, 0600, made when missing), the listener bound before
/// this returns (so a taken port is this command's error), the server in a task of the current runtime.
///
/// # Errors
/// A failure when the token cannot be written or the address cannot be bound.
pub async fn start(ctx: &Ctx, addr: SocketAddr) -> Result<Dashboard, Failure> {
    // A descriptor per connection besides the board's, the workers' and the logs': as many as the hard limit allows.
    crate::edge::process::raise_open_files_limit();
    let token = auth::kept_token(&ctx.home)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::other(format!("cannot serve the dashboard on {addr}: {e}")))?;
    let local = listener.local_addr().map_err(|e| Failure::other(format!("cannot serve the dashboard: {e}")))?;
    let (tx, rx) = watch::channel(0_u64);
    let state = Arc::new(Web {
        ctx: copy_ctx(ctx),
        token: auth::Token::new(&ctx.home, token.clone()),
        live: rx,
        reads: Arc::default(),
        explained: console::Explained::default(),
        writes: std::sync::atomic::AtomicU64::new(0),
        streams: Arc::default(),
    });
    let router = routes::router(state);
    tokio::spawn(serve::connections(listener, router));
    let url = format!("http://{local}/?token={token}");
    Ok(Dashboard { live: tx, url })
}

/// What `gateway token` printed: the token, its file, and whether it was just replaced.
#[derive(serde::Serialize)]
struct TokenView {
    token: String,
    file: String,
    rotated: bool,
}

/// `berth gateway token [--rotate]`: the home's dashboard token (made when missing), or a new one in its place.
///
/// # Errors
/// A failure when the token cannot be written.
pub fn token(ctx: &Ctx, rotate: bool) -> Result<u8, Failure> {
    let token = if rotate { auth::new_token(&ctx.home)? } else { auth::kept_token(&ctx.home)? };
    if ctx.json {
        let file = auth::token_path(&ctx.home).display().to_string();
        crate::edge::output::json(&TokenView { token, file, rotated: rotate });
    } else {
        crate::edge::output::line(&token);
    }
    Ok(crate::edge::error::Exit::OK)
}

/// The gateway's dashboard, when `kanban.dashboard_port` asks for one; its URL (with the token) is logged once.
///
/// # Errors
/// A refused address, a port already taken or an unwritable token file: the gateway does not start without the
/// dashboard it was asked to serve.
pub async fn for_gateway(ctx: &Ctx) -> Result<Option<Dashboard>, Failure> {
    let port = ctx.settings.kanban.dashboard_port;
    if port == 0 {
        tracing::info!("dashboard: off (kanban.dashboard_port=PORT serves it, or run `berth dashboard`)");
        return Ok(None);
    }
    let dash = start(ctx, listen_addr(ctx, None, port)?).await?;
    tracing::info!("dashboard: {}", dash.url);
    Ok(Some(dash))
}

/// `berth dashboard`: the dashboard alone, for a host without a gateway, until SIGTERM or SIGINT. The URL with the
/// token is printed once on stdout.
///
/// # Errors
/// As [`listen_addr`] and [`start`].
pub async fn command(ctx: &Ctx, bind: Option<&str>, port: Option<u16>) -> Result<u8, Failure> {
    let addr = listen_addr(ctx, bind, port.unwrap_or(ctx.settings.kanban.dashboard_port))?;
    let dash = start(ctx, addr).await?;
    dash.watch_alone(ctx);
    crate::edge::output::line(&format!("dashboard: {}", dash.url));
    // Workers started by "dispatch now" are this process's children: reap them as the gateway does.
    let mut reap = tokio::time::interval(Duration::from_secs(1));
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        return Err(Failure::other("cannot watch for SIGTERM and SIGINT"));
    };
    loop {
        tokio::select! {
            _ = reap.tick() => {
                crate::edge::process::reap_children();
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    Ok(0)
}
