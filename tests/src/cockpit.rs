//! The operator's cockpit (issue 13), through the real binary: input piped into a sandbox, an interactive `-t`
//! session driven through a pseudo-terminal.

use std::fs::File;
use std::io::{Read, Write};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{Engine, Gateway, Home, poll, wait_exit, wait_until};
use rustix::termios::{LocalModes, Winsize, tcgetattr, tcsetwinsize};

/// Waits for `child` to exit within `limit`; kills it and fails otherwise.
fn wait_within(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    wait_exit(child, limit).unwrap_or_else(|| panic!("berth did not exit within {limit:?}"))
}

#[test]
fn piped_stdin_reaches_the_command_and_its_end_closes_it() {
    let home = Home::on(&Engine::docker());
    // Large enough to take several chunks; `wc -c` only prints once its input is closed.
    let input: Vec<u8> = (0..200_000u32).map(|i| b'a' + u8::try_from(i % 26).unwrap()).collect();
    let mut child = home
        .cmd()
        .args(["run", "--task", "pipe", "--timeout", "60", "--", "wc", "-c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("berth runs");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        stdin.write_all(&input).unwrap();
        // Dropping stdin is the end of input.
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "200000", "{}", String::from_utf8_lossy(&out.stderr));

    // Bytes come back unchanged, and the exit code is the command's.
    let mut child = home
        .cmd()
        .args(["run", "--task", "pipe", "--timeout", "60", "--", "sh", "-c", "cat; exit 5"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("berth runs");
    child.stdin.take().unwrap().write_all(b"one\ntwo\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(out.stdout, b"one\ntwo\n");
}

/// A pseudo-terminal pair: the master end the test types into and reads from, the slave end berth gets.
fn pty(rows: u16, cols: u16) -> (File, File) {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let slave = File::options().read(true).write(true).open(name.to_str().unwrap()).expect("open the pty's slave");
    tcsetwinsize(&slave, Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 }).expect("winsize");
    (File::from(master), slave)
}

/// Collects everything `master` (a pty's master end, a child's stdout) reads, on a thread, until the other side
/// is closed.
fn collect(mut master: impl Read + Send + 'static) -> Arc<Mutex<Vec<u8>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    seen
}

/// Waits until the terminal output holds `needle`; false at the deadline.
fn saw(seen: &Arc<Mutex<Vec<u8>>>, needle: &str, within: Duration) -> bool {
    poll(within, || String::from_utf8_lossy(&seen.lock().unwrap()).contains(needle)).is_ok()
}

#[test]
fn an_interactive_tty_session_is_raw_follows_resizes_and_keeps_the_exit_code() {
    let home = Home::on(&Engine::docker());
    home.ok(&["sandbox", "ensure", "--task", "tty"]);
    let (master, slave) = pty(30, 100);
    let mut typing = master.try_clone().unwrap();
    let seen = collect(master);
    // Prints the TTY's size, then again after every line, until a `q` line (exit 3).
    let script = "import os, sys\n\
                  size = lambda: print(*os.get_terminal_size()[::-1], flush=True)\n\
                  size()\n\
                  while (line := sys.stdin.readline().strip()) != 'q':\n    size()\n\
                  sys.exit(3)\n";
    let mut child = home
        .cmd()
        .args(["run", "--task", "tty", "-it", "--", "python3", "-c", script])
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave.try_clone().unwrap()))
        .spawn()
        .expect("berth runs");
    // The command's TTY starts with our size.
    assert!(saw(&seen, "30 100", Duration::from_secs(60)), "{}", String::from_utf8_lossy(&seen.lock().unwrap()));
    // Our terminal is raw while the command runs: keys go to the command as typed.
    let modes = tcgetattr(&slave).unwrap().local_modes;
    assert!(!modes.contains(LocalModes::ICANON) && !modes.contains(LocalModes::ECHO), "not raw: {modes:?}");

    // A window-size change reaches the command's TTY.
    tcsetwinsize(&slave, Winsize { ws_row: 40, ws_col: 120, ws_xpixel: 0, ws_ypixel: 0 }).unwrap();
    crate::support::signal(child.id(), rustix::process::Signal::WINCH);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut resized = false;
    while !resized && Instant::now() < deadline {
        // Each line makes the command print its size again; the resize may land after the first one.
        typing.write_all(b"again\r").unwrap();
        resized = saw(&seen, "40 120", Duration::from_secs(1));
    }
    assert!(resized, "{}", String::from_utf8_lossy(&seen.lock().unwrap()));

    typing.write_all(b"q\r").unwrap();
    let status = wait_within(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(3), "{}", String::from_utf8_lossy(&seen.lock().unwrap()));
    // The terminal is as it was before.
    let modes = tcgetattr(&slave).unwrap().local_modes;
    assert!(modes.contains(LocalModes::ICANON) && modes.contains(LocalModes::ECHO), "not restored: {modes:?}");
}

fn create_task(home: &Home, args: &[&str]) -> String {
    let mut all = vec!["kanban", "create"];
    all.extend_from_slice(args);
    home.json(&all)["id"].as_str().unwrap().to_owned()
}

#[test]
fn kanban_logs_follows_a_run_to_its_end_and_show_gives_the_log() {
    crate::support::require_docker();
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    let _cleanup = crate::kanban::ProfileContainers::new(&["alpha"], home.path());
    let id = create_task(&home, &["talk", "--assignee", "alpha", "--command", "echo line-one; sleep 2; echo line-two"]);
    // Before any run: no log yet, said plainly (and `kanban logs` says so on stderr, printing nothing).
    assert!(home.ok(&["kanban", "show", &id]).contains("(nothing yet)"));
    let none = home.run(&["kanban", "logs", &id]);
    assert!(none.status.success() && none.stdout.is_empty());
    assert!(String::from_utf8_lossy(&none.stderr).contains("does not exist yet"), "{none:?}");

    // `-f` before any run says so and waits for the task's run, then prints as the worker writes and returns once the
    // run is over (not before: the task is done then).
    let mut follow = home
        .cmd()
        .args(["kanban", "logs", &id, "-f"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("berth runs");
    // scenario: the follower has begun waiting before the task is dispatched.
    std::thread::sleep(Duration::from_millis(500));
    assert!(follow.try_wait().unwrap().is_none(), "-f on a ready task waits for its run");
    let v = home.json(&["kanban", "dispatch"]);
    assert_eq!(v["spawned"].as_array().unwrap().len(), 1, "{v}");
    let status = wait_within(&mut follow, Duration::from_secs(90));
    let (mut followed, mut said) = (String::new(), String::new());
    follow.stdout.take().unwrap().read_to_string(&mut followed).unwrap();
    follow.stderr.take().unwrap().read_to_string(&mut said).unwrap();
    assert!(status.success());
    assert_eq!(said, format!("berth: {id} is ready and not running; waiting for its next run (Ctrl-C to stop)\n"));
    assert!(followed.contains("line-one\n") && followed.contains("line-two\n"), "{followed}");
    assert!(followed.trim_end().ends_with("completed"), "the worker's last line is there: {followed}");
    // The sandbox the command ran in is named before the command's output, not after it.
    let (sandbox, first) =
        (followed.find("] sandbox ").expect("the sandbox line"), followed.find("\nline-one\n").unwrap());
    assert!(sandbox < first, "{followed}");
    let show = home.json(&["kanban", "show", &id]);
    assert_eq!(show["task"]["status"], "done", "{show}");

    // `kanban show` gives the log's path and its last lines.
    let path = show["log"]["path"].as_str().unwrap().to_owned();
    assert!(std::path::Path::new(&path).is_file(), "{show}");
    let last: Vec<&str> = show["log"]["last_lines"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert!(last.contains(&"line-two"), "{last:?}");
    let text = home.ok(&["kanban", "show", &id]);
    assert!(text.contains(&format!("Log: {path}")) && text.contains("  line-two"), "{text}");
    // The finished task's workspace folder (its output) is named, and it is there.
    let ws = show["workspace"].as_str().unwrap().to_owned();
    assert!(ws.ends_with("/workspace") && std::path::Path::new(&ws).is_dir(), "{show}");
    assert!(text.contains(&format!("Workspace: {ws}")), "{text}");

    // --tail and --run select; the whole log is what -f printed.
    assert_eq!(home.ok(&["kanban", "logs", &id]), followed);
    let tail = home.ok(&["kanban", "logs", &id, "--tail", "2"]);
    assert_eq!(tail.lines().count(), 2, "{tail}");
    assert!(followed.ends_with(&tail));
    let run = show["runs"][0]["id"].as_i64().unwrap().to_string();
    assert_eq!(show["runs"][0]["number"], 1, "{show}");
    let part = home.ok(&["kanban", "logs", &id, "--run", &run]);
    assert!(part.starts_with("[berth worker") && part.contains(&format!("confirmed run {run} of {id}")), "{part}");
    let json = home.json(&["kanban", "logs", &id, "--tail", "1"]);
    assert_eq!(json["lines"].as_array().unwrap().len(), 1, "{json}");

    // Bad input: one line, exit 2.
    for args in [&["kanban", "logs", &id, "--run", "999999"][..], &["kanban", "logs", "t_nope"][..]] {
        let out = home.run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("berth: ") && err.lines().count() == 1, "{err}");
    }
}

/// A config in hermes-agent's style: mostly comments, its own sections, quoting and blank lines as a person wrote
/// them.
const HERMES_STYLE: &str = "\
# Hermes Agent configuration (example)
# Copy to ~/.hermes/config.yaml and edit.

model:
  default: \"anthropic/claude-opus-4\"   # the model every session starts with
  provider: auto

# ── Terminal ────────────────────────────────────────────────
terminal:
  # Where commands run: local, docker, ssh, modal
  backend: docker
  timeout: 180        # seconds per command
  docker_image: 'berth-sandbox:latest'
  docker_volumes:
    - /srv/data:/data:ro   # read-only reference data
  # docker_forward_env: [GITHUB_TOKEN]

display:
  compact: false
# trailing remark
";

#[test]
fn config_set_and_unset_change_only_their_key() {
    let home = Home::new();
    let path = home.path().join("config.yaml");
    std::fs::write(&path, HERMES_STYLE).unwrap();
    let file = || std::fs::read_to_string(&path).unwrap();

    // An existing key: that value's bytes change, nothing else.
    home.ok(&["config", "set", "terminal.timeout", "30"]);
    let step1 = HERMES_STYLE.replace("timeout: 180  ", "timeout: 30  ");
    assert_eq!(file(), step1);
    assert_eq!(home.json(&["config", "get", "terminal.timeout"])["value"], 30);

    // A new key in an existing section: one line added, every other line as it was.
    home.ok(&["config", "set", "terminal.lifetime_seconds", "600"]);
    let now = file();
    let added: Vec<&str> = now.lines().filter(|l| !step1.lines().any(|o| o == *l)).collect();
    assert_eq!(added, ["  lifetime_seconds: 600"], "{now}");
    assert_eq!(now.lines().filter(|l| *l != "  lifetime_seconds: 600").collect::<Vec<_>>().join("\n") + "\n", step1);

    // Unset puts the file back byte for byte.
    home.ok(&["config", "unset", "terminal.lifetime_seconds"]);
    assert_eq!(file(), step1);

    // A section the file does not have is added at the end; the rest is untouched.
    home.ok(&["config", "set", "kanban.failure_limit", "3"]);
    let now = file();
    assert!(now.starts_with(&step1), "{now}");
    assert_eq!(&now[step1.len()..], "kanban:\n  failure_limit: 3\n");

    // A string that needs quoting is quoted, and reads back as written.
    home.ok(&["config", "set", "terminal.docker_image", "my image: v2"]);
    assert_eq!(home.json(&["config", "get", "terminal.docker_image"])["value"], "my image: v2");
    assert!(file().contains("# Copy to ~/.hermes/config.yaml and edit.\n"));
    assert!(file().contains("    - /srv/data:/data:ro   # read-only reference data\n"));
}

#[test]
fn help_says_what_berth_is_for_and_completions_are_generated() {
    let home = Home::new();
    let help = home.ok(&["--help"]);
    assert!(help.starts_with("Long-lived, leak-free Docker sandboxes"), "{help}");
    assert!(!help.contains("wiring the other crates"), "{help}");
    let ls = home.ok(&["kanban", "ls", "--help"]);
    assert!(ls.contains("triage, todo, ready, running, blocked, review, done or archived"), "{ls}");
    for (shell, marker) in [("bash", "complete -F _berth"), ("zsh", "#compdef berth"), ("fish", "complete -c berth")] {
        let script = home.ok(&["completions", shell]);
        assert!(script.contains(marker) && script.contains("kanban"), "{shell}: {}", &script[..script.len().min(200)]);
    }
    let out = home.run(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_missing_program_exits_127_and_a_non_executable_one_126_with_one_line() {
    let home = Home::on(&Engine::docker());
    for (program, code, words) in
        [("/no/such/program", 127, "command not found"), ("/etc/passwd", 126, "not executable")]
    {
        let out = home.run(&["run", "--task", "codes", "--", program]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{program}: {err}");
        assert!(out.stdout.is_empty(), "{program}: {}", String::from_utf8_lossy(&out.stdout));
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with(&format!("berth: {program}: ")) && err.contains(words), "{err}");
    }
    // A command that exits 127 itself keeps its own words and code.
    let out = home.run(&["run", "--task", "codes", "--", "sh", "-c", "echo mine; exit 127"]);
    assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stdout).as_ref()), (Some(127), "mine\n"));
}

#[test]
fn warnings_start_with_berth_like_errors() {
    let home = Home::new();
    let out = home.cmd().env("TERMINAL_TIMEOUT", "abc").args(["config", "get", "terminal.timeout"]).output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("berth: warning: invalid env TERMINAL_TIMEOUT value \"abc\""), "{err}");
}

#[test]
fn all_boards_for_ls_and_dispatch_and_show_finds_a_task_on_any_board() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    home.ok(&["kanban", "board", "create", "second"]);
    let a = create_task(&home, &["on default", "--assignee", "alpha", "--command", "true"]);
    let b = create_task(&home, &["on second", "--assignee", "alpha", "--command", "true", "--board", "second"]);

    // One board by default; every board with --all-boards.
    let one: Vec<String> =
        home.json(&["kanban", "ls"]).as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(one, std::slice::from_ref(&a));
    let all = home.json(&["kanban", "ls", "--all-boards"]);
    let ids: Vec<&str> = all.as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&a.as_str()) && ids.contains(&b.as_str()) && ids.len() == 2, "{all}");
    let text = home.ok(&["kanban", "ls", "--all-boards"]);
    assert!(text.starts_with("ID") && text.lines().next().unwrap().contains("BOARD"), "{text}");
    assert!(text.lines().any(|l| l.starts_with(&b) && l.contains("second")), "{text}");

    // A dry tick of every board plans each board's task.
    let v = home.json(&["kanban", "dispatch", "--all-boards", "--dry-run"]);
    let boards: Vec<&str> = v.as_array().unwrap().iter().map(|r| r["board"].as_str().unwrap()).collect();
    assert_eq!(boards, ["default", "second"], "{v}");
    for r in v.as_array().unwrap() {
        assert_eq!(r["report"]["spawned"].as_array().unwrap().len(), 1, "{v}");
    }
    let text = home.ok(&["kanban", "dispatch", "--all-boards", "--dry-run"]);
    assert!(text.contains("Board default:") && text.contains("Board second:"), "{text}");

    // show and logs find the task on the other board without --board.
    assert_eq!(home.json(&["kanban", "show", &b])["task"]["board"], "second");
    assert!(home.run(&["kanban", "logs", &b]).status.success());
    // --all-boards with one board named is a mistake: one line, exit 2.
    let out = home.run(&["kanban", "ls", "--all-boards", "--board", "second"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn edit_and_rm_fix_a_task_and_are_audited_and_a_typo_assignee_is_refused() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    let id = create_task(&home, &["first title", "--assignee", "alpha", "--command", "true"]);

    // A typo in assign or edit is caught there, with a way out; the task is untouched.
    for args in [&["kanban", "assign", &id, "alpah"][..], &["kanban", "edit", &id, "--assignee", "alpah"][..]] {
        let out = home.run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("berth: no profile \"alpah\"") && err.contains("--allow-unknown-assignee"), "{err}");
        assert_eq!(err.lines().count(), 1);
    }
    assert_eq!(home.json(&["kanban", "show", &id])["task"]["assignee"], "alpha");
    home.ok(&["kanban", "assign", &id, "later", "--allow-unknown-assignee"]);

    // edit changes what it is given and records each change as from/to.
    let t = home.json(&[
        "kanban",
        "edit",
        &id,
        "--title",
        "better title",
        "--command",
        "echo hi",
        "--priority",
        "-3",
        "--assignee",
        "alpha",
        "--max-runtime",
        "60",
    ]);
    assert_eq!(
        (&t["title"], &t["command"], &t["priority"], &t["assignee"], &t["max_runtime_seconds"]),
        (&"better title".into(), &"echo hi".into(), &(-3).into(), &"alpha".into(), &60.into()),
        "{t}"
    );
    let show = home.json(&["kanban", "show", &id]);
    let edited: Vec<&serde_json::Value> =
        show["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "edited").collect();
    assert_eq!(edited.len(), 1, "{show}");
    let payload: serde_json::Value = match &edited[0]["payload"] {
        serde_json::Value::String(s) => serde_json::from_str(s).unwrap(),
        v => v.clone(),
    };
    assert_eq!(payload["title"], serde_json::json!({"from": "first title", "to": "better title"}), "{payload}");
    assert_eq!(payload["assignee"]["from"], "later");
    assert!(payload.get("body").is_none(), "unchanged fields are not listed: {payload}");
    // Nothing to change, or an empty title: refused.
    assert_eq!(home.run(&["kanban", "edit", &id]).status.code(), Some(2));
    assert_eq!(home.run(&["kanban", "edit", &id, "--title", " "]).status.code(), Some(2));

    // rm takes it off the board; the event log keeps the removal.
    home.ok(&["kanban", "rm", &id]);
    assert_eq!(home.run(&["kanban", "show", &id]).status.code(), Some(2));
    assert!(home.json(&["kanban", "ls"]).as_array().unwrap().is_empty());
    let db = rusqlite::Connection::open(home.path().join("berth-kanban.db")).unwrap();
    let kinds: Vec<String> = db
        .prepare("SELECT kind FROM task_events WHERE task_id = ?1 ORDER BY id")
        .unwrap()
        .query_map([&id], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(kinds.last().map(String::as_str), Some("removed"), "{kinds:?}");
    assert_eq!(home.run(&["kanban", "rm", &id]).status.code(), Some(2));
}

/// Asserts `args` fail with exit 2 and one `berth:` line holding `words`.
fn refused(home: &Home, args: &[&str], words: &str) {
    let out = home.run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.starts_with("berth: ") && err.contains(words), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn create_refuses_a_typo_assignee_and_a_task_the_built_in_worker_cannot_run() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    refused(&home, &["kanban", "create", "t", "--assignee", "alpah", "--command", "true"], "no profile \"alpah\"");
    refused(&home, &["kanban", "create", "t", "--assignee", "alpha"], "needs a command");
    refused(&home, &["kanban", "create", "t", "--assignee", "alpha", "--command", "  "], "needs a command");
    refused(&home, &["kanban", "create", "t"], "--command");
    assert!(home.json(&["kanban", "ls"]).as_array().unwrap().is_empty(), "nothing was created");

    // The ways out: a profile made later, and an external worker that needs no command.
    let later = create_task(&home, &["later", "--assignee", "beta", "--allow-unknown-assignee", "--command", "true"]);
    assert_eq!(home.json(&["kanban", "show", &later])["task"]["assignee"], "beta");
    let external = ["-c", "kanban.worker_command=my-agent {task_id}"];
    let agent = home.json(&[external[0], external[1], "kanban", "create", "for an agent", "--assignee", "alpha"]);
    assert!(agent["command"].is_null(), "{agent}");

    // edit refuses to clear the command the built-in worker needs, and allows it for an external worker.
    refused(&home, &["kanban", "edit", &later, "--command", ""], "needs a command");
    assert_eq!(home.json(&["kanban", "show", &later])["task"]["command"], "true");
    let t = home.json(&[external[0], external[1], "kanban", "edit", &later, "--command", ""]);
    assert!(t["command"].is_null() || t["command"] == "", "{t}");
    // An edit that keeps a task command-less is refused too; one that gives it a command is the fix.
    let id = agent["id"].as_str().unwrap();
    refused(&home, &["kanban", "edit", id, "--title", "renamed"], "needs a command");
    assert_eq!(home.json(&["kanban", "show", id])["task"]["title"], "for an agent");
    let t = home.json(&["kanban", "edit", id, "--title", "renamed", "--command", "echo fixed"]);
    assert_eq!((&t["title"], &t["command"]), (&"renamed".into(), &"echo fixed".into()), "{t}");
    // A finished task may be edited as it is (its record, not its future).
    home.ok(&["kanban", "complete", &later]);
    home.ok(&["kanban", "edit", &later, "--title", "done and renamed"]);
}

#[test]
fn explain_names_the_assignee_of_deferred_tasks() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    create_task(&home, &["first", "--assignee", "alpha", "--command", "true", "--priority", "1"]);
    let waiting = create_task(&home, &["second", "--assignee", "alpha", "--command", "true"]);
    let c = ["-c", "kanban.max_in_progress=1"];
    let v = home.json(&[c[0], c[1], "kanban", "dispatch", "--dry-run", "--explain"]);
    let row = v["explain"].as_array().unwrap().iter().find(|e| e["task_id"] == waiting.as_str()).unwrap().clone();
    assert_eq!((&row["code"], &row["assignee"]), (&"deferred_max_in_progress".into(), &"alpha".into()), "{v}");
    assert_eq!(v["deferred"][0]["assignee"], "alpha", "{v}");
    let text = home.ok(&[c[0], c[1], "kanban", "dispatch", "--dry-run", "--explain"]);
    assert!(text.contains(&format!("Deferred (deferred_max_in_progress): {waiting} (alpha)")), "{text}");
    // The table's row: the code, the assignee and why in words, as the dashboard's card says it.
    let line = text.lines().find(|l| l.starts_with(&waiting)).unwrap();
    assert!(text.lines().any(|l| l.starts_with("TASK") && l.ends_with("ASSIGNEE  WHY")), "{text}");
    assert!(line.contains("  alpha  ") && line.ends_with("kanban.max_in_progress reached (1 of 1 running)"), "{text}");
}

#[test]
fn gateway_status_text_shows_what_json_has() {
    let home = Home::new();
    home.ok(&["kanban", "board", "create", "default"]);
    let gateway = Gateway::start(&home, &[]);
    let v = wait_until("a tick", Duration::from_secs(30), || {
        let v = home.gateway_status();
        if v["ticks"].as_u64().unwrap_or(0) >= 1 { Ok(v) } else { Err(v) }
    });
    let text = home.ok(&["gateway", "status"]);
    for want in [
        format!("running:      yes (pid {})", v["pid"]),
        format!("started at:   {}", v["started_at"].as_str().unwrap()),
        format!("interval:     {} s", v["interval_seconds"]),
        "dispatching:  yes".to_owned(),
        "  board default: ".to_owned(),
    ] {
        assert!(text.contains(&want), "{want:?} missing from:\n{text}");
    }
    assert!(text.lines().any(|l| l.starts_with("last tick:    ") && l.contains("(spawned ")), "{text}");
    assert_eq!(gateway.stop().0, Some(0));
    let v = home.gateway_status();
    assert_eq!((&v["state"], &v["dispatching"]), (&"stopped".into(), &false.into()), "{v}");
    let out = home.run(&["gateway", "status"]);
    assert_eq!(out.status.code(), Some(3), "a stopped gateway's status is not success");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("running:      no: stopped") && text.contains("dispatching:  no"), "{text}");
    assert!(text.contains(&format!("stopped at:   {}", v["stopped_at"].as_str().unwrap())), "{text}");
    // No `kanban.worker_exit_outcome` task ran here: no runner serves the home.
    assert!(text.contains("runner:       no") && v["runner_pid"].is_null(), "{text}\n{v}");
}

