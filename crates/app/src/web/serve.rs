//! The dashboard's connections: HTTP/1.1 on each accepted connection, with a bound on how long a request's head may
//! take (which also closes a connection left idle between requests) and on how many connections are open at once,
//! so idle or slow clients (before any token is checked) cannot take the descriptors the gateway needs to dispatch.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How long a client may take to send a request's head, counted from the connection's start or from the end of its
/// previous response: a slow (slowloris) or idle connection is closed after it. An event stream, once its request
/// is in, is not limited.
pub(super) const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// How many connections are served at once; one more is closed as soon as it is accepted. A browser holds a few per
/// tab (one for the event stream), Prometheus one.
pub(super) const MAX_CONNECTIONS: usize = 256;

/// Serves `router` on every connection `listener` accepts, until the process ends.
pub(super) async fn connections(listener: TcpListener, router: Router) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut warned = false;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors (EMFILE) or a connection reset before it was taken: try again shortly.
                if !warned {
                    tracing::warn!("dashboard: cannot accept a connection: {e}");
                    warned = true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await; // a back-off, not synchronisation
                continue;
            }
        };
        warned = false;
        // At the cap the connection is closed at once (dropped): the open ones end within the head timeout.
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else { continue };
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!("dashboard: a connection ended: {e}");
            }
        });
    }
}
