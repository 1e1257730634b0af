//! The second trust round (issue 23), the PostgreSQL board from outside: a server that accepts the connection and
//! never answers costs a command its connect timeout, not forever; the board password never reaches an error
//! message, a listing or the command line.

use std::net::TcpListener;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::Home;

const PASSWORD: &str = "pw-Sekr1t";

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A port nothing listens on (bound, then let go), so a connection is refused at once.
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `kanban ls` and `kanban create` against a server that accepts connections and never answers end within the
/// connect timeout (10 s) with one line that says so, without the password; before, they hung past 40 s.
#[test]
fn a_board_server_that_never_answers_costs_a_command_its_timeout_not_forever() {
    let port = crate::support::silent_server();
    let home = Home::new();
    let url = format!("postgres://berth:{PASSWORD}@127.0.0.1:{port}/board");
    let started = Instant::now();
    let spawn = |args: &[&str]| {
        home.cmd().env("KANBAN_DATABASE_URL", &url).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()
    };
    let ls = spawn(&["kanban", "ls"]).unwrap();
    let create = spawn(&["kanban", "create", "x", "--assignee", &home.profile, "--command", "true"]).unwrap();
    for (what, child) in [("ls", ls), ("create", create)] {
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert_ne!(out.status.code(), Some(0), "{what}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{what}: one line expected: {err}");
        assert!(err.contains("did not answer within 10s"), "{what}: {err}");
        assert!(!err.contains(PASSWORD), "{what}: {err}");
    }
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
}

/// The password shows as `***` in error messages whatever the URL's form (an unencoded `/`, `@` or `?` in it, a
/// key-value string quoted or with spaces around `=`), and in `config ls` also when it is percent-encoded.
#[test]
fn the_board_password_never_reaches_a_message_or_a_listing() {
    let home = Home::new();
    let port = closed_port();
    let urls = [
        format!("postgres://berth:se/{PASSWORD}@127.0.0.1:{port}/board"),
        format!("postgres://berth:a@{PASSWORD}@127.0.0.1:{port}/board"),
        format!("host=127.0.0.1 port={port} user=berth password='a {PASSWORD}' dbname=b"),
        format!("host=127.0.0.1 port={port} user=berth password = {PASSWORD} dbname=b"),
        format!("host=127.0.0.1 port={port} password={PASSWORD} dbname=b connect_timeout=x"),
    ];
    for url in &urls {
        let out = home.cmd().env("KANBAN_DATABASE_URL", url).args(["kanban", "ls"]).output().unwrap();
        let err = stderr(&out);
        assert_ne!(out.status.code(), Some(0), "{url}: {err}");
        assert!(!err.contains(PASSWORD), "{url}: the password leaked: {err}");
        assert!(err.contains("***"), "{url}: {err}");
    }
    let encoded = format!("postgres://berth:{}%2Fx%40y@db-host/board", PASSWORD.replace('-', "%2D"));
    for args in [&["config", "ls"][..], &["config", "ls", "--json"]] {
        let out = home.cmd().env("KANBAN_DATABASE_URL", &encoded).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", stderr(&out));
        let line = text.lines().find(|l| l.contains("database_url") || l.contains("db-host")).unwrap_or_default();
        assert!(!text.contains("Sekr1t"), "{args:?}: the password leaked: {line}");
        assert!(text.contains("db-host"), "{args:?}: {text}");
    }
}

/// A board password in `kanban migrate --to URL` would sit in the process's arguments, which any local user reads:
/// refused in one line that names the ways that keep it out, without echoing it; the SQLite board is left as it was.
#[test]
fn kanban_migrate_refuses_a_password_in_its_arguments() {
    let home = Home::new();
    home.ok(&["kanban", "create", "x", "--assignee", &home.profile, "--command", "true"]);
    let before = home.json(&["kanban", "ls"]);
    for url in [
        format!("postgres://berth:{PASSWORD}@127.0.0.1:{}/board", closed_port()),
        format!("host=127.0.0.1 port={} user=berth password={PASSWORD} dbname=board", closed_port()),
    ] {
        let out = home.run(&["kanban", "migrate", "--to", &url]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("--to -") && err.contains("kanban.database_url"), "{err}");
        assert!(!err.contains(PASSWORD) && err.trim().lines().count() == 1, "{err}");
    }
    assert_eq!(home.json(&["kanban", "ls"]), before);
}

