//! Board reads that answer in time: each runs on a blocking thread (at most [`READERS`] at once) and is awaited for
//! a deadline; a read still waiting then (the board locked by another writer, its server away) is answered with the
//! last good answer to the same request, marked stale, or a one-line 503, while the read finishes in the background
//! and refreshes the answer kept. So a page, `/metrics` or `/healthz` never waits on the board.
//!
//! A request that finds the same request's read under way, begun since the board last changed (the dashboard's
//! change counter unmoved), waits for that read instead of starting its own: the pages open on one board fetch
//! again together at each change, and one read answers them all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use super::Web;
use crate::edge::context::Ctx;

/// Board reads under way at once; past them, a request is answered from what is kept.
const READERS: usize = 4;
/// The shortest wait for a read: a board that answers at all answers a page's read well within it.
const FLOOR: Duration = Duration::from_millis(150);
/// The longest wait, for a large board whose reads are known to take a while.
const CEILING: Duration = Duration::from_secs(3);
/// Answers kept, one per request (path and query).
const KEPT: usize = 64;

/// A whole answer, kept to be given again when the board does not answer in time.
#[derive(Clone, Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) content_type: &'static str,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn new(status: StatusCode, content_type: &'static str, body: String) -> Self {
        Self { status, content_type, body }
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        (self.status, [(header::CONTENT_TYPE, self.content_type)], self.body).into_response()
    }
}

struct Kept {
    answer: Answer,
    at: Instant,
    /// How long the read that gave it took.
    took: Duration,
}

/// A read under way, as every request that joins it awaits it.
type Pending = Shared<BoxFuture<'static, Answer>>;

/// A read under way: the board's change count when it began, its number (so only it removes itself), its answer and
/// when it is due (a request that joins it waits no longer than the request that began it).
struct InFlight {
    version: Version,
    id: u64,
    answer: Pending,
    due: Instant,
}

/// The board's change count as the dashboard knows it: the board watch's, and the dashboard's own writes.
pub(crate) type Version = (u64, u64);

/// The readers' permits, the reads under way and the answers kept.
pub(crate) struct Reads {
    permits: Arc<Semaphore>,
    kept: Mutex<HashMap<String, Kept>>,
    in_flight: Mutex<HashMap<String, InFlight>>,
    next_id: AtomicU64,
}

impl Default for Reads {
    fn default() -> Self {
        Self {
            permits: Arc::new(Semaphore::new(READERS)),
            kept: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        }
    }
}

impl Reads {
    /// How long to wait for `key`'s read: four times what its last read took (else the slowest kept read),
    /// within [`FLOOR`] and [`CEILING`].
    fn deadline(&self, key: &str) -> Duration {
        let Ok(kept) = self.kept.lock() else { return FLOOR };
        let typical = kept.get(key).map(|k| k.took).or_else(|| kept.values().map(|k| k.took).max());
        typical.map_or(FLOOR, |t| (t * 4).clamp(FLOOR, CEILING))
    }

    /// Keeps the answer of a read awaited for `deadline` that took `took`. A read that outlived its deadline counts
    /// as taking that deadline: it says no more than that, and a read that waited out an outage (the board locked,
    /// its server away) would otherwise have the seconds it waited set the next request's wait, so a second outage
    /// soon after would hold that request for up to [`CEILING`]. A board whose reads are slow still raises the
    /// deadline, fourfold per read that outlives it.
    fn finished(&self, key: &str, answer: &Answer, took: Duration, deadline: Duration) {
        self.keep(key, answer, took.min(deadline));
    }

    fn keep(&self, key: &str, answer: &Answer, took: Duration) {
        if answer.status != StatusCode::OK {
            return;
        }
        let Ok(mut kept) = self.kept.lock() else { return };
        if kept.len() >= KEPT && !kept.contains_key(key) {
            let oldest = kept.iter().min_by_key(|(_, k)| k.at).map(|(k, _)| k.clone());
            oldest.map(|k| kept.remove(&k));
        }
        kept.insert(key.to_owned(), Kept { answer: answer.clone(), at: Instant::now(), took });
    }