/// The gateway's log names the task of each line about one: a worker started, its failed run, the task blocked by
/// the failure breaker; with `--json` every line is a JSON object.
#[test]
fn gateway_log_lines_name_their_tasks_and_are_json_lines_with_json() {
    let home = Home::on(&Engine::docker());
    let id = create_task(&home, &["doomed", "--assignee", &home.profile, "--command", "false"]);
    let gateway = Gateway::start(&home, &["--json", "-c", "kanban.failure_limit=1"]);
    wait_until("the task blocked", Duration::from_secs(60), || {
        let v = home.json(&["kanban", "show", &id]);
        if v["task"]["status"] == "blocked" { Ok(()) } else { Err(v) }
    });
    // The lines about the worker's end and the block come from the gateway's reaping of the worker, just after
    // (asserted below; a bare "blocked" would match the tick summary's `auto_blocked=0`).
    let _ = poll(Duration::from_secs(10), || {
        let err = gateway.stderr();
        err.contains(&format!("task {id} blocked")) && err.contains("failed (exit 1)")
    });
    let (code, _, err) = gateway.stop();
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<serde_json::Value> =
        err.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}\n{err}"))).collect();
    let about = |word: &str| {
        lines.iter().any(|l| {
            let m = l["message"].as_str().unwrap_or_default();
            m.contains(&format!("task {id}")) && m.contains(word) && l["time"].is_string() && l["level"].is_string()
        })
    };
    assert!(about("started"), "{err}");
    assert!(about("failed (exit 1)"), "{err}");
    assert!(about("blocked"), "{err}");
}

