//! The event stream (`/events`, Server-Sent Events): one `change` event whenever the board watch saw the board
//! change (a CLI command, a worker, another host, the gateway's own tick), so a page fetches what it shows again.
//! Bursts coalesce: a stream that is behind gets one event for all the changes it missed, and a stream gets at most
//! one event every [`PACE`] (a busy board's pages fetch four times a second, not at every change, and their reads
//! leave the CPU to the ticks that make the changes). At most half the dashboard's connections are streams.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};

use super::Web;

/// The shortest time between two events of one stream.
const PACE: Duration = Duration::from_millis(250);

/// How many event streams are open at once: half the connections, so streams that are never read (many tabs, or a
/// script) leave the pages, `/metrics` and `/healthz` room.
const STREAMS_MAX: usize = super::serve::MAX_CONNECTIONS / 2;

/// An open stream, counted until it ends.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `GET /events`; 503 while [`STREAMS_MAX`] are open.
pub(crate) async fn events(State(web): State<Arc<Web>>) -> Response {
    if web.streams.fetch_add(1, Ordering::SeqCst) >= STREAMS_MAX {
        web.streams.fetch_sub(1, Ordering::SeqCst);
        let why = format!("{STREAMS_MAX} live pages are open already: close some (each tab holds one)\n");
        return (StatusCode::SERVICE_UNAVAILABLE, why).into_response();
    }
    let counted = Counted(Arc::clone(&web.streams));
    let mut rx = web.live.clone();
    rx.mark_unchanged();
    let stream = futures_util::stream::unfold((rx, None, counted), |(mut rx, last, counted)| async move {
        // The dashboard's sender goes with its command: the stream ends then.
        rx.changed().await.ok()?;
        if let Some(last) = last {
            tokio::time::sleep_until(last + PACE).await;
        }
        let version = *rx.borrow_and_update();
        let event = Event::default().event("change").data(version.to_string());
        Some((Ok::<_, std::convert::Infallible>(event), (rx, Some(tokio::time::Instant::now()), counted)))
    });
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}
