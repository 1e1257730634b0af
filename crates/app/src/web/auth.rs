//! The dashboard's lock: a random token per start, required on every route, and the cross-site check on writes.
//!
//! A browser gets the token once in the URL (`/?token=…`), which answers with an HttpOnly, SameSite=Strict cookie
//! and a redirect to the same page without it; afterwards only the event stream takes `?token=` (an `EventSource`
//! cannot set headers). Scripts and Prometheus send `Authorization: Bearer …`. A write must carry the
//! `x-berth-csrf` header (a cross-site page cannot send a custom header without a preflight, which is never
//! granted) and, when the browser names one, come from the dashboard's own origin.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use super::Web;
use crate::edge::error::Failure;

/// The header every write must carry.
pub(crate) const CSRF_HEADER: &str = "x-berth-csrf";

/// The token file in the home (0600): what a script on this host reads to reach the dashboard.
pub(crate) fn token_path(home: &Path) -> std::path::PathBuf {
    home.join("dashboard.token")
}

/// A fresh token of 128 random bits (from the kernel), written to `<home>/dashboard.token` readable by its owner
/// only; a previous start's file is replaced.
pub(crate) fn new_token(home: &Path) -> Result<String, Failure> {
    let token =
        crate::edge::random::hex128().map_err(|e| Failure::other(format!("cannot draw the dashboard token: {e}")))?;
    let path = token_path(home);
    let tmp = path.with_extension("token.tmp");
    let written = {
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::remove_file(&tmp);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(token.as_bytes()))
            .and_then(|()| std::fs::rename(&tmp, &path))
    };
    written.map_err(|e| Failure::other(format!("cannot write {}: {e}", path.display())))?;
    Ok(token)
}

/// Compares without an early exit, so the time taken says nothing about how much of a guess was right.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0_u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn cookie_token<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(k, v)| (k == name).then_some(v))
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ")
}

fn query_token(req: &Request) -> Option<&str> {
    req.uri().query()?.split('&').find_map(|p| p.strip_prefix("token="))
}

fn unauthorized() -> Response {
    (StatusCode::UNAUTHORIZED, "the dashboard needs its token: open the URL berth printed at start\n").into_response()
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

/// The middleware in front of every route.
pub(crate) async fn require(State(web): State<Arc<Web>>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let by_header = cookie_token(headers, &web.cookie).or_else(|| bearer(headers)).is_some_and(|t| same(t, &web.token));
    let query = query_token(&req).map(|t| same(t, &web.token));
    let is_read = matches!(*req.method(), Method::GET | Method::HEAD);
    if !by_header {
        match query {
            // The event stream may carry the token in its URL (EventSource sends no headers).
            Some(true) if req.uri().path() == "/events" => return next.run(req).await,
            // The first load: the cookie, then the same page without the token in its address.
            Some(true) if is_read => {
                let path = req.uri().path().to_owned();
                let rest: Vec<&str> = req
                    .uri()
                    .query()
                    .unwrap_or("")
                    .split('&')
                    .filter(|p| !p.is_empty() && !p.starts_with("token="))
                    .collect();
                let to = if rest.is_empty() { path } else { format!("{path}?{}", rest.join("&")) };
                let cookie = format!("{}={}; HttpOnly; SameSite=Strict; Path=/", web.cookie, web.token);
                return ([(header::SET_COOKIE, cookie)], Redirect::to(&to)).into_response();
            }
            _ => return unauthorized(),
        }
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