    /// The answer kept for `key`, marked stale, or a 503 saying why there is none.
    fn stale(&self, key: &str, why: &str) -> Response {
        let kept = self.kept.lock().ok().and_then(|k| k.get(key).map(|k| (k.answer.clone(), k.at.elapsed())));
        match kept {
            Some((answer, age)) => {
                let mut response = with_banner(answer, why, age).into_response();
                if let Ok(v) = HeaderValue::from_str(&format!("{}", age.as_secs())) {
                    response.headers_mut().insert("x-berth-stale-seconds", v);
                }
                response
            }
            None => (StatusCode::SERVICE_UNAVAILABLE, format!("board unavailable: {why}\n")).into_response(),
        }
    }
}

/// A kept page with a line on top saying it is not current (JSON and text are given as they were, with the
/// `x-berth-stale-seconds` header).
fn with_banner(mut answer: Answer, why: &str, age: Duration) -> Answer {
    if answer.content_type.starts_with("text/html")
        && let Some(at) = answer.body.find("<main")
    {
        let line = maud::html! {
            p.stale role="status" { "Board unavailable (" (why) "); shown as it was " (age.as_secs()) " s ago." }
        };
        answer.body.insert_str(at, &line.into_string());
    }
    answer
}

/// Runs `read` (the board read and its rendering) off the runtime and answers within the deadline: its answer, or
/// the kept one (see the module's doc). `key` names the request (path and query).
pub(crate) async fn answer(
    web: &Arc<Web>,
    key: String,
    read: impl FnOnce(&Ctx) -> Answer + Send + 'static,
) -> Response {
    let deadline = web.reads.deadline(&key);
    let w = Arc::clone(web);
    let Some((pending, due)) = join_or_start(&web.reads, web.version(), &key, deadline, move || read(&w.ctx)) else {
        return web.reads.stale(&key, "every board read is still waiting for the board");
    };
    match tokio::time::timeout_at(due.into(), pending).await {
        Ok(answer) => answer.into_response(),
        Err(_) => web.reads.stale(&key, &format!("no answer within {} ms", deadline.as_millis())),
    }
}

/// Removes a read from the reads under way when it ends.
struct Done<'a> {
    reads: &'a Reads,
    key: &'a str,
    id: u64,
}

impl Drop for Done<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.reads.in_flight.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if in_flight.get(self.key).is_some_and(|f| f.id == self.id) {
            in_flight.remove(self.key);
        }
    }
}

