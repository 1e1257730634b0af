//! The proxy's side of `terminal.docker_credentials`: the credentials each sandbox address registered (in memory
//! only, handed over on a socket only the proxy's own container reaches), and the swap itself: a CONNECT to a
//! credential's destination is answered with a certificate of the home's CA, the request headers get the real value
//! in place of the placeholder, and the request goes on over TLS verified against the host's roots.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use domain::egress::EgressPolicy;
use domain::egress::credentials::covers;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::tls::{CA_DIR, CA_KEY, Tls, UPSTREAM_ROOTS};

/// The abstract socket (the proxy container's own network namespace, so nothing outside it) that registrations
/// arrive on.
pub const REGISTRATION_SOCKET: &str = "berth-egress-credentials";

/// The largest registration read.
const MAX_REGISTRATION: u64 = 4 * 1024 * 1024;

/// One credential of one sandbox, as the proxy holds it.
#[derive(Clone, Deserialize)]
pub struct Credential {
    pub var: String,
    pub placeholder: String,
    pub value: String,
    /// The destinations, in the egress syntax.
    pub destinations: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential").field("var", &self.var).field("destinations", &self.destinations).finish()
    }
}

/// What a registration carries: the sandbox's address on the internal network and its credentials.
#[derive(Deserialize)]
pub struct Registration {
    pub source: IpAddr,
    pub credentials: Vec<Credential>,
}

/// One sandbox's credentials, each with its destinations parsed.
pub type Held = Arc<Vec<(Credential, EgressPolicy)>>;

/// The credentials by sandbox address, and the TLS material (loaded at the first registration, the roots again at
/// every one).
pub struct Registry {
    dir: PathBuf,
    by_source: Mutex<HashMap<IpAddr, Held>>,
    tls: Mutex<Option<Arc<Tls>>>,
}

impl Registry {
    /// A registry whose CA lives in `dir` (the denial log's folder).
    pub fn new(dir: &Path) -> Self {
        Self { dir: dir.join(CA_DIR), by_source: Mutex::new(HashMap::new()), tls: Mutex::new(None) }
    }

    /// The credentials `source` registered (none when it registered none).
    pub fn of(&self, source: IpAddr) -> Held {
        self.by_source.lock().ok().and_then(|m| m.get(&source).cloned()).unwrap_or_default()
    }

    pub fn tls(&self) -> Option<Arc<Tls>> {
        self.tls.lock().ok().and_then(|t| t.clone())
    }

    /// Takes a registration: the sandbox's credentials replace what its address held before.
    ///
    /// # Errors
    /// One line: a destination that does not parse, or CA files that cannot be read.
    pub fn register(&self, reg: Registration) -> Result<(), String> {
        let mut held = Vec::new();
        for c in reg.credentials {
            let dests = EgressPolicy::parse(&c.destinations).map_err(|e| format!("{}: {e}", c.var))?;
            held.push((c, dests));
        }
        let key = std::fs::read_to_string(self.dir.join(CA_KEY))
            .map_err(|e| format!("cannot read the egress CA key {}: {e}", self.dir.join(CA_KEY).display()))?;
        let roots = std::fs::read(self.dir.join(UPSTREAM_ROOTS))
            .map_err(|e| format!("cannot read the egress roots {}: {e}", self.dir.join(UPSTREAM_ROOTS).display()))?;
        let tls = Tls::new(&key, &roots)?;
        if let Ok(mut t) = self.tls.lock() {
            *t = Some(Arc::new(tls));
        }
        if let Ok(mut m) = self.by_source.lock() {
            m.insert(reg.source, Arc::new(held));
        }
        Ok(())
    }
}

/// Serves registrations on the abstract socket until the proxy exits: one JSON registration per connection,
/// answered `ok` or with one line.
///
/// # Errors
/// When the socket cannot be bound.
pub fn listen(registry: Arc<Registry>) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(REGISTRATION_SOCKET)?;
    let std_listener = std::os::unix::net::UnixListener::bind_addr(&addr)?;
    std_listener.set_nonblocking(true)?;
    let listener = tokio::net::UnixListener::from_std(std_listener)?;
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else { continue };
            let registry = registry.clone();
            tokio::spawn(async move {
                let mut body = Vec::new();
                let read = (&mut conn).take(MAX_REGISTRATION).read_to_end(&mut body).await;
                let answer = match read.map_err(|e| e.to_string()).and_then(|_| {
                    serde_json::from_slice::<Registration>(&body).map_err(|e| format!("bad registration: {e}"))
                }) {
                    Ok(reg) => {
                        let source = reg.source;
                        let vars: Vec<String> = reg.credentials.iter().map(|c| c.var.clone()).collect();
                        match registry.register(reg) {
                            Ok(()) => {
                                eprintln!("credentials {} registered for {source}", vars.join(", "));
                                "ok".to_owned()
                            }
                            Err(e) => e,
                        }
                    }
                    Err(e) => e,
                };
                body.fill(0);
                let _ = conn.write_all(format!("{answer}\n").as_bytes()).await;
            });
        }
    });
    Ok(())
}

