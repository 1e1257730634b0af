//! The operator's cockpit, second pass (issue 25), through the real binary: nothing destructive by default, and a
//! mistake (a typo, a bad number, a title with a line break, a cap that is not a number) caught where it is made,
//! in one line that says what to type instead.

use std::process::Output;

use crate::support::{Engine, Home, require_docker};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs berth, asserts the exit code and that stderr is one `berth: ` line holding every one of `words`; returns
/// that line.
fn refused(home: &Home, args: &[&str], code: i32, words: &[&str]) -> String {
    let out = home.run(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.starts_with("berth: ") && err.trim_end().lines().count() == 1, "{args:?}: not one line: {err}");
    for w in words {
        assert!(err.contains(w), "{args:?}: no {w:?} in {err}");
    }
    err
}

fn task(home: &Home, args: &[&str]) -> String {
    let mut all = vec!["kanban", "create"];
    all.extend_from_slice(args);
    home.json(&all)["id"].as_str().unwrap().to_owned()
}

#[test]
fn sandbox_rm_needs_a_sandbox_named_and_a_missing_one_fails() {
    require_docker();
    let home = Home::on(&Engine::docker());
    let id = home.json(&["sandbox", "ensure"])["id"].as_str().unwrap().to_owned();
    // No argument: a usage error saying what to pass; the default task's sandbox stays.
    refused(&home, &["sandbox", "rm"], 2, &["--task ID", "sandbox ls"]);
    assert_eq!(home.inspect(&id, "{{.State.Running}}"), "true", "`sandbox rm` with no argument removed a sandbox");
    refused(&home, &["sandbox", "rm", "--task", "missing"], 1, &["no sandbox for task \"missing\""]);
    refused(&home, &["sandbox", "rm", "--task", "missing", "--json"], 1, &["missing"]);
    home.ok(&["sandbox", "rm", "--task", "default"]);
    assert!(home.containers().is_empty());
    // Releasing what is not there stays done.
    home.ok(&["sandbox", "release", "--task", "missing"]);
}

