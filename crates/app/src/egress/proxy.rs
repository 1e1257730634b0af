//! `berth egress-proxy` (hidden): the only way out of an egress network. HTTP CONNECT and plain HTTP to the
//! destinations the policy lists, decided on the name asked for and the addresses it resolves to, connecting only to
//! the vetted addresses; DNS answers (`dns.rs`) for listed names only; every refusal appended to the denial log. A
//! sandbox's credentials (`intercept.rs`) are swapped in for their destinations, and a placeholder seen going
//! anywhere else is refused and logged.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use domain::egress::{EgressPolicy, PROXY_PORT, Verdict};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::shared::Shared;
use crate::edge::error::Failure;

/// The largest request head the proxy reads.
const MAX_HEAD: usize = 64 * 1024;
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves on `listen` (every address when `None`) until killed.
///
/// # Errors
/// A failure when a port cannot be bound.
pub async fn serve(policy: &str, log: PathBuf, listen: Option<IpAddr>) -> Result<u8, Failure> {
    let policy = EgressPolicy::parse(policy).map_err(Failure::usage)?;
    // The credentials it will hold stay out of core dumps and other processes' reach (ptrace, /proc/<pid>/mem).
    crate::edge::process::keep_memory_private();
    let dir = log.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    let registry = Arc::new(super::intercept::Registry::new(&dir));
    let shared = Arc::new(Shared::new(policy, super::denial_log::DenialLog::open(log), registry.clone()));
    let at = listen.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    let tcp = TcpListener::bind((at, PROXY_PORT))
        .await
        .map_err(|e| Failure::other(format!("cannot listen on {at}:{PROXY_PORT}: {e}")))?;
    let udp = tokio::net::UdpSocket::bind((at, 53))
        .await
        .map_err(|e| Failure::other(format!("cannot listen on {at}:53/udp: {e}")))?;
    tokio::spawn(super::dns::serve(udp, shared.clone()));
    super::intercept::listen(registry).map_err(|e| {
        Failure::other(format!("cannot listen for credentials on @{}: {e}", super::intercept::REGISTRATION_SOCKET))
    })?;
    let flusher = shared.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(super::denial_log::REPEAT_WINDOW);
        loop {
            every.tick().await;
            flusher.flush_repeats();
        }
    });
    eprintln!("egress proxy for {} listening on {at}:{PROXY_PORT} and 53/udp", shared.policy);
    loop {
        let Ok((client, peer)) = tcp.accept().await else { continue };
        let _ = client.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            let _ = handle(client, peer, &shared).await;
        });
    }
}

/// One request: the head, the verdict, then a tunnel (CONNECT) or one forwarded request (plain HTTP, closed after).
async fn handle(mut client: TcpStream, peer: SocketAddr, shared: &Shared) -> std::io::Result<()> {
    let Some((head, rest)) = read_head(&mut client).await? else { return Ok(()) };
    let Some(req) = Request::parse(&head) else {
        return respond(&mut client, 400, "not an HTTP proxy request").await;
    };
    if let Some(task) = req.task.clone() {
        shared.note_task(peer.ip(), task);
    }
    let kind = if req.connect { "connect" } else { "http" };
    let destination = format!("{}:{}", req.host, req.port);
    let addrs = match vet(&shared.policy, &req.host, req.port).await {
        Ok(addrs) => addrs,
        Err(reason) => {
            shared.deny(peer.ip(), kind, &destination, &reason);
            return respond(&mut client, 403, &format!("berth egress: {reason}")).await;
        }
    };
    // A placeholder going where its credential may not: refused (the value would not be swapped in anyway, and the
    // attempt is worth a line in the log).
    let held = shared.credentials.of(peer.ip());
    if let Some((c, dests)) = super::intercept::misdirected(&held, &head, &req.host, req.port) {
        let reason = format!("carries the placeholder of {}, which goes only to {dests}", c.var);
        shared.deny(peer.ip(), kind, &destination, &reason);
        return respond(&mut client, 403, &format!("berth egress: {reason}")).await;
    }
    let swaps = super::intercept::swaps_for(&held, &req.host, req.port);
    let Some(mut upstream) = connect_any(&addrs, req.port).await else {
        return respond(&mut client, 502, &format!("berth egress: cannot connect to {destination}")).await;
    };
    let _ = upstream.set_nodelay(true);
    if req.connect {
        client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await?;
        if let (false, Some(tls)) = (swaps.is_empty(), shared.credentials.tls()) {
            super::intercept::serve(client, upstream, &req.host, tls, swaps).await;
            return Ok(());
        }
    } else {
        let forwarded = super::intercept::swap_text(&req.forwarded_head, &swaps);
        upstream.write_all(forwarded.as_bytes()).await?;
    }
    upstream.write_all(&rest).await?;
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    Ok(())
}

/// The addresses `host:port` may be reached at, or why not. An unlisted name is refused before any lookup, so the
/// proxy's own DNS queries never carry a name the policy does not list.
async fn vet(policy: &EgressPolicy, host: &str, port: u16) -> Result<Vec<IpAddr>, String> {
    let resolved = if host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().is_ok() {
        Vec::new()
    } else if !policy.allows_name(host, Some(port)) {
        return match policy.check(host, port, &[]) {
            Verdict::Deny(reason) => Err(reason),
            Verdict::Allow(_) => Err(format!("host {host}:{port} is not listed")),
        };
    } else {
        match tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((host, port))).await {
            Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
            _ => Vec::new(),
        }
    };
    match policy.check(host, port, &resolved) {
        Verdict::Allow(addrs) => Ok(addrs),
        Verdict::Deny(reason) => Err(reason),
    }
}