/// `berth egress-credentials` (hidden), run inside the proxy's container by `docker exec`: reads one registration
/// from stdin and hands it to the proxy on its socket, so the values are never in an argument, a variable or a file.
///
/// # Errors
/// One line when the proxy does not take it.
pub fn hand_over() -> Result<u8, crate::edge::error::Failure> {
    use crate::edge::error::Failure;
    use std::io::{Read, Write};
    use std::os::linux::net::SocketAddrExt;
    crate::edge::process::keep_memory_private();
    let mut body = Vec::new();
    std::io::stdin()
        .take(MAX_REGISTRATION)
        .read_to_end(&mut body)
        .map_err(|e| Failure::other(format!("cannot read the registration: {e}")))?;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(REGISTRATION_SOCKET)
        .map_err(|e| Failure::other(e.to_string()))?;
    let mut conn = std::os::unix::net::UnixStream::connect_addr(&addr)
        .map_err(|e| Failure::other(format!("the egress proxy does not take credentials here: {e}")))?;
    let sent = conn.write_all(&body).and_then(|()| conn.shutdown(std::net::Shutdown::Write));
    body.fill(0);
    sent.map_err(|e| Failure::other(format!("cannot hand the credentials to the egress proxy: {e}")))?;
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    match answer.trim() {
        "ok" => Ok(0),
        "" => Err(Failure::other("the egress proxy closed without an answer")),
        other => Err(Failure::other(other.to_owned())),
    }
}

/// The credentials of `held` that may go to `host:port`, as (placeholder, value) pairs.
pub fn swaps_for(held: &Held, host: &str, port: u16) -> Vec<(String, String)> {
    held.iter().filter(|(_, d)| covers(d, host, port)).map(|(c, _)| (c.placeholder.clone(), c.value.clone())).collect()
}

/// The first credential of `held` whose placeholder is in `head` but which may not go to `host:port`.
pub fn misdirected<'a>(held: &'a Held, head: &str, host: &str, port: u16) -> Option<&'a (Credential, EgressPolicy)> {
    held.iter().find(|(c, d)| head.contains(&c.placeholder) && !covers(d, host, port))
}

/// `text` with every placeholder of `swaps` replaced by its value.
pub fn swap_text(text: &str, swaps: &[(String, String)]) -> String {
    swaps.iter().fold(text.to_owned(), |t, (p, v)| t.replace(p.as_str(), v))
}

/// A CONNECT to a credential's destination, after the proxy answered 200: TLS to the sandbox with a certificate for
/// `host`, TLS to `upstream` verified against the roots, then HTTP/1.1 request by request with the placeholders in
/// each request's headers replaced by the values. When the destination's certificate is not trusted, the sandbox gets
/// a 502 saying so.
pub async fn serve(client: TcpStream, upstream: TcpStream, host: &str, tls: Arc<Tls>, swaps: Vec<(String, String)>) {
    let Ok(server) = tls.server_for(host) else { return };
    let bare = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    let Ok(name) = rustls::pki_types::ServerName::try_from(bare) else { return };
    let connector = tokio_rustls::TlsConnector::from(tls.client.clone());
    let upstream = connector.connect(name, upstream).await;
    let Ok(mut inside) = tokio_rustls::TlsAcceptor::from(server).accept(client).await else { return };
    let upstream = match upstream {
        Ok(u) => u,
        Err(e) => {
            eprintln!("credential destination {host}: {e}");
            let body = format!("berth egress: the certificate of {host} is not trusted ({e})\n");
            let text = format!(
                "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = inside.write_all(text.as_bytes()).await;
            let _ = inside.shutdown().await;
            return;
        }
    };
    let Ok((sender, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await else { return };
    tokio::spawn(conn);
    let sender = Arc::new(tokio::sync::Mutex::new(sender));
    let swaps = Arc::new(swaps);
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let (sender, swaps) = (sender.clone(), swaps.clone());
        async move {
            swap_headers(req.headers_mut(), &swaps);
            let mut s = sender.lock().await;
            s.ready().await?;
            let resp: Result<Response<Incoming>, hyper::Error> = s.send_request(req).await;
            resp
        }
    });
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(inside), service).await;
}

fn swap_headers(headers: &mut hyper::HeaderMap, swaps: &[(String, String)]) {
    for value in headers.values_mut() {
        let Ok(text) = value.to_str() else { continue };
        if !swaps.iter().any(|(p, _)| text.contains(p.as_str())) {
            continue;
        }
        if let Ok(mut swapped) = HeaderValue::from_str(&swap_text(text, swaps)) {
            swapped.set_sensitive(true);
            *value = swapped;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_swapped_for_their_destinations_only() {
        let c = |var: &str, p: &str, dests: &str| {
            let cred = Credential {
                var: var.into(),
                placeholder: p.into(),
                value: format!("real-{var}"),
                destinations: dests.into(),
            };
            (cred, EgressPolicy::parse(dests).unwrap())
        };
        let held: Held = Arc::new(vec![c("A", "berth-cred-a", "a.test:443"), c("B", "berth-cred-b", "b.test")]);
        let swaps = swaps_for(&held, "a.test", 443);
        assert_eq!(swaps, vec![("berth-cred-a".to_owned(), "real-A".to_owned())]);
        assert!(swaps_for(&held, "a.test", 8443).is_empty());
        assert_eq!(swap_text("Bearer berth-cred-a, berth-cred-b", &swaps), "Bearer real-A, berth-cred-b");
        let head = "GET http://c.test/ HTTP/1.1\r\nX-Key: berth-cred-b\r\n\r\n";
        assert_eq!(misdirected(&held, head, "c.test", 80).map(|(c, _)| c.var.as_str()), Some("B"));
        assert!(misdirected(&held, head, "b.test", 80).is_none());
        let mut headers = hyper::HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer berth-cred-a"));
        swap_headers(&mut headers, &swaps);
        assert_eq!(headers["authorization"], "Bearer real-A");
        assert!(!format!("{:?}", held[0].0).contains("real-A"), "the value is never in a debug print");
    }
}
