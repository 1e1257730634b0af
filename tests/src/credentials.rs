//! Credentials that never enter the sandbox (`terminal.docker_credentials`) on the real engine: the suite's own
//! HTTPS server (a self-signed certificate from rcgen, given as `terminal.docker_egress_ca_file`) on two ports behind
//! an allowlist; the sandbox holds a placeholder, the proxy swaps the real value in for the credential's port only,
//! and the real value is nowhere a sandbox, the engine or berth's home keeps it.

use std::path::Path;
use std::time::Duration;

use crate::egress::Lab;
use crate::support::{Home, IMAGE, wait_until};

/// The real value: what no sandbox, inspect or home file may ever hold.
const REAL: &str = "real-secret-7c1d0e5a9b";

/// The HTTPS server: on 8443 and 9443, each request's headers written to `/tls/seen-<port>.json`, answered `ok`
/// (never echoed back, so the real value cannot reach the sandbox through the answer either).
const SERVER: &str = r#"
import http.server as h, ssl, threading, json
class H(h.BaseHTTPRequestHandler):
    def do_GET(self):
        port = self.server.server_address[1]
        with open('/tls/seen-%d.json' % port, 'w') as f:
            json.dump({k.lower(): v for k, v in self.headers.items()}, f)
        body = b'ok'
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
def serve(port):
    s = h.ThreadingHTTPServer(('', port), H)
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    c.load_cert_chain('/tls/cert.pem', '/tls/key.pem')
    s.socket = c.wrap_socket(s.socket, server_side=True)
    s.serve_forever()
threading.Thread(target=serve, args=(9443,), daemon=True).start()
serve(8443)
"#;

/// The HTTPS server's container on the lab's network as `tls.<id>.test`; removed on drop.
struct TlsServer<'a> {
    home: &'a Home,
    name: String,
    dir: tempfile::TempDir,
    host: String,
    ip: String,
}

impl<'a> TlsServer<'a> {
    fn start(home: &'a Home, lab: &Lab<'_>) -> Self {
        let host = lab.host("tls");
        let cert = rcgen::generate_simple_self_signed(vec![host.clone()]).expect("certificate");
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("cert.pem"), cert.cert.pem()).expect("cert");
        std::fs::write(dir.path().join("key.pem"), cert.signing_key.serialize_pem()).expect("key");
        let name = format!("{}-tls", lab.net);
        let mount = format!("{}:/tls", dir.path().display());
        let args = [
            "run",
            "-d",
            "--name",
            &name,
            "--network",
            &lab.net,
            "--network-alias",
            &host,
            "--label",
            "berth.test=egress",
            "-v",
            &mount,
            IMAGE,
            "python3",
            "-c",
            SERVER,
        ];
        let out = home.docker(&args);
        assert!(out.status.success(), "tls server: {}", String::from_utf8_lossy(&out.stderr));
        let probe = "import socket; socket.create_connection(('127.0.0.1', 8443), 1); \
                     socket.create_connection(('127.0.0.1', 9443), 1)";
        wait_until("the HTTPS server answers", Duration::from_secs(20), || {
            home.docker(&["exec", &name, "python3", "-c", probe]).status.success()
        });
        let ip = home.inspect(&name, "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}");
        Self { home, name, dir, host, ip }
    }

    /// The headers the server saw last on `port`.
    fn seen(&self, port: u16) -> serde_json::Value {
        let text = std::fs::read_to_string(self.dir.path().join(format!("seen-{port}.json"))).unwrap_or_default();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("no request seen on {port} ({e}): {text:?}"))
    }
}

impl Drop for TlsServer<'_> {
    fn drop(&mut self) {
        self.home.docker(&["rm", "-f", &self.name]);
    }
}

/// Every file under `dir` whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file()
                && std::fs::read(&path).is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[test]