async fn connect_any(addrs: &[IpAddr], port: u16) -> Option<TcpStream> {
    for ip in addrs {
        if let Ok(Ok(s)) = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((*ip, port))).await {
            return Some(s);
        }
    }
    None
}

/// Reads up to the end of the request head; returns it and whatever followed it.
async fn read_head(client: &mut TcpStream) -> std::io::Result<Option<(String, Vec<u8>)>> {
    let mut buf = Vec::with_capacity(2048);
    let mut chunk = [0u8; 4096];
    loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok(Some((String::from_utf8_lossy(&buf).into_owned(), rest)));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

async fn respond(client: &mut TcpStream, status: u16, body: &str) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Bad Gateway",
    };
    let text = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}\n",
        body.len() + 1
    );
    client.write_all(text.as_bytes()).await?;
    client.shutdown().await
}

/// A proxy request's target and, for plain HTTP, the head to send on (origin form, one request, then closed).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Request {
    pub connect: bool,
    pub host: String,
    pub port: u16,
    /// The task the sandbox's proxy URL names (`http://<task>@proxy:3128`), as the client claims it.
    pub task: Option<String>,
    pub forwarded_head: String,
}

impl Request {
    pub fn parse(head: &str) -> Option<Self> {
        let mut lines = head.split("\r\n");
        let mut first = lines.next()?.split(' ');
        let (method, target, version) = (first.next()?, first.next()?, first.next()?);
        let headers: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
        let task = headers.iter().find_map(|h| {
            let (k, v) = h.split_once(':')?;
            k.trim().eq_ignore_ascii_case("proxy-authorization").then(|| basic_user(v.trim()))?
        });
        if method.eq_ignore_ascii_case("CONNECT") {
            let (host, port) = split_host_port(target, 443)?;
            return Some(Self { connect: true, host, port, task, forwarded_head: String::new() });
        }
        let rest = target.strip_prefix("http://")?;
        let (authority, path) = rest.find('/').map_or((rest, "/"), |i| (&rest[..i], &rest[i..]));
        let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
        let (host, port) = split_host_port(authority, 80)?;
        let mut forwarded = format!("{method} {path} {version}\r\n");
        for h in headers {
            let name = h.split_once(':').map_or(h, |(k, _)| k).trim().to_ascii_lowercase();
            if !matches!(name.as_str(), "proxy-authorization" | "proxy-connection" | "connection" | "keep-alive") {
                forwarded.push_str(h);
                forwarded.push_str("\r\n");
            }
        }
        // One request per connection: a kept-alive connection could carry a second request to another host.
        forwarded.push_str("Connection: close\r\n\r\n");
        Some(Self { connect: false, host, port, task, forwarded_head: forwarded })
    }
}

fn split_host_port(authority: &str, default: u16) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (h, tail) = rest.split_once(']')?;
        (h.to_owned(), tail.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (authority.to_owned(), None),
        }
    };
    let port = match port {
        Some(p) => p.parse().ok().filter(|p| *p > 0)?,
        None => default,
    };
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port))
}

/// The user of a `Basic` credential.
fn basic_user(value: &str) -> Option<String> {
    let encoded = value.strip_prefix("Basic ").or_else(|| value.strip_prefix("basic "))?.trim();
    let decoded = base64_decode(encoded)?;
    let text = String::from_utf8(decoded).ok()?;
    let user = text.split_once(':').map_or(text.as_str(), |(u, _)| u);
    Some(user.chars().filter(|c| c.is_ascii_alphanumeric() || "_.-".contains(*c)).take(63).collect())
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    };
    let bytes: Vec<u8> = s.bytes().filter(|b| *b != b'=').collect();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, b) in chunk.iter().enumerate() {
            acc |= val(*b)? << (18 - 6 * i);
        }
        let n = chunk.len().saturating_sub(1);
        out.extend_from_slice(&acc.to_be_bytes()[1..=n]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_into_targets_and_a_one_shot_forward() {
        let c = Request::parse(
            "CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\nProxy-Authorization: Basic dDE6\r\n\r\n",
        )
        .unwrap();
        assert_eq!((c.connect, c.host.as_str(), c.port, c.task.as_deref()), (true, "pypi.org", 443, Some("t1")));
        let g =
            Request::parse("GET http://Ex.test:8080/a?b HTTP/1.1\r\nHost: ex.test\r\nConnection: keep-alive\r\n\r\n")
                .unwrap();
        assert_eq!((g.connect, g.host.as_str(), g.port), (false, "ex.test", 8080));
        assert_eq!(g.forwarded_head, "GET /a?b HTTP/1.1\r\nHost: ex.test\r\nConnection: close\r\n\r\n");
        assert!(Request::parse("GET /local HTTP/1.1\r\n\r\n").is_none(), "origin form is not a proxy request");
        assert_eq!(split_host_port("[::1]:8443", 443), Some(("::1".into(), 8443)));
        assert_eq!(base64_decode("dGFzay0xOnB3").unwrap(), b"task-1:pw");
    }
}