/// `kanban migrate` takes the board URL from stdin (`--to -`) or from `kanban.database_url` (its environment
/// variable), so the password need not be in the command line; a failure names the URL without it.
#[test]
fn kanban_migrate_takes_the_url_from_stdin_or_the_environment() {
    use std::io::Write;
    let home = Home::new();
    home.ok(&["kanban", "create", "x", "--assignee", &home.profile, "--command", "true"]);
    let url = format!("postgres://berth:{PASSWORD}@127.0.0.1:{}/board", closed_port());
    let mut child = home
        .cmd()
        .args(["kanban", "migrate", "--to", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{url}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(err.contains("cannot reach the board database at postgres://berth:***@127.0.0.1"), "{err}");
    assert!(!err.contains(PASSWORD), "{err}");
    let out = home.cmd().env("KANBAN_DATABASE_URL", &url).args(["kanban", "migrate"]).output().unwrap();
    let err = stderr(&out);
    assert!(err.contains("cannot reach the board database at postgres://berth:***@127.0.0.1"), "{err}");
    // And it really copies from stdin's URL.
    if let Some(db) = crate::pg::TestDb::create() {
        let mut child = home
            .cmd()
            .args(["kanban", "migrate", "--to", "-", "--json"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(format!("{}\n", db.url).as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["copied"]["tasks"], 1, "{report}");
    }
}

/// A NUL byte in a task's text was accepted (by `create --from` and the dashboard) on a SQLite board and then stopped
/// `kanban migrate` for the whole board (PostgreSQL stores no NUL in text): now refused where it is written, in one
/// line, nothing written, and the board still migrates.
#[test]
fn a_nul_byte_in_a_tasks_text_is_refused_where_it_is_written() {
    let home = Home::new();
    let file = home.path().join("tasks.jsonl");
    for line in [
        r#"{"title": "a\u0000b", "command": "true"}"#,
        r#"{"title": "fine", "body": "x\u0000y", "command": "true"}"#,
        r#"{"title": "fine", "command": "echo \u0000"}"#,
    ] {
        std::fs::write(&file, format!("{{\"title\": \"first\", \"command\": \"true\"}}\n{line}\n")).unwrap();
        let out = home.run(&["kanban", "create", "--from", file.to_str().unwrap()]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{line}: {err}");
        assert!(err.contains("NUL") && err.trim().lines().count() == 1, "{line}: {err}");
    }
    assert_eq!(home.json(&["kanban", "ls"]).as_array().map(Vec::len), Some(0), "nothing was written");
    let id = home.json(&["kanban", "create", "kept", "--command", "true"])["id"].as_str().unwrap().to_owned();
    let d = crate::dashboard::Served::start(&home, &[]);
    let (status, body) = d.post("/api/tasks", r#"{"board": "default", "title": "a\u0000b", "command": "true"}"#);
    assert_eq!(status, 400, "{body}");
    let (status, body) = d.post(&format!("/api/tasks/{id}/edit"), r#"{"title": "a\u0000b"}"#);
    assert_eq!(status, 400, "{body}");
    assert_eq!(home.json(&["kanban", "ls"]).as_array().map(Vec::len), Some(1), "only the kept task");
    assert_eq!(home.json(&["kanban", "show", &id])["task"]["title"], "kept");
    drop(d);
    if let Some(db) = crate::pg::TestDb::create() {
        use std::io::Write;
        let mut child = home
            .cmd()
            .args(["kanban", "migrate", "--to", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(format!("{}\n", db.url).as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
}

/// A home deleted under its runner (`kanban.worker_exit_outcome`) while a task's command runs: before, recording the
/// command's exit made the home again, with an empty board; now the runner sees its home gone and stops, and nothing
/// is made.
#[test]
fn a_runner_whose_home_was_deleted_stops_instead_of_making_it_again() {
    let home = Home::new();
    let outside = tempfile::tempdir().unwrap();
    let stop = outside.path().join("stop");
    home.ok(&["config", "set", "kanban.worker_exit_outcome", "true"]);
    let command =
        format!("sh -c 'i=0; while [ ! -e {} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done'", stop.display());
    home.ok(&["config", "set", "kanban.worker_command", &command]);
    let id = home.json(&["kanban", "create", "long", "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    home.ok(&["kanban", "dispatch"]);
    crate::support::wait_until("the task running", Duration::from_secs(30), || {
        home.json(&["kanban", "show", &id])["task"]["status"] == "running"
    });
    let runner =
        crate::support::wait_until("the home's runner", Duration::from_secs(10), || crate::support::runner_of(&home));
    std::fs::remove_dir_all(home.path()).unwrap();
    std::fs::write(&stop, "").unwrap();
    let alive = || std::fs::read_to_string(format!("/proc/{runner}/stat")).is_ok_and(|s| !s.contains(") Z "));
    let seen =
        crate::support::wait_until("the runner to stop or the home to come back", Duration::from_secs(20), || {
            let back = home.path().exists();
            (back || !alive()).then_some(back)
        });
    assert!(!seen, "the home was made again: {:?}", std::fs::read_dir(home.path()).map(|d| d.count()));
    assert!(!home.path().exists());
}
