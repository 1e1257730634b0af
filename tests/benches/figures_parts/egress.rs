//! The egress proxy's added latency: an allowed request through berth's proxy (a CONNECT tunnel, what an HTTPS
//! client opens, then one request inside it) from a sandbox under an allowlist, beside the same request made
//! directly from a container on the server's network. The server is the bench's own (`python3 -m http.server` from
//! the local image, on a network the bench creates); nothing outside the machine is contacted. Each sample is a new
//! connection (name lookup included), timed inside the container, in alternating rounds.

use std::path::Path;
use std::process::{Command, Stdio};

use super::{Figure, berth, median};

/// The client: `N` requests to `host:port`, each on a fresh connection, directly or through the proxy from
/// `$HTTPS_PROXY`; prints one time in ms per line.
const CLIENT: &str = r#"
import os, socket, sys, time
host, port, mode, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
proxy = os.environ.get("HTTPS_PROXY", "").split("@")[-1].rstrip("/")
for _ in range(n):
    t = time.perf_counter()
    if mode == "proxy":
        ph, pp = proxy.rsplit(":", 1)
        s = socket.create_connection((ph, int(pp)))
        s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(4096)
        assert b" 200 " in head.split(b"\r\n")[0], head
    else:
        s = socket.create_connection((host, port))
    s.sendall(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    assert data.startswith(b"HTTP/1.0 200"), data[:80]
    print((time.perf_counter() - t) * 1000)
"#;

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).stdin(Stdio::null()).output().expect("docker CLI")
}

fn times(out: &std::process::Output, what: &str) -> Vec<f64> {
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// The figure: median added milliseconds per allowed request.
pub fn bench_egress(home: &Path, quick: bool) -> Vec<Figure> {
    let (rounds, n) = if quick { (2, 50) } else { (5, 200) };
    let net = format!("berth-bench-egress-{}", std::process::id());
    assert!(docker(&["network", "create", &net]).status.success());
    let server = format!("{net}-srv");
    let host = "origin.bench.test";
    let up = docker(&[
        "run",
        "-d",
        "--name",
        &server,
        "--network",
        &net,
        "--network-alias",
        host,
        super::IMAGE,
        "python3",
        "-m",
        "http.server",
        "8000",
    ]);
    assert!(up.status.success(), "server: {}", String::from_utf8_lossy(&up.stderr));
    let ip = String::from_utf8_lossy(
        &docker(&["inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", &server]).stdout,
    )
    .trim()
    .to_owned();
    let policy = format!("terminal.docker_egress={host}:8000,{ip}/32");
    let outside = format!("terminal.docker_egress_network={net}");
    let profile = format!("bench-egress-{}", std::process::id());
    std::fs::create_dir_all(home.join("profiles").join(&profile)).unwrap();
    let through = |count: usize| {
        let out = berth(home)
            .args(["-p", &profile, "-c", &policy, "-c", &outside, "run", "--task", "egress", "--"])
            .args(["python3", "-c", CLIENT, host, "8000", "proxy", &count.to_string()])
            .output()
            .expect("berth run");
        times(&out, "through the proxy")
    };
    let direct = |count: usize| {
        let out = docker(&[
            "run",
            "--rm",
            "--network",
            &net,
            super::IMAGE,
            "python3",
            "-c",
            CLIENT,
            host,
            "8000",
            "direct",
            &count.to_string(),
        ]);
        times(&out, "direct")
    };
    // Warm both paths (the sandbox, the proxy, the server) before measuring.
    through(10);
    direct(10);
    let (mut via, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        plain.extend(direct(n));
        via.extend(through(n));
    }
    let samples = via.len();
    let (m_via, m_plain) = (median(&mut via), median(&mut plain));
    let added = m_via - m_plain;
    // Sandboxes of the bench profile, then the proxy and network berth made, then the bench's own.
    let listed = |args: &[&str]| -> Vec<String> {
        String::from_utf8_lossy(&docker(args).stdout).split_whitespace().map(str::to_owned).collect()
    };
    for c in listed(&["ps", "-aq", "--filter", &format!("label=hermes-profile={profile}")]) {
        docker(&["rm", "-f", &c]);
    }
    let home_label = format!(
        "label=berth.home={}",
        domain::sandbox::home_digest(&std::fs::canonicalize(home).unwrap().display().to_string(),)
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
        name:
            "egress proxy: added latency of an allowed request (CONNECT tunnel + one HTTP request, new connection each)"
                .into(),
        berth: added,
        baseline: Some(m_plain),
        baseline_source: "the same request made directly from a container on the server's network, alternating rounds",
        unit: "ms added (median)",
        ratio: Some(m_via / m_plain),
        target: "≤ 2 ms added".into(),
        met: added <= 2.0,
        detail: format!(
            "{samples} requests each way in {rounds} alternating rounds, timed inside the containers; through the proxy {m_via:.2} ms, direct {m_plain:.2} ms (medians); ratio = through ÷ direct; the tunnel is what an HTTPS client opens (the proxy never sees TLS, so TLS costs the same both ways)"
        ),
    }]
}
