//! The credential swap's added latency (`terminal.docker_credentials`): an HTTPS request to a credential's
//! destination (the proxy terminates TLS with the home's CA, swaps the placeholder in the headers, and opens TLS to
//! the server) beside the same request to a port that is not one (a plain CONNECT tunnel, TLS end to end), both from
//! the same sandbox, each on a new connection, in alternating rounds. The server is the bench's own (python's TLS
//! server from the local image, a self-signed certificate from rcgen given as `terminal.docker_egress_ca_file`);
//! nothing outside the machine is contacted.

use std::path::Path;
use std::process::{Command, Stdio};

use super::{Figure, berth, median};

/// The server: HTTPS on 8443 and 9443, `ok` to a GET carrying the real value on 8443 and the placeholder on 9443 (403
/// otherwise, which fails the client: every sample went the way it is counted).
const SERVER: &str = r#"
import http.server as h, ssl, threading
class H(h.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def do_GET(self):
        # Each request proves its path: the real value on the credential's port, the placeholder elsewhere.
        auth = self.headers.get("Authorization", "")
        want = "Bearer bench-real-value" if self.server.server_address[1] == 8443 else "Bearer berth-cred-"
        self.send_response(200 if auth.startswith(want) else 403)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
def serve(port):
    s = h.ThreadingHTTPServer(("", port), H)
    s.request_queue_size = 256
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    c.load_cert_chain("/tls/cert.pem", "/tls/key.pem")
    s.socket = c.wrap_socket(s.socket, server_side=True)
    s.serve_forever()
threading.Thread(target=serve, args=(9443,), daemon=True).start()
serve(8443)
"#;

/// The client: `N` rounds, each one request to each port (swapped first on even rounds), each on a new connection
/// through `$HTTPS_PROXY` with TLS verified against `$SSL_CERT_FILE`; prints `swap <ms>` and `tunnel <ms>` lines.
const CLIENT: &str = r#"
import os, socket, ssl, sys, time
host, n = sys.argv[1], int(sys.argv[2])
proxy = os.environ["HTTPS_PROXY"].split("@")[-1].rstrip("/")
ph, pp = proxy.rsplit(":", 1)
ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
token = os.environ["BENCH_TOKEN"]
def one(port):
    t = time.perf_counter()
    s = socket.create_connection((ph, int(pp)))
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    assert b" 200 " in head.split(b"\r\n")[0], head
    t_s = ctx.wrap_socket(s, server_hostname=host)
    t_s.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while True:
        chunk = t_s.recv(65536)
        if not chunk:
            break
        data += chunk
    t_s.close()
    assert data.startswith(b"HTTP/1.") and b" 200 " in data.split(b"\r\n")[0], data[:80]
    return (time.perf_counter() - t) * 1000
for i in range(n):
    order = [(8443, "swap"), (9443, "tunnel")]
    if i % 2:
        order.reverse()
    for port, kind in order:
        print(kind, one(port))
"#;

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).stdin(Stdio::null()).output().expect("docker CLI")
}

