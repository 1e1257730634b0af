//! The event stream (`/events`, Server-Sent Events): one `change` event whenever the board watch saw the board
//! change (a CLI command, a worker, another host, the gateway's own tick), so a page fetches what it shows again.
//! Bursts coalesce: a stream that is behind gets one event for all the changes it missed, and a stream gets at most
//! one event every [`PACE`] (a busy board's pages fetch four times a second, not at every change, and their reads
//! leave the CPU to the ticks that make the changes).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;

use super::Web;

/// The shortest time between two events of one stream.
const PACE: Duration = Duration::from_millis(250);

/// `GET /events`.
pub(crate) async fn events(State(web): State<Arc<Web>>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut rx = web.live.clone();
    rx.mark_unchanged();
    let stream = futures_util::stream::unfold((rx, None), |(mut rx, last)| async move {
        // The dashboard's sender goes with its command: the stream ends then.
        rx.changed().await.ok()?;
        if let Some(last) = last {
            tokio::time::sleep_until(last + PACE).await;
        }
        let version = *rx.borrow_and_update();
        let event = Event::default().event("change").data(version.to_string());
        Some((Ok(event), (rx, Some(tokio::time::Instant::now()))))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