fn a_credential_is_swapped_in_for_its_destination_only_and_never_enters_the_sandbox() {
    let home = Home::new();
    let lab = Lab::new(&home);
    let tls = TlsServer::start(&home, &lab);
    let (host, ok) = (tls.host.clone(), lab.host("ok"));
    let policy = format!("terminal.docker_egress={host},{}/32,{ok},{}/32", tls.ip, lab.ok_ip);
    let outside = format!("terminal.docker_egress_network={}", lab.net);
    let ca_file = format!("terminal.docker_egress_ca_file={}", tls.dir.path().join("cert.pem").display());
    let creds = format!(r#"terminal.docker_credentials={{"BERTH_TEST_TOKEN": ["{host}:8443"]}}"#);
    let run = |egress: &str, task: &str, script: &str| {
        let mut cmd = home.cmd();
        cmd.env("BERTH_TEST_TOKEN", REAL);
        let args = ["-c", egress, "-c", &outside, "-c", &ca_file, "-c", &creds, "run", "--task", task, "--"];
        cmd.args(args).args(["sh", "-c", script]).output().expect("berth runs")
    };
    let curl = |port: u16| {
        format!(
            "curl -sS -m 20 https://{host}:{port}/ -H \"Authorization: Bearer $BERTH_TEST_TOKEN\" -H \"X-Api-Key: $BERTH_TEST_TOKEN\""
        )
    };
    let script = format!("echo \"$BERTH_TEST_TOKEN\"; {}; echo; {}; echo", curl(8443), curl(9443));
    let out = run(&policy, "t1", &script);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "run failed: {stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let placeholder = lines.first().copied().unwrap_or_default().trim().to_owned();
    assert!(placeholder.starts_with("berth-cred-") && placeholder.len() > 20, "the sandbox sees {placeholder:?}");
    assert_eq!(lines.get(1..3), Some(&["ok", "ok"][..]), "both requests answered: {stdout}\n{stderr}");
    // The credential's destination got the real value in both headers; the other port only the placeholder.
    let swapped = tls.seen(8443);
    assert_eq!(swapped["authorization"], format!("Bearer {REAL}"), "{swapped}");
    assert_eq!(swapped["x-api-key"], REAL, "{swapped}");
    let kept = tls.seen(9443);
    assert_eq!(kept["authorization"], format!("Bearer {placeholder}"), "{kept}");
    assert_eq!(kept["x-api-key"], placeholder, "{kept}");
    assert!(!stdout.contains(REAL) && !stderr.contains(REAL), "berth's output holds the value");

    // A placeholder sent in plain HTTP elsewhere is refused and logged.
    let plain = format!(
        "curl -sS -m 10 -o /dev/null -w '%{{http_code}}' http://{ok}:8000/ -H \"Authorization: Bearer $BERTH_TEST_TOKEN\""
    );
    let out = run(&policy, "t1", &plain);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "403", "{}", String::from_utf8_lossy(&out.stderr));
    let denials = home.json(&["sandbox", "denials"]);
    let row = denials.as_array().and_then(|rows| {
        rows.iter()
            .find(|r| r["reason"].as_str().is_some_and(|t| t.contains("placeholder of BERTH_TEST_TOKEN")))
            .cloned()
    });
    let row = row.unwrap_or_else(|| panic!("no denial for the placeholder in {denials:#}"));
    assert_eq!(row["destination"], format!("{ok}:8000"), "{row}");
    assert!(!denials.to_string().contains(REAL), "the denial log holds the value");

    // Nowhere in the sandbox: its environment and every file it can read.
    let sandboxes = home.containers();
    assert_eq!(sandboxes.len(), 1, "one sandbox: {sandboxes:?}");
    let search = format!(
        "env | grep -c {REAL}; grep -rl --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev {REAL} / ; echo done"
    );
    let inside = home.docker(&["exec", &sandboxes[0], "sh", "-c", &search]);
    let inside = String::from_utf8_lossy(&inside.stdout).into_owned();
    assert_eq!(inside.split_whitespace().collect::<Vec<_>>(), ["0", "done"], "the sandbox holds the value: {inside}");
    // Nor in what the engine keeps of the sandbox or the proxy (their configuration, arguments, logs).
    let canonical = std::fs::canonicalize(home.path()).expect("home");
    let mine = format!("label=berth.home={}", domain::sandbox::home_digest(&canonical.display().to_string()));
    let proxies =
        crate::support::ids(&home.docker(&["ps", "-aq", "--filter", &mine, "--filter", "label=berth.egress-proxy"]));
    assert_eq!(proxies.len(), 1, "one proxy: {proxies:?}");
    for id in sandboxes.iter().chain(&proxies) {
        let inspect = home.docker(&["inspect", id]);
        assert!(inspect.status.success());
        assert!(!String::from_utf8_lossy(&inspect.stdout).contains(REAL), "docker inspect {id} holds the value");
        let logs = home.docker(&["logs", id]);
        let text = format!("{}{}", String::from_utf8_lossy(&logs.stdout), String::from_utf8_lossy(&logs.stderr));
        assert!(!text.contains(REAL), "the logs of {id} hold the value");
    }
    // Nor in berth's home.
    assert_eq!(files_holding(home.path(), REAL.as_bytes()), Vec::<String>::new(), "files of the home hold the value");

    // Another destination is another policy: the sandbox is recreated through drift, with a new placeholder.
    let moved = format!(r#"terminal.docker_credentials={{"BERTH_TEST_TOKEN": ["{host}:9443"]}}"#);
    let mut cmd = home.cmd();
    cmd.env("BERTH_TEST_TOKEN", REAL).args(["-c", &policy, "-c", &outside, "-c", &ca_file, "-c", &moved]);
    let out = cmd.args(["run", "--task", "t1", "--", "sh", "-c", "echo \"$BERTH_TEST_TOKEN\""]).output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("recreating") && stderr.contains("terminal.docker_credentials"), "no drift: {stderr}");
    let next = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(next.starts_with("berth-cred-") && next != placeholder, "{next:?} after {placeholder:?}");
    assert_eq!(home.containers().len(), 1, "the old sandbox was replaced");

    // Without an allowlist: refused in one line, no sandbox made.
    let out = run("terminal.docker_egress=all", "t2", "true");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("docker_credentials") && stderr.contains("docker_egress"), "{stderr}");
    assert_eq!(home.containers().len(), 1, "a sandbox was made for the refused run");
}

#[test]
fn a_bad_credential_is_refused_at_config_set_in_one_line_and_the_file_untouched() {
    let home = Home::new();
    home.ok(&["config", "set", "terminal.docker_credentials", r#"{"GITHUB_TOKEN": ["api.github.com"]}"#]);
    let file = home.path().join("config.yaml");
    let before = std::fs::read_to_string(&file).expect("config.yaml");
    for bad in [r#"{"GITHUB_TOKEN": ["all"]}"#, r#"{"GITHUB_TOKEN": ["bad host!"]}"#, r#"{"1X": ["a.test"]}"#, "[1]"] {
        let out = home.run(&["config", "set", "terminal.docker_credentials", bad]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{bad}: one line: {stderr}");
        assert!(stderr.contains("terminal.docker_credentials"), "{stderr}");
        assert_eq!(std::fs::read_to_string(&file).expect("config.yaml"), before, "{bad} changed the file");
    }
    let got = home.json(&["config", "get", "terminal.docker_credentials"]);
    assert_eq!(got["value"]["GITHUB_TOKEN"][0], "api.github.com", "{got}");
}