/// The figure: median added milliseconds of a swapped HTTPS request over a tunnelled one.
pub fn bench_credentials(home: &Path, quick: bool) -> Vec<Figure> {
    let (rounds, n) = if quick { (2, 50) } else { (5, 100) };
    let net = format!("berth-bench-creds-{}", std::process::id());
    assert!(docker(&["network", "create", &net]).status.success());
    let host = "tls.bench.test";
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec![host.to_owned()]).unwrap();
    std::fs::write(dir.path().join("cert.pem"), cert.cert.pem()).unwrap();
    std::fs::write(dir.path().join("key.pem"), cert.signing_key.serialize_pem()).unwrap();
    let server = format!("{net}-srv");
    let mount = format!("{}:/tls:ro", dir.path().display());
    let up = docker(&[
        "run",
        "-d",
        "--name",
        &server,
        "--network",
        &net,
        "--network-alias",
        host,
        "-v",
        &mount,
        super::IMAGE,
        "python3",
        "-c",
        SERVER,
    ]);
    assert!(up.status.success(), "server: {}", String::from_utf8_lossy(&up.stderr));
    let ip = String::from_utf8_lossy(
        &docker(&["inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", &server]).stdout,
    )
    .trim()
    .to_owned();
    let policy = format!("terminal.docker_egress={host},{ip}/32");
    let outside = format!("terminal.docker_egress_network={net}");
    let ca_file = format!("terminal.docker_egress_ca_file={}", dir.path().join("cert.pem").display());
    let creds = format!(r#"terminal.docker_credentials={{"BENCH_TOKEN": ["{host}:8443"]}}"#);
    let profile = format!("bench-creds-{}", std::process::id());
    std::fs::create_dir_all(home.join("profiles").join(&profile)).unwrap();
    let run = |count: usize| {
        let out = berth(home)
            .env("BENCH_TOKEN", "bench-real-value")
            .args(["-p", &profile, "-c", &policy, "-c", &outside, "-c", &ca_file, "-c", &creds])
            .args(["run", "--task", "creds", "--", "python3", "-c", CLIENT, host, &count.to_string()])
            .output()
            .expect("berth run");
        assert!(out.status.success(), "client: {}", String::from_utf8_lossy(&out.stderr));
        let (mut swap, mut tunnel) = (Vec::new(), Vec::new());
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            match line.split_once(' ') {
                Some(("swap", ms)) => swap.extend(ms.trim().parse::<f64>().ok()),
                Some(("tunnel", ms)) => tunnel.extend(ms.trim().parse::<f64>().ok()),
                _ => {}
            }
        }
        (swap, tunnel)
    };
    // Warm the sandbox, the proxy (its leaf certificate for the host) and the server.
    let _ = run(10);
    let (mut swap, mut tunnel) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (s, t) = run(n);
        swap.extend(s);
        tunnel.extend(t);
    }
    let samples = swap.len().min(tunnel.len());
    let (m_swap, m_tunnel) = (median(&mut swap), median(&mut tunnel));
    let added = m_swap - m_tunnel;
    let listed = |args: &[&str]| -> Vec<String> {
        String::from_utf8_lossy(&docker(args).stdout).split_whitespace().map(str::to_owned).collect()
    };
    for c in listed(&["ps", "-aq", "--filter", &format!("label=hermes-profile={profile}")]) {
        docker(&["rm", "-f", &c]);
    }
    let home_label = format!(
        "label=berth.home={}",
        domain::sandbox::home_digest(&std::fs::canonicalize(home).unwrap().display().to_string())
    );
    for c in listed(&["ps", "-aq", "--filter", &home_label, "--filter", "label=berth.egress-proxy"]) {
        docker(&["rm", "-f", &c]);
    }
    for n in listed(&["network", "ls", "-q", "--filter", &home_label, "--filter", "label=berth.egress-proxy"]) {
        docker(&["network", "rm", &n]);
    }
    docker(&["rm", "-f", &server]);
    docker(&["network", "rm", &net]);
    vec![Figure {
        name: "credential swap: added latency of a swapped HTTPS request over a CONNECT tunnel (new connection each)"
            .into(),
        berth: added,
        baseline: Some(m_tunnel),
        baseline_source: "the same HTTPS request from the same sandbox to a port that is no credential's destination (tunnelled, TLS end to end), alternating",
        unit: "ms added (median)",
        ratio: Some(m_swap / m_tunnel),
        target: "≤ 3 ms added".into(),
        met: added <= 3.0,
        detail: format!(
            "{samples} requests each way in {rounds} runs of alternating pairs, timed inside the sandbox; swapped {m_swap:.2} ms, tunnelled {m_tunnel:.2} ms (medians); the swap terminates TLS with the home's CA (leaf cached per host), rewrites the headers and opens TLS to the server"
        ),
    }]
}
