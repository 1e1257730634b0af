//! The fault suite at berth's edges (issue 10, sections 1 and 4): a task's command cannot reach berth's home or the
//! engine socket under any mount settings; out-of-range numbers are refused, never wrapped; concurrent `config set`s
//! all land; forwarded secrets stay out of logs; worker logs are capped while a run goes; a full or read-only disk is
//! named as such.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::{Home, require_docker, wait_until};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts the bad-input contract: exit 2 and one `berth: ` line.
fn assert_refused(out: &Output, what: &str) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{what}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{what}: one line expected: {err}");
    assert!(err.starts_with("berth: "), "{what}: {err}");
    err
}

fn task_status(home: &Home, id: &str) -> String {
    home.json(&["kanban", "show", id])["task"]["status"].as_str().unwrap_or_default().to_owned()
}

/// Polls until the task leaves `running` (its worker finished), within `limit`.
fn wait_not_running(home: &Home, id: &str, limit: Duration) -> String {
    wait_until(&format!("task {id} to leave running"), limit, || {
        let s = task_status(home, id);
        (s != "running").then_some(s)
    })
}

fn create_task(home: &Home, command: &str) -> String {
    home.json(&["kanban", "create", "edge", "--assignee", &home.profile, "--command", command])["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn worker_log(home: &Home, id: &str) -> String {
    std::fs::read_to_string(home.path().join("kanban").join("logs").join(format!("{id}.log"))).unwrap_or_default()
}

/// Every way a command inside the sandbox could reach berth's files: its working directory and the mount points the
/// hostile settings below ask for (`name` is the home's folder name, `home` its host path). It only ever writes at
/// those exact places, never searches the whole tree: should a refusal regress, a host-root mount must not turn this
/// test into a host-wide overwrite.
fn attack(home: &str, name: &str) -> String {
    format!(
        r#"
for d in "$PWD" /workspace /root /h /q /l /x "/p/{name}" "/hostroot{home}"; do
  printf 'terminal:\n  docker_volumes: ["/var/run/docker.sock:/var/run/docker.sock"]\n' > "$d/config.yaml" 2>/dev/null
  echo junk > "$d/berth-kanban.db" 2>/dev/null
  touch "$d/pwned" 2>/dev/null
done
for f in /db /c; do [ -f "$f" ] && echo junk > "$f" 2>/dev/null; done
true
"#
    )
}

#[test]
fn a_task_cannot_change_settings_or_board_from_its_sandbox_under_any_mount_settings() {
    require_docker();
    let home = Home::new();
    let h = home.path().canonicalize().unwrap();
    let hs = h.display().to_string();
    // A config file the attack would rewrite, and a board it would overwrite.
    home.ok(&["config", "set", "terminal.timeout", "120"]);
    let config_before = std::fs::read(h.join("config.yaml")).unwrap();
    let link_dir = tempfile::tempdir().unwrap();
    let link = link_dir.path().join("home-link");
    std::os::unix::fs::symlink(&h, &link).unwrap();
    let name = h.file_name().unwrap().to_str().unwrap().to_owned();
    let parent = h.parent().unwrap().display().to_string();
    let hostile_volumes = [
        format!("{hs}:/h"),
        format!("{parent}:/p"),
        format!("{hs}/../{name}/:/q"),
        format!("{}:/l", link.display()),
        "/:/hostroot".to_owned(),
        "/var/run/docker.sock:/var/run/docker.sock".to_owned(),
        format!("{hs}/berth-kanban.db:/db"),
    ];
    let hostile_args = [format!("[\"-v\",\"{hs}:/x\"]"), format!("[\"--volume={hs}/config.yaml:/c\"]")];
    let mut ran = 0;
    for i in 0..16u32 {
        let (cwd, persistent, allow, hostile) = (i & 1 == 1, i & 2 == 0, i & 4 != 0, i & 8 != 0);
        let id = create_task(&home, &attack(&hs, &name));
        let mut cmd = home.cmd();
        cmd.env("TERMINAL_DOCKER_MOUNT_CWD_TO_WORKSPACE", cwd.to_string())
            .env("TERMINAL_CONTAINER_PERSISTENT", persistent.to_string())
            .env("TERMINAL_DOCKER_ALLOW_HOST_MOUNTS", allow.to_string());
        let what = format!("cwd={cwd} persistent={persistent} allow={allow} hostile={hostile}");
        if hostile {
            let k = i as usize;
            // With the opt-in the socket may be mounted; berth's own files never.
            let volume = if allow && k % hostile_volumes.len() == 5 {
                hostile_volumes[0].clone()
            } else {
                hostile_volumes[k % hostile_volumes.len()].clone()
            };
            cmd.env("TERMINAL_DOCKER_VOLUMES", serde_json::to_string(&[volume]).unwrap());
            if !k.is_multiple_of(3) {
                cmd.env("TERMINAL_DOCKER_EXTRA_ARGS", &hostile_args[k % 2]);
            }
        }
        let out = cmd.args(["kanban", "dispatch", "--json"]).output().unwrap();
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        let status = wait_not_running(&home, &id, Duration::from_secs(120));
        let log = worker_log(&home, &id);
        if hostile {
            assert!(log.contains("refusing to mount"), "{what}: the hostile mount was not refused:\n{log}");
        } else {
            assert_eq!(status, "done", "{what}: a task without hostile mounts must run:\n{log}");
            ran += 1;
        }
        assert_eq!(std::fs::read(h.join("config.yaml")).unwrap(), config_before, "{what}: config.yaml changed");
        let db = std::fs::read(h.join("berth-kanban.db")).unwrap();
        assert!(db.starts_with(b"SQLite format 3\0"), "{what}: berth-kanban.db overwritten");
        home.ok(&["kanban", "ls"]);
        for d in [h.clone(), h.join("kanban"), h.join("profiles")] {
            assert!(!d.join("pwned").exists(), "{what}: the task wrote into {}", d.display());
        }
    }
    assert_eq!(ran, 8);
}

#[test]
fn mounts_of_the_home_or_the_socket_are_refused_at_config_set_and_at_create() {
    let home = Home::new();
    let h = home.path().canonicalize().unwrap().display().to_string();
    let config = home.path().join("config.yaml");
    home.ok(&["config", "set", "terminal.timeout", "120"]);
    let before = std::fs::read(&config).unwrap();
    for (key, value) in [
        ("terminal.docker_volumes", format!("[\"{h}:/h\"]")),
        ("terminal.docker_volumes", format!("[\"{h}/berth-kanban.db:/db:ro\"]")),
        ("terminal.docker_volumes", "[\"/:/host\"]".to_owned()),
        ("terminal.docker_volumes", "[\"/var/run/docker.sock:/var/run/docker.sock\"]".to_owned()),
        ("terminal.docker_volumes", "[\"/run/:/r\"]".to_owned()),
        ("terminal.docker_extra_args", format!("[\"-v\",\"{h}/..:/p\"]")),
        ("terminal.docker_extra_args", format!("[\"--mount\",\"type=bind,source={h},target=/m\"]")),
        ("terminal.sandbox_dir", String::new()),
        ("terminal.sandbox_dir", "/".to_owned()),
    ] {
        let out = home.run(&["config", "set", key, &value]);
        let err = assert_refused(&out, &format!("{key}={value}"));
        assert!(err.contains("refusing to mount") || err.contains("sandbox_dir"), "{err}");
        assert_eq!(std::fs::read(&config).unwrap(), before, "{key}={value} touched the file");
    }
    // The socket passes with the explicit opt-in; the home never does.
    let allow = ["-c", "terminal.docker_allow_host_mounts=true", "config", "set", "terminal.docker_volumes"];
    let mut args = allow.to_vec();
    args.push("[\"/var/run/docker.sock:/var/run/docker.sock\"]");
    home.ok(&args);
    let mut args = allow.to_vec();
    let home_volume = format!("[\"{h}:/h\"]");
    args.push(&home_volume);
    assert_refused(&home.run(&args), "home with the opt-in");
}

#[test]
fn berth_run_from_the_home_with_mount_cwd_is_refused_with_one_line() {
    require_docker();
    let home = Home::new();
    let out = home
        .cmd()
        .current_dir(home.path())
        .args(["-c", "terminal.docker_mount_cwd_to_workspace=true", "run", "--task", "t", "--", "true"])
        .output()
        .unwrap();
    let err = assert_refused(&out, "cwd = home");
    assert!(err.contains("refusing to mount"), "{err}");
    let out = home.cmd().env("TERMINAL_SANDBOX_DIR", "").args(["run", "--task", "t", "--", "true"]).output().unwrap();
    assert!(assert_refused(&out, "empty sandbox_dir").contains("sandbox_dir"));
    assert!(!Path::new("/docker").join(&home.profile).exists(), "a folder was made at /docker");
    assert!(home.containers().is_empty(), "a container was made");
}

#[test]
fn a_worker_reads_its_settings_from_the_environment_not_the_file() {
    let home = Home::new();
    // A file a sandbox might have written: garbage YAML would fail any process that reads it.
    std::fs::write(home.path().join("config.yaml"), ": : not yaml [").unwrap();
    let out = home.run(&["kanban", "ls"]);
    assert!(!out.status.success(), "a normal command reads the file");
    let out = home.run(&["worker", "run", "t_missing"]);
    let err = stderr(&out);
    assert!(err.contains("no task t_missing"), "the worker read config.yaml: {err}");
}

#[test]
fn out_of_range_numbers_are_refused_never_wrapped() {
    let home = Home::new();
    home.ok(&["config", "set", "terminal.timeout", "120"]);
    let config = home.path().join("config.yaml");
    let before = std::fs::read(&config).unwrap();
    for (key, value) in [
        ("terminal.lifetime_seconds", "4611686018427387904"),
        ("kanban.claim_ttl_seconds", "9223372036854775807"),
        ("kanban.dispatch_interval_seconds", "1e20"),
        ("terminal.container_memory", "9223372036854775807"),
        ("kanban.failure_limit", "-5"),
        ("terminal.timeout", "-1"),
    ] {
        let err = assert_refused(&home.run(&["config", "set", key, value]), &format!("{key}={value}"));
        assert!(err.contains(key), "{err}");
        assert_eq!(std::fs::read(&config).unwrap(), before, "{key}={value} touched the file");
    }
    // A negative value is a value, judged by the table's rules (not clap's parser).
    let err = assert_refused(&home.run(&["config", "set", "kanban.max_spawn", "-1"]), "negative cap");
    assert!(err.contains("-1 is below 1"), "{err}");
    let err = assert_refused(&home.run(&["kanban", "tail", "t_x", "--interval", "NaN"]), "tail NaN");
    assert!(err.contains("--interval"), "{err}");
    assert_refused(&home.run(&["kanban", "tail", "t_x", "--interval", "inf"]), "tail inf");
}

#[test]
fn a_huge_claim_ttl_from_the_environment_is_not_a_claim_in_the_past() {
    let home = Home::new();
    let id = create_task(&home, "true");
    let out = home
        .cmd()
        .env("KANBAN_CLAIM_TTL_SECONDS", "9223372036854775807")
        .env("KANBAN_WORKER_COMMAND", "sleep 30")
        .args(["kanban", "dispatch", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("kanban.claim_ttl_seconds"), "no warning: {}", stderr(&out));
    let task = home.json(&["kanban", "show", &id])["task"].clone();
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let expires = domain::time::Timestamp::parse_docker(task["claim_expires"].as_str().unwrap()).unwrap().as_millis();
    assert!(expires > now_ms, "claim expires in the past: {expires} < {now_ms}");
    if let Some(pid) = task["worker_pid"].as_i64() {
        crate::support::signal_group(&home, pid, rustix::process::Signal::KILL);
    }
}

#[test]
fn a_huge_lifetime_does_not_make_the_reaper_remove_a_fresh_sandbox() {
    require_docker();
    let home = Home::new();
    let id = home.json(&["sandbox", "ensure", "--task", "fresh"])["id"].as_str().unwrap().to_owned();
    let out = crate::support::docker(&["stop", "-t", "0", &id]);
    assert!(out.status.success());
    let out = home
        .cmd()
        .env("TERMINAL_LIFETIME_SECONDS", "4611686018427387904")
        .args(["sandbox", "reap", "--dry-run", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["removed"].as_array().unwrap().is_empty(), "a sandbox that exited a second ago would go: {v}");
}

#[test]
fn concurrent_config_sets_of_different_keys_all_land() {
    let home = Home::new();
    let keys = [
        ("terminal.timeout", "11"),
        ("terminal.lifetime_seconds", "301"),
        ("terminal.container_cpu", "2"),
        ("terminal.docker_image", "img:edges"),
        ("kanban.failure_limit", "3"),
        ("kanban.claim_ttl_seconds", "901"),
        ("kanban.worker_log_backup_count", "2"),
        ("kanban.default_assignee", "someone"),
    ];
    for round in 0..5 {
        let _ = std::fs::remove_file(home.path().join("config.yaml"));
        let mut running: Vec<_> = keys
            .iter()
            .map(|(k, v)| {
                home.cmd()
                    .args(["config", "set", k, v])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in &mut running {
            let status = c.wait().unwrap();
            assert!(status.success(), "round {round}");
        }
        let v = home.json(&["config", "ls"]);
        for (k, want) in keys {
            let e = v.as_array().unwrap().iter().find(|e| e["key"] == k).unwrap();
            assert_eq!(e["source"], "file", "round {round}: {k} lost");
            let got = e["value"].to_string();
            assert!(got.trim_matches('"') == want || got == format!("{want}.0"), "round {round}: {k} = {got}");
        }
        let leftovers: Vec<PathBuf> = std::fs::read_dir(home.path())
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "temporaries left behind: {leftovers:?}");
    }
}

#[test]
fn forwarded_secrets_never_reach_a_log_line_at_debug_level() {
    require_docker();
    let home = Home::new();
    let secret = "s3cr3t-\"edge\"-value";
    let out = home
        .cmd()
        .env("MY_SECRET", secret)
        .env("TERMINAL_DOCKER_FORWARD_ENV", "[\"MY_SECRET\"]")
        .args(["-vv", "run", "--task", "sec", "--", "sh", "-c", "printf %s \"$MY_SECRET\" | wc -c"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    // The command got the value (its length), and the debug log shows the exec request, masked.
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), secret.len().to_string());
    assert!(err.contains("MY_SECRET=***"), "the exec request is not in the debug log as expected:\n{err}");
    assert!(!err.contains("s3cr3t"), "the secret reached the log:\n{err}");
}

#[test]
fn a_debug_logging_worker_keeps_forwarded_secrets_out_of_its_log_file() {
    require_docker();
    let home = Home::new();
    let secret = "w0rker-s3cret-value";
    let id = create_task(&home, "test -n \"$MY_SECRET\" && echo got-it");
    let out = home
        .cmd()
        .env("MY_SECRET", secret)
        .env("BERTH_LOG", "debug")
        .env("TERMINAL_DOCKER_FORWARD_ENV", "[\"MY_SECRET\"]")
        .args(["kanban", "dispatch", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(wait_not_running(&home, &id, Duration::from_secs(120)), "done");
    let log = worker_log(&home, &id);
    assert!(log.contains("got-it"), "the command did not get the secret:\n{log}");
    assert!(log.contains("MY_SECRET=***"), "the debug log lacks the masked exec request:\n{log}");
    assert!(!log.contains(secret), "the secret reached the worker's log file:\n{log}");
}

#[test]
fn a_worker_log_is_capped_while_the_run_goes_keeping_the_tail() {
    require_docker();
    let home = Home::new();
    let cap = 256 * 1024;
    // About 3 MB of output, then a last line the tail must keep.
    let id = create_task(
        &home,
        "i=0; while [ $i -lt 40000 ]; do echo \"line $i of the flood ............................................\"; i=$((i+1)); done; echo THE-END",
    );
    let out = home
        .cmd()
        .env("KANBAN_WORKER_LOG_ROTATE_BYTES", cap.to_string())
        .args(["kanban", "dispatch", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let mut max_seen = 0;
    let log_path = home.path().join("kanban").join("logs").join(format!("{id}.log"));
    wait_until("the flood to finish", Duration::from_secs(120), || {
        max_seen = max_seen.max(std::fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0));
        task_status(&home, &id) != "running"
    });
    assert_eq!(task_status(&home, &id), "done");
    let log = std::fs::read_to_string(&log_path).unwrap();
    let bound = cap + 128 * 1024;
    assert!((log.len() as u64) <= bound, "log is {} bytes, cap {cap}", log.len());
    assert!(max_seen <= bound, "log reached {max_seen} bytes during the run, cap {cap}");
    assert!(log.contains("THE-END"), "the tail was not kept");
    assert!(log.contains("earlier output dropped"), "no note of the cut");
}

/// Runs `script` as root in a private mount namespace (so it may mount a small tmpfs); `None` when this host
/// cannot (no `unshare`), which the caller turns into a failure: the fault suite runs as root in CI.
fn in_mount_namespace(script: &str) -> Output {
    let userns =
        if Command::new("id").arg("-u").output().map(|o| o.stdout == b"0\n").unwrap_or(false) { "-m" } else { "-rm" };
    Command::new("unshare").args([userns, "sh", "-euc", script]).output().expect("unshare runs")
}

#[test]
fn a_healthy_board_on_a_full_or_read_only_disk_is_named_as_such() {
    let home = Home::new();
    home.ok(&["kanban", "create", "hello", "--command", "true"]);
    // A WAL-mode board with committed pages still in its WAL (a process was killed holding it), as a gateway leaves.
    let db = home.path().join("berth-kanban.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    conn.execute("UPDATE tasks SET priority = 7", []).unwrap();
    let saved = tempfile::tempdir().unwrap();
    for f in ["berth-kanban.db", "berth-kanban.db-wal"] {
        std::fs::copy(home.path().join(f), saved.path().join(f)).unwrap();
    }
    drop(conn);
    let mnt = tempfile::tempdir().unwrap();
    let script = format!(
        r#"
B='{bin}'; M='{mnt}'; S='{saved}'
mount -t tmpfs -o size=1m tmpfs "$M"
mkdir "$M/home"; cp "$S/berth-kanban.db" "$S/berth-kanban.db-wal" "$M/home/"
export BERTH_HOME="$M/home" BERTH_PROFILE=default
sum() {{ cat "$M/home/berth-kanban.db" "$M/home/berth-kanban.db-wal" | cksum; }}
before=$(sum)
mount -o remount,ro "$M"
echo "== read-only"; "$B" kanban ls 2>&1 || true; "$B" kanban create x 2>&1 || true
echo "== config-ro"; "$B" config set terminal.timeout 5 2>&1 || true
mount -o remount,rw "$M"
dd if=/dev/zero of="$M/fill" bs=4k 2>/dev/null || true
echo "== full"; "$B" kanban ls 2>&1 || true; "$B" kanban create x 2>&1 || true
echo "== config-full"; "$B" config set terminal.timeout 5 2>&1 || true
echo "== files"; ls -a "$M/home"
[ "$before" = "$(sum)" ] && echo "== unchanged"
"#,
        bin = crate::support::berth_bin().display(),
        mnt = mnt.path().display(),
        saved = saved.path().display()
    );
    let out = in_mount_namespace(&script);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    let section = |name: &str| -> String {
        let start = text.find(&format!("== {name}\n")).unwrap_or_else(|| panic!("no {name} in:\n{text}"));
        let rest = &text[start + name.len() + 4..];
        rest[..rest.find("== ").unwrap_or(rest.len())].to_owned()
    };
    let (ro, config_ro, full, config_full) =
        (section("read-only"), section("config-ro"), section("full"), section("config-full"));
    assert!(ro.contains("Read-only file system"), "the read-only disk is not named:\n{ro}");
    assert!(full.contains("No space left on device") || full.contains("disk is full"), "full disk not named:\n{full}");
    assert!(!text.contains("move it aside"), "a good board was called damaged:\n{text}");
    // `config set` names the OS's reason and leaves no temporary behind.
    assert!(config_ro.contains("Read-only file system"), "no OS reason:\n{config_ro}");
    assert!(config_full.contains("No space left on device"), "no OS reason:\n{config_full}");
    assert!(!section("files").contains(".tmp"), "a temporary was left behind:\n{text}");
    assert!(text.contains("== unchanged"), "the board changed:\n{text}");
}