/// `kanban ls` shows what a task went through (a failed task is not plain `ready`; FAILURES, AGE, STARTED) and
/// hides archived tasks unless asked; task ids are taken by a unique prefix (an ambiguous one is refused in one
/// line naming the candidates); `kanban logs --run N` is the task's own Nth run.
#[test]
fn kanban_ls_shows_failures_and_ages_hides_archived_ids_take_prefixes_runs_count_per_task() {
    let home = Home::on(&Engine::docker());
    let me = home.profile.clone();
    let first = create_task(&home, &["first", "--assignee", &me, "--command", "true"]);
    let failing = create_task(&home, &["failing", "--assignee", &me, "--command", "false"]);
    let old = create_task(&home, &["old", "--assignee", &me, "--command", "true"]);
    let task = |id: &str| home.json(&["kanban", "show", id])["task"].clone();
    home.ok(&["kanban", "dispatch", "--task", &first]);
    wait_until("first to finish", Duration::from_secs(60), || {
        let t = task(&first);
        if t["status"] == "done" { Ok(()) } else { Err(t) }
    });
    // By prefixes: `t_` and four characters, and four characters alone.
    home.ok(&["kanban", "dispatch", "--task", &failing[..6]]);
    wait_until("failing to fail once", Duration::from_secs(60), || {
        let t = task(&failing);
        if t["consecutive_failures"] == 1 && t["status"] == "ready" { Ok(()) } else { Err(t) }
    });
    home.ok(&["kanban", "archive", &old[2..6]]);
    let text = home.ok(&["kanban", "ls"]);
    let header = text.lines().next().unwrap();
    assert!(header.contains("FAILURES") && header.contains("AGE") && header.contains("STARTED"), "{text}");
    let row = text.lines().find(|l| l.starts_with(&failing)).unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("ready (failed 1x)") && row.matches(" ago").count() == 2, "{text}");
    assert!(!text.contains(&old), "an archived task listed by default:\n{text}");
    assert!(home.ok(&["kanban", "ls", "--archived"]).contains(&old));
    assert!(!home.json(&["kanban", "ls"]).to_string().contains(&old));
    assert!(home.json(&["kanban", "ls", "--archived"]).to_string().contains(&old));
    // The failing task's first run is the board's second: `--run` takes the id `show` prints, the same number the log
    // and the dashboard print; its number within the task is refused.
    let show = home.json(&["kanban", "show", &failing[2..6]]);
    let run_id = show["runs"][0]["id"].as_i64().unwrap();
    assert_eq!((show["runs"][0]["number"].as_i64(), run_id > 1), (Some(1), true), "{show}");
    let part = home.ok(&["kanban", "logs", &failing, "--run", &run_id.to_string()]);
    assert!(part.contains(&format!("confirmed run {run_id} of {failing}")), "{part}");
    let text = home.ok(&["kanban", "show", &failing]);
    assert!(text.lines().any(|l| l.trim_start().starts_with(&format!("{run_id} "))), "{text}");
    let out = home.run(&["kanban", "logs", &failing, "--run", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("its runs: {run_id}")), "{err}");
    // Enough tasks that two ids share four characters (2000 of 65536 prefixes: all but certain).
    let lines: String = (0..2000).map(|i| format!("{{\"title\":\"bulk {i}\",\"command\":\"true\"}}\n")).collect();
    let file = home.path().join("bulk.jsonl");
    std::fs::write(&file, lines).unwrap();
    home.ok(&["kanban", "create", "--from", file.to_str().unwrap()]);
    let ids: Vec<String> =
        home.json(&["kanban", "ls"]).as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect();
    let mut by_prefix = std::collections::BTreeMap::<&str, Vec<&String>>::new();
    for id in &ids {
        by_prefix.entry(&id[..6]).or_default().push(id);
    }
    let (prefix, shared) = by_prefix.iter().find(|(_, v)| v.len() > 1).expect("two ids share four characters");
    let out = home.run(&["kanban", "show", prefix]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.lines().count() == 1 && err.contains("is ambiguous"), "{err}");
    // The candidates, sorted, the first eight by name.
    let mut sorted = shared.clone();
    sorted.sort();
    assert!(sorted.iter().take(8).all(|id| err.contains(id.as_str())), "{err}");
}

