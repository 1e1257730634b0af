//! The dashboard over plain HTTP (`berth dashboard` and the gateway's): the token on every route, cross-site writes
//! refused, a non-loopback bind refused without its setting, no secret in a page, `/metrics` parsed by a Prometheus
//! text parser with its counters moving as a gateway runs tasks.

use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::support::{Gateway, Home, berth_bin, require_docker, wait_until};

/// A dashboard under test: its base URL (`http://127.0.0.1:PORT`) and token.
pub(crate) struct Served {
    child: Option<Child>,
    pub base: String,
    pub token: String,
}

impl Served {
    /// `berth dashboard` on a free port, with `envs` in its environment; the URL is its first line of stdout.
    pub(crate) fn start(home: &Home, envs: &[(&str, &str)]) -> Self {
        let mut cmd = home.cmd();
        cmd.args(["dashboard"]).envs(envs.iter().copied()).stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = cmd.spawn().expect("berth dashboard starts");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.trim().strip_prefix("dashboard: ").unwrap_or_else(|| panic!("no URL line: {line:?}"));
        let (base, token) = url.split_once("/?token=").unwrap();
        let on_file = std::fs::read_to_string(home.path().join("dashboard.token")).unwrap();
        assert_eq!(on_file, token, "the printed token is the one in the home");
        Self { child: Some(child), base: base.to_owned(), token: token.to_owned() }
    }

    pub(crate) fn url(&self) -> String {
        format!("{}/?token={}", self.base, self.token)
    }

    pub(crate) fn get(&self, path: &str) -> (u16, String) {
        http(&self.base, "GET", path, &[("authorization", &format!("Bearer {}", self.token))], "")
    }

