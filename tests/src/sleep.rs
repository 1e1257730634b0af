//! Sandboxes that sleep and wake, on the real engines (Docker, and Podman when `BERTH_TEST_ENGINES` names it):
//! snapshots listed as the sandbox's, suspend (the container goes, the sandbox stays listed), the transparent resume
//! by the next `berth run` with its files, concurrent resumes making one container, fork, the gateway's automatic
//! suspend, and `sandbox rm` leaving no snapshot image.

use std::time::{Duration, Instant};

use crate::support::{Engine, Home, wait_until};

fn ensure(home: &Home, task: &str) -> (String, String) {
    let v = home.json(&["sandbox", "ensure", "--task", task]);
    (v["id"].as_str().unwrap().to_owned(), v["name"].as_str().unwrap().to_owned())
}

fn exists(home: &Home, id: &str) -> bool {
    home.docker(&["inspect", "--type", "container", id]).status.success()
}

/// Writes `text` to `path` in the container's own layer as root (whatever user berth runs commands as).
fn write_layer(home: &Home, id: &str, path: &str, text: &str) {
    let out = home.docker(&[
        "exec",
        "-u",
        "0",
        id,
        "sh",
        "-c",
        &format!("mkdir -p \"$(dirname {path})\" && echo {text} > {path}"),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The `sandbox ls --json` row named `name`.
fn ls_row(home: &Home, name: &str) -> Option<serde_json::Value> {
    let rows = home.json(&["sandbox", "ls"]);
    rows.as_array().unwrap().iter().find(|r| r["name"] == name).cloned()
}

/// The snapshot images of the sandbox `name` on the home's engine.
fn images_of(home: &Home, name: &str) -> Vec<String> {
    let filter = format!("label=berth.snapshot.of={name}");
    crate::support::ids(&home.docker(&["images", "-q", "--no-trunc", "--filter", &filter]))
}

/// A snapshot is a local image labelled as its sandbox's, listed with its size and age; the sandbox keeps running;
/// `terminal.docker_snapshot_keep` (1) keeps only the newest; a bad name is one line and changes nothing.
#[test]
fn a_snapshot_is_a_labelled_local_image_listed_with_its_size() {
    for e in Engine::all() {
        let home = Home::on(&e);
        let (id, name) = ensure(&home, "snap");
        write_layer(&home, &id, "/opt/layer", "one");
        let taken = home.json(&["sandbox", "snapshot", "--task", "snap", "--name", "first"]);
        assert_eq!(taken["action"], "snapshot", "{taken}");
        assert_eq!(taken["snapshot"]["name"], "first", "{taken}");
        let image = taken["snapshot"]["image"].as_str().unwrap().to_owned();
        assert!(image.starts_with("berth-snapshot/") && image.ends_with(":first"), "{image}");
        // The sandbox's labels are on the image, beside the snapshot's.
        for (key, want) in [("berth.snapshot", "first"), ("hermes-task-id", "snap"), ("berth.snapshot.of", &name)] {
            let got =
                home.docker(&["image", "inspect", "-f", &format!("{{{{index .Config.Labels \"{key}\"}}}}"), &image]);
            assert_eq!(String::from_utf8_lossy(&got.stdout).trim(), want, "{} label {key}", e.name);
        }
        assert_eq!(home.inspect(&id, "{{.State.Running}}"), "true", "the sandbox stopped for its snapshot");

        let listed = home.json(&["sandbox", "snapshots"]);
        let rows = listed.as_array().unwrap();
        assert_eq!(rows.len(), 1, "{listed}");
        assert_eq!(rows[0]["sandbox"], name.as_str());
        assert_eq!(rows[0]["task"], "snap");
        assert!(rows[0]["size_bytes"].as_i64().unwrap() > 0, "{listed}");
        assert!(rows[0]["age_secs"].as_i64().unwrap() >= 0, "{listed}");
        let table = home.ok(&["sandbox", "snapshots"]);
        assert!(table.contains("first") && table.contains(&name), "{table}");

        // A second snapshot: the first goes (keep 1).
        let again = home.json(&["sandbox", "snapshot", "--task", "snap"]);
        assert_eq!(again["removed"], serde_json::json!(["first"]), "{again}");
        assert_eq!(images_of(&home, &name).len(), 1);

        let bad = home.run(&["sandbox", "snapshot", "--task", "snap", "--name", "no/slash"]);
        assert_eq!(bad.status.code(), Some(2));
        let err = String::from_utf8_lossy(&bad.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert_eq!(images_of(&home, &name).len(), 1);
        let none = home.run(&["sandbox", "snapshot", "--task", "nobody"]);
        assert_eq!(none.status.code(), Some(2), "{}", String::from_utf8_lossy(&none.stderr));
    }
}

/// Suspend removes the container and keeps the sandbox in `sandbox ls` (state `suspended`, its snapshot's size,
/// its folder); the next `berth run` resumes it with its files (the container's layer and the host folder) in one
/// command, within 10 s, under the same labels; concurrent resumes make one container; `sandbox rm` then leaves no
/// snapshot image and no folder.
#[test]
fn suspend_then_run_resumes_with_files_and_rm_leaves_no_snapshot() {
    for e in Engine::all() {
        let home = Home::on(&e);
        let (id, name) = ensure(&home, "nap");
        home.ok(&["run", "--task", "nap", "--", "sh", "-c", "echo ws > /workspace/w"]);
        write_layer(&home, &id, "/opt/layer", "layer");
        let labels_before = home.inspect(&id, "{{json .Config.Labels}}");

        let done = home.json(&["sandbox", "suspend", "--task", "nap"]);
        assert_eq!(done["action"], "suspended", "{done}");
        assert!(!exists(&home, &id), "{}: the container is still there", e.name);
        let row = ls_row(&home, &name).unwrap_or_else(|| panic!("{}: suspended sandbox not listed", e.name));
        assert_eq!(row["state"], "suspended", "{row}");
        assert_eq!(row["task"], "nap", "{row}");
        assert_eq!(row["snapshots"], 1, "{row}");
        assert!(row["snapshot_bytes"].as_i64().is_some(), "{row}");
        let table = home.ok(&["sandbox", "ls"]);
        assert!(table.lines().any(|l| l.contains(&name) && l.contains("suspended")), "{table}");
        // Suspending what is suspended says so.
        let twice = home.run(&["sandbox", "suspend", "--task", "nap"]);
        assert_eq!(twice.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&twice.stderr).contains("is suspended"));

        let started = Instant::now();
        let out = home.ok(&["run", "--task", "nap", "--", "cat", "/opt/layer", "/workspace/w"]);
        let took = started.elapsed();
        assert_eq!(out, "layer\nws\n", "{}", e.name);
        assert!(took <= Duration::from_secs(10), "{}: resume took {took:?}", e.name);
        let (resumed, again_name) = ensure(&home, "nap");
        assert_eq!(again_name, name);
        assert_ne!(resumed, id);
        // Same labels (hermes finds it again), but the resume's own snapshot mark.
        let labels_after = home.inspect(&resumed, "{{json .Config.Labels}}");
        let parse = |s: &str| -> serde_json::Map<String, serde_json::Value> { serde_json::from_str(s).unwrap() };
        let (before, after) = (parse(&labels_before), parse(&labels_after));
        for (k, v) in &before {
            assert_eq!(after.get(k), Some(v), "{}: label {k} changed over the resume", e.name);
        }
        assert_eq!(ls_row(&home, &name).unwrap()["state"], "running");

        // Concurrent resumes: one container, every caller in it.
        home.ok(&["sandbox", "suspend", "--task", "nap"]);
        let children: Vec<_> = (0..6)
            .map(|_| {
                home.cmd()
                    .args(["sandbox", "ensure", "--task", "nap", "--json"])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        let mut actions = Vec::new();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            seen.insert(v["id"].as_str().unwrap().to_owned());
            actions.push(v["action"].as_str().unwrap().to_owned());
        }
        assert_eq!(seen.len(), 1, "{}: {seen:?}", e.name);
        // One resumed it; the others attached to that one.
        assert_eq!(actions.iter().filter(|a| *a == "resumed").count(), 1, "{}: {actions:?}", e.name);
        assert_eq!(home.containers().len(), 1, "{}", e.name);
        let out = home.ok(&["run", "--task", "nap", "--", "cat", "/opt/layer"]);
        assert_eq!(out, "layer\n");

        assert!(!images_of(&home, &name).is_empty());
        let folder = std::path::PathBuf::from(
            home.json(&["sandbox", "rm", "--task", "nap"])[0]["folder"]["path"].as_str().unwrap(),
        );
        assert!(home.containers().is_empty());
        assert!(images_of(&home, &name).is_empty(), "{}: rm left a snapshot image", e.name);
        assert!(!folder.exists(), "{}", folder.display());
        assert!(ls_row(&home, &name).is_none());
    }
}

/// `sandbox rm` of a suspended sandbox (by its name, as `sandbox ls` shows it) removes its snapshot and folder.
#[test]
fn removing_a_suspended_sandbox_leaves_no_snapshot() {
    let home = Home::on(&Engine::docker());
    let (_, name) = ensure(&home, "gone");
    home.ok(&["sandbox", "suspend", "--task", "gone"]);
    assert_eq!(images_of(&home, &name).len(), 1);
    let out = home.ok(&["sandbox", "rm", &name]);
    assert!(out.contains("snapshot"), "{out}");
    assert!(images_of(&home, &name).is_empty());
    assert!(home.snapshot_images().is_empty());
    let again = home.run(&["sandbox", "rm", "--task", "gone"]);
    assert_eq!(again.status.code(), Some(1), "{}", String::from_utf8_lossy(&again.stderr));
}

/// Fork: the new task's sandbox starts from the source's current files (layer and host folder); the source keeps
/// running, unchanged, and later changes on either side stay there.
#[test]
fn fork_copies_files_and_leaves_the_source_untouched() {
    for e in Engine::all() {
        let home = Home::on(&e);
        let (src, _) = ensure(&home, "from");
        home.ok(&["run", "--task", "from", "--", "sh", "-c", "echo ws > /workspace/w"]);
        write_layer(&home, &src, "/opt/layer", "layer");
        let forked = home.json(&["sandbox", "fork", "--task", "from", "--to", "copy"]);
        assert_eq!(forked["action"], "forked", "{forked}");
        assert!(forked["started"].is_string(), "{forked}");
        let out = home.ok(&["run", "--task", "copy", "--", "cat", "/opt/layer", "/workspace/w"]);
        assert_eq!(out, "layer\nws\n", "{}", e.name);
        home.ok(&["run", "--task", "copy", "--", "sh", "-c", "echo changed > /workspace/w; rm /opt/layer"]);
        assert_eq!(home.inspect(&src, "{{.State.Running}}"), "true");
        assert_eq!(ensure(&home, "from").0, src, "the source was replaced");
        let out = home.ok(&["run", "--task", "from", "--", "cat", "/opt/layer", "/workspace/w"]);
        assert_eq!(out, "layer\nws\n", "{}: the fork changed its source", e.name);
        // A fork onto a task that has a sandbox is refused, in one line.
        let refused = home.run(&["sandbox", "fork", "--task", "from", "--to", "copy"]);
        assert_eq!(refused.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&refused.stderr).contains("already has a sandbox"));
    }
}

/// A gateway with `terminal.docker_suspend_after_seconds=3` suspends an idle sandbox (container gone, snapshot
/// kept, listed `suspended`), and the next `berth run` finds its files.
#[test]
fn the_gateway_suspends_an_idle_sandbox_and_the_next_run_finds_its_files() {
    let home = Home::on(&Engine::docker());
    let (id, name) = ensure(&home, "idle");
    home.ok(&["run", "--task", "idle", "--", "sh", "-c", "echo ws > /workspace/w"]);
    write_layer(&home, &id, "/opt/layer", "layer");
    let started = Instant::now();
    let gw = crate::support::Gateway::start_with(
        &home,
        home.cmd().args(["-c", "kanban.dispatch_in_gateway=false", "-c", "terminal.docker_suspend_after_seconds=3"]),
    );
    wait_until("the idle sandbox to be suspended", Duration::from_secs(30), || !exists(&home, &id));
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(3), "suspended after {took:?}, before its idle period");
    let (code, _, log) = gw.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("suspended idle sandbox"), "{log}");
    assert_eq!(ls_row(&home, &name).unwrap()["state"], "suspended");
    let out = home.ok(&["run", "--task", "idle", "--", "cat", "/opt/layer", "/workspace/w"]);
    assert_eq!(out, "layer\nws\n");
}

/// With `kanban.prewarm=2` and a cap of 1 (`kanban.max_in_progress`), the gateway's first tick starts one task and
/// the two others, waiting on the cap, have running sandboxes before their turn (still `ready`); without pre-warm
/// they have none.
#[test]
fn prewarm_starts_the_sandboxes_of_the_tasks_waiting_on_a_cap() {
    for prewarm in [0, 2] {
        let home = Home::on(&Engine::docker());
        let tasks: Vec<String> = (0..3)
            .map(|i| {
                let args = ["kanban", "create", &format!("p{i}"), "--assignee", &home.profile, "--command", "sleep 10"];
                home.json(&args)["id"].as_str().unwrap().to_owned()
            })
            .collect();
        let setting = format!("kanban.prewarm={prewarm}");
        let gw = crate::support::Gateway::start_with(
            &home,
            home.cmd().args(["-c", &setting, "-c", "kanban.max_in_progress=1"]),
        );
        let running_sandbox = |task: &str| {
            let filter = format!("label=hermes-task-id={task}");
            !crate::support::ids(&home.docker(&["ps", "-q", "--filter", &filter])).is_empty()
        };
        let status = |task: &str| -> String {
            let all = home.json(&["kanban", "ls"]);
            let t = all.as_array().unwrap().iter().find(|t| t["id"] == task).cloned().unwrap();
            t["status"].as_str().unwrap().to_owned()
        };
        wait_until("one task to run", Duration::from_secs(20), || tasks.iter().any(|t| status(t) == "running"));
        let waiting: Vec<&String> = tasks.iter().filter(|t| status(t) == "ready").collect();
        assert_eq!(waiting.len(), 2, "prewarm={prewarm}");
        if prewarm == 2 {
            wait_until("the waiting tasks' sandboxes to run", Duration::from_secs(8), || {
                waiting.iter().all(|t| running_sandbox(t))
            });
            assert!(waiting.iter().all(|t| status(t) == "ready"), "a warmed task ran before its turn");
        } else {
            std::thread::sleep(Duration::from_secs(3)); // scenario: time in which nothing may be warmed
            assert!(waiting.iter().all(|t| !running_sandbox(t)), "sandboxes warmed with prewarm=0");
        }
        let (code, _, log) = gw.stop();
        assert_eq!(code, Some(0), "{log}");
        assert_eq!(log.matches("gateway pre-warm: sandbox").count(), prewarm, "{log}");
    }
}

/// A task's worker resumes its suspended sandbox (the log names it) and its command finds the files; the task's
/// end removes the sandbox's snapshot with it.
#[test]
fn a_tasks_worker_resumes_its_suspended_sandbox() {
    let home = Home::on(&Engine::docker());
    let args = ["kanban", "create", "w", "--assignee", &home.profile, "--command", "cat /opt/layer /workspace/w"];
    let task = home.json(&args)["id"].as_str().unwrap().to_owned();
    let (id, name) = ensure(&home, &task);
    home.ok(&["run", "--task", &task, "--", "sh", "-c", "echo ws > /workspace/w"]);
    write_layer(&home, &id, "/opt/layer", "layer");
    home.ok(&["sandbox", "suspend", "--task", &task]);
    assert_eq!(images_of(&home, &name).len(), 1);
    home.ok(&["kanban", "dispatch"]);
    let status = || -> String {
        let all = home.json(&["kanban", "ls"]);
        let t = all.as_array().unwrap().iter().find(|t| t["id"] == task.as_str()).cloned().unwrap();
        t["status"].as_str().unwrap().to_owned()
    };
    wait_until("the task to finish", Duration::from_secs(30), || status() != "ready" && status() != "running");
    assert_eq!(status(), "done");
    let log = std::fs::read_to_string(home.path().join("kanban").join("logs").join(format!("{task}.log"))).unwrap();
    assert!(log.contains("(resumed)") && log.contains("layer") && log.contains("ws"), "{log}");
    wait_until("the done task's snapshot to go", Duration::from_secs(10), || images_of(&home, &name).is_empty());
}

/// The reaper removing a stale stopped sandbox removes its snapshots with it.
#[test]
fn the_reaper_removes_a_reaped_sandboxs_snapshots() {
    let home = Home::on(&Engine::docker());
    let (id, name) = ensure(&home, "stale");
    home.ok(&["sandbox", "snapshot", "--task", "stale"]);
    assert_eq!(images_of(&home, &name).len(), 1);
    assert!(home.docker(&["stop", "-t", "0", &id]).status.success());
    std::thread::sleep(Duration::from_secs(2)); // scenario: the container must be stopped longer than --max-age
    let reaped = home.json(&["sandbox", "reap", "--max-age", "1"]);
    assert_eq!(reaped["removed"].as_array().map(Vec::len), Some(1), "{reaped}");
    assert!(!exists(&home, &id));
    assert!(images_of(&home, &name).is_empty(), "the reaper left a snapshot without its sandbox");
}

/// A stopped sandbox is suspended too once stopped its period, here through the per-profile override with the
/// default off; the next run finds its files.
#[test]
fn the_gateway_suspends_a_stopped_sandbox_by_its_profiles_override() {
    let home = Home::on(&Engine::docker());
    let (id, name) = ensure(&home, "stopped");
    write_layer(&home, &id, "/opt/layer", "layer");
    assert!(home.docker(&["stop", "-t", "0", &id]).status.success());
    let overrides = format!("terminal.docker_suspend_after_seconds_overrides={{\"{}\": 2}}", home.profile);
    let gw = crate::support::Gateway::start_with(
        &home,
        home.cmd().args(["-c", "kanban.dispatch_in_gateway=false", "-c", &overrides]),
    );
    wait_until("the stopped sandbox to be suspended", Duration::from_secs(30), || !exists(&home, &id));
    let (code, _, log) = gw.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("suspended stopped sandbox"), "{log}");
    assert_eq!(ls_row(&home, &name).unwrap()["state"], "suspended");
    assert_eq!(home.ok(&["run", "--task", "stopped", "--", "cat", "/opt/layer"]), "layer\n");
}