/// `berth status` is one screen on the gateway, the hosts, each board's counts, the sandboxes and the problems, with
/// the same in `--json`; its state words are coloured on a terminal only, and never with `NO_COLOR`. `berth man`
/// prints the man page.
#[test]
fn status_overviews_everything_coloured_only_on_a_terminal_and_man_prints_the_page() {
    let home = Home::on(&Engine::docker());
    let me = home.profile.clone();
    let stuck = create_task(&home, &["stuck", "--assignee", &me, "--command", "true"]);
    home.ok(&["kanban", "block", &stuck, "--reason", "waiting for review"]);
    create_task(&home, &["next", "--assignee", &me, "--command", "true"]);
    home.ok(&["sandbox", "ensure", "--task", "box"]);
    let v = home.json(&["status"]);
    assert_eq!(v["gateway"]["state"], "stopped", "{v}");
    assert_eq!((&v["boards"]["default"]["blocked"], &v["boards"]["default"]["ready"]), (&1.into(), &1.into()), "{v}");
    // The engine-facts probe of a new home may still have a short-lived container of its own (`created`).
    assert_eq!(v["sandboxes"]["by_state"]["running"], 1, "{v}");
    let problem = v["problems"].as_array().unwrap().iter().find(|p| p["task"] == stuck.as_str()).cloned();
    assert_eq!(problem.map(|p| p["kind"].clone()), Some("blocked".into()), "{v}");
    assert!(v["hosts"]["this_host"].is_string(), "{v}");
    let text = home.ok(&["status"]);
    for want in ["gateway:    stopped", "board default: 1 blocked, 1 ready", &stuck] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    assert!(text.lines().any(|l| l.starts_with("sandboxes:  ") && l.contains("1 running")), "{text}");
    assert!(!text.contains('\x1b'), "colour into a pipe: {text:?}");
    let on_terminal = |no_colour: bool| {
        let (master, slave) = pty(24, 120);
        let mut cmd = home.cmd();
        if no_colour {
            cmd.env("NO_COLOR", "1");
        }
        let mut child = cmd.arg("status").stdout(slave).spawn().expect("berth runs");
        let seen = collect(master);
        assert!(wait_within(&mut child, Duration::from_secs(20)).success());
        saw(&seen, "sandboxes:", Duration::from_secs(5));
        String::from_utf8_lossy(&seen.lock().unwrap()).into_owned()
    };
    let coloured = on_terminal(false);
    assert!(coloured.contains("\x1b[31mstopped\x1b[0m") && coloured.contains("\x1b[31mblocked\x1b[0m"), "{coloured:?}");
    let plain = on_terminal(true);
    assert!(plain.contains("gateway:    stopped") && !plain.contains('\x1b'), "NO_COLOR: {plain:?}");
    let man = home.ok(&["man"]);
    assert!(man.contains(".TH berth 1") && man.contains("kanban") && man.contains(".SH SYNOPSIS"), "{man}");
}

