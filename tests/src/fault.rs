//! The fault suite: SIGKILL at random points (of `berth run` and of workers), hostile ids and names, damaged board
//! files, and ten dispatchers racing real workers. Engine-unreachable behaviour is in `docker`.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use crate::support::{Home, docker, inspect, require_docker, wait_until};

/// A small deterministic generator (xorshift), so failures replay.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn sigkilled_runs_leave_nothing_once_the_reaper_window_passes() {
    require_docker();
    let home = Home::new();
    let mut rng = Rng(0x5eed_1234);
    let mut persist_tasks = BTreeSet::new();
    for i in 0..16 {
        let opt_out = i % 2 == 1;
        let task = format!("k{i}");
        let mut cmd = home.cmd();
        if opt_out {
            cmd.args(["-c", "terminal.docker_persist_across_processes=false"]);
        } else {
            persist_tasks.insert(task.clone());
        }
        let mut child = cmd
            .args(["run", "--task", &task, "--", "sleep", "3"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // scenario: a kill point anywhere from before the engine is reached to the middle of the command.
        std::thread::sleep(Duration::from_millis(rng.below(900)));
        child.kill().unwrap();
        child.wait().unwrap();
    }
    // Requests a killed client already sent (a create, a start) still complete in the engine, some only after a first
    // sweep under load; so sweep until what is left is only persistent sandboxes (bounded), then check it closely.
    // The reaper window passing is simulated by a zero threshold.
    crate::support::wait_until("the sweeps to leave only persistent sandboxes", Duration::from_secs(60), || {
        let report = home.json(&["sandbox", "reap", "--max-age", "0"]);
        assert!(report["failed"].as_array().unwrap().is_empty(), "{report}");
        home.containers().iter().all(|id| {
            inspect(id, "{{.State.Status}}") == "running"
                && inspect(id, "{{index .Config.Labels \"berth.mode\"}}") == "persist"
        })
    });
    // What is left is only reusable persistent sandboxes: running, one per identity, never an opt-out one.
    let left = home.containers();
    let mut seen = BTreeSet::new();
    for id in &left {
        assert_eq!(inspect(id, "{{.State.Status}}"), "running", "{id} left behind");
        assert_eq!(inspect(id, "{{index .Config.Labels \"berth.mode\"}}"), "persist");
        let task = inspect(id, "{{index .Config.Labels \"hermes-task-id\"}}");
        assert!(persist_tasks.contains(&task));
        assert!(seen.insert(task), "two containers for one identity");
    }
    // And the next process reuses each of them.
    for task in &seen {
        let v = home.json(&["sandbox", "ensure", "--task", task]);
        assert_eq!(v["action"], "attached");
    }
}

#[test]
fn sigkilled_workers_are_recovered_and_every_task_finishes_without_leaks() {
    require_docker();
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    let _cleanup = crate::kanban::ProfileContainers::new(&["alpha"], home.path());
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(
            home.json(&["kanban", "create", "w", "--assignee", "alpha", "--command", "sleep 1"])["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let c = ["-c", "kanban.failure_limit=50"];
    let mut rng = Rng(0xfa11_7001);
    let mut kills = 0;
    // Dispatch until every task is done.
    wait_until("every task to finish", Duration::from_secs(120), || {
        let v = home.json(&[c[0], c[1], "kanban", "dispatch"]);
        // Kill some of the workers just started, at a random point of their life.
        for w in v["workers"].as_array().unwrap() {
            if kills < 8 && rng.below(2) == 0 {
                std::thread::sleep(Duration::from_millis(rng.below(1500))); // scenario: a random kill point
                crate::support::signal_group(&home, w["pid"].as_i64().unwrap(), rustix::process::Signal::KILL);
                kills += 1;
            }
        }
        let tasks = home.json(&["kanban", "ls"]);
        if tasks.as_array().unwrap().iter().all(|t| t["status"] == "done") { Ok(()) } else { Err(tasks) }
    });
    assert!(kills > 0);
    let crashes: usize = ids
        .iter()
        .map(|id| {
            home.json(&["kanban", "show", id])["events"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["kind"] == "crashed")
                .count()
        })
        .sum();
    assert!(crashes > 0, "the kills were detected as crashes");
    // A killed worker leaves its command running in the sandbox until it ends (and the worker that finished the
    // task removes the sandbox); the reaper, with its window passed, takes whatever stopped meanwhile.
    let left = |id: &str| {
        let out = docker(&[
            "ps",
            "-aq",
            "--filter",
            "label=hermes-profile=alpha",
            "--filter",
            &format!("label=hermes-task-id={id}"),
        ]);
        crate::support::ids(&out)
    };
    crate::support::wait_until("every task's sandbox to be gone", Duration::from_secs(30), || {
        home.json(&["-p", "alpha", "sandbox", "reap", "--max-age", "0"]);
        ids.iter().all(|id| left(id).is_empty())
    });
}

/// At least thirty hostile names: separators, `=`, commas, newlines, unicode, 1 KB, empty.
fn hostile() -> Vec<String> {
    let mut v: Vec<String> = [
        "",
        " ",
        "a/b",
        "a:b",
        "a\\b",
        "../..",
        ".",
        "..",
        "a=b",
        "a,b",
        "a;b",
        "a|b",
        "a&b",
        "$(id)",
        "`id`",
        "a\nb",
        "a\tb",
        "a\rb",
        "\0",
        "😀",
        "émoji-ü",
        "名前",
        "a b",
        "-flag",
        "--flag",
        "'quoted'",
        "\"dq\"",
        "*",
        "?",
        "#hash",
        "%s%n",
        "null",
        "nul\u{7f}",
    ]
    .map(String::from)
    .to_vec();
    v.push("x".repeat(1024));
    v.push("y/".repeat(300));
    v
}

#[test]
fn hostile_profile_names_are_refused_with_one_line_or_work() {
    let home = Home::new();
    // NUL cannot travel in an argument (the OS refuses it before berth runs); every other name is tried.
    let names: Vec<String> = hostile().into_iter().filter(|n| !n.contains('\0')).collect();
    assert!(names.len() >= 30);
    for name in &names {
        // `--profile=NAME` and `--` carry any text as a value, so berth (not clap) judges it.
        let out = home.run(&[&format!("--profile={name}"), "profile", "ls"]);
        let ok = domain::ids::ProfileName::parse(name).is_ok();
        if ok {
            assert!(out.status.success(), "{name:?}");
        } else {
            assert_eq!(out.status.code(), Some(2), "{name:?}");
            assert_eq!(String::from_utf8_lossy(&out.stderr).trim().lines().count(), 1, "{name:?}");
        }
        let out = home.run(&["profile", "create", "--", name]);
        assert_eq!(out.status.code(), Some(if ok { 0 } else { 2 }), "{name:?}");
        // Whether the profile exists is not the point here (a name that parses only once trimmed has none).
        let assignee = format!("--assignee={name}");
        let out = home.run(&["kanban", "create", "t", &assignee, "--command", "true", "--allow-unknown-assignee"]);
        if !name.trim().is_empty() {
            assert_eq!(
                out.status.code(),
                Some(if ok || domain::ids::ProfileName::parse(name.trim()).is_ok() { 0 } else { 2 }),
                "{name:?}"
            );
        }
    }
    // Nothing escaped the profiles directory.
    for e in std::fs::read_dir(home.path()).unwrap().flatten() {
        let n = e.file_name().into_string().unwrap();
        assert!(
            [".berth-home", "profiles", "berth-kanban.db", "berth-kanban.db-wal", "berth-kanban.db-shm"]
                .contains(&n.as_str()),
            "unexpected {n}"
        );
    }
}

#[test]
fn hostile_task_ids_each_get_their_own_labelled_sandbox() {
    require_docker();
    let home = Home::new();
    let names: Vec<String> = hostile().into_iter().filter(|n| !n.contains('\0')).collect();
    assert!(names.len() >= 30);
    let mut containers = BTreeSet::new();
    for t in &names {
        let v = home.json(&["sandbox", "ensure", &format!("--task={t}")]);
        let label = v["labels"]["hermes-task-id"].as_str().unwrap();
        assert_eq!(label, domain::label::LabelValue::sanitize(t).as_str());
        containers.insert(v["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(containers.len(), names.len(), "distinct raw ids never share a sandbox");
    // A NUL cannot travel in an argument at all: the OS refuses it before berth runs.
    assert!(home.cmd().args(["sandbox", "ensure", "--task=a\0b"]).output().is_err());
}

#[test]
fn truncated_and_garbage_databases_are_left_byte_for_byte() {
    let home = Home::new();
    for i in 0..300 {
        home.ok(&["kanban", "create", &format!("task {i} {}", "z".repeat(300)), "--command", "true"]);
        if i == 0 {
            home.ok(&["kanban", "ls"]);
        }
    }
    let db = home.path().join("berth-kanban.db");
    // Fold the WAL into the file (a clean close does), then cut the file.
    drop(rusqlite::Connection::open(&db).unwrap().pragma_update(None, "wal_checkpoint", "TRUNCATE"));
    let full = std::fs::read(&db).unwrap();
    assert!(full.len() > 64 * 1024, "{}", full.len());
    for (name, bytes) in [("truncated", full[..full.len() / 2].to_vec()), ("garbage", b"\x00\x01garbage".repeat(500))] {
        std::fs::write(&db, &bytes).unwrap();
        let _ = std::fs::remove_file(home.path().join("berth-kanban.db-wal"));
        for args in [
            &["kanban", "ls"][..],
            &["kanban", "create", "x", "--command", "true"][..],
            &["kanban", "dispatch"][..],
            &["kanban", "dispatch", "--dry-run"][..],
        ] {
            let out = home.run(args);
            assert_eq!(out.status.code(), Some(1), "{name} {args:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
            assert!(err.contains("left untouched"), "{name}: {err}");
        }
        assert_eq!(std::fs::read(&db).unwrap(), bytes, "{name} changed");
        // Nothing was journaled beside it: no WAL for a file that is no database at all, an empty one at most for a
        // WAL-mode database a reader checked.
        let wal = std::fs::read(home.path().join("berth-kanban.db-wal")).ok();
        if name == "garbage" {
            assert!(wal.is_none(), "garbage: a journal was started beside it");
        } else {
            assert!(wal.is_none_or(|w| w.is_empty()), "{name}: something was journaled beside it");
        }
    }
}

#[test]
fn ten_dispatchers_race_real_workers_on_one_board() {
    require_docker();
    let home = Home::new();
    home.ok(&["profile", "create", "alpha"]);
    home.ok(&["profile", "create", "beta"]);
    let _cleanup = crate::kanban::ProfileContainers::new(&["alpha", "beta"], home.path());
    let mut ids = Vec::new();
    for i in 0..12 {
        ids.push(
            home.json(&["kanban", "create", "r", "--assignee", ["alpha", "beta"][i % 2], "--command", "echo ok"])["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    // Racing dispatchers until every task is done.
    wait_until("every task done", Duration::from_secs(120), || {
        let racers: Vec<_> = (0..10)
            .map(|_| {
                home.cmd()
                    .args(["-c", "kanban.max_in_progress_per_profile=2", "kanban", "dispatch", "--json"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for r in racers {
            let out = r.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        let running = home.json(&["kanban", "ls", "--status", "running"]);
        for who in ["alpha", "beta"] {
            let n = running.as_array().unwrap().iter().filter(|t| t["assignee"] == who).count();
            assert!(n <= 2, "{who} runs {n}");
        }
        home.json(&["kanban", "ls"]).as_array().unwrap().iter().all(|t| t["status"] == "done")
    });
    for id in &ids {
        let show = home.json(&["kanban", "show", id]);
        let claims = show["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "claimed").count();
        assert_eq!(claims, 1, "{id} claimed {claims} times");
        assert_eq!(show["task"]["result"], "ok");
    }
    // Done tasks release their sandboxes (the worker removes it before recording the outcome; a removal the
    // engine is still finishing may show for a moment).
    let home_dir = home.path().display().to_string();
    crate::support::wait_until("the sandboxes of done tasks to be removed", Duration::from_secs(30), || {
        ["alpha", "beta"].iter().all(|who| {
            let out = docker(&["ps", "-aq", "--filter", &format!("label=hermes-profile={who}")]);
            crate::support::ids(&out)
                .iter()
                .all(|id| !inspect(id, "{{range .Mounts}}{{.Source}} {{end}}").contains(&home_dir))
        })
    });
}

#[test]
fn kanban_check_reads_every_page_and_reports_damage_the_cheap_open_cannot_see() {
    let home = Home::new();
    for i in 0..300 {
        home.ok(&["kanban", "create", &format!("task {i} {}", "q".repeat(300)), "--command", "true"]);
    }
    let db = home.path().join("berth-kanban.db");
    drop(rusqlite::Connection::open(&db).unwrap().pragma_update(None, "wal_checkpoint", "TRUNCATE"));
    let ok = home.json(&["kanban", "check"]);
    assert_eq!(ok["ok"], true, "{ok}");
    // A page in the middle overwritten, the length unchanged.
    let mut bytes = std::fs::read(&db).unwrap();
    let mid = (bytes.len() / 4096 / 2) * 4096;
    bytes[mid..mid + 4096].fill(0x5A);
    std::fs::write(&db, &bytes).unwrap();
    let out = home.run(&["kanban", "check"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("left untouched"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).trim().is_empty(), "the findings go to stdout");
    assert_eq!(std::fs::read(&db).unwrap(), bytes, "check changed the file");
}
