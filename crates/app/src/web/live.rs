//! The event stream (`/events`, Server-Sent Events): one `change` event whenever the board watch saw the board
//! change (a CLI command, a worker, another host, the gateway's own tick), so a page fetches what it shows again.
//! Bursts coalesce: a stream that is behind gets one event for all the changes it missed.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;

use super::Web;

/// `GET /events`.
pub(crate) async fn events(State(web): State<Arc<Web>>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut rx = web.live.clone();
    rx.mark_unchanged();
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        // The dashboard's sender goes with its command: the stream ends then.
        rx.changed().await.ok()?;
        let version = *rx.borrow_and_update();
        Some((Ok(Event::default().event("change").data(version.to_string())), rx))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
