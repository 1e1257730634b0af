//! Sandboxes on real engines: reuse, restart, fallback, opt-out, cleanup, reaper, races, drift, timeouts.
//!
//! The same tests run against every engine of the run (`on_docker::…`, `on_podman::…`; see
//! [`crate::support::ENGINES_VAR`]). Every test works under its own profile (so its containers carry a unique
//! `hermes-profile` label) and removes everything of that profile when it ends; no test touches containers it did
//! not create.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{Engine, Home, IMAGE, ids, wait_until};
use rustix::process::Signal;

/// Creates a container the way hermes-agent would: its three labels, a `hermes-<hex>` name, no berth labels.
fn hermes_container(home: &Home, task: &str, cmd: &[&str]) -> String {
    let name =
        format!("hermes-{}", &home.profile[..home.profile.len().min(20)]) + &format!("-{}", task.len() + cmd.len());
    let labels =
        ["hermes-agent=1".to_owned(), format!("hermes-task-id={task}"), format!("hermes-profile={}", home.profile)];
    let mut args = vec!["create".to_owned(), "--name".to_owned(), format!("{name}-{}", rand_suffix())];
    for l in &labels {
        args.push("--label".to_owned());
        args.push(l.clone());
    }
    args.push(IMAGE.to_owned());
    args.extend(cmd.iter().map(|s| (*s).to_owned()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = home.docker(&argv);
    assert!(out.status.success(), "docker create: {}", String::from_utf8_lossy(&out.stderr));
    ids(&out).remove(0)
}

fn rand_suffix() -> String {
    format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos())
}

fn labels_and_hardening_on_a_fresh_sandbox(e: &Engine) {
    let home = Home::on(e);
    let v = home.json(&["sandbox", "ensure", "--task", "task/with:weird*chars"]);
    assert_eq!(v["action"], "created");
    let id = v["id"].as_str().unwrap();
    assert_eq!(home.inspect(id, "{{index .Config.Labels \"hermes-agent\"}}"), "1");
    assert_eq!(home.inspect(id, "{{index .Config.Labels \"hermes-task-id\"}}"), "task_with_weird_chars");
    assert_eq!(home.inspect(id, "{{index .Config.Labels \"hermes-profile\"}}"), home.profile);
    // What the engine enforces, not how it reports it (Podman lists the dropped capabilities one by one): the
    // bounding set is exactly CHOWN, DAC_OVERRIDE, FOWNER, SETGID and SETUID.
    let status = home.ok(&["run", "--task", "task/with:weird*chars", "--", "grep", "CapBnd", "/proc/self/status"]);
    assert_eq!(status.split_whitespace().nth(1), Some("00000000000000cb"), "{status}");
    assert_eq!(home.inspect(id, "{{.HostConfig.PidsLimit}}"), "256");
    assert_eq!(home.inspect(id, "{{.HostConfig.Init}}"), "true");
    assert_eq!(home.inspect(id, "{{.HostConfig.SecurityOpt}}"), "[no-new-privileges]");
    assert_eq!(home.inspect(id, "{{.State.Status}}"), "running");
}

fn the_main_job_two_processes_share_one_sandbox(e: &Engine) {
    let home = Home::on(e);
    home.ok(&["run", "--task", "demo", "--", "sh", "-c", "echo hi > /tmp/x"]);
    let out = home.ok(&["run", "--task", "demo", "--", "cat", "/tmp/x"]);
    assert_eq!(out, "hi\n");
    assert_eq!(home.containers().len(), 1);
    let v = home.json(&["sandbox", "ensure", "--task", "demo"]);
    assert_eq!(v["action"], "attached");
}

fn exit_codes_and_streams_are_propagated(e: &Engine) {
    let home = Home::on(e);
    let out = home.run(&["run", "--task", "codes", "--", "sh", "-c", "echo out; echo err >&2; exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("err"));
    // argv exec, no implicit shell: the `;` is an argument to echo.
    assert_eq!(home.ok(&["run", "--task", "codes", "--", "echo", "a;", "b"]), "a; b\n");
    // A missing program is the command's failure, not berth's.
    let out = home.run(&["run", "--task", "codes", "--", "/no/such/program"]);
    assert_ne!(out.status.code(), Some(0));
}

fn an_exited_sandbox_is_started_not_recreated(e: &Engine) {
    let home = Home::on(e);
    let first = home.json(&["sandbox", "ensure", "--task", "t"]);
    let id = first["id"].as_str().unwrap();
    assert!(home.docker(&["stop", "-t", "0", id]).status.success());
    let again = home.json(&["sandbox", "ensure", "--task", "t"]);
    assert_eq!((again["action"].as_str(), again["id"].as_str()), (Some("started"), Some(id)));
}

fn a_container_that_will_not_start_falls_back_to_a_fresh_one(e: &Engine) {
    let home = Home::on(e);
    let broken = hermes_container(&home, "t", &["/does/not/exist"]);
    let got = home.json(&["sandbox", "ensure", "--task", "t"]);
    assert_eq!(got["action"], "created");
    assert_ne!(got["id"].as_str(), Some(broken.as_str()));
    assert!(got["notes"][0].as_str().unwrap().contains("would not start"));
    // The hermes-made broken container is left for the reaper, as upstream.
    assert!(home.containers().contains(&broken));
}

fn a_running_hermes_container_is_reused_and_the_running_duplicate_preferred(e: &Engine) {
    let home = Home::on(e);
    let stopped = hermes_container(&home, "dup", &["sleep", "infinity"]);
    let running = hermes_container(&home, "dup", &["sleep", "infinity"]);
    assert!(home.docker(&["start", &running]).status.success());
    let got = home.json(&["sandbox", "ensure", "--task", "dup"]);
    assert_eq!((got["action"].as_str(), got["id"].as_str()), (Some("attached"), Some(running.as_str())));
    assert_eq!(home.inspect(&stopped, "{{.State.Status}}"), "created");
}

fn opt_out_gives_each_process_its_own_sandbox_and_removes_it(e: &Engine) {
    let home = Home::on(e);
    let c = "terminal.docker_persist_across_processes=false";
    home.ok(&["-c", c, "run", "--task", "o", "--", "sh", "-c", "echo x > /tmp/mark"]);
    assert!(home.containers().is_empty(), "opt-out run removes its container");
    let out = home.run(&["-c", c, "run", "--task", "o", "--", "cat", "/tmp/mark"]);
    assert_ne!(out.status.code(), Some(0), "a fresh container does not see the last one's files");
    // ensure keeps the container until release; release removes it.
    home.json(&["-c", c, "sandbox", "ensure", "--task", "o"]);
    assert_eq!(home.containers().len(), 1);
    home.ok(&["-c", c, "sandbox", "release", "--task", "o"]);
    assert!(home.containers().is_empty());
}

fn cleanup_matrix_on_real_containers(e: &Engine) {
    let home = Home::on(e);
    let v = home.json(&["sandbox", "ensure", "--task", "m"]);
    let id = v["id"].as_str().unwrap().to_owned();
    let rel = home.json(&["sandbox", "release", "--task", "m"]);
    assert_eq!(rel[0]["action"], "kept");
    assert_eq!(home.inspect(&id, "{{.State.Status}}"), "running");
    let rel = home.json(&["sandbox", "release", "--task", "m", "--force"]);
    assert_eq!(rel[0]["action"], "removed");
    assert!(home.containers().is_empty());
    home.json(&["sandbox", "ensure", "--task", "m"]);
    home.ok(&["sandbox", "rm", "--task", "m"]);
    assert!(home.containers().is_empty());
    // Opt-out release removes even a container with persistent bind dirs.
    let c = "terminal.docker_persist_across_processes=false";
    home.json(&["-c", c, "-c", "terminal.container_persistent=true", "sandbox", "ensure", "--task", "m"]);
    home.ok(&["-c", c, "sandbox", "release", "--task", "m"]);
    assert!(home.containers().is_empty());
}

fn reaper_on_real_containers(e: &Engine) {
    let home = Home::on(e);
    let other = Home::on(e);
    let a = home.json(&["sandbox", "ensure", "--task", "a"])["id"].as_str().unwrap().to_owned();
    let b = home.json(&["sandbox", "ensure", "--task", "b"])["id"].as_str().unwrap().to_owned();
    let theirs = other.json(&["sandbox", "ensure", "--task", "a"])["id"].as_str().unwrap().to_owned();
    let leftover = hermes_container(&home, "never-started", &["sleep", "infinity"]);
    for id in [&a, &theirs] {
        assert!(home.docker(&["stop", "-t", "0", id]).status.success());
    }
    // Default threshold (600 s): a just-stopped container is too young.
    let r = home.json(&["sandbox", "reap"]);
    assert!(r["removed"].as_array().unwrap().is_empty(), "{r}");
    // Threshold 0, dry run: lists the stopped and the created leftover with reasons, removes nothing.
    let dry = home.json(&["sandbox", "reap", "--dry-run", "--max-age", "0"]);
    let mut listed: Vec<&str> = dry["removed"].as_array().unwrap().iter().map(|o| o["id"].as_str().unwrap()).collect();
    listed.sort();
    let mut want = vec![a.as_str(), leftover.as_str()];
    want.sort();
    assert_eq!(listed, want);
    assert!(dry["removed"].as_array().unwrap().iter().all(|o| o["reason"].is_string()));
    assert_eq!(home.containers().len(), 3);
    // Real sweep: the running sandbox and the other profile's container stay.
    let r = home.json(&["sandbox", "reap", "--max-age", "0"]);
    assert_eq!(r["removed"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(home.containers(), vec![b.clone()]);
    assert_eq!(other.containers(), vec![theirs.clone()]);
}

fn distinct_raw_ids_never_share_a_sandbox(e: &Engine) {
    let home = Home::on(e);
    let a = home.json(&["sandbox", "ensure", "--task", "a/b"]);
    let b = home.json(&["sandbox", "ensure", "--task", "a:b"]);
    assert_ne!(a["id"], b["id"]);
    assert_eq!(a["labels"]["hermes-task-id"], b["labels"]["hermes-task-id"]);
    home.ok(&["run", "--task", "a/b", "--", "touch", "/tmp/only-ab"]);
    let out = home.run(&["run", "--task", "a:b", "--", "cat", "/tmp/only-ab"]);
    assert_ne!(out.status.code(), Some(0));
}

fn twenty_concurrent_ensures_make_exactly_one_container(e: &Engine) {
    // 20 callers race for one identity, 20 rounds, each round from no container and a fresh home (so the callers
    // are also the first to probe the engine and write its answers to the home's cache): every caller succeeds (a
    // loser of the name race follows the winner's container) and every round ends with exactly one container.
    for round in 0..20 {
        let home = Home::on(e);
        let children: Vec<_> = (0..20)
            .map(|_| {
                home.cmd()
                    .args(["sandbox", "ensure", "--task", "race", "--json"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{} round {round}: {}", e.name, String::from_utf8_lossy(&out.stderr));
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            seen.insert(v["id"].as_str().unwrap().to_owned());
        }
        assert_eq!(seen.len(), 1, "{} round {round}: every process got the same container", e.name);
        let left = home.containers();
        assert_eq!(left.len(), 1, "{} round {round}", e.name);
        assert!(home.docker(&["rm", "-f", &left[0]]).status.success());
    }
}

fn a_sigkilled_run_leaves_a_sandbox_the_next_run_reuses(e: &Engine) {
    let home = Home::on(e);
    home.ok(&["run", "--task", "k", "--", "true"]);
    let mut child = home
        .cmd()
        .args(["run", "--task", "k", "--", "sleep", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700)); // scenario: the kill point, mid-run
    child.kill().unwrap();
    child.wait().unwrap();
    let out = home.ok(&["run", "--task", "k", "--", "echo", "again"]);
    assert_eq!(out, "again\n");
    assert_eq!(home.containers().len(), 1);
}

fn config_drift_recreates_the_sandbox(e: &Engine) {
    let home = Home::on(e);
    let a = home.json(&["sandbox", "ensure", "--task", "d"]);
    let same = home.json(&["sandbox", "ensure", "--task", "d"]);
    assert_eq!(same["action"], "attached");
    let b = home.json(&["-c", "terminal.docker_env={\"NEW\":\"1\"}", "sandbox", "ensure", "--task", "d"]);
    assert_eq!(b["action"], "recreated");
    // The drift message names what changed (and only that).
    let note = b["notes"][0].as_str().unwrap_or_default();
    assert!(
        note.starts_with("config changed: env (terminal.docker_env, terminal.docker_credentials); recreating "),
        "{b}"
    );
    assert_ne!(a["id"], b["id"]);
    assert_eq!(home.containers().len(), 1);
    // With recreation disabled, drift is accepted.
    let c = home.json(&["-c", "terminal.docker_recreate_on_config_change=false", "sandbox", "ensure", "--task", "d"]);
    assert_eq!((c["action"].as_str(), &c["id"]), (Some("attached"), &b["id"]));
    // In text, the same words as a `berth: warning:` line on stderr.
    let out = home.run(&["-c", "terminal.container_memory=300", "sandbox", "ensure", "--task", "d"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.lines().any(|l| l.starts_with("berth: warning: config changed: env (terminal.docker_env, terminal.docker_credentials), memory_bytes (terminal.container_memory); recreating ")),
        "{err}"
    );
}

fn timeout_exits_124_and_kills_the_process(e: &Engine) {
    let home = Home::on(e);
    let out = home.run(&["run", "--task", "to", "--timeout", "1", "--", "sh", "-c", "sleep 300; echo never"]);
    assert_eq!(out.status.code(), Some(124));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("never"));
    let ps = home.ok(&["run", "--task", "to", "--", "ps", "-eo", "args"]);
    assert!(!ps.contains("sleep 300"), "the timed-out process is gone:\n{ps}");
}

fn forwarded_secrets_reach_the_command_but_not_the_container_config(e: &Engine) {
    let home = Home::on(e);
    let out = home
        .cmd()
        .env("MY_SECRET", "s3cr3t")
        .args(["-c", r#"terminal.docker_forward_env=["MY_SECRET"]"#, "run", "--task", "sec", "--", "env"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("MY_SECRET=s3cr3t"));
    let id = &home.containers()[0];
    assert!(!home.inspect(id, "{{.Config.Env}}").contains("s3cr3t"));
}

fn out_of_band_removal_is_recovered(e: &Engine) {
    let home = Home::on(e);
    home.ok(&["run", "--task", "oob", "--", "true"]);
    let id = home.containers().remove(0);
    assert!(home.docker(&["rm", "-f", &id]).status.success());
    assert_eq!(home.ok(&["run", "--task", "oob", "--", "echo", "back"]), "back\n");
}

/// The engine's API version is remembered per home with its socket file's identity, so `berth run` skips the ping:
/// a remembered version for another socket file (a restarted engine) is not used, and one for a socket whose engine
/// is gone, or hangs, still fails at once with the one-line "unavailable" error.
#[test]
fn the_remembered_api_version_follows_the_socket_file() {
    crate::support::require_docker();
    let home = Home::new();
    let cache = |endpoint: &str| {
        let hash = domain::sha256::hex_digest(endpoint.as_bytes());
        home.path().join("cache").join(format!("api-version-{}", &hash[..12]))
    };
    let endpoint = std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".to_owned());
    home.cmd().env("DOCKER_HOST", &endpoint).args(["sandbox", "ls"]).output().unwrap();
    let remembered = std::fs::read_to_string(cache(&endpoint)).expect("the version is remembered");
    let (socket, version) = remembered.trim().split_once(' ').unwrap();
    assert!(version.starts_with("1."), "{remembered}");
    // Another socket file's version (a restarted engine) is asked again, and the answer replaces it.
    std::fs::write(cache(&endpoint), "0:0:0.0 1.25").unwrap();
    let out = home.cmd().env("DOCKER_HOST", &endpoint).args(["sandbox", "ls", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(cache(&endpoint)).unwrap().trim(), format!("{socket} {version}"));
    // A socket file left behind by a gone engine, with its version remembered: one line, exit 125, at once.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gone.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let gone = format!("unix://{}", path.display());
    let id = {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&path).unwrap();
        format!("{}:{}:{}.{}", m.dev(), m.ino(), m.ctime(), m.ctime_nsec())
    };
    std::fs::write(cache(&gone), format!("{id} {version}")).unwrap();
    // And an engine that accepts connections but never answers (hung), its version remembered too.
    let hung_path = dir.path().join("hung.sock");
    let _hung = std::os::unix::net::UnixListener::bind(&hung_path).unwrap();
    let hung = format!("unix://{}", hung_path.display());
    let hung_id = {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&hung_path).unwrap();
        format!("{}:{}:{}.{}", m.dev(), m.ino(), m.ctime(), m.ctime_nsec())
    };
    std::fs::write(cache(&hung), format!("{hung_id} {version}")).unwrap();
    for (host, shown) in [(&gone, &path), (&hung, &hung_path)] {
        for args in [&["sandbox", "ls"][..], &["run", "--task", "x", "--", "true"][..]] {
            let start = Instant::now();
            let out = home.cmd().env("DOCKER_HOST", host).args(args).output().unwrap();
            assert_eq!(out.status.code(), Some(125), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
            assert!(start.elapsed() < Duration::from_secs(8), "{args:?} on {host} took {:?}", start.elapsed());
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
            assert!(err.contains(&shown.display().to_string()), "names the endpoint: {err}");
        }
    }
}

#[test]
fn daemon_unreachable_fails_fast_with_one_line() {
    let home = Home::new();
    for host in ["unix:///nonexistent/docker.sock", "tcp://127.0.0.1:9"] {
        for args in [
            &["run", "--", "true"][..],
            &["sandbox", "ensure"][..],
            &["sandbox", "ls"][..],
            &["sandbox", "reap"][..],
            &["sandbox", "rm", "--task", "default"][..],
            &["sandbox", "release"][..],
        ] {
            let start = Instant::now();
            let out = home.cmd().env("DOCKER_HOST", host).args(args).output().unwrap();
            let took = start.elapsed();
            assert_eq!(out.status.code(), Some(125), "{args:?} with {host}");
            assert!(took < Duration::from_secs(5), "{args:?} took {took:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
            assert!(
                err.contains(host.trim_start_matches("unix://").trim_start_matches("tcp://")) || err.contains(host),
                "names the endpoint: {err}"
            );
        }
    }
    // Board commands keep working without Docker.
    let out = home
        .cmd()
        .env("DOCKER_HOST", "tcp://127.0.0.1:9")
        .args(["config", "get", "terminal.timeout"])
        .output()
        .unwrap();
    assert!(out.status.success());
}

fn a_missing_image_is_a_clear_engine_error(e: &Engine) {
    let home = Home::on(e);
    let out = home.run(&["-c", "terminal.docker_image=berth-no-such-image:0", "run", "--task", "img", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("berth never pulls"), "{err}");
    // The way out, named (issue 41): the pull to run.
    assert!(err.contains("`docker pull berth-no-such-image:0`"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(home.containers().is_empty(), "no created leftover");
}

fn sandbox_ls_lists_this_profiles_sandboxes(e: &Engine) {
    let home = Home::on(e);
    home.json(&["sandbox", "ensure", "--task", "one"]);
    home.json(&["sandbox", "ensure", "--task", "two"]);
    let v = home.json(&["sandbox", "ls"]);
    let mut tasks: Vec<&str> = v.as_array().unwrap().iter().map(|c| c["task"].as_str().unwrap()).collect();
    tasks.sort();
    assert_eq!(tasks, ["one", "two"]);
    assert!(v[0]["created"].is_string() && v[0]["state"] == "running");
    let text = home.ok(&["sandbox", "ls"]);
    assert!(text.starts_with("NAME") && text.contains("one"));
}

fn hostile_task_ids_get_sanitized_labels_and_their_own_sandboxes(e: &Engine) {
    let home = Home::on(e);
    let long = "x".repeat(1024);
    let hostile = ["a=b", "a,b", "line\nbreak", "😀", "", long.as_str(), "../..", "--flag"];
    let mut ids = std::collections::BTreeSet::new();
    for t in hostile {
        let v = home.json(&["sandbox", "ensure", &format!("--task={t}")]);
        let label = v["labels"]["hermes-task-id"].as_str().unwrap();
        assert!(
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        );
        ids.insert(v["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids.len(), hostile.len());
}

fn an_interrupted_run_stops_its_command_and_leaves_no_opt_out_container(e: &Engine) {
    let home = Home::on(e);
    for (opt_out, signal, code) in [(true, Signal::INT, 130), (false, Signal::TERM, 143)] {
        let mut cmd = home.cmd();
        if opt_out {
            cmd.args(["-c", "terminal.docker_persist_across_processes=false"]);
        }
        let mut child = cmd
            .args(["run", "--task", "int", "--", "sh", "-c", "sleep 300"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Wait until the command runs inside (Podman's first start on a loaded machine has taken over 20 s).
        wait_until("the command to start", Duration::from_secs(60), || {
            home.containers().iter().any(|id| home.docker(&["top", id]).stdout.windows(9).any(|w| w == b"sleep 300"))
        });
        crate::support::signal(child.id(), signal);
        assert_eq!(child.wait().unwrap().code(), Some(code));
        if opt_out {
            assert!(home.containers().is_empty(), "the opt-out container was removed");
        } else {
            let id = &home.containers()[0];
            let top = String::from_utf8_lossy(&home.docker(&["top", id]).stdout).into_owned();
            assert!(!top.contains("sleep 300"), "the command was stopped:\n{top}");
        }
    }
}

/// Each test above once per engine: `on_docker::name` and `on_podman::name`.
macro_rules! on_engines {
    ($($test:ident),* $(,)?) => {
        mod on_docker {
            $(#[test]
            fn $test() {
                super::$test(&crate::support::Engine::docker());
            })*
        }
        mod on_podman {
            $(#[test]
            fn $test() {
                if let Some(e) = crate::support::Engine::podman() {
                    super::$test(&e);
                }
            })*
        }
    };
}

on_engines!(
    labels_and_hardening_on_a_fresh_sandbox,
    the_main_job_two_processes_share_one_sandbox,
    exit_codes_and_streams_are_propagated,
    an_exited_sandbox_is_started_not_recreated,
    a_container_that_will_not_start_falls_back_to_a_fresh_one,
    a_running_hermes_container_is_reused_and_the_running_duplicate_preferred,
    opt_out_gives_each_process_its_own_sandbox_and_removes_it,
    cleanup_matrix_on_real_containers,
    reaper_on_real_containers,
    distinct_raw_ids_never_share_a_sandbox,
    twenty_concurrent_ensures_make_exactly_one_container,
    a_sigkilled_run_leaves_a_sandbox_the_next_run_reuses,
    config_drift_recreates_the_sandbox,
    timeout_exits_124_and_kills_the_process,
    forwarded_secrets_reach_the_command_but_not_the_container_config,
    out_of_band_removal_is_recovered,
    a_missing_image_is_a_clear_engine_error,
    sandbox_ls_lists_this_profiles_sandboxes,
    hostile_task_ids_get_sanitized_labels_and_their_own_sandboxes,
    an_interrupted_run_stops_its_command_and_leaves_no_opt_out_container,
);

/// The task labels of a home's containers, sorted.
fn task_labels(home: &Home) -> Vec<String> {
    let filter = format!("label=hermes-profile={}", home.profile);
    let out = home.docker(&["ps", "-a", "--filter", &filter, "--format", "{{.Label \"hermes-task-id\"}}"]);
    let mut labels: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
    labels.sort();
    labels
}

/// `sandbox reap` and the automatic reaper (which runs before a process's first acquire) remove the same stale
/// sandboxes, on every engine of the run. Staleness is real age: the policy's shortest threshold is 120 s
/// (`2 × max(60, lifetime)`), so the test ages its containers once, for every engine at the same time.
#[test]
fn both_reapers_remove_the_same_stale_sandboxes_on_every_engine() {
    const LIFETIME: &str = "terminal.lifetime_seconds=60";
    let mut homes = Vec::new();
    for e in Engine::all() {
        for reaper in ["manual", "automatic"] {
            let home = Home::on(&e);
            let stopped =
                home.json(&["sandbox", "ensure", "--task", "stale-stopped"])["id"].as_str().unwrap().to_owned();
            assert!(home.docker(&["stop", "-t", "0", &stopped]).status.success());
            hermes_container(&home, "stale-created", &["sleep", "infinity"]);
            home.json(&["sandbox", "ensure", "--task", "live"]);
            homes.push((e.name, reaper, home));
        }
    }
    // scenario: ageing; the containers must be older than the threshold by the engines' own clocks.
    std::thread::sleep(Duration::from_secs(122));
    for (_, _, home) in &homes {
        let young = home.json(&["sandbox", "ensure", "--task", "young-stopped"])["id"].as_str().unwrap().to_owned();
        assert!(home.docker(&["stop", "-t", "0", &young]).status.success());
    }
    for (engine, reaper, home) in &homes {
        assert_eq!(task_labels(home), ["live", "stale-created", "stale-stopped", "young-stopped"], "{engine}");
        let out = if *reaper == "manual" {
            let r = home.json(&["-c", LIFETIME, "sandbox", "reap"]);
            assert_eq!(r["removed"].as_array().unwrap().len(), 2, "{engine}: {r}");
            home.run(&["-c", LIFETIME, "sandbox", "ls"])
        } else {
            // The first acquire of a process sweeps first; a failing sweep would be a warning on stderr.
            home.run(&["-c", LIFETIME, "sandbox", "ensure", "--task", "live"])
        };
        assert!(out.status.success(), "{engine} {reaper}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("reaper"),
            "{engine} {reaper}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(task_labels(home), ["live", "young-stopped"], "{engine} {reaper}");
    }
}

/// An engine that answers its ping and fails everything else, like Podman 4.3 failing the reaper's listing: the
/// automatic reaper's failure is one warning line at the default log level, not something only `-vv` shows.
#[test]
fn a_failing_automatic_reaper_is_a_warning_by_default() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("engine.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut buf = [0u8; 8192];
            let n = conn.read(&mut buf).unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]);
            let (status, body) = if request.starts_with("GET /_ping") {
                ("200 OK", "OK")
            } else {
                ("500 Internal Server Error", r#"{"message":"failed to parse filters: unknown status"}"#)
            };
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\nApi-Version: 1.41\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let home = Home::new();
    let out = home
        .cmd()
        .env("DOCKER_HOST", format!("unix://{}", sock.display()))
        .args(["sandbox", "ensure", "--task", "t"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("orphan reaper failed")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains("unknown status"), "{err}");
}