/// The default image has the small tools a person reaches for (and `berth --help`'s own `make test` example needs):
/// each runs in a sandbox, `file` with its database, vim without a startup error, pip3 on the image's python3.
#[test]
fn the_default_image_has_tty_stty_make_vim_file_and_pip3() {
    let home = Home::on(&Engine::docker());
    let script = "for p in tty stty make vi vim file pip3; do command -v $p >/dev/null || echo missing $p; done; \
                  file /bin/sh; make --version | head -n 1; vim -es -c q </dev/null && echo vim ok; pip3 --version";
    let out = home.run(&["run", "--task", "tools", "--", "bash", "-c", script]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && !text.contains("missing"), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for want in ["/bin/sh: ", "GNU Make", "vim ok", "pip "] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
}

#[test]
fn reap_dry_run_gives_one_reason_in_words_per_row_and_says_when_there_is_nothing() {
    let home = Home::on(&Engine::docker());
    assert_eq!(home.ok(&["sandbox", "reap", "--dry-run"]), "nothing to reap\n");
    home.ok(&["sandbox", "ensure", "--task", "old"]);
    let id = home.containers().remove(0);
    assert!(home.docker(&["stop", "-t", "0", &id]).status.success());
    let text = home.ok(&["sandbox", "reap", "--dry-run", "--max-age", "0"]);
    let row = text.lines().find(|l| l.contains("would remove")).unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("exited ") && row.contains(" ago, past the threshold"), "{text}");
    let text = home.ok(&["sandbox", "reap", "--dry-run", "--max-age", "3600"]);
    let row = text.lines().find(|l| l.contains("kept")).unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("younger than the 1h 0m threshold") && !row.contains('{'), "{text}");
}