/// The read under way for `key` that began at the board's change count `version` (none since), or a new one on a
/// blocking thread awaited for `deadline`: its answer and when it is due; `None` when every reader is busy.
fn join_or_start(
    reads: &Arc<Reads>,
    version: Version,
    key: &str,
    deadline: Duration,
    read: impl FnOnce() -> Answer + Send + 'static,
) -> Option<(Pending, Instant)> {
    let mut in_flight = reads.in_flight.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(f) = in_flight.get(key).filter(|f| f.version == version) {
        return Some((f.answer.clone(), f.due));
    }
    let permit = Arc::clone(&reads.permits).try_acquire_owned().ok()?;
    let id = reads.next_id.fetch_add(1, Ordering::Relaxed);
    let (r, k) = (Arc::clone(reads), key.to_owned());
    let job = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        // Gone from the reads under way when it ends, however it ends (a read that panicked is not joined again).
        let _done = Done { reads: &r, key: &k, id };
        let started = Instant::now();
        let answer = read();
        r.finished(&k, &answer, started.elapsed(), deadline);
        answer
    });
    let answer = job
        .map(|joined| {
            joined.unwrap_or_else(|e| {
                Answer::new(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", format!("the board read failed: {e}\n"))
            })
        })
        .boxed()
        .shared();
    let due = Instant::now() + deadline;
    in_flight.insert(key.to_owned(), InFlight { version, id, answer: answer.clone(), due });
    Some((answer, due))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_follows_the_reads_within_its_bounds() {
        let reads = Reads::default();
        assert_eq!(reads.deadline("/"), FLOOR, "nothing read yet");
        let ok = Answer::new(StatusCode::OK, "text/plain", "x".into());
        reads.keep("/", &ok, Duration::from_millis(400));
        assert_eq!(reads.deadline("/"), Duration::from_millis(1600));
        assert_eq!(reads.deadline("/other"), Duration::from_millis(1600), "the slowest kept read");
        reads.keep("/big", &ok, Duration::from_secs(10));
        assert_eq!(reads.deadline("/big"), CEILING);
        let failed = Answer::new(StatusCode::BAD_REQUEST, "text/plain", "no".into());
        reads.keep("/bad", &failed, Duration::from_secs(1));
        assert!(reads.kept.lock().unwrap().get("/bad").is_none(), "only good answers are kept");
    }

    #[test]
    fn a_read_that_waited_out_an_outage_does_not_stretch_the_next_wait() {
        let reads = Reads::default();
        let ok = Answer::new(StatusCode::OK, "text/plain", "x".into());
        reads.finished("/", &ok, Duration::from_millis(10), FLOOR);
        assert_eq!(reads.deadline("/"), FLOOR);
        // Awaited for 150 ms, it came back once the board did, 6 s later: the next wait is 600 ms, not 3 s.
        reads.finished("/", &ok, Duration::from_secs(6), FLOOR);
        assert_eq!(reads.deadline("/"), Duration::from_millis(600));
        // A board whose reads take 2 s: each read past its deadline raises it, up to the ceiling.
        reads.finished("/", &ok, Duration::from_secs(2), reads.deadline("/"));
        assert_eq!(reads.deadline("/"), Duration::from_millis(2400));
        reads.finished("/", &ok, Duration::from_secs(2), reads.deadline("/"));
        assert_eq!(reads.deadline("/"), CEILING);
    }

    #[tokio::test]
    async fn a_request_joins_the_same_read_begun_since_the_last_change() {
        let reads = Arc::new(Reads::default());
        let (calls, (go, wait)) = (Arc::new(AtomicU64::new(0)), std::sync::mpsc::channel::<()>());
        let wait = Arc::new(Mutex::new(wait));
        let read = |version: u64| {
            let (calls, wait) = (Arc::clone(&calls), Arc::clone(&wait));
            move || {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                let _ = wait.lock().unwrap().recv();
                Answer::new(StatusCode::OK, "text/plain", format!("read {n} at {version}"))
            }
        };
        let (first, due) = join_or_start(&reads, (7, 0), "/", CEILING, read(7)).unwrap();
        let (joined, joined_due) = join_or_start(&reads, (7, 0), "/", FLOOR, read(7)).unwrap();
        assert_eq!(due, joined_due, "a joined read is due when it was due for the request that began it");
        let (other, _) = join_or_start(&reads, (7, 0), "/other", CEILING, read(7)).unwrap();
        // The board changed since the first began: a read of its own.
        let (later, _) = join_or_start(&reads, (8, 0), "/", CEILING, read(8)).unwrap();
        for _ in 0..3 {
            go.send(()).unwrap();
        }
        let (a, b, c, d) = (first.await.body, joined.await.body, other.await.body, later.await.body);
        assert_eq!(a, b, "one read for both");
        assert_eq!(calls.load(Ordering::SeqCst), 3, "{a} {c} {d}");
        assert!(d.ends_with("at 8") && c != a && d != a, "{a} {c} {d}");
        assert!(reads.in_flight.lock().unwrap().is_empty(), "a read that ended is not joined");
    }

    #[test]
    fn a_kept_page_says_it_is_stale_and_nothing_kept_is_a_503() {
        let reads = Reads::default();
        let page = Answer::new(StatusCode::OK, "text/html; charset=utf-8", "<body><main>board</main>".into());
        reads.keep("/", &page, Duration::from_millis(1));
        let r = reads.stale("/", "no answer within 150 ms");
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers().contains_key("x-berth-stale-seconds"));
        assert_eq!(reads.stale("/none", "why").status(), StatusCode::SERVICE_UNAVAILABLE);
        let shown = with_banner(page, "why", Duration::from_secs(3)).body;
        assert!(shown.contains("Board unavailable (why)") && shown.find("stale") < shown.find("<main"), "{shown}");
    }
}