#[test]
fn config_file_typos_are_named_and_a_cap_that_is_not_a_number_refuses_commands() {
    let home = Home::new();
    let file = home.path().join("config.yaml");
    let shown = file.display().to_string();
    // Keys hermes-agent reads in berth's sections, and its own sections, are no typos.
    let hermes = "terminal:\n  backend: docker\n  env_type: docker\n  ssh_host: example\n  persistent_shell: true\n\
                  kanban:\n  auto_decompose: true\n  orchestrator_profile: ''\nmodel:\n  default: some/model\n";
    std::fs::write(&file, hermes.replace("  auto_decompose", "  max_in_progress: four\n  auto_decompose")).unwrap();
    let err = refused(&home, &["kanban", "ls"], 2, &["kanban.max_in_progress", "\"four\"", &shown, "config unset"]);
    assert!(!err.contains("no cap"), "{err}");
    let out = home.run(&["kanban", "ls"]);
    assert!(stdout(&out).is_empty(), "a refused command printed: {}", stdout(&out));
    // `config` still runs (it is how the cap is fixed), and says what is wrong.
    let out = home.run(&["config", "unset", "kanban.max_in_progress"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(home.run(&["kanban", "ls"]).stderr.is_empty(), "hermes-agent's keys were warned about");
    // A typo: one warning naming the file, the key and the nearest setting.
    std::fs::write(&file, hermes.replace("  backend:", "  timout: 90\n  backend:")).unwrap();
    let out = home.run(&["kanban", "ls"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&shown) && err.contains("terminal.timout") && err.contains("did you mean terminal.timeout?"),
        "{err}"
    );
    // A cap below 1 is hermes-agent's "no cap": a warning, not a refusal.
    std::fs::write(&file, "kanban:\n  max_in_progress_per_profile: 0\n").unwrap();
    let out = home.run(&["kanban", "ls"]);
    assert!(out.status.success() && stderr(&out).contains("no cap"), "{}", stderr(&out));
    // The same for the environment, named as the variable.
    let out = home.cmd().env("KANBAN_MAX_SPAWN", "lots").args(["kanban", "ls"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("env KANBAN_MAX_SPAWN"), "{}", stderr(&out));
}

#[test]
fn mistyped_values_get_the_nearest_name() {
    let home = Home::new();
    home.ok(&["profile", "create", "ralph"]);
    refused(
        &home,
        &["kanban", "create", "x", "--assignee", "ncalph", "--command", "true"],
        2,
        &["did you mean ralph?"],
    );
    refused(&home, &["kanban", "ls", "--status", "runing"], 2, &["did you mean running?"]);
    for args in [&["config", "set", "terminal.timout", "5"][..], &["config", "get", "terminal.timout"][..]] {
        refused(&home, args, 2, &["did you mean terminal.timeout?"]);
    }
    // An empty listing for an assignee nobody has says so on stderr; the table stays on stdout.
    let out = home.run(&["kanban", "ls", "--assignee", "nobody"]);
    assert!(out.status.success());
    assert!(stderr(&out).contains("no task is assigned to \"nobody\" and no profile has that name"), "{out:?}");
    let out = home.run(&["kanban", "ls", "--assignee", "ralp"]);
    assert!(stderr(&out).contains("did you mean ralph?"), "{out:?}");
    let out = home.run(&["kanban", "ls", "--assignee", "ralph"]);
    assert!(out.status.success() && out.stderr.is_empty(), "a profile with no tasks is no mistake: {out:?}");
}

/// A command berth does not have is one line naming the one meant (other tools' words too: `list`, `remove`,
/// `gateway start`) and the commands there are; nothing is written.
#[test]
fn unknown_commands_are_one_line_with_the_one_meant() {
    let home = Home::new();
    for (args, meant, among) in [
        (&["sandbox", "list"][..], "ls", "ls, top"),
        (&["kanban", "list"][..], "ls", "create"),
        (&["profile", "list"][..], "ls", "create, ls, rm"),
        (&["sandbox", "remove", "--task", "x"][..], "rm", "stop, rm"),
        (&["sandboxes", "ls"][..], "sandbox", "kanban"),
        (&["gateway", "start"][..], "run", "run, status, token"),
    ] {
        let err = refused(&home, args, 2, &[&format!("(did you mean {meant}?)"), "its commands: ", among]);
        assert!(err.contains(&format!("unknown command {:?}", args[usize::from(args[0] != "sandboxes")])), "{err}");
    }
    assert!(!home.path().join("berth-kanban.db").exists(), "a refused command made the board");
}

#[test]
fn number_flags_name_the_flag_and_the_range() {
    let home = Home::new();
    for (args, flag) in [
        (&["kanban", "create", "x", "--command", "true", "--priority", "high"][..], "--priority"),
        (&["kanban", "dispatch", "--max", "-1"][..], "--max"),
        (&["kanban", "dispatch", "--failure-limit", "0"][..], "--failure-limit"),
        (&["run", "--timeout", "-1", "--", "true"][..], "--timeout"),
        (&["kanban", "create", "x", "--command", "true", "--max-runtime", "0"][..], "--max-runtime"),
        (&["kanban", "create", "x", "--command", "true", "--max-retries", "-2"][..], "--max-retries"),
        (&["kanban", "edit", "t_x", "--priority", "1.5"][..], "--priority"),
    ] {
        let err = refused(&home, args, 2, &[flag, "expected"]);
        assert!(!err.contains("invalid digit") && !err.contains("-- -"), "{err}");
    }
    let err = refused(&home, &["kanban", "create", "x", "--command", "true", "--max-runtime", "0"], 2, &["at least 1"]);
    assert!(!err.contains("--max-retries"), "names a flag that was not given: {err}");
    assert!(home.json(&["kanban", "ls"]).as_array().unwrap().is_empty(), "a refused create wrote a task");
    // Negative priorities are numbers, not flags.
    task(&home, &["low", "--command", "true", "--priority", "-5"]);
}

#[test]
fn run_takes_a_trailing_command_as_docker_exec_does() {
    require_docker();
    let home = Home::on(&Engine::docker());
    let out = home.run(&["run", "--task", "trail", "--timeout", "60", "echo", "hi", "-n", "--task"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hi -n --task\n", "the command's own flags are the command's");
    assert_eq!(home.ok(&["run", "--task", "trail", "--", "echo", "dash"]), "dash\n");
    home.ok(&["sandbox", "rm", "--task", "trail"]);
}

#[test]
fn titles_are_one_line_and_settings_are_checked_when_set() {
    let home = Home::new();
    refused(&home, &["kanban", "create", "two\nlines", "--command", "true"], 2, &["one line", "--body"]);
    let id = task(&home, &["one line", "--command", "true"]);
    refused(&home, &["kanban", "edit", &id, "--title", "a\r\nb"], 2, &["one line"]);
    let from = home.path().join("tasks.jsonl");
    std::fs::write(
        &from,
        "{\"title\": \"ok\", \"command\": \"true\"}\n{\"title\": \"x\\ny\", \"command\": \"true\"}\n",
    )
    .unwrap();
    refused(&home, &["kanban", "create", "--from", from.to_str().unwrap()], 2, &["one line"]);
    assert_eq!(home.json(&["kanban", "ls"]).as_array().unwrap().len(), 1, "a refused title was written");

    let file = home.path().join("config.yaml");
    refused(&home, &["config", "set", "kanban.database_url", "postgres//oops"], 2, &["kanban.database_url"]);
    assert!(!std::fs::read_to_string(&file).unwrap_or_default().contains("oops"), "a refused URL was written");
    refused(&home, &["config", "set", "terminal.docker_env", "x"], 2, &[r#"'{"NAME": "value"}'"#]);
    refused(&home, &["config", "set", "terminal.docker_volumes", "/a:/b"], 2, &["/host/dir:/container/dir:ro"]);
    refused(
        &home,
        &["config", "set", "kanban.max_in_progress_per_profile_overrides", "[1]"],
        2,
        &[r#"{"PROFILE": 2}"#],
    );
}

#[test]
fn config_set_and_get_mask_the_board_password() {
    let home = Home::new();
    let url = "postgres://berth:hunter2secret@db.invalid:5432/berth";
    // The URL with its password comes on standard input (`-`): on the command line it is refused.
    let with_input = |args: &[&str]| {
        use std::io::Write;
        let mut child = home
            .cmd()
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        writeln!(child.stdin.take().unwrap(), "{url}").unwrap();
        child.wait_with_output().unwrap()
    };
    for args in [
        &["config", "set", "kanban.database_url", "-"][..],
        &["config", "set", "kanban.database_url", "-", "--json"][..],
        &["config", "get", "kanban.database_url"][..],
        &["config", "get", "kanban.database_url", "--json"][..],
    ] {
        let out = if args[1] == "set" { with_input(args) } else { home.run(args) };
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let printed = format!("{}{}", stdout(&out), stderr(&out));
        assert!(!printed.contains("hunter2secret") && printed.contains("berth:***@db.invalid"), "{args:?}: {printed}");
    }
    assert_eq!(home.ok(&["config", "get", "kanban.database_url", "--reveal"]).trim(), url);
}

#[test]
fn blocked_and_archived_tasks_say_what_to_do_next() {
    let home = Home::new();
    let id = task(&home, &["stuck", "--command", "true", "--assignee", &home.profile]);
    home.ok(&["kanban", "block", &id, "--reason", "needs a fix"]);
    let out = home.ok(&["kanban", "edit", &id, "--command", "true --fixed"]);
    assert!(out.contains("still blocked") && out.contains(&format!("berth kanban unblock {id}")), "{out}");
    // Nothing ready: the explain table says why it is empty; for the task itself, in words.
    let out = home.ok(&["kanban", "dispatch", "--dry-run", "--explain"]);
    assert!(out.contains("no ready task") && out.contains("--status blocked"), "{out}");
    let out = home.ok(&["kanban", "dispatch", "--dry-run", "--explain", "--task", &id]);
    assert!(out.contains("the task is blocked"), "{out}");
    // A dry run is worded as what a tick would do.
    home.ok(&["kanban", "unblock", &id]);
    let out = home.ok(&["kanban", "dispatch", "--dry-run"]);
    assert!(out.starts_with("Dry run: ") && out.contains("Would spawn:  1\n") && !out.contains("(dry)"), "{out}");
    refused(&home, &["kanban", "retry", &id], 2, &["kanban unblock"]);
    home.ok(&["kanban", "archive", &id]);
    let out = home.run(&["kanban", "logs", &id]);
    assert!(stderr(&out).contains("removed when the task was archived"), "{}", stderr(&out));
}

#[test]
fn profile_name_rules_are_the_same_in_help_and_in_refusals() {
    let home = Home::new();
    let help = home.ok(&["profile", "create", "--help"]);
    let err = refused(&home, &["profile", "create", "a b"], 2, &[]);
    for allowed in ["'_'", "'.'", "'-'"] {
        let plain = allowed.trim_matches('\'');
        assert!(err.contains(allowed), "the refusal does not allow {plain}: {err}");
        assert!(help.contains(&format!("`{plain}`")), "the help does not allow {plain}: {help}");
    }
    home.ok(&["profile", "create", "a.b"]);
}

#[test]
fn sandbox_reap_names_its_first_column_for_folders_too() {
    require_docker();
    let home = Home::on(&Engine::docker());
    home.ok(&["run", "--task", "left", "--", "true"]);
    home.ok(&["sandbox", "rm", "--task", "left", "--keep-files"]);
    let dry = home.ok(&["sandbox", "reap", "--dry-run", "--max-age", "0"]);
    assert!(dry.starts_with("CONTAINER OR FOLDER "), "{dry}");
    assert!(dry.lines().any(|l| l.contains("/left-") && l.contains("would remove")), "{dry}");
    home.ok(&["sandbox", "reap", "--max-age", "0"]);
}

#[test]
fn migrate_counts_one_board_as_one_board() {
    let Some(db) = crate::pg::TestDb::create() else {
        eprintln!("skipped: no PostgreSQL test server (BERTH_TEST_POSTGRES_URL)");
        return;
    };
    let home = Home::new();
    task(&home, &["only", "--command", "true"]);
    let out = home.ok(&["kanban", "migrate", "--to", &db.url]);
    assert!(out.contains("(1 board, 1 task, ") && !out.contains("1 boards"), "{out}");
}

/// Found by a new user (issue 25): `--tail x` said "invalid digit found in string" and `--tail -3` was taken for a
/// flag; every number flag now names itself and what it expects, and a negative value reaches that check.
#[test]
fn every_number_flag_names_what_it_expects() {
    let home = Home::new();
    for (args, flag) in [
        (&["kanban", "logs", "t_x", "--tail", "x"][..], "--tail"),
        (&["kanban", "logs", "t_x", "--tail", "-3"][..], "--tail"),
        (&["kanban", "logs", "t_x", "--run", "0"][..], "--run"),
        (&["kanban", "logs", "t_x", "--run", "x"][..], "--run"),
        (&["kanban", "tail", "t_x", "--interval", "0"][..], "--interval"),
        (&["sandbox", "logs", "--task", "x", "--tail", "x"][..], "--tail"),
        (&["sandbox", "denials", "--tail", "-1"][..], "--tail"),
        (&["sandbox", "reap", "--dry-run", "--max-age", "-5"][..], "--max-age"),
        (&["dashboard", "--port", "x"][..], "--port"),
    ] {
        let err = refused(&home, args, 2, &[flag, "expected"]);
        assert!(!err.contains("invalid digit") && !err.contains("float literal"), "{err}");
    }
}

/// Found by a new user (issue 25): `kanban show 474` (three characters of an id) said `no task 474` although a task
/// starts so; it now says the prefix is too short, and a short prefix that matches nothing is still `no task`.
#[test]
fn a_task_id_prefix_too_short_says_so() {
    let home = Home::new();
    let id = task(&home, &["short", "--command", "true"]);
    let bare = &id[2..];
    refused(&home, &["kanban", "show", &bare[..3]], 2, &["too short", "at least 4", &id]);
    refused(&home, &["kanban", "logs", &format!("t_{}", &bare[..2])], 2, &["too short"]);
    let miss = if bare.starts_with('0') { "fff" } else { "000" };
    refused(&home, &["kanban", "show", miss], 2, &["no task"]);
    assert!(home.ok(&["kanban", "show", &bare[..4]]).contains(&id));
}

/// Found by a new user (issue 25): `sandbox rm NAME` of a sandbox whose task id berth had to sanitize for its label
/// (`odd id!` is labelled `odd_id_`) printed `no sandbox for task "odd_id_"`, exited 0 and left the sandbox running.
#[test]
fn sandbox_rm_by_name_removes_a_sandbox_whose_task_id_was_sanitized() {
    require_docker();
    let home = Home::on(&Engine::docker());
    let made = home.json(&["sandbox", "ensure", "--task", "odd id!"]);
    let name = made["name"].as_str().unwrap().to_owned();
    let out = home.run(&["sandbox", "rm", &name]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&format!("removed {name}")), "{}", stdout(&out));
    assert!(home.containers().is_empty(), "`sandbox rm {name}` left the sandbox");
    // The folder stays (the exact id is not in the labels) and the line says how to remove it.
    assert!(stdout(&out).contains("--task"), "{}", stdout(&out));
}

/// Found by a new user (issue 25): `profile rm` of a profile with tasks still assigned said only `removed profile`,
/// and the tasks then sat in `ready` for ever (the dispatcher skips an assignee that is no profile); it now warns,
/// naming a task and how to move it. A profile with no unfinished task goes silently.
#[test]
fn profile_rm_warns_about_the_tasks_it_strands() {
    let home = Home::new();
    home.ok(&["profile", "create", "gone"]);
    let id = task(&home, &["stranded", "--assignee", "gone", "--command", "true"]);
    let out = home.run(&["profile", "rm", "gone"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.starts_with("berth: warning: 1 unfinished task") && err.contains(&id), "{err}");
    assert!(err.contains("kanban assign") && err.trim_end().lines().count() == 1, "{err}");
    home.ok(&["profile", "create", "empty"]);
    let out = home.run(&["profile", "rm", "empty"]);
    assert!(out.status.success() && out.stderr.is_empty(), "{}", stderr(&out));
}

/// Found by a new user (issue 25): `berth help run` said `--task <ID>  Task id of the sandbox (default: `default`)
/// [default: default]`, the default twice.
#[test]
fn task_flag_help_names_its_default_once() {
    let home = Home::new();
    for cmd in ["run", "sandbox ensure"] {
        let mut args: Vec<&str> = vec!["help"];
        args.extend(cmd.split(' '));
        let help = home.ok(&args);
        let line = help.lines().find(|l| l.trim_start().starts_with("--task")).unwrap_or_default();
        assert_eq!(line.matches("default").count(), 2, "berth help {cmd}: {line}");
    }
}

/// Found by a new user (issue 25): `berth run demo ls` (the task as the first word, `--task` left out) said only
/// `demo: command not found in the sandbox`; the line now shows the command with `--task`. With `--task` given the
/// first word is the command, and no hint is added.
#[test]
fn run_without_task_flag_shows_how_to_name_the_task() {
    require_docker();
    let home = Home::on(&Engine::docker());
    let err = refused(&home, &["run", "demo", "echo", "hi"], 127, &["demo: command not found"]);
    assert!(err.contains("`berth run --task demo -- echo hi`"), "{err}");
    let err = refused(&home, &["run", "--task", "demo", "nosuch", "x"], 127, &["nosuch: command not found"]);
    assert!(!err.contains("--task"), "{err}");
    home.ok(&["sandbox", "rm", "--task", "default"]);
    home.ok(&["sandbox", "rm", "--task", "demo"]);
}

/// Found by a new user (issue 25): a `--from` line that is not JSON said only `line 1, column 2: expected ident`;
/// it now shows the shape of a line. Nothing is created.
#[test]
fn create_from_a_line_that_is_not_json_shows_the_shape() {
    let home = Home::new();
    let file = home.path().join("tasks.jsonl");
    std::fs::write(&file, "{\"title\": \"ok\", \"command\": \"true\"}\ntitle: x\n").unwrap();
    refused(&home, &["kanban", "create", "--from", file.to_str().unwrap()], 2, &["line 2", r#"{"title": "build""#]);
    assert!(home.json(&["kanban", "ls"]).as_array().unwrap().is_empty(), "a refused batch wrote a task");
    // An empty file creates nothing and says so (third attack: it printed nothing at all); `--json` gets `[]`.
    std::fs::write(&file, "\n").unwrap();
    let out = home.run(&["kanban", "create", "--from", file.to_str().unwrap()]);
    assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
    assert!(stderr(&out).contains("holds no task") && stderr(&out).lines().count() == 1, "{out:?}");
    assert_eq!(home.json(&["kanban", "create", "--from", file.to_str().unwrap()]), serde_json::json!([]));
    // A task id typed with a newline in it is quoted on one line.
    refused(&home, &["kanban", "block", "why\nnot"], 2, &["no task why\\nnot"]);
}

/// Found by a new user (issue 25): `sandbox rm` and `sandbox logs` take `--task`, `sandbox stop --task demo` was
/// refused by clap, and `sandbox stop` alone printed clap's five lines; it takes `--task` now, and with nothing named
/// says so in one line, stopping nothing.
#[test]
fn sandbox_stop_takes_a_task_as_rm_does() {
    require_docker();
    let home = Home::on(&Engine::docker());
    let id = home.json(&["sandbox", "ensure", "--task", "halt"])["id"].as_str().unwrap().to_owned();
    refused(&home, &["sandbox", "stop"], 2, &["--task ID", "sandbox ls"]);
    assert_eq!(home.inspect(&id, "{{.State.Running}}"), "true", "`sandbox stop` with no argument stopped a sandbox");
    refused(&home, &["sandbox", "stop", "--task", "missing"], 2, &["missing"]);
    assert!(home.ok(&["sandbox", "stop", "--task", "halt"]).contains("stopped"));
    assert_eq!(home.inspect(&id, "{{.State.Running}}"), "false");
    home.ok(&["sandbox", "rm", "--task", "halt"]);
}

/// Found by a new user (issue 25): a missing argument (`berth run`, `kanban show`, `config set KEY`) or an unexpected
/// one (`--tsk`, a block reason without `--reason`) got clap's five lines; each is one line with the usage, and a
/// mistyped flag names the nearest.
#[test]
fn a_missing_or_unexpected_argument_is_one_line_with_the_usage() {
    let home = Home::new();
    refused(&home, &["run"], 2, &["missing <CMD>", "`berth run <CMD>...`"]);
    refused(&home, &["kanban", "show"], 2, &["missing <ID>", "berth kanban show <ID>"]);
    refused(&home, &["config", "set", "terminal.timeout"], 2, &["missing <VALUE>", "<KEY> <VALUE>"]);
    refused(&home, &["run", "--tsk", "demo", "--", "ls"], 2, &["\"--tsk\"", "did you mean --task?", "usage: "]);
    refused(&home, &["kanban", "unblock", "t_1234", "waiting"], 2, &["\"waiting\"", "<ID>"]);
    // A flag last on the line with no value (found by a helper): not "expected one of " and nothing after it.
    refused(&home, &["kanban", "dispatch", "--task"], 2, &["for --task: a value is required"]);
    assert!(!home.path().join("config.yaml").exists(), "a refused `config set` wrote the file");
}

/// Two neighbouring letters swapped, the commonest typo (issue 41): `alpah` gets "did you mean alpha", at
/// `kanban create` and `kanban ls`.
#[test]
fn a_swapped_pair_of_letters_gets_the_nearest_name() {
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    let args = ["kanban", "create", "x", "--assignee", "alpah", "--command", "true"];
    refused(&home, &args, 2, &["no profile \"alpah\" (did you mean alpha?)"]);
    let out = home.run(&["kanban", "ls", "--assignee", "alpah"]);
    assert!(stderr(&out).contains("did you mean alpha?"), "{out:?}");
}