#[test]
fn the_gateway_warns_once_about_a_task_that_can_never_run() {
    let home = Home::new();
    let id = create_task(&home, &["lost", "--assignee", "ghost", "--allow-unknown-assignee", "--command", "true"]);
    // A command-less task, made while an external worker was configured; the gateway runs the built-in one.
    let bare = create_task(&home, &["bare", "-c", "kanban.worker_command=my-agent", "--assignee", &home.profile]);
    let gateway = Gateway::start(&home, &[]);
    wait_until("the gateway to tick three times", Duration::from_secs(30), || {
        home.gateway_status()["ticks"].as_u64().unwrap_or(0) >= 3
    });
    let (code, _, err) = gateway.stop();
    assert_eq!(code, Some(0));
    // The never-run warnings (the gateway's other lines about these tasks, e.g. `started`, name them too).
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains(&format!("task {id} on board"))).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains("\"ghost\", which is no profile here: it will never run"), "{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains(&format!("task {bare} on board"))).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains("has no command and the built-in worker"), "{err}");
}

/// Whether `s` is an RFC 3339 date-time: `YYYY-MM-DDTHH:MM:SS`, optional fraction, then `Z` or `±HH:MM`.
fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let shape = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && matches!(b[10], b'T' | b't')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !shape {
        return false;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &frac[n..];
    }
    let zone = rest.as_bytes();
    rest == "Z"
        || rest == "z"
        || (zone.len() == 6
            && matches!(zone[0], b'+' | b'-')
            && zone[1..3].iter().all(u8::is_ascii_digit)
            && zone[3] == b':'
            && zone[4..6].iter().all(u8::is_ascii_digit))
}