    /// A write as the dashboard's own page makes it.
    pub(crate) fn post(&self, path: &str, body: &str) -> (u16, String) {
        let auth = format!("Bearer {}", self.token);
        let headers = [("authorization", auth.as_str()), ("x-berth-csrf", "1"), ("content-type", "application/json")];
        http(&self.base, "POST", path, &headers, body)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One HTTP/1.1 request on a fresh connection; the status and the body.
pub(crate) fn http(base: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let host = base.strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(host).expect("the dashboard accepts");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\ncontent-length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// A port nobody listens on right now.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn create(home: &Home, title: &str) -> String {
    let t = home.json(&["kanban", "create", title, "--command", "true"]);
    t["id"].as_str().unwrap().to_owned()
}

const GETS: &[&str] = &[
    "/",
    "/?board=default",
    "/tasks/ID",
    "/profiles",
    "/hosts",
    "/diagnostics",
    "/events",
    "/api/boards",
    "/api/board",
    "/api/tasks/ID",
    "/api/tasks/ID/log",
    "/api/profiles",
    "/api/hosts",
    "/api/diagnostics",
    "/metrics",
    "/healthz",
    "/chart",
    "/api/chart",
    "/no/such/page",
];

/// The two static assets: served to anyone (they hold no data; a page opened without the token needs its script).
const ASSETS: &[&str] = &["/assets/app.js", "/assets/app.css"];
const POSTS: &[&str] = &[
    "/api/tasks",
    "/api/tasks/ID/block",
    "/api/tasks/ID/archive",
    "/api/tasks/ID/approve",
    "/api/tasks/ID/request-changes",
    "/api/tasks/ID/complete",
    "/api/tasks/ID/retry",
    "/api/dispatch",
    "/api/sandboxes/SB/stop",
    "/api/sandboxes/SB/remove",
];
/// Routes that ask the engine: 401 without the token like the rest (the engine's own answer is another test's).
const ENGINE_GETS: &[&str] = &["/sandboxes", "/sandboxes?fragment=1", "/api/sandboxes"];

#[test]
fn dashboard_every_route_answers_401_without_its_token() {
    let home = Home::new();
    let id = create(&home, "guarded");
    let d = Served::start(&home, &[]);
    let mode = std::fs::metadata(home.path().join("dashboard.token")).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777, 0o600);
    let wrong = "0".repeat(d.token.len());
    for path in GETS.iter().map(|p| p.replace("ID", &id)) {
        assert_eq!(http(&d.base, "GET", &path, &[], "").0, 401, "GET {path} without a token");
        let bearer = format!("Bearer {wrong}");
        assert_eq!(http(&d.base, "GET", &path, &[("authorization", &bearer)], "").0, 401, "GET {path}, wrong token");
        let sep = if path.contains('?') { '&' } else { '?' };
        assert_eq!(http(&d.base, "GET", &format!("{path}{sep}token={wrong}"), &[], "").0, 401, "{path}?token=wrong");
        if path != "/events" && path != "/no/such/page" {
            assert_eq!(d.get(&path).0, 200, "GET {path} with the token");
        }
    }
    for path in ASSETS {
        assert_eq!(http(&d.base, "GET", path, &[], "").0, 200, "GET {path} without a token");
    }
    for path in ENGINE_GETS {
        assert_eq!(http(&d.base, "GET", path, &[], "").0, 401, "GET {path} without a token");
        let bearer = format!("Bearer {wrong}");
        assert_eq!(http(&d.base, "GET", path, &[("authorization", &bearer)], "").0, 401, "GET {path}, wrong token");
    }
    for path in POSTS.iter().map(|p| p.replace("ID", &id).replace("SB", "berth-sandbox")) {
        let headers = [("x-berth-csrf", "1"), ("content-type", "application/json")];
        assert_eq!(http(&d.base, "POST", &path, &headers, "{}").0, 401, "POST {path} without a token");
        let bearer = format!("Bearer {wrong}");
        let wrong_token = [("authorization", bearer.as_str()), ("x-berth-csrf", "1")];
        assert_eq!(http(&d.base, "POST", &path, &wrong_token, "{}").0, 401, "POST {path}, wrong token");
    }
    assert_eq!(home.json(&["kanban", "show", &id])["task"]["status"], "ready", "nothing was written");
    // The scheme's case does not matter (RFC 9110); a script's refusal says where the token is.
    let lower = format!("bearer {}", d.token);
    assert_eq!(http(&d.base, "GET", "/api/board", &[("authorization", &lower)], "").0, 200, "a lowercase scheme");
    let (_, said) = http(&d.base, "GET", "/api/board", &[], "");
    assert!(said.contains("`berth gateway token` prints it") && said.contains("Authorization: Bearer"), "{said}");

    // The first load takes the token in the URL (the page's script keeps it and takes it out of the address); no
    // cookie is set, and none opens the dashboard: cookies go to every port of the host (issue 38).
    let first = format!("GET /?board=default&token={} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", d.token);
    let head = raw(&d.base, &first);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(!head.to_ascii_lowercase().contains("set-cookie"), "{head}");
    assert!(head.to_ascii_lowercase().contains("referrer-policy: no-referrer"), "{head}");
    assert!(head.contains("guarded"), "{head}");
    let port = d.base.rsplit(':').next().unwrap();
    let cookie = format!("berth_token_{port}={}", d.token);
    assert_eq!(http(&d.base, "GET", "/", &[("cookie", &cookie)], "").0, 401);
    // A browser opening a page without the token gets the shell: its script, no data, the line for a new user.
    let (status, page) = http(&d.base, "GET", "/", &[("accept", "text/html"), ("sec-fetch-mode", "navigate")], "");
    assert_eq!(status, 401);
    assert!(page.contains("data-shell") && page.contains("/assets/app.js"), "{page}");
    assert!(page.contains("open the URL berth printed at start") && !page.contains("guarded"), "{page}");
}

/// The whole answer (head and body) to the raw request `req`.
fn raw(base: &str, req: &str) -> String {
    let mut s = TcpStream::connect(base.strip_prefix("http://").unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn dashboard_refuses_cross_site_writes() {
    let home = Home::new();
    let id = create(&home, "target");
    let d = Served::start(&home, &[]);
    let auth = format!("Bearer {}", d.token);
    let path = format!("/api/tasks/{id}/block");
    let attempts: [&[(&str, &str)]; 4] = [
        // A form posted from another site (were the token known to it): no custom header.
        &[
            ("authorization", &auth),
            ("origin", "http://evil.example"),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        &[("authorization", &auth)],
        &[("authorization", &auth), ("x-berth-csrf", "1"), ("origin", "http://evil.example")],
        &[("authorization", &auth), ("x-berth-csrf", "1"), ("sec-fetch-site", "cross-site")],
    ];
    for headers in attempts {
        let (status, body) = http(&d.base, "POST", &path, headers, "");
        assert_eq!(status, 403, "{headers:?}: {body}");
        assert!(body.starts_with("cross-site write refused") && body.trim().lines().count() == 1, "{body}");
        // Found by a new user (issue 25): curl without the header was told only "cross-site", not what to send.
        let has_header = headers.iter().any(|(k, _)| *k == "x-berth-csrf");
        assert_eq!(body.contains("x-berth-csrf: 1"), !has_header, "{headers:?}: {body}");
    }
    assert_eq!(home.json(&["kanban", "show", &id])["task"]["status"], "ready", "nothing was blocked");
    // The dashboard's own page does it.
    let (status, body) = d.post(&path, r#"{"reason": "from the page"}"#);
    assert_eq!((status, body.contains("blocked")), (200, true), "{body}");
    assert_eq!(home.json(&["kanban", "show", &id])["task"]["status"], "blocked");
    // A refused transition is its one-line error.
    let (status, body) = d.post(&path, "{}");
    assert_eq!(status, 400);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(v["error"].as_str().unwrap().contains("cannot block"), "{body}");
}

#[test]
fn dashboard_refuses_a_non_loopback_bind_without_the_setting() {
    let home = Home::new();
    let out = home.run(&["dashboard", "--bind", "0.0.0.0", "--port", "0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not loopback") && err.contains("kanban.dashboard_allow_remote"), "{err}");

    let port = free_port().to_string();
    let port_setting = format!("kanban.dashboard_port={port}");
    let args = ["-c", &port_setting, "-c", "kanban.dashboard_bind=0.0.0.0", "gateway", "run"];
    let out = home.cmd().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().filter(|l| l.contains("not loopback")).count(), 1, "{err}");

    // With the setting it serves there (still behind the token).
    let mut child = home
        .cmd()
        .args(["-c", "kanban.dashboard_allow_remote=true", "dashboard", "--bind", "0.0.0.0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("dashboard: http://0.0.0.0:"), "{line}");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn dashboard_never_shows_a_forwarded_secret() {
    let home = Home::new();
    let id = create(&home, "deploy with s3cr3t-v4lue-42");
    home.ok(&["kanban", "block", &id, "--reason", "key s3cr3t-v4lue-42 leaked"]);
    let envs = [("TERMINAL_DOCKER_FORWARD_ENV", r#"["BERTH_TEST_SECRET"]"#), ("BERTH_TEST_SECRET", "s3cr3t-v4lue-42")];
    let d = Served::start(&home, &envs);
    for path in ["/", "/api/board", &format!("/tasks/{id}"), &format!("/api/tasks/{id}"), "/api/diagnostics"] {
        let (status, body) = d.get(path);
        assert_eq!(status, 200, "{path}");
        assert!(!body.contains("s3cr3t-v4lue-42"), "{path} shows the secret: {body}");
        assert!(body.contains("deploy with ***"), "{path}: {body}");
        if path.contains("diagnostics") {
            assert!(body.contains("key *** leaked"), "the reason is shown, masked: {body}");
        }
    }
}

/// A metric's value in a parsed scrape (summed over its label sets matching `labels`).
pub(crate) fn value(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(h) => h.last().map_or(0.0, |b| b.count),
            prometheus_parse::Value::Summary(_) => 0.0,
        })
        .sum()
}

fn scrape(base: &str, token: &str) -> prometheus_parse::Scrape {
    // A first read slower than its deadline (a loaded machine) is a 503 (`bounded.rs`); the next one waits longer.
    let body = wait_until("a scrape", Duration::from_secs(10), || {
        let (status, body) = http(base, "GET", "/metrics", &[("authorization", &format!("Bearer {token}"))], "");
        if status == 200 { Ok(body) } else { Err(format!("{status} {body}")) }
    });
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).expect("/metrics parses")
}

#[test]
fn dashboard_metrics_parse_and_their_counters_move_as_a_gateway_runs_tasks() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    let port = free_port();
    let worker = format!("kanban.worker_command={} kanban complete {{task_id}}", berth_bin().display());
    let port_setting = format!("kanban.dashboard_port={port}");
    let gw = Gateway::start(&home, &["-c", &port_setting, "-c", &worker, "-c", "kanban.max_in_progress_per_profile=2"]);
    let base = format!("http://127.0.0.1:{port}");
    let token = gateway_token(&home);
    assert_eq!(http(&base, "GET", "/healthz", &[("authorization", &format!("Bearer {token}"))], "").1, "ok\n");
    let before = scrape(&base, &token);
    assert_eq!(value(&before, "berth_spawns_total", &[]), 0.0);
    assert_eq!(value(&before, "berth_completions_total", &[]), 0.0);
    for i in 0..3 {
        home.json(&["kanban", "create", &format!("job {i}"), "--assignee", "alpha", "--command", "true"]);
    }
    wait_until("the three tasks to finish", Duration::from_secs(30), || {
        home.json(&["kanban", "ls"]).as_array().unwrap().iter().all(|t| t["status"] == "done")
    });
    let after = scrape(&base, &token);
    assert_eq!(value(&after, "berth_tasks", &[("status", "done"), ("assignee", "alpha")]), 3.0);
    assert_eq!(value(&after, "berth_running_cap", &[("profile", "alpha")]), 2.0);
    assert_eq!(value(&after, "berth_spawns_total", &[]), 3.0);
    assert_eq!(value(&after, "berth_claims_total", &[]), 3.0);
    assert_eq!(value(&after, "berth_completions_total", &[]), 3.0);
    assert!(value(&after, "berth_tick_duration_seconds", &[]) >= 1.0, "ticks were timed");
    assert!(value(&after, "berth_board_round_trip_seconds", &[]) > 0.0, "the board's round trip was timed");
    assert_eq!(value(&after, "berth_lease_expiries_total", &[]), 0.0);
    assert_eq!(value(&after, "berth_crashes_total", &[]), 0.0);
    // Every metric the dashboard's issue lists is there (the engine's, too: this host has one).
    let listed = [
        "berth_tasks",
        "berth_running",
        "berth_running_cap",
        "berth_claims_total",
        "berth_spawns_total",
        "berth_completions_total",
        "berth_failures_total",
        "berth_crashes_total",
        "berth_lease_expiries_total",
        "berth_reclaims_total",
        "berth_tick_duration_seconds",
        "berth_sandboxes",
        "berth_sandboxes_reaped_total",
        "berth_sandboxes_idle_stopped_total",
        "berth_sandbox_folders_removed_total",
        "berth_board_round_trip_seconds",
        "berth_engine_up",
    ];
    let missing: Vec<&str> =
        listed.into_iter().filter(|name| !after.samples.iter().any(|s| s.metric == *name)).collect();
    assert!(missing.is_empty(), "missing from /metrics: {missing:?}");
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0), "{err}");
}

/// A dispatcher that died after its claim leaves a run no worker confirms; the gateway's tick finds its spawn lease
/// lapsed: a lease expiry, counted apart from crashes, and the task runs again.
#[test]
fn dashboard_metrics_count_a_lapsed_spawn_lease_as_a_lease_expiry_not_a_crash() {
    use domain::board::KanbanStore;
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    let id = home.json(&["kanban", "create", "lapsed", "--assignee", "alpha", "--command", "true"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut store = kanban_store::SqliteKanbanStore::open(&home.path().join("berth-kanban.db")).unwrap();
    let board = domain::ids::BoardSlug::default_board();
    let cfg = domain::board::TickConfig {
        profiles: ["alpha".to_owned()].into_iter().collect(),
        ..domain::board::TickConfig::default()
    };
    let probe = domain::test_util::FakeProcessProbe::default();
    let millis = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    let now = domain::time::Timestamp::from_millis(i64::try_from(millis).unwrap());
    let req = domain::board::TickRequest {
        board: &board,
        cfg: &cfg,
        now,
        probe: &probe,
        claimer: "crashed:1",
        claim_ttl: Duration::from_secs(900),
        spawn_lease: Duration::from_secs(1),
    };
    let out = store.tick(&req, &|snap| domain::policy::dispatch::plan_tick(now, snap, &cfg)).unwrap();
    assert_eq!(out.plan.spawns().count(), 1, "claimed, no worker started");
    drop(store);
    std::thread::sleep(Duration::from_millis(1100)); // scenario: the 1 s spawn lease lapses
    let port = free_port();
    let worker = format!("kanban.worker_command={} kanban complete {{task_id}}", berth_bin().display());
    let gw = Gateway::start(&home, &["-c", &format!("kanban.dashboard_port={port}"), "-c", &worker]);
    wait_until("the task to run again and finish", Duration::from_secs(30), || {
        home.json(&["kanban", "show", &id])["task"]["status"] == "done"
    });
    let token = std::fs::read_to_string(home.path().join("dashboard.token")).unwrap();
    let m = scrape(&format!("http://127.0.0.1:{port}"), &token);
    assert_eq!(value(&m, "berth_lease_expiries_total", &[]), 1.0);
    assert_eq!(value(&m, "berth_crashes_total", &[]), 0.0, "a lapsed lease is no crash");
    assert_eq!(value(&m, "berth_spawns_total", &[]), 1.0);
    assert_eq!(value(&m, "berth_completions_total", &[]), 1.0);
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0), "{err}");
}

/// The sandbox metrics over a gateway's cleanup: a running sandbox idle-stopped (1 s), then reaped with its folder
/// once it has been exited past the reaper's threshold (2 × 60 s, the least `terminal.lifetime_seconds` gives): this
/// test waits those two minutes.
#[test]
fn dashboard_metrics_count_sandboxes_by_state_and_the_gateways_cleanup() {
    require_docker();
    let home = Home::new();
    home.json(&["sandbox", "ensure", "--task", "tidy"]);
    let folders = || walk_dirs(&home.path().join("sandboxes").join("docker"));
    assert_eq!(folders().len(), 1, "the sandbox has its host folder");
    {
        let d = Served::start(&home, &[]);
        let m = scrape(&d.base, &d.token);
        assert_eq!(value(&m, "berth_engine_up", &[]), 1.0);
        assert_eq!(value(&m, "berth_sandboxes", &[("state", "running")]), 1.0);
        assert_eq!(value(&m, "berth_sandboxes", &[("state", "exited")]), 0.0);
    }
    let port = free_port();
    let settings = [
        format!("kanban.dashboard_port={port}"),
        "terminal.docker_idle_stop_seconds=1".to_owned(),
        "terminal.docker_reap_interval_seconds=1".to_owned(),
        "terminal.lifetime_seconds=60".to_owned(),
    ];
    let args: Vec<&str> = settings.iter().flat_map(|s| ["-c", s.as_str()]).collect();
    let gw = Gateway::start(&home, &args);
    let (base, token) = (format!("http://127.0.0.1:{port}"), gateway_token(&home));
    let id = home.containers().pop().expect("the sandbox");
    wait_until("idle stop", Duration::from_secs(30), || state_of(&home, &id) == "exited");
    let m = scrape(&base, &token);
    assert_eq!(value(&m, "berth_sandboxes_idle_stopped_total", &[]), 1.0);
    assert_eq!(value(&m, "berth_sandboxes", &[("state", "exited")]), 1.0);
    assert_eq!(value(&m, "berth_sandboxes", &[("state", "running")]), 0.0);
    assert_eq!(value(&m, "berth_sandboxes_reaped_total", &[]), 0.0);
    wait_until("the reaper", Duration::from_secs(200), || home.containers().is_empty());
    wait_until("the folder sweep", Duration::from_secs(20), || folders().is_empty());
    let m = scrape(&base, &token);
    assert_eq!(value(&m, "berth_sandboxes_reaped_total", &[]), 1.0);
    assert_eq!(value(&m, "berth_sandbox_folders_removed_total", &[]), 1.0);
    assert_eq!(value(&m, "berth_sandboxes", &[("state", "exited")]), 0.0);
    let (code, _, err) = gw.stop();
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn dashboard_lists_the_sandboxes_as_sandbox_ls_does() {
    require_docker();
    let home = Home::new();
    home.ok(&["sandbox", "ensure", "--task", "webview"]);
    let d = Served::start(&home, &[]);
    let (status, body) = d.get("/api/sandboxes");
    assert_eq!(status, 200, "{body}");
    let rows: serde_json::Value = serde_json::from_str(&body).unwrap();
    let row = rows.as_array().unwrap().iter().find(|r| r["task"] == "webview").expect("the sandbox is listed");
    assert_eq!(row["state"], "running", "{row}");
    assert!(row["memory_bytes"].as_u64().is_some_and(|m| m > 0), "{row}");
    let (status, page) = d.get("/sandboxes");
    assert_eq!(status, 200);
    assert!(page.contains("webview") && page.contains("running"), "{page}");
    // The egress policy in force, as `sandbox ls` gives it.
    assert_eq!(row["egress"], "all", "{row}");
    assert!(page.contains("<th>egress</th>") && page.contains("<td>all</td>"), "{page}");
}

/// The sandbox's engine state (`running`, `exited`), or empty when it is gone.
fn state_of(home: &Home, id: &str) -> String {
    home.inspect(id, "{{.State.Status}}")
}

#[test]
fn dashboard_stops_and_removes_a_sandbox_as_the_cli_does() {
    require_docker();
    let home = Home::new();
    let got = home.json(&["sandbox", "ensure", "--task", "webact"]);
    let (id, name) = (got["id"].as_str().unwrap().to_owned(), got["name"].as_str().unwrap().to_owned());
    let folder_parent = home.path().join("sandboxes").join("docker");
    let folders = || walk_dirs(&folder_parent);
    assert!(!folders().is_empty(), "the sandbox has its host folder");
    let d = Served::start(&home, &[]);
    let error_of = |(status, body): (u16, String)| -> String {
        assert_eq!(status, 400, "{body}");
        let e = serde_json::from_str::<serde_json::Value>(&body).unwrap()["error"].as_str().unwrap().to_owned();
        assert_eq!(e.lines().count(), 1, "one line: {e}");
        e
    };
    // A cross-site stop is refused and stops nothing.
    let stop = format!("/api/sandboxes/{name}/stop");
    let auth = format!("Bearer {}", d.token);
    let (status, _) = http(&d.base, "POST", &stop, &[("authorization", &auth), ("origin", "http://evil.example")], "");
    assert_eq!(status, 403);
    assert_eq!(state_of(&home, &id), "running");

    // Stop, by name: the container stays, stopped; the page's table shows it and offers remove only.
    let (status, body) = d.post(&stop, "{}");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&format!("stopped {name}")), "{body}");
    assert_eq!(state_of(&home, &id), "exited");
    let (status, table) = d.get("/sandboxes?fragment=1");
    assert_eq!(status, 200);
    assert!(table.contains("exited") && table.contains(r#"data-sandbox-action="remove""#), "{table}");
    assert!(!table.contains(r#"data-sandbox-action="stop""#), "a stopped sandbox offers no stop: {table}");
    assert!(error_of(d.post("/api/sandboxes/no-such-sandbox/stop", "{}")).contains("no sandbox"));
    assert!(error_of(d.post(&format!("/api/sandboxes/{name}/explode"), "{}")).contains("stop or remove"));

    // `berth sandbox stop` is the same call: the restarted sandbox stops again.
    home.json(&["sandbox", "ensure", "--task", "webact"]);
    assert_eq!(state_of(&home, &id), "running");
    let stopped = home.json(&["sandbox", "stop", &id[..12]]);
    assert_eq!(stopped["action"], "stopped", "{stopped}");
    assert_eq!(state_of(&home, &id), "exited");

    // Remove, by id prefix: the container and its host folder go, as `sandbox rm` removes them.
    let (status, body) = d.post(&format!("/api/sandboxes/{}/remove", &id[..12]), "{}");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&format!("removed {name}")), "{body}");
    assert!(home.containers().is_empty(), "the sandbox is gone");
    assert!(folders().is_empty(), "its folder is gone: {:?}", folders());
    assert!(error_of(d.post(&format!("/api/sandboxes/{name}/remove"), "{}")).contains("no sandbox"));
}

/// The sandbox folders (`docker/<profile>/<name>`) under `dir`.
fn walk_dirs(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let subdirs = |d: &std::path::Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect()
    };
    subdirs(dir).iter().flat_map(|p| subdirs(p)).collect()
}

#[test]
fn dashboard_actions_go_through_the_board_as_the_cli_does() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    let worker = format!("sleep 1; {} kanban complete {{task_id}}", berth_bin().display());
    let d = Served::start(&home, &[("KANBAN_WORKER_COMMAND", &worker)]);
    let show = |id: &str| home.json(&["kanban", "show", id])["task"].clone();
    let error_of = |(status, body): (u16, String)| -> String {
        assert_eq!(status, 400, "{body}");
        let e = serde_json::from_str::<serde_json::Value>(&body).unwrap()["error"].as_str().unwrap().to_owned();
        assert_eq!(e.lines().count(), 1, "one line: {e}");
        e
    };
    assert!(error_of(d.post("/api/tasks", r#"{"title": " "}"#)).contains("title"));
    // A body that is not JSON, of no JSON type, or without a field: `{"error": …}` too, with axum's status; a log's
    // offset that is no number is refused, not read as 0.
    assert!(error_of(d.post("/api/tasks", r#"{"title": "x""#)).contains("EOF"));
    let auth = format!("Bearer {}", d.token);
    for (headers, body, want) in [
        (vec![("x-berth-csrf", "1")], r#"{"title": "x"}"#, 415),
        (vec![("x-berth-csrf", "1"), ("content-type", "application/json")], r#"{"board": "default"}"#, 422),
    ] {
        let headers: Vec<(&str, &str)> = [("authorization", auth.as_str())].into_iter().chain(headers).collect();
        let (status, body) = http(&d.base, "POST", "/api/tasks", &headers, body);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert!((status, v["error"].is_string()) == (want, true), "{status} {body}");
    }
    assert!(error_of(d.get("/api/tasks/t_x/log?offset=abc")).contains("offset"));
    assert!(home.json(&["kanban", "ls"]).as_array().unwrap().is_empty(), "a refused create wrote a task");
    let (status, body) = d.post("/api/tasks", r#"{"title": "made on the page", "command": "true"}"#);
    assert_eq!(status, 200, "{body}");
    let id = body.split_whitespace().find(|w| w.starts_with("t_")).unwrap().to_owned();
    assert_eq!(show(&id)["title"], "made on the page");

    assert_eq!(d.post(&format!("/api/tasks/{id}/assign"), r#"{"profile": "alpha"}"#).0, 200);
    assert_eq!(show(&id)["assignee"], "alpha");
    error_of(d.post(&format!("/api/tasks/{id}/assign"), r#"{"profile": "nobody"}"#));
    assert_eq!(d.post(&format!("/api/tasks/{id}/edit"), r#"{"title": "renamed", "priority": 5}"#).0, 200);
    assert_eq!((show(&id)["title"].clone(), show(&id)["priority"].clone()), ("renamed".into(), 5.into()));
    assert!(error_of(d.post(&format!("/api/tasks/{id}/edit"), "{}")).contains("nothing to change"));
    assert!(error_of(d.post(&format!("/api/tasks/{id}/unblock"), "{}")).contains("unblock"));

    // Dispatch now, reclaim the running task (its worker is stopped), dispatch again: it finishes.
    assert!(d.post("/api/dispatch", r#"{"board": "default"}"#).1.contains("1 spawned"));
    assert_eq!(show(&id)["status"], "running");
    assert_eq!(d.post(&format!("/api/tasks/{id}/reclaim"), r#"{"reason": "try again"}"#).0, 200);
    assert_eq!(show(&id)["status"], "ready");
    assert!(d.post("/api/dispatch", r#"{"board": "default"}"#).1.contains("1 spawned"));
    wait_until("the task to finish", Duration::from_secs(20), || show(&id)["status"] == "done");
    let profiles: serde_json::Value = serde_json::from_str(&d.get("/api/profiles").1).unwrap();
    assert!(profiles["profiles"].as_array().unwrap().iter().any(|p| p["name"] == "alpha"), "{profiles}");
    let hosts: serde_json::Value = serde_json::from_str(&d.get("/api/hosts").1).unwrap();
    assert!(hosts["this_host"].is_string(), "{hosts}");
    let task: serde_json::Value = serde_json::from_str(&d.get(&format!("/api/tasks/{id}")).1).unwrap();
    assert_eq!(task["runs"].as_array().unwrap().len(), 2, "two runs: reclaimed, then done");
    assert!(task["events"].as_array().unwrap().iter().any(|e| e["kind"] == "reclaimed"), "{task}");

    assert_eq!(d.post(&format!("/api/tasks/{id}/archive"), "{}").0, 200);
    assert_eq!(show(&id)["status"], "archived");
    let other = create(&home, "to remove");
    assert_eq!(d.post(&format!("/api/tasks/{other}/block"), "{}").0, 200);
    assert_eq!(d.post(&format!("/api/tasks/{other}/remove"), "{}").0, 200);
    assert!(!home.run(&["kanban", "show", &other]).status.success(), "removed from the board");
}

#[test]
fn dashboard_review_column_approves_and_requests_changes_as_the_cli_does() {
    let home = Home::new();
    let t = home.json(&["kanban", "create", "check my work", "--command", "true", "--review"]);
    let id = t["id"].as_str().unwrap().to_owned();
    let status = || home.json(&["kanban", "show", &id])["task"]["status"].as_str().unwrap().to_owned();
    home.ok(&["kanban", "complete", &id]);
    assert_eq!(status(), "review", "a --review task's completion waits in review");
    let d = Served::start(&home, &[]);
    let (code, page) = d.get("/");
    assert_eq!(code, 200);
    let column = page
        .split("<section class=\"col\" data-status=\"review\"")
        .nth(1)
        .expect("a review column")
        .split("</section>")
        .next()
        .unwrap();
    assert!(column.contains(&id), "the card is in the REVIEW column");
    for act in ["approve", "request-changes"] {
        assert!(column.contains(&format!("data-action=\"{act}\"")), "{act} button: {column}");
    }
    let metrics = scrape(&d.base, &d.token);
    assert_eq!(value(&metrics, "berth_tasks", &[("status", "review")]), 1.0, "/metrics counts it");
    // Cross-site: refused as the other buttons are (no custom header), nothing written.
    let auth = format!("Bearer {}", d.token);
    let approve = format!("/api/tasks/{id}/approve");
    assert_eq!(http(&d.base, "POST", &approve, &[("authorization", &auth)], "").0, 403);
    assert_eq!(status(), "review");
    // A request for changes needs its note.
    let (code, body) = d.post(&format!("/api/tasks/{id}/request-changes"), "{}");
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("note"), "{body}");
    let (code, body) = d.post(&format!("/api/tasks/{id}/request-changes"), r#"{"note": "add a test"}"#);
    assert_eq!(code, 200, "{body}");
    let t = home.json(&["kanban", "show", &id])["task"].clone();
    assert_eq!((t["status"].as_str(), t["review_note"].as_str()), (Some("ready"), Some("add a test")), "{t}");
    home.ok(&["kanban", "complete", &id]);
    let (code, body) = d.post(&approve, "{}");
    assert_eq!((code, body.contains("approved")), (200, true), "{body}");
    assert_eq!(status(), "done");
    assert_eq!(d.post(&approve, "{}").0, 400, "a done task is not approved twice");
}

/// Opens `/events` and returns a reader positioned after the response headers.
fn event_stream(base: &str, token: &str) -> std::io::BufReader<TcpStream> {
    let host = base.strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    write!(s, "GET /events?token={token} HTTP/1.1\r\nhost: {host}\r\n\r\n").unwrap();
    let mut r = std::io::BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    while line != "\r\n" {
        line.clear();
        r.read_line(&mut line).unwrap();
    }
    r
}

/// How long until the stream says the board changed.
fn next_change(r: &mut std::io::BufReader<TcpStream>) -> Duration {
    let start = std::time::Instant::now();
    let mut line = String::new();
    loop {
        assert!(start.elapsed() < Duration::from_secs(15), "no change within 15 s");
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "the stream ended");
        if line.contains("event: change") {
            return start.elapsed();
        }
    }
}

/// A change reaches the stream within a second; a run of changes comes as at most one event every 250 ms.
#[test]
fn the_gateways_board_watch_feeds_the_event_stream_dispatching_or_not() {
    for dispatching in [true, false] {
        let home = Home::new();
        home.ok(&["profile", "create", "alpha"]);
        // The board exists before the gateway: its watch has a file to open from the start.
        home.json(&["kanban", "create", "before", "--command", "true"]);
        let port = free_port();
        let port_setting = format!("kanban.dashboard_port={port}");
        let dispatch = format!("kanban.dispatch_in_gateway={dispatching}");
        let gw = Gateway::start(&home, &["-c", &port_setting, "-c", &dispatch, "-c", "kanban.worker_command=sleep 30"]);
        let token = gateway_token(&home);
        if dispatching {
            // Past the reaper and into the loop: the change announced when the watch began has gone out.
            wait_until("two ticks", Duration::from_secs(15), || {
                home.gateway_status()["ticks"].as_u64().unwrap_or(0) >= 2
            });
        }
        let mut events = event_stream(&format!("http://127.0.0.1:{port}"), &token);
        home.json(&["kanban", "create", "seen live", "--command", "true"]);
        let took = next_change(&mut events);
        eprintln!("dispatching={dispatching}: the stream said changed {} ms after the CLI returned", took.as_millis());
        if dispatching {
            assert!(took < Duration::from_secs(1), "{took:?}");
        }
        // A run of changes comes as at most one event every 250 ms: 20 tasks made 60 ms apart (each a change the
        // watch sees on its own, so an unpaced stream says about 20), counted until the stream is quiet for 500 ms.
        let began = std::time::Instant::now();
        for i in 0..20 {
            home.json(&["kanban", "create", &format!("burst {i}"), "--command", "true"]);
            std::thread::sleep(Duration::from_millis(60)); // scenario: the changes spaced out
        }
        let made = began.elapsed();
        events.get_ref().set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        let (mut said, mut line) = (0_u128, String::new());
        while events.read_line(&mut line).is_ok_and(|n| n > 0) {
            said += u128::from(line.contains("event: change"));
            line.clear();
        }
        // One an interval of the run, one sent just before it, one after its last change.
        let most = made.as_millis() / 250 + 3;
        eprintln!("dispatching={dispatching}: 20 changes in {made:?}; the stream said {said} (at most {most})");
        assert!(said >= 1 && said <= most, "{said} events for 20 changes in {made:?}: the stream is paced");
        let (code, _, err) = gw.stop();
        assert_eq!(code, Some(0), "{err}");
    }
}

/// The token of a gateway's dashboard: a gateway counts as running once it holds its lock, and its dashboard (with
/// the token file) starts right after.
pub(crate) fn gateway_token(home: &Home) -> String {
    wait_until("the dashboard's token", Duration::from_secs(10), || {
        std::fs::read_to_string(home.path().join("dashboard.token")).ok()
    })
}

/// One request with `headers`; the status, the response's `content-type` and the body.
fn typed(base: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let host = base.strip_prefix("http://").unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let text = raw(base, &req);
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let kind = head
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-type")).map(|(_, v)| v.trim()))
        .unwrap_or_default();
    (status, kind.to_owned(), body.to_owned())
}

/// `/metrics` is text a browser shows (`text/plain; charset=utf-8`), and OpenMetrics to a scraper that asks for it.
#[test]
fn dashboard_metrics_are_plain_text_unless_openmetrics_is_asked_for() {
    let home = Home::new();
    let d = Served::start(&home, &[]);
    let auth = format!("Bearer {}", d.token);
    // A first read slower than its deadline (a loaded machine) is a 503 (`bounded.rs`); the next one waits longer.
    let (kind, body) = wait_until("a scrape", Duration::from_secs(10), || {
        let browser = [("authorization", auth.as_str()), ("accept", "text/html,application/xhtml+xml,*/*")];
        let (status, kind, body) = typed(&d.base, "/metrics", &browser);
        if status == 200 { Ok((kind, body)) } else { Err(format!("{status} {body}")) }
    });
    assert_eq!(kind, "text/plain; charset=utf-8", "{body}");
    assert!(body.contains("# TYPE berth_running gauge"), "{body}");
    let prometheus = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (status, kind, _) = typed(&d.base, "/metrics", &[("authorization", &auth), ("accept", prometheus)]);
    assert_eq!(status, 200);
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
}

/// The console's API on both stores: why each ready card waits (the code `dispatch --dry-run --explain` gives),
/// crashed runs counted in the chart, retry taking a task out of its schedule and out of `gave_up`, complete by hand
/// counted too.
fn console_api(home: Home) {
    home.ok(&["profile", "create", "alpha"]);
    let d = Served::start(&home, &[("KANBAN_WORKER_COMMAND", "exit 3")]);
    let new = |title: &str, extra: &[&str]| -> String {
        let mut args = vec!["kanban", "create", title, "--assignee", "alpha", "--command", "true"];
        args.extend(extra);
        home.json(&args)["id"].as_str().unwrap().to_owned()
    };
    let crash = new("crashes", &[]);
    let later = new("later", &["--in", "1h"]);
    let idle = create(&home, "nobody's");
    let card = |id: &str| -> serde_json::Value {
        // A read slower than its deadline with no answer kept yet is a 503 (`bounded.rs`): the next one waits longer.
        let body = wait_until("the board's answer", Duration::from_secs(10), || {
            let (status, body) = d.get("/api/board");
            if status == 200 { Ok(body) } else { Err(format!("{status} {body}")) }
        });
        let board: serde_json::Value = serde_json::from_str(&body).unwrap();
        let cols = board["columns"].as_array().unwrap().clone();
        cols.iter().flat_map(|c| c["tasks"].as_array().unwrap().clone()).find(|t| t["id"] == id).unwrap()
    };
    let explained = |id: &str| -> String {
        let e = home.json(&["kanban", "dispatch", "--dry-run", "--explain"]);
        let row = e["explain"].as_array().unwrap().iter().find(|r| r["task_id"] == id).cloned().unwrap();
        row["code"].as_str().unwrap().to_owned()
    };
    for id in [&crash, &later, &idle] {
        assert_eq!(card(id)["waiting"]["code"], explained(id), "{id}: {}", card(id));
    }
    assert_eq!(card(&idle)["waiting"]["code"], "skipped_unassigned");
    assert_eq!(card(&later)["waiting"]["code"], "deferred_scheduled");
    let chart = || -> serde_json::Value {
        let body = wait_until("the chart's answer", Duration::from_secs(10), || {
            let (status, body) = d.get("/api/chart");
            if status == 200 { Ok(body) } else { Err(format!("{status} {body}")) }
        });
        serde_json::from_str(&body).unwrap()
    };
    let sum = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).sum::<u64>();
    assert_eq!((sum(&chart()["completed"]), sum(&chart()["failed"])), (0, 0));

    // Its worker exits without a word: each later tick finds it crashed, until the breaker blocks it.
    wait_until("the task to give up", Duration::from_secs(60), || {
        d.post("/api/dispatch", r#"{"board": "default"}"#);
        home.json(&["kanban", "show", &crash])["task"]["status"] == "blocked"
    });
    let shown = home.json(&["kanban", "show", &crash]);
    let crashes = shown["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "crashed").count() as u64;
    assert!(crashes >= 1, "{shown}");
    assert_eq!(sum(&chart()["failed"]), crashes, "one failed attempt each: {}", chart());

    // Retry: the blocked task is ready again, the scheduled one no longer waits for its time.
    for id in [&crash, &later] {
        let (status, body) = d.post(&format!("/api/tasks/{id}/retry"), "{}");
        assert_eq!(status, 200, "{body}");
        assert_eq!(home.json(&["kanban", "show", id])["task"]["status"], "ready");
    }
    assert_eq!(card(&later)["waiting"]["code"], "spawn", "retried: no longer held by its schedule");
    assert!(card(&later)["starts_in_secs"].is_null());

    // Complete by hand (with a result); a done task takes neither retry nor complete.
    let (status, body) = d.post(&format!("/api/tasks/{idle}/complete"), r#"{"result": "done by hand"}"#);
    assert_eq!(status, 200, "{body}");
    let shown = home.json(&["kanban", "show", &idle]);
    assert_eq!(
        (shown["task"]["status"].as_str(), shown["task"]["result"].as_str()),
        (Some("done"), Some("done by hand"))
    );
    assert_eq!(sum(&chart()["completed"]), 1, "{}", chart());
    for action in ["retry", "complete"] {
        let (status, body) = d.post(&format!("/api/tasks/{idle}/{action}"), "{}");
        assert_eq!(status, 400, "{action} of a done task: {body}");
        let e: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(e["error"].as_str().unwrap().lines().count(), 1, "{body}");
    }
}

on_both_stores!(console_api);

/// Event streams nobody reads (many tabs, or a script) held every connection slot, so `/healthz`, `/metrics` and the
/// pages went unanswered (third attack, F4): at most half the slots are streams; the next stream gets a 503 in one
/// line while the rest answer, and a closed stream's slot is free again.
#[test]
fn event_streams_leave_room_for_the_other_requests() {
    let home = Home::new();
    let d = Served::start(&home, &[]);
    let addr = d.base.strip_prefix("http://").unwrap().to_owned();
    let open = |n: usize| -> Vec<TcpStream> {
        (0..n)
            .map(|_| {
                let mut s = TcpStream::connect(&addr).unwrap();
                let req = format!("GET /events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\r\n", d.token);
                s.write_all(req.as_bytes()).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut head = [0_u8; 12];
                s.read_exact(&mut head).unwrap();
                assert_eq!(&head, b"HTTP/1.1 200", "a stream within the bound");
                s
            })
            .collect()
    };
    let streams = open(128);
    let (status, body) = d.get("/events");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body.trim().lines().count(), 1, "{body}");
    assert!(body.contains("live pages"), "{body}");
    for path in ["/healthz", "/metrics", "/"] {
        assert_eq!(d.get(path).0, 200, "{path} with every stream taken");
    }
    drop(streams);
    wait_until("a closed stream's slot free again", Duration::from_secs(10), || {
        let mut s = TcpStream::connect(&addr).unwrap();
        let req = format!("GET /events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\r\n", d.token);
        s.write_all(req.as_bytes()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut head = [0_u8; 12];
        s.read_exact(&mut head).is_ok() && &head == b"HTTP/1.1 200"
    });
}
