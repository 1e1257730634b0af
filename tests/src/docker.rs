//! Sandboxes on the real Docker Engine: reuse, restart, fallback, opt-out, cleanup, reaper, races, drift, timeouts.
//!
//! Every test works under its own profile (so its containers carry a unique `hermes-profile` label) and removes
//! everything of that profile when it ends; no test touches containers it did not create.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{Home, IMAGE, docker, ids, inspect, require_docker};
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
    let out = docker(&argv);
    assert!(out.status.success(), "docker create: {}", String::from_utf8_lossy(&out.stderr));
    ids(&out).remove(0)
}

fn rand_suffix() -> String {
    format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos())
}

#[test]
fn labels_and_hardening_on_a_fresh_sandbox() {
    require_docker();
    let home = Home::new();
    let v = home.json(&["sandbox", "ensure", "--task", "task/with:weird*chars"]);
    assert_eq!(v["action"], "created");
    let id = v["id"].as_str().unwrap();
    assert_eq!(inspect(id, "{{index .Config.Labels \"hermes-agent\"}}"), "1");
    assert_eq!(inspect(id, "{{index .Config.Labels \"hermes-task-id\"}}"), "task_with_weird_chars");
    assert_eq!(inspect(id, "{{index .Config.Labels \"hermes-profile\"}}"), home.profile);
    assert_eq!(inspect(id, "{{.HostConfig.CapDrop}}"), "[ALL]");
    assert_eq!(inspect(id, "{{.HostConfig.PidsLimit}}"), "256");
    assert_eq!(inspect(id, "{{.HostConfig.Init}}"), "true");
    assert_eq!(inspect(id, "{{.HostConfig.SecurityOpt}}"), "[no-new-privileges]");
    assert!(inspect(id, "{{.HostConfig.CapAdd}}").contains("SETUID"));
    assert_eq!(inspect(id, "{{.State.Status}}"), "running");
}

#[test]
fn the_main_job_two_processes_share_one_sandbox() {
    require_docker();
    let home = Home::new();
    home.ok(&["run", "--task", "demo", "--", "sh", "-c", "echo hi > /tmp/x"]);
    let out = home.ok(&["run", "--task", "demo", "--", "cat", "/tmp/x"]);
    assert_eq!(out, "hi\n");
    assert_eq!(home.containers().len(), 1);
    let v = home.json(&["sandbox", "ensure", "--task", "demo"]);
    assert_eq!(v["action"], "attached");
}