/// Whether a JSON key names a point in time.
fn is_timestamp_key(key: &str) -> bool {
    key.ends_with("_at")
        || key.ends_with("_since")
        || ["at", "created", "finished", "expires", "claim_expires"].contains(&key)
}

/// Walks `v`, checking every timestamp-named field is null or RFC 3339; records each key seen with a value.
fn check_timestamps(cmd: &str, v: &serde_json::Value, seen: &mut std::collections::BTreeSet<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, x) in map {
                if is_timestamp_key(k) {
                    match x {
                        // `created: true` (board create) is a flag, not a time.
                        serde_json::Value::Null | serde_json::Value::Bool(_) => {}
                        serde_json::Value::String(s) if is_rfc3339(s) => {
                            seen.insert(k.clone());
                        }
                        other => panic!("{cmd}: {k} is {other}, not RFC 3339"),
                    }
                }
                check_timestamps(cmd, x, seen);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|x| check_timestamps(cmd, x, seen)),
        _ => {}
    }
}

#[test]
fn rfc3339_checker_accepts_and_refuses_what_it_should() {
    for good in ["2026-11-26T05:51:42Z", "2026-11-26T05:51:42.123456789Z", "2026-11-26T05:51:42+01:00"] {
        assert!(is_rfc3339(good), "{good}");
    }
    for bad in ["1795672112055", "2026-11-26 05:51:42", "2026-11-26T05:51:42", "2026-11-26T05:51:42.Z", "yesterday"] {
        assert!(!is_rfc3339(bad), "{bad}");
    }
}

