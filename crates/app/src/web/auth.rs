//! The dashboard's lock: a random token kept in the home (`dashboard.token`, 0600) across starts and rotated only on
//! request (`berth gateway token --rotate`, which a running dashboard takes up at its next request), required on every
//! route but the two static assets, and the cross-site check on writes.
//!
//! No ambient credential: a browser is never given a cookie. Cookies are scoped to a host, not to a port, so a
//! cookie set by `127.0.0.1:8080` is sent to every server on `127.0.0.1` the browser visits, and any local user's
//! server on another port would receive it and replay it. The token is sent only by the dashboard's own script, as
//! `Authorization: Bearer …`, from the origin's `localStorage` (origins include the port: a page of another port
//! never reads it). A browser gets the token once in the URL (`/?token=…`): that page is served, and its script
//! keeps the token and takes it out of the address. A page opened later without it (a link, a new tab, a reload)
//! answers 401 with a small shell whose script fetches the page again with the token and shows it. The event
//! stream takes `?token=` (an `EventSource` cannot set headers). Scripts and Prometheus send the header. A write
//! must carry the `x-berth-csrf` header and, when the browser names one, come from the dashboard's own origin.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Web;
use crate::edge::error::Failure;

/// The header every write must carry.
pub(crate) const CSRF_HEADER: &str = "x-berth-csrf";

/// The token file in the home (0600): what a script on this host reads to reach the dashboard.
pub(crate) fn token_path(home: &Path) -> std::path::PathBuf {
    home.join("dashboard.token")
}

/// A fresh token of 128 random bits (from the kernel), written to `<home>/dashboard.token` readable by its owner
/// only; a previous file is replaced.
pub(crate) fn new_token(home: &Path) -> Result<String, Failure> {
    let token =
        crate::edge::random::hex128().map_err(|e| Failure::other(format!("cannot draw the dashboard token: {e}")))?;
    let path = token_path(home);
    let written = crate::edge::state_file::replace(&path, token.as_bytes(), 0o600);
    written.map_err(|e| Failure::other(format!("cannot write {}: {e}", path.display())))?;
    Ok(token)
}

/// The home's kept token: `<home>/dashboard.token` when it is a regular file of this user's, readable by no one
/// else, holding 32 hex digits; else a fresh one written there. So a restart keeps every open tab and script working.
pub(crate) fn kept_token(home: &Path) -> Result<String, Failure> {
    match read_kept(&token_path(home)) {
        Some((token, _)) => Ok(token),
        None => new_token(home),
    }
}

/// A token file's identity: inode and change time (seconds, nanoseconds).
type Stamp = (u64, i64, i64);

/// The token a dashboard holds: the token, its file's stamp when read, and when the file was last looked at.
type Held = (String, Option<Stamp>, std::time::Instant);

/// The token in `path` and the file's stamp, when the file may be trusted.
fn read_kept(path: &Path) -> Option<(String, Stamp)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    let mine = meta.uid() == rustix::process::geteuid().as_raw();
    if !meta.is_file() || !mine || meta.mode() & 0o077 != 0 || meta.len() > 64 {
        return None;
    }
    let token = std::fs::read_to_string(path).ok()?.trim().to_owned();
    let valid = token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit());
    valid.then(|| (token, (meta.ino(), meta.ctime(), meta.ctime_nsec())))
}

/// The token a running dashboard checks against: its start's, or the one `gateway token --rotate` wrote since (the
/// file is looked at, one `stat`, at most once a second).
pub(crate) struct Token {
    path: std::path::PathBuf,
    current: std::sync::RwLock<Held>,
}

impl Token {
    pub(crate) fn new(home: &Path, token: String) -> Self {
        let path = token_path(home);
        let stamp = read_kept(&path).map(|(_, s)| s);
        Self { path, current: std::sync::RwLock::new((token, stamp, std::time::Instant::now())) }
    }

    /// The token now.
    pub(crate) fn get(&self) -> String {
        use std::sync::PoisonError;
        {
            let cur = self.current.read().unwrap_or_else(PoisonError::into_inner);
            if cur.2.elapsed() < std::time::Duration::from_secs(1) {
                return cur.0.clone();
            }
        }
        let mut cur = self.current.write().unwrap_or_else(PoisonError::into_inner);
        cur.2 = std::time::Instant::now();
        if let Some((token, stamp)) = read_kept(&self.path)
            && Some(stamp) != cur.1
        {
            if token != cur.0 {
                tracing::info!(
                    "dashboard: the token in {} changed (rotated); the old one is refused",
                    self.path.display()
                );
            }
            *cur = (token, Some(stamp), std::time::Instant::now());
        }
        cur.0.clone()
    }
}