#[test]
fn exit_codes_and_streams_are_propagated() {
    require_docker();
    let home = Home::new();
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

#[test]
fn an_exited_sandbox_is_started_not_recreated() {
    require_docker();
    let home = Home::new();
    let first = home.json(&["sandbox", "ensure", "--task", "t"]);
    let id = first["id"].as_str().unwrap();
    assert!(docker(&["stop", "-t", "0", id]).status.success());
    let again = home.json(&["sandbox", "ensure", "--task", "t"]);
    assert_eq!((again["action"].as_str(), again["id"].as_str()), (Some("started"), Some(id)));
}

#[test]
fn a_container_that_will_not_start_falls_back_to_a_fresh_one() {
    require_docker();
    let home = Home::new();
    let broken = hermes_container(&home, "t", &["/does/not/exist"]);
    let got = home.json(&["sandbox", "ensure", "--task", "t"]);
    assert_eq!(got["action"], "created");
    assert_ne!(got["id"].as_str(), Some(broken.as_str()));
    assert!(got["notes"][0].as_str().unwrap().contains("would not start"));
    // The hermes-made broken container is left for the reaper, as upstream.
    assert!(home.containers().contains(&broken));
}

#[test]
fn a_running_hermes_container_is_reused_and_the_running_duplicate_preferred() {
    require_docker();
    let home = Home::new();
    let stopped = hermes_container(&home, "dup", &["sleep", "infinity"]);
    let running = hermes_container(&home, "dup", &["sleep", "infinity"]);
    assert!(docker(&["start", &running]).status.success());
    let got = home.json(&["sandbox", "ensure", "--task", "dup"]);
    assert_eq!((got["action"].as_str(), got["id"].as_str()), (Some("attached"), Some(running.as_str())));
    assert_eq!(inspect(&stopped, "{{.State.Status}}"), "created");
}

#[test]
fn opt_out_gives_each_process_its_own_sandbox_and_removes_it() {
    require_docker();
    let home = Home::new();
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

#[test]
fn cleanup_matrix_on_real_containers() {
    require_docker();
    let home = Home::new();
    let v = home.json(&["sandbox", "ensure", "--task", "m"]);
    let id = v["id"].as_str().unwrap().to_owned();
    let rel = home.json(&["sandbox", "release", "--task", "m"]);
    assert_eq!(rel[0]["action"], "kept");
    assert_eq!(inspect(&id, "{{.State.Status}}"), "running");
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

#[test]
fn reaper_on_real_containers() {
    require_docker();
    let home = Home::new();
    let other = Home::new();
    let a = home.json(&["sandbox", "ensure", "--task", "a"])["id"].as_str().unwrap().to_owned();
    let b = home.json(&["sandbox", "ensure", "--task", "b"])["id"].as_str().unwrap().to_owned();
    let theirs = other.json(&["sandbox", "ensure", "--task", "a"])["id"].as_str().unwrap().to_owned();
    let leftover = hermes_container(&home, "never-started", &["sleep", "infinity"]);
    for id in [&a, &theirs] {
        assert!(docker(&["stop", "-t", "0", id]).status.success());
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

#[test]
fn distinct_raw_ids_never_share_a_sandbox() {
    require_docker();
    let home = Home::new();
    let a = home.json(&["sandbox", "ensure", "--task", "a/b"]);
    let b = home.json(&["sandbox", "ensure", "--task", "a:b"]);
    assert_ne!(a["id"], b["id"]);
    assert_eq!(a["labels"]["hermes-task-id"], b["labels"]["hermes-task-id"]);
    home.ok(&["run", "--task", "a/b", "--", "touch", "/tmp/only-ab"]);
    let out = home.run(&["run", "--task", "a:b", "--", "cat", "/tmp/only-ab"]);
    assert_ne!(out.status.code(), Some(0));
}

#[test]
fn twenty_concurrent_ensures_make_exactly_one_container() {
    require_docker();
    let home = Home::new();
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
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        seen.insert(v["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(seen.len(), 1, "every process got the same container");
    assert_eq!(home.containers().len(), 1);
}

#[test]
fn a_sigkilled_run_leaves_a_sandbox_the_next_run_reuses() {
    require_docker();
    let home = Home::new();
    home.ok(&["run", "--task", "k", "--", "true"]);
    let mut child = home
        .cmd()
        .args(["run", "--task", "k", "--", "sleep", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    child.kill().unwrap();
    child.wait().unwrap();
    let out = home.ok(&["run", "--task", "k", "--", "echo", "again"]);
    assert_eq!(out, "again\n");
    assert_eq!(home.containers().len(), 1);
}

#[test]
fn config_drift_recreates_the_sandbox() {
    require_docker();
    let home = Home::new();
    let a = home.json(&["sandbox", "ensure", "--task", "d"]);
    let same = home.json(&["sandbox", "ensure", "--task", "d"]);
    assert_eq!(same["action"], "attached");
    let b = home.json(&["-c", "terminal.docker_env={\"NEW\":\"1\"}", "sandbox", "ensure", "--task", "d"]);
    assert_eq!(b["action"], "recreated");
    assert_ne!(a["id"], b["id"]);
    assert_eq!(home.containers().len(), 1);
    // With recreation disabled, drift is accepted.
    let c = home.json(&["-c", "terminal.docker_recreate_on_config_change=false", "sandbox", "ensure", "--task", "d"]);
    assert_eq!((c["action"].as_str(), &c["id"]), (Some("attached"), &b["id"]));
}

#[test]
fn timeout_exits_124_and_kills_the_process() {
    require_docker();
    let home = Home::new();
    let out = home.run(&["run", "--task", "to", "--timeout", "1", "--", "sh", "-c", "sleep 300; echo never"]);
    assert_eq!(out.status.code(), Some(124));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("never"));
    let ps = home.ok(&["run", "--task", "to", "--", "ps", "-eo", "args"]);
    assert!(!ps.contains("sleep 300"), "the timed-out process is gone:\n{ps}");
}

#[test]
fn forwarded_secrets_reach_the_command_but_not_the_container_config() {
    require_docker();
    let home = Home::new();
    let out = home
        .cmd()
        .env("MY_SECRET", "s3cr3t")
        .args(["-c", r#"terminal.docker_forward_env=["MY_SECRET"]"#, "run", "--task", "sec", "--", "env"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("MY_SECRET=s3cr3t"));
    let id = &home.containers()[0];
    assert!(!inspect(id, "{{.Config.Env}}").contains("s3cr3t"));
}

#[test]
fn out_of_band_removal_is_recovered() {
    require_docker();
    let home = Home::new();
    home.ok(&["run", "--task", "oob", "--", "true"]);
    let id = home.containers().remove(0);
    assert!(docker(&["rm", "-f", &id]).status.success());
    assert_eq!(home.ok(&["run", "--task", "oob", "--", "echo", "back"]), "back\n");
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
            &["sandbox", "rm"][..],
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

#[test]
fn a_missing_image_is_a_clear_engine_error() {
    require_docker();
    let home = Home::new();
    let out = home.run(&["-c", "terminal.docker_image=berth-no-such-image:0", "run", "--task", "img", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("berth never pulls"), "{err}");
    assert!(home.containers().is_empty(), "no created leftover");
}

#[test]
fn sandbox_ls_lists_this_profiles_sandboxes() {
    require_docker();
    let home = Home::new();
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

#[test]
fn hostile_task_ids_get_sanitized_labels_and_their_own_sandboxes() {
    require_docker();
    let home = Home::new();
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

#[test]
fn an_interrupted_run_stops_its_command_and_leaves_no_opt_out_container() {
    require_docker();
    let home = Home::new();
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
        // Wait until the command runs inside.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !home
            .containers()
            .iter()
            .any(|id| crate::support::docker(&["top", id]).stdout.windows(9).any(|w| w == b"sleep 300"))
        {
            assert!(Instant::now() < deadline, "the command never started");
            std::thread::sleep(Duration::from_millis(100));
        }
        crate::support::signal(child.id(), signal);
        assert_eq!(child.wait().unwrap().code(), Some(code));
        if opt_out {
            assert!(home.containers().is_empty(), "the opt-out container was removed");
        } else {
            let id = &home.containers()[0];
            let top = String::from_utf8_lossy(&crate::support::docker(&["top", id]).stdout).into_owned();
            assert!(!top.contains("sleep 300"), "the command was stopped:\n{top}");
        }
    }
}