#[test]
fn every_timestamp_in_every_json_output_is_rfc3339() {
    let home = Home::on(&Engine::docker());
    let me = home.profile.clone();
    let mut seen = std::collections::BTreeSet::new();
    let mut check = |home: &Home, args: &[&str]| {
        let mut all = args.to_vec();
        all.push("--json");
        let out = home.run(&all);
        // `gateway status` of a stopped gateway exits 3 and still prints its document.
        let stopped_gateway = args == ["gateway", "status"] && out.status.code() == Some(3);
        assert!(out.status.success() || stopped_gateway, "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let out = String::from_utf8_lossy(&out.stdout).into_owned();
        // One document, or one per line (`kanban tail`).
        let docs: Vec<serde_json::Value> = match serde_json::from_str(&out) {
            Ok(v) => vec![v],
            Err(_) => {
                out.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{args:?}: {e}: {l}"))).collect()
            }
        };
        assert!(!docs.is_empty(), "{args:?} printed nothing");
        for v in &docs {
            check_timestamps(&format!("{args:?}"), v, &mut seen);
        }
        docs.into_iter().next().unwrap()
    };

    // The board: a task that runs to its end under a gateway (claims, confirmation, run rows, events).
    check(&home, &["kanban", "board", "create", "second"]);
    let id = check(&home, &["kanban", "create", "stamped", "--assignee", &me, "--command", "echo hi"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    check(&home, &["kanban", "create", "waiting", "--assignee", &me, "--command", "true", "--board", "second"]);
    check(&home, &["kanban", "dispatch", "--dry-run", "--explain"]);
    check(&home, &["kanban", "dispatch", "--all-boards", "--dry-run"]);
    check(&home, &["kanban", "board", "ls"]);
    check(&home, &["kanban", "edit", &id, "--priority", "3"]);
    let gateway = Gateway::start(&home, &[]);
    wait_until("the task to finish", Duration::from_secs(60), || {
        let v = home.json(&["kanban", "show", &id]);
        if v["task"]["status"] == "done" { Ok(()) } else { Err(v) }
    });
    check(&home, &["gateway", "status"]);
    assert_eq!(gateway.stop().0, Some(0));
    check(&home, &["gateway", "status"]);
    check(&home, &["kanban", "show", &id]);
    check(&home, &["kanban", "ls"]);
    check(&home, &["kanban", "ls", "--all-boards"]);
    check(&home, &["kanban", "tail", &id, "--no-follow"]);
    check(&home, &["kanban", "logs", &id]);
    check(&home, &["kanban", "dispatch"]);

    // Sandboxes: running, then stopped (the engine's own times).
    let ensured = check(&home, &["sandbox", "ensure", "--task", "stamps"]);
    let cid = ensured["id"].as_str().unwrap().to_owned();
    check(&home, &["sandbox", "ls"]);
    check(&home, &["sandbox", "top", &cid]);
    assert!(home.docker(&["stop", "-t", "0", &cid]).status.success());
    check(&home, &["sandbox", "ls", "--size"]);
    check(&home, &["sandbox", "reap", "--dry-run", "--max-age", "0"]);
    check(&home, &["sandbox", "rm", "--task", "stamps"]);

    // The walk met the timestamps of each kind (so it cannot pass by seeing none).
    for key in [
        "created_at",
        "started_at",
        "completed_at",
        "confirmed_at",
        "ended_at",
        "expires",
        "at",
        "stopped_at",
        "created",
        "finished",
    ] {
        assert!(seen.contains(key), "no {key} with a value was seen: {seen:?}");
    }
}

#[test]
fn sandbox_logs_shows_the_containers_own_output_by_task_or_id_and_follows_until_it_stops() {
    let home = Home::on(&Engine::docker());
    home.ok(&["run", "--task", "L", "--", "sh", "-c", "echo one > /proc/1/fd/1; echo two > /proc/1/fd/2"]);
    let out = home.run(&["sandbox", "logs", "--task", "L"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one\n", "stdout stays stdout");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "two\n", "stderr stays stderr");
    let id = home.containers().remove(0);
    let v = home.json(&["sandbox", "logs", &id[..12]]);
    assert_eq!(v["id"], id.as_str());
    // The engine keeps each stream's order; between the two streams, writes this close may come either way.
    let mut lines: Vec<String> =
        v["lines"].as_array().unwrap().iter().map(|l| format!("{}:{}", l["stream"], l["line"])).collect();
    lines.sort();
    assert_eq!(lines, ["\"stderr\":\"two\"", "\"stdout\":\"one\""], "{v}");

    // -f prints what comes, and ends (exit 0) when the sandbox stops.
    let mut follow = home
        .cmd()
        .args(["sandbox", "logs", "-f", "--task", "L"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("berth runs");
    let seen = collect(follow.stdout.take().unwrap());
    assert!(saw(&seen, "one\n", Duration::from_secs(20)), "the old output first");
    home.ok(&["run", "--task", "L", "--", "sh", "-c", "echo three > /proc/1/fd/1"]);
    assert!(saw(&seen, "three\n", Duration::from_secs(20)), "{:?}", String::from_utf8_lossy(&seen.lock().unwrap()));
    let v = home.json(&["sandbox", "logs", "--task", "L", "--tail", "1"]);
    assert_eq!(v["lines"], serde_json::json!([{"stream": "stdout", "line": "three"}]), "{v}");
    assert!(home.docker(&["stop", "-t", "1", &id]).status.success());
    assert!(wait_within(&mut follow, Duration::from_secs(30)).success());

    // Mistakes: one line, exit 2.
    refused(&home, &["sandbox", "logs", "nope"], "no sandbox \"nope\"");
    refused(&home, &["sandbox", "logs", "-f", "--task", "L", "--json"], "drop --json");
}

#[test]
fn long_work_shows_progress_on_a_terminal_and_nothing_when_stderr_is_not_one() {
    let home = Home::on(&Engine::docker());
    // Workers that ignore SIGTERM: each stop waits out the whole grace period (5 s) before its SIGKILL.
    let stubborn = "kanban.worker_command=trap '' TERM; sleep 300";
    let started = |home: &Home, title: &str| -> String {
        let id = create_task(home, &[title, "--assignee", &home.profile, "--command", "true"]);
        home.ok(&["-c", stubborn, "kanban", "dispatch", "--task", &id]);
        wait_until(&format!("the worker of {id} to confirm its run"), Duration::from_secs(20), || {
            home.json(&["kanban", "show", &id])["task"]["confirmed_at"].is_string()
        });
        id
    };

    // stderr not a terminal: not one byte of progress.
    let quiet = started(&home, "quiet");
    let out = home.run(&["kanban", "block", &quiet]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("blocked {quiet}\n"));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    home.ok(&["sandbox", "ensure", "--task", "box"]);
    let out = home.run(&["sandbox", "rm", "--task", "box"]);
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));

    // stderr a terminal: the note shows at once, counts the seconds in place, and is erased at the end; stdout is
    // untouched.
    let shown = started(&home, "shown");
    let (master, slave) = pty(24, 120);
    let mut child =
        home.cmd().args(["kanban", "block", &shown]).stdout(Stdio::piped()).stderr(slave).spawn().expect("berth runs");
    let seen = collect(master);
    assert!(wait_within(&mut child, Duration::from_secs(30)).success());
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    assert_eq!(stdout, format!("blocked {shown}\n"));
    let note = format!("berth: stopping the worker of {shown} … ");
    assert!(
        saw(&seen, &format!("{note}0s"), Duration::from_secs(5)),
        "{:?}",
        String::from_utf8_lossy(&seen.lock().unwrap())
    );
    // Counting in place: a later second rewritten over the first (which one depends on how the machine kept up:
    // a starved second ticks late and the next one at once).
    let counted = |seen: &Arc<Mutex<Vec<u8>>>| {
        let text = String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
        (2..=6).any(|n| text.contains(&format!("\r\x1b[K{note}{n}s")))
    };
    assert!(
        poll(Duration::from_secs(6), || counted(&seen)).is_ok(),
        "it counts while it waits: {:?}",
        String::from_utf8_lossy(&seen.lock().unwrap())
    );
    wait_until("the note to be erased at the end", Duration::from_secs(5), || {
        String::from_utf8_lossy(&seen.lock().unwrap()).ends_with("\r\x1b[K")
    });

    // The same for a sandbox being stopped and removed.
    home.ok(&["sandbox", "ensure", "--task", "box"]);
    let (master, slave) = pty(24, 120);
    let mut child =
        home.cmd().args(["sandbox", "rm", "--task", "box"]).stdout(Stdio::null()).stderr(slave).spawn().unwrap();
    let seen = collect(master);
    assert!(wait_within(&mut child, Duration::from_secs(60)).success());
    assert!(
        saw(&seen, "berth: releasing berth-", Duration::from_secs(5)),
        "{:?}",
        String::from_utf8_lossy(&seen.lock().unwrap())
    );
}
