//! Idempotency keys (issue 39), through the binary on SQLite and PostgreSQL: eight concurrent creates under one key
//! (each as its own host) make one task and all eight print its id; a second create under the key changes nothing
//! (no row, no event); the key in a `--from` batch; a bad key refused in one line with nothing written.

use std::process::{Output, Stdio};

use crate::support::Home;

/// The tasks on the home's default board, as `kanban ls --json` gives them.
fn tasks(home: &Home) -> Vec<serde_json::Value> {
    home.json(&["kanban", "ls"]).as_array().cloned().unwrap_or_default()
}

/// The kinds of a task's events, oldest first.
fn event_kinds(home: &Home, id: &str) -> Vec<String> {
    home.json(&["kanban", "show", id])["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn eight_concurrent_creates_under_one_key_make_one_task_and_all_print_its_id(home: Home) {
    // All eight started before any is waited for; each says it is another host (as on a shared PostgreSQL board).
    let racers: Vec<_> = (0..8)
        .map(|i| {
            let (title, host) = (format!("racer {i}"), format!("kanban.host_id=host-{i}"));
            home.cmd()
                .args([
                    "-c",
                    &host,
                    "kanban",
                    "create",
                    &title,
                    "--command",
                    "true",
                    "--idempotency-key",
                    "k",
                    "--json",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let printed: Vec<String> = racers
        .into_iter()
        .map(|racer| {
            let out = racer.wait_with_output().unwrap();
            assert!(out.status.success(), "a racer failed ({}): {}", out.status, stderr_of(&out));
            let task: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            task["id"].as_str().unwrap().to_owned()
        })
        .collect();
    let all = tasks(&home);
    assert_eq!(all.len(), 1, "one task: {all:?}");
    let id = all[0]["id"].as_str().unwrap();
    assert!(printed.iter().all(|p| p == id), "all eight print {id}: {printed:?}");
    assert_eq!(all[0]["idempotency_key"], "k");
    assert_eq!(event_kinds(&home, id), ["created"], "one task, one event");
}

fn a_second_create_under_the_key_returns_the_task_and_changes_nothing(home: Home) {
    let first = home.json(&["kanban", "create", "nightly report", "--command", "true", "--idempotency-key", "r-1"]);
    let id = first["id"].as_str().unwrap().to_owned();
    let events = event_kinds(&home, &id);
    let again = home.ok(&["kanban", "create", "another title", "--command", "false", "--idempotency-key", "r-1"]);
    assert_eq!(again.split_whitespace().next(), Some(id.as_str()), "printed as a create prints it: {again}");
    assert!(again.contains("nightly report"), "the existing task, as it is: {again}");
    let again = home.json(&["kanban", "create", "another title", "--idempotency-key", "r-1", "--command", "false"]);
    assert_eq!((again["id"].as_str(), again["title"].as_str()), (Some(id.as_str()), Some("nightly report")), "{again}");
    assert_eq!(again["created_at"], first["created_at"], "--json: the task itself");
    assert_eq!(tasks(&home).len(), 1, "no second row");
    assert_eq!(event_kinds(&home, &id), events, "no event");
    let show = home.json(&["kanban", "show", &id])["task"].clone();
    assert_eq!((show["title"].as_str(), show["command"].as_str()), (Some("nightly report"), Some("true")));
    assert_eq!(show["idempotency_key"], "r-1");
    // The key is the board's: another board makes its own task under it.
    home.ok(&["kanban", "board", "create", "other"]);
    let other = home.json(&[
        "kanban",
        "create",
        "elsewhere",
        "--command",
        "true",
        "--idempotency-key",
        "r-1",
        "--board",
        "other",
    ]);
    assert_ne!(other["id"], first["id"], "{other}");
    // Without a key, the same create twice is two tasks.
    home.ok(&["kanban", "create", "plain", "--command", "true"]);
    home.ok(&["kanban", "create", "plain", "--command", "true"]);
    assert_eq!(tasks(&home).len(), 3);
}

fn the_key_in_a_from_batch_names_the_task_on_the_board_or_earlier_in_the_batch(home: Home) {
    let existing = home.json(&["kanban", "create", "already there", "--command", "true", "--idempotency-key", "a"]);
    let file = home.path().join("batch.jsonl");
    let lines = [
        r#"{"title": "a again", "command": "true", "idempotency_key": "a"}"#,
        r#"{"title": "b", "command": "true", "idempotency_key": "b"}"#,
        r#"{"title": "b twice", "command": "true", "idempotency_key": "b"}"#,
        r#"{"title": "no key", "command": "true"}"#,
    ];
    std::fs::write(&file, lines.join("\n")).unwrap();
    let from = file.to_str().unwrap();
    let ids: Vec<String> = serde_json::from_value(home.json(&["kanban", "create", "--from", from])).unwrap();
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert_eq!(ids[0], existing["id"].as_str().unwrap(), "the board's task under key a");
    assert_eq!(ids[1], ids[2], "the batch's own task under key b");
    assert_eq!(tasks(&home).len(), 3, "already there, b, no key");
    assert_eq!(event_kinds(&home, &ids[0]), ["created"], "nothing written for the board's task");
    let b = home.json(&["kanban", "show", &ids[1]])["task"].clone();
    assert_eq!((b["title"].as_str(), b["idempotency_key"].as_str()), (Some("b"), Some("b")));
    // The text listing shows each line's task, the one already there by its own title.
    let text = home.ok(&["kanban", "create", "--from", from]);
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 4, "{text}");
    assert!(rows[0].starts_with(&ids[0]) && rows[0].ends_with("already there"), "{text}");
    assert!(rows[2].starts_with(&ids[1]) && rows[2].ends_with("  b"), "{text}");
    assert_eq!(tasks(&home).len(), 4, "only the keyless line made a task again");
}

fn a_bad_key_is_refused_in_one_line_and_nothing_is_written(home: Home) {
    let long = "k".repeat(201);
    for bad in ["", "   ", "two\nlines", long.as_str()] {
        let out = home.run(&["kanban", "create", "t", "--command", "true", "--idempotency-key", bad]);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(err.contains("idempotency"), "{err}");
    }
    let file = home.path().join("bad.jsonl");
    let good = r#"{"title": "fine", "command": "true", "idempotency_key": "ok"}"#;
    std::fs::write(
        &file,
        format!("{good}\n{{\"title\": \"bad\", \"command\": \"true\", \"idempotency_key\": \"\"}}\n"),
    )
    .unwrap();
    let out = home.run(&["kanban", "create", "--from", file.to_str().unwrap()]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("line 2") && err.contains("idempotency key"), "{err}");
    assert!(tasks(&home).is_empty(), "nothing written");
    // At most 200 characters (not bytes) is a key.
    let key = "é".repeat(200);
    let t = home.json(&["kanban", "create", "long key", "--command", "true", "--idempotency-key", &key]);
    assert_eq!(t["idempotency_key"].as_str(), Some(key.as_str()));
}

on_both_stores!(
    eight_concurrent_creates_under_one_key_make_one_task_and_all_print_its_id,
    a_second_create_under_the_key_returns_the_task_and_changes_nothing,
    the_key_in_a_from_batch_names_the_task_on_the_board_or_earlier_in_the_batch,
    a_bad_key_is_refused_in_one_line_and_nothing_is_written,
);