/// Compares without an early exit, so the time taken says nothing about how much of a guess was right.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0_u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    // The scheme's case does not matter (RFC 9110, 11.1).
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

fn query_token(req: &Request) -> Option<&str> {
    req.uri().query()?.split('&').find_map(|p| p.strip_prefix("token="))
}

fn unauthorized() -> Response {
    (StatusCode::UNAUTHORIZED, UNAUTHORIZED).into_response()
}

/// Whether a write comes from the dashboard's own page: the custom header, and the browser's own word on where the
/// request came from when it gives one (`Sec-Fetch-Site`, `Origin`).
fn same_origin_write(headers: &HeaderMap) -> bool {
    if !headers.contains_key(CSRF_HEADER) {
        return false;
    }
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if site.is_some_and(|s| s != "same-origin" && s != "none") {
        return false;
    }
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    match headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        None => true,
        Some(origin) => host.is_some_and(|h| origin == format!("http://{h}")),
    }
}

/// What a browser gets for a page it opened without the token: the page's frame and its script, which fetches the
/// page again with the token it keeps (or says how to get one), and no data.
fn shell() -> Response {
    let page = super::pages::shell(UNAUTHORIZED.trim_end());
    (StatusCode::UNAUTHORIZED, axum::response::Html(page.into_string())).into_response()
}

const UNAUTHORIZED: &str = "the dashboard needs its token: open the URL berth printed at start, or send \
    `Authorization: Bearer TOKEN` (`berth gateway token` prints it)\n";

/// Whether a request is a browser opening a page (not a script's fetch): the shell is its answer.
fn is_navigation(headers: &HeaderMap) -> bool {
    let value = |h: &str| headers.get(h).and_then(|v| v.to_str().ok()).unwrap_or("");
    value("sec-fetch-mode") == "navigate" || value(header::ACCEPT.as_str()).contains("text/html")
}

/// The middleware in front of every route: the token check, then headers on every answer, refusals and the shell
/// included: no referrer (a page's address may hold the token on its first load), and no framing by any other page
/// (a page on another port of the same host would otherwise show the dashboard, which finds its token in the
/// origin's storage, in a frame and have its buttons clicked: clickjacking).
pub(crate) async fn require(State(web): State<Arc<Web>>, req: Request, next: Next) -> Response {
    let mut response = checked(&web, req, next).await;
    let headers = response.headers_mut();
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("frame-ancestors 'none'"));
    response
}

async fn checked(web: &Web, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let path = req.uri().path();
    // The two static assets hold no data; the shell needs its script before it has a token to send.
    if path.starts_with("/assets/") {
        return next.run(req).await;
    }
    let token = web.token.get();
    let by_header = bearer(headers).is_some_and(|t| same(t, &token));
    let is_read = matches!(*req.method(), Method::GET | Method::HEAD);
    // A read may carry the token in its URL: the first load of a page (its script then keeps the token and takes it
    // out of the address), and the event stream (an EventSource sends no headers).
    let by_query = is_read && query_token(&req).is_some_and(|t| same(t, &token));
    if !by_header && !by_query {
        return if is_read && is_navigation(headers) { shell() } else { unauthorized() };
    }
    if !is_read && !same_origin_write(headers) {
        // Say what a script (curl) left out: a write without the header is refused however it came.
        let why = if headers.contains_key(CSRF_HEADER) {
            "cross-site write refused\n"
        } else {
            "cross-site write refused: a write needs the header `x-berth-csrf: 1` (and a JSON body)\n"
        };
        return (StatusCode::FORBIDDEN, why).into_response();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_comparison_needs_every_byte() {
        assert!(same("abcd", "abcd"));
        assert!(!same("abcd", "abce"));
        assert!(!same("abc", "abcd"));
    }

    #[test]
    fn writes_need_the_header_and_the_same_origin() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:8080".parse().unwrap());
        assert!(!same_origin_write(&h), "no header");
        h.insert(CSRF_HEADER, "1".parse().unwrap());
        assert!(same_origin_write(&h));
        h.insert(header::ORIGIN, "http://127.0.0.1:8080".parse().unwrap());
        assert!(same_origin_write(&h));
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(!same_origin_write(&h), "another origin");
        h.remove(header::ORIGIN);
        h.insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(!same_origin_write(&h), "the browser says cross-site");
    }
}
