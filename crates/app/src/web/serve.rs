//! The dashboard's connections: HTTP/1.1 on each accepted connection, with a bound on how long a request's head may
//! take (which also closes a connection left idle between requests) and on how many connections are open at once,
//! so idle or slow clients (before any token is checked) cannot take the descriptors the gateway needs to dispatch.
//!
//! At the bound a new connection takes the place of the oldest one that is waiting for a request head (it never
//! sent one, or its last response is over): a flood of idle connections, from one peer or many, only ever pushes
//! out its own kind, while a client that sends its request at once (a health check, a page) is served. Only when
//! every connection is in a request (an event stream, a response being written) is the new one closed instead.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::service::Service;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// How long a client may take to send a request's head, counted from the connection's start or from the end of its
/// previous response: a slow (slowloris) or idle connection is closed after it. An event stream, once its request
/// is in, is not limited.
pub(super) const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// How many connections are served at once. A browser holds a few per tab (one for the event stream), Prometheus
/// one.
pub(super) const MAX_CONNECTIONS: usize = 256;

/// An open connection as the accept loop sees it.
struct Open {
    /// Whether it waits for a request head: from its start, and again once a response's body is done.
    waiting: Arc<AtomicBool>,
    /// Its task: aborting it closes the connection.
    task: tokio::task::AbortHandle,
}

/// The open connections by their order of arrival.
type Table = Arc<Mutex<BTreeMap<u64, Open>>>;

fn lock(table: &Table) -> std::sync::MutexGuard<'_, BTreeMap<u64, Open>> {
    table.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Makes room for one more connection: at the bound, closes the oldest one waiting for a request head. `false`
/// when every open connection is in a request.
fn make_room(open: &mut BTreeMap<u64, Open>) -> bool {
    if open.len() < MAX_CONNECTIONS {
        return true;
    }
    let Some(oldest) = open.iter().find(|(_, o)| o.waiting.load(Ordering::Acquire)).map(|(id, _)| *id) else {
        return false;
    };
    if let Some(o) = open.remove(&oldest) {
        o.task.abort();
    }
    true
}

/// Serves `router` on every connection `listener` accepts, until the process ends.
pub(super) async fn connections(listener: TcpListener, router: Router) {
    let table: Table = Arc::default();
    let mut warned = false;
    for id in 0_u64.. {
        let stream = loop {
            match listener.accept().await {
                Ok((stream, _)) => break stream,
                Err(e) => {
                    // Out of descriptors (EMFILE) or a connection reset before it was taken: try again shortly.
                    if !warned {
                        tracing::warn!("dashboard: cannot accept a connection: {e}");
                        warned = true;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await; // a back-off, not synchronisation
                }
            }
        };
        warned = false;
        let mut open = lock(&table);
        // Every connection in a request: the new one is closed at once (dropped).
        if !make_room(&mut open) {
            continue;
        }
        let waiting = Arc::new(AtomicBool::new(true));
        let service = Tracked { inner: TowerToHyperService::new(router.clone()), waiting: Arc::clone(&waiting) };
        let mine = Arc::clone(&table);
        // Registered under the lock, so the task's own removal at its end comes after this insert.
        let task = tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!("dashboard: a connection ended: {e}");
            }
            lock(&mine).remove(&id);
        });
        open.insert(id, Open { waiting, task: task.abort_handle() });
    }
}

/// The router as one connection's service, telling the accept loop when the connection waits for a request head.
#[derive(Clone)]
struct Tracked {
    inner: TowerToHyperService<Router>,
    waiting: Arc<AtomicBool>,
}

type Answer = Result<hyper::Response<TrackedBody>, std::convert::Infallible>;

impl Service<hyper::Request<Incoming>> for Tracked {
    type Response = hyper::Response<TrackedBody>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn call(&self, req: hyper::Request<Incoming>) -> Self::Future {
        // A whole request head is in.
        self.waiting.store(false, Ordering::Release);
        let answer = self.inner.call(req);
        let waiting = Arc::clone(&self.waiting);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|inner| TrackedBody { inner, waiting }))
        })
    }
}

/// A response body that, once done with (written or abandoned), marks its connection as waiting again.
struct TrackedBody {
    inner: Body,
    waiting: Arc<AtomicBool>,
}

impl Drop for TrackedBody {
    fn drop(&mut self) {
        self.waiting.store(true, Ordering::Release);
    }
}

impl HttpBody for TrackedBody {
    type Data = <Body as HttpBody>::Data;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
