//! The second trust round (issue 23), the gaps left after the first pass: `sandbox ls --size` counts disk as `du`
//! does, a stalled board server bounds every command, forwarded secrets never reach the board or an external
//! worker's log, the board's connection limit blocks no task, `kanban logs` streams.

use std::io::Write;
use std::path::PathBuf;

use crate::support::Home;

/// The host folder of task `task`'s sandbox in `home` (there is one after its first run).
fn sandbox_folder(home: &Home, task: &str) -> PathBuf {
    let profile = home.path().join("sandboxes").join("docker").join(&home.profile);
    let prefix = format!("{task}-");
    std::fs::read_dir(&profile)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)))
        .unwrap_or_else(|| panic!("no folder of task {task} under {}", profile.display()))
        .path()
}

/// Twenty hard links to one 4 MiB file and a 1 GiB sparse file cost 4 MiB and a few blocks, as `du` counts them;
/// before, `host_dir_bytes` said 1.1 GiB (every link and the sparse file's length counted).
#[test]
fn sandbox_ls_size_counts_a_hard_link_once_and_a_sparse_file_by_its_blocks() {
    let home = Home::new();
    home.ok(&["run", "--task", "du", "--", "true"]);
    let dir = sandbox_folder(&home, "du");
    let data = dir.join("data");
    std::fs::File::create(&data).unwrap().write_all(&vec![7u8; 4 << 20]).unwrap();
    for i in 0..20 {
        std::fs::hard_link(&data, dir.join(format!("link{i}"))).unwrap();
    }
    std::fs::File::create(dir.join("sparse")).unwrap().set_len(1 << 30).unwrap();
    let du = std::process::Command::new("du").arg("-sB1").arg(&dir).output().unwrap();
    let du: u64 = String::from_utf8_lossy(&du.stdout).split_whitespace().next().unwrap().parse().unwrap();
    let rows = home.json(&["sandbox", "ls", "--size"]);
    let bytes = rows.as_array().unwrap()[0]["host_dir_bytes"].as_u64().unwrap();
    assert!((4 << 20..8 << 20).contains(&bytes), "host_dir_bytes {bytes}, du says {du}");
    assert!(bytes.abs_diff(du) < 1 << 20, "host_dir_bytes {bytes}, du says {du}");
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A fake PostgreSQL server that completes the start-up (refusing TLS, then `AuthenticationOk` and `ReadyForQuery`)
/// and then never answers a query; it holds every connection as long as the test lives.
fn handshake_then_silence() -> u16 {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let read_message = |conn: &mut std::net::TcpStream| -> Option<Vec<u8>> {
                let mut len = [0u8; 4];
                conn.read_exact(&mut len).ok()?;
                let mut body = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
                conn.read_exact(&mut body).ok()?;
                Some(body)
            };
            let Some(mut first) = read_message(&mut conn) else { continue };
            if first.get(..4) == Some(&80_877_103u32.to_be_bytes()[..]) {
                let _ = conn.write_all(b"N"); // no TLS: the start-up message follows
                let Some(next) = read_message(&mut conn) else { continue };
                first = next;
            }
            let _ = first;
            let _ = conn.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 0, b'Z', 0, 0, 0, 5, b'I']);
            held.push(conn);
        }
    });
    port
}

/// A server that completes the handshake and then never answers a query costs `kanban ls` and `kanban create` the
/// connect timeout, with one line; before, both hung (the first query was unbounded).
#[test]
fn a_board_server_silent_after_the_handshake_costs_a_command_its_timeout() {
    let port = handshake_then_silence();
    let home = Home::new();
    let url = format!("postgres://berth:pw-s1lent@127.0.0.1:{port}/board?connect_timeout=3");
    let started = std::time::Instant::now();
    let spawn = |args: &[&str]| {
        home.cmd()
            .env("KANBAN_DATABASE_URL", &url)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let children = [
        ("ls", spawn(&["kanban", "ls"])),
        ("create", spawn(&["kanban", "create", "x", "--assignee", &home.profile, "--command", "true"])),
    ];
    for (what, mut child) in children {
        if crate::support::poll(std::time::Duration::from_secs(20), || child.try_wait().unwrap().is_some()).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("kanban {what} still waits after {:?}", started.elapsed());
        }
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert_ne!(out.status.code(), Some(0), "{what}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{what}: one line expected: {err}");
        assert!(err.contains("did not answer within 3s") && !err.contains("pw-s1lent"), "{what}: {err}");
    }
}

/// An external worker (`kanban.worker_command`) that prints 3 MB and a forwarded secret: its log stays under the cap
/// while it runs and shows the secret as `***`, and the result it passes to `kanban complete --result` is stored
/// masked; `kanban complete --result` by hand masks too. Before, the log grew to 3 MB with the secret in it and the
/// board stored the result as given.
#[test]
fn an_external_workers_log_is_masked_and_capped_and_every_stored_result_masked() {
    let home = Home::new();
    let secret = "ext3rnal-s3cret-value";
    let worker = format!(
        "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo \"token=$MY_SECRET\"; echo \"err $MY_SECRET\" >&2; \
         {} kanban complete {{task_id}} --result \"last $MY_SECRET\"; sleep 5",
        crate::support::berth_bin().display()
    );
    home.ok(&["config", "set", "kanban.worker_command", &worker]);
    home.ok(&["config", "set", "kanban.worker_log_rotate_bytes", "65536"]);
    let id = home.json(&["kanban", "create", "ext", "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    let with_secret = |args: &[&str]| {
        let out = home
            .cmd()
            .env("MY_SECRET", secret)
            .env("TERMINAL_DOCKER_FORWARD_ENV", "[\"MY_SECRET\"]")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    };
    with_secret(&["kanban", "dispatch"]);
    crate::support::wait_until("the external worker to complete", std::time::Duration::from_secs(60), || {
        home.json(&["kanban", "show", &id])["task"]["status"].as_str() == Some("done")
    });
    // The command still sleeps: this is the log while it runs (once the worker has passed on the last lines, which
    // may come after the completion).
    let log_path = home.path().join("kanban/logs").join(format!("{id}.log"));
    let read = || std::fs::read_to_string(&log_path).unwrap();
    crate::support::wait_until("the last lines in the log", std::time::Duration::from_secs(4), || {
        let log = read();
        log.contains("token=")
    });
    let log = read();
    assert!(log.len() < 256 * 1024, "the log holds {} bytes while the worker runs", log.len());
    // (Its stderr line may have been dropped by a cap: the stdout still queued in the pipe came after it.)
    assert!(log.contains("token=***") && !log.contains(secret), "{}", &log[log.len().saturating_sub(500)..]);
    let shown = home.json(&["kanban", "show", &id]);
    assert_eq!(shown["task"]["result"].as_str(), Some("last ***"), "{shown}");
    // By hand.
    let other =
        home.json(&["kanban", "create", "hand", "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    with_secret(&["kanban", "complete", &other, "--result", &format!("by hand {secret}")]);
    let shown = home.json(&["kanban", "show", &other]);
    assert_eq!(shown["task"]["result"].as_str(), Some("by hand ***"), "{shown}");
    // A block's reason too.
    let third = home.json(&["kanban", "create", "blk", "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    with_secret(&["kanban", "block", &third, "--reason", &format!("why {secret}")]);
    let shown = home.json(&["kanban", "show", &third]).to_string();
    assert!(!shown.contains(secret) && shown.contains("why ***"), "{shown}");
}

/// `kanban logs` without `--tail` prints a 1 GB log whole under a 512 MiB address-space limit (streamed); before, it
/// read the whole file into memory, failed to, and printed nothing.
#[test]
fn kanban_logs_streams_a_1_gb_log() {
    use std::process::Stdio;
    let home = Home::new();
    home.ok(&["config", "set", "kanban.worker_command", "true"]);
    let id = home.json(&["kanban", "create", "big", "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    let dir = home.path().join("kanban/logs");
    std::fs::create_dir_all(&dir).unwrap();
    let mut f = std::fs::File::create(dir.join(format!("{id}.log"))).unwrap();
    for i in 0..3 {
        writeln!(f, "first {i}").unwrap();
    }
    f.set_len(1 << 30).unwrap(); // sparse: a gigabyte that takes no disk
    std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)).unwrap();
    writeln!(f).unwrap();
    for i in 0..5 {
        writeln!(f, "line {i}").unwrap();
    }
    drop(f);
    let berth = home.cmd();
    let mut cmd = std::process::Command::new("prlimit");
    cmd.arg(format!("--as={}", 512u64 << 20)).arg(berth.get_program()).args(["kanban", "logs", &id]);
    for (k, v) in berth.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let started = std::time::Instant::now();
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    // Count what comes, keeping its first and last bytes.
    let (mut total, mut head, mut tail) = (0u64, Vec::new(), Vec::new());
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = std::io::Read::read(&mut out, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        total += n as u64;
        if head.len() < 64 {
            head.extend_from_slice(&buf[..n.min(64)]);
        }
        tail.extend_from_slice(&buf[..n]);
        tail.drain(..tail.len().saturating_sub(64));
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "kanban logs failed after {:?}", started.elapsed());
    assert!(total > 1 << 30, "printed {total} bytes");
    assert!(String::from_utf8_lossy(&head).starts_with("first 0\nfirst 1\n"), "{head:?}");
    assert!(String::from_utf8_lossy(&tail).ends_with("line 3\nline 4\n"), "{tail:?}");
}

/// With the board server's connection limit reached (a role with `CONNECTION LIMIT 4`: the gateway's two and two
/// more), six tasks whose workers start together all end done, none blocked even with `kanban.failure_limit 1`:
/// a worker waiting for a connection slot is not the task's failure, and a worker holds one connection. Before,
/// workers whose spawn lease lapsed while they waited were counted, and the tasks blocked.
#[test]
fn the_board_connection_limit_blocks_no_task() {
    let Some(admin) = crate::pg::server_url() else { return };
    let role = format!("berth_lim{}", std::process::id());
    let mut admin_client = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
    admin_client
        .batch_execute(&format!("DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN CONNECTION LIMIT 4"))
        .unwrap();
    struct DropRole(postgres::Client, String);
    impl Drop for DropRole {
        fn drop(&mut self) {
            let _ = self.0.batch_execute(&format!("DROP OWNED BY {0}; DROP ROLE IF EXISTS {0}", self.1));
        }
    }
    let _role_guard = DropRole(admin_client, role.clone());
    let home = Home::on_postgres().unwrap();
    let url = home.cmd().get_envs().find(|(k, _)| *k == "KANBAN_DATABASE_URL").unwrap().1.unwrap().to_owned();
    let url = url.to_string_lossy().into_owned();
    let db = url.rsplit('/').next().unwrap().split('?').next().unwrap().to_owned();
    {
        let mut c = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
        c.batch_execute(&format!("ALTER DATABASE {db} OWNER TO {role}")).unwrap();
    }
    let (user_at, _) = url.split_once('@').unwrap();
    let limited = url.replacen(user_at.rsplit('/').next().unwrap(), &role, 1);
    assert!(limited.contains(&role), "{limited}");
    // The limited role makes the schema (it owns it); the test's own commands use the unlimited one.
    let out = home.cmd().env("KANBAN_DATABASE_URL", &limited).args(["kanban", "ls"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let worker = format!("sleep 1; {} kanban complete {{task_id}}", crate::support::berth_bin().display());
    for (k, v) in [
        ("kanban.worker_command", worker.as_str()),
        ("kanban.spawn_lease_seconds", "3"),
        ("kanban.failure_limit", "1"),
        ("kanban.max_in_progress", "6"),
    ] {
        home.ok(&["config", "set", k, v]);
    }
    let mut gw_cmd = home.cmd();
    gw_cmd.env("KANBAN_DATABASE_URL", &limited).args(["-c", "kanban.dispatch_interval_seconds=1"]);
    let gw = crate::support::Gateway::start_with(&home, &mut gw_cmd);
    // The gateway's connections are made once it has ticked.
    crate::support::wait_until("the gateway's first tick", std::time::Duration::from_secs(20), || {
        home.gateway_status()["ticks"].as_u64().unwrap_or(0) >= 1
    });
    // The test takes every slot left, so the workers find the limit reached for longer than their spawn lease.
    let mut slots = Vec::new();
    while let Ok(c) = postgres::Client::connect(&limited, postgres::NoTls) {
        slots.push(c);
        assert!(slots.len() < 10, "the role's connection limit does not hold");
    }
    let ids: Vec<String> = (0..6)
        .map(|i| {
            home.json(&["kanban", "create", &format!("c{i}"), "--assignee", &home.profile])["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    // A command meanwhile says so in one line, as an outage.
    let out = home.cmd().env("KANBAN_DATABASE_URL", &limited).args(["kanban", "ls"]).output().unwrap();
    let err = stderr(&out);
    assert!(err.trim().lines().count() == 1 && err.contains("has no free connection now"), "{err}");
    // scenario: the limit stays reached longer than the workers' spawn lease.
    std::thread::sleep(std::time::Duration::from_secs(8));
    let held = slots.len();
    drop(slots);
    let statuses = || -> Vec<String> {
        ids.iter()
            .map(|id| home.json(&["kanban", "show", id])["task"]["status"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    // Until every task settled (done or blocked; asserted below).
    let settled = crate::support::poll(std::time::Duration::from_secs(120), || {
        let last = statuses();
        if last.iter().all(|s| s == "done" || s == "blocked") { Ok(last.clone()) } else { Err(last) }
    });
    let last = settled.unwrap_or_else(|_| statuses());
    let (_, _, gateway_err) = gw.stop();
    assert!(last.iter().all(|s| s == "done"), "{last:?} (the test held {held} slots)\n{}", gateway_err);
}

/// When berth cannot kill a timed-out command from the host (here: berth in a process namespace of its own, where the
/// sandbox's processes are not visible, as with a remote engine), the kill uses none of the sandbox's programs: a
/// task (as root) replaced `sh`, `kill`, `tr` and `grep` in it with scripts that do nothing, and the command is
/// still killed, with the child it started under `env -i` (no marker). Before, the in-sandbox kill ran those and
/// `yes` kept running.
#[test]
fn the_fallback_kill_of_a_timed_out_command_runs_none_of_the_sandboxs_programs() {
    crate::support::require_docker();
    let home = Home::new();
    home.ok(&["run", "--task", "tk", "--", "true"]);
    let id = home.containers()[0].clone();
    let plant = r#"for t in sh kill tr grep; do p=$(type -P $t); rm -f "$p"; printf '#!/bin/bash\nexit 0\n' > "$p"; chmod 755 "$p"; done"#;
    let planted = home.docker(&["exec", "-u", "0", &id, "bash", "-c", plant]);
    assert!(planted.status.success(), "{}", stderr(&planted));
    let berth = home.cmd();
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc"]).arg(berth.get_program());
    let command = r#"env -i bash -c "sleep 100" & yes > /dev/null"#;
    cmd.args(["run", "--task", "tk", "--timeout", "3", "--", "bash", "-c", command]);
    for (k, v) in berth.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let started = std::time::Instant::now();
    let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    let ps = home.ok(&["run", "--task", "tk", "--", "ps", "-eo", "pid=,args="]);
    let left: Vec<&str> =
        ps.lines().filter(|l| l.contains("yes") || l.contains("bash -c") || l.contains("sleep 100")).collect();
    assert!(left.is_empty(), "left in the sandbox after {:?}: {left:?}", started.elapsed());
}

/// The built-in worker holds one board connection while its command runs (its heartbeats use the worker's own);
/// before, two.
#[test]
fn a_built_in_worker_holds_one_board_connection() {
    crate::support::require_docker();
    let Some(home) = Home::on_postgres() else { return };
    let url = home.cmd().get_envs().find(|(k, _)| *k == "KANBAN_DATABASE_URL").unwrap().1.unwrap().to_owned();
    let url = url.to_string_lossy().into_owned();
    let db = url.rsplit('/').next().unwrap().split('?').next().unwrap().to_owned();
    let made = home.json(&["kanban", "create", "one", "--assignee", &home.profile, "--command", "sleep 6"]);
    let id = made["id"].as_str().unwrap().to_owned();
    home.ok(&["kanban", "dispatch"]);
    crate::support::wait_until("the command to run", std::time::Duration::from_secs(60), || {
        std::fs::read_to_string(home.path().join("kanban/logs").join(format!("{id}.log")))
            .is_ok_and(|l| l.contains("] sandbox "))
    });
    // The dispatcher has exited: every connection to this board's database is the worker's.
    let mut admin = postgres::Client::connect(&crate::pg::server_url().unwrap(), postgres::NoTls).unwrap();
    let n: i64 = admin.query_one("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", &[&db]).unwrap().get(0);
    assert_eq!(n, 1, "connections held by the worker while its command runs");
    crate::support::wait_until("the task to finish", std::time::Duration::from_secs(60), || {
        home.json(&["kanban", "show", &id])["task"]["status"].as_str() == Some("done")
    });
}

/// What reaches the host past any mount needs `terminal.docker_allow_host_access` (or its older name
/// `terminal.docker_allow_host_mounts`), like the engine's socket: `--privileged`, a capability beyond the engine's
/// default set and those acting inside the sandbox's namespaces only (however spelled: `sys_admin`, `CAP_SYS_ADMIN`,
/// `ALL`), a confinement switched off (`--security-opt …=unconfined`), a host device, a namespace shared with the
/// host (`--pid`, `--ipc`, `--uts`, `--userns`, `--cgroupns`, `--network`). Each is refused in one line naming the
/// opt-in, at create (from `-c`, the environment and config.yaml) and at `config set`, and no sandbox is made.
/// Before, only `--privileged`, `--pid host` and `--userns host` were; `--cap-add SYS_ADMIN` made a sandbox.
#[test]
fn host_wide_extra_args_need_the_host_mounts_opt_in() {
    crate::support::require_docker();
    let home = Home::new();
    let refused = |out: &std::process::Output, what: &str| {
        let err = stderr(out);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert!(err.trim().lines().count() == 1 && err.contains("docker_allow_host_access"), "{what}: {err}");
    };
    for args in [
        r#"["--privileged"]"#,
        r#"["--pid=host"]"#,
        r#"["--userns=host"]"#,
        r#"["--cap-add","SYS_ADMIN"]"#,
        r#"["--cap-add=sys_admin"]"#,
        r#"["--cap-add","CAP_SYS_ADMIN"]"#,
        r#"["--cap-add","ALL"]"#,
        r#"["--cap-add","DAC_READ_SEARCH"]"#,
        r#"["--cap-add","SYS_MODULE"]"#,
        r#"["--cap-add","SYS_RESOURCE"]"#,
        r#"["--security-opt","apparmor=unconfined"]"#,
        r#"["--security-opt","seccomp=unconfined"]"#,
        r#"["--security-opt=systempaths=unconfined"]"#,
        r#"["--device","/dev/null"]"#,
        r#"["--device-cgroup-rule","b 7:* rmw"]"#,
        r#"["--cgroupns","host"]"#,
        r#"["--uts","host"]"#,
        r#"["--ipc=host"]"#,
        r#"["--network","host"]"#,
    ] {
        let out = home.run(&["-c", &format!("terminal.docker_extra_args={args}"), "run", "--task", "hw", "--", "true"]);
        refused(&out, &format!("-c {args}"));
        let out =
            home.cmd().env("TERMINAL_DOCKER_EXTRA_ARGS", args).args(["run", "--task", "hw", "--", "true"]).output();
        refused(&out.unwrap(), &format!("env {args}"));
        refused(&home.run(&["config", "set", "terminal.docker_extra_args", args]), &format!("config set {args}"));
    }
    // In config.yaml (written with the opt-in, which is then taken away), the create refuses it too.
    let allow = "terminal.docker_allow_host_mounts=true";
    home.ok(&["-c", allow, "config", "set", "terminal.docker_extra_args", r#"["--cap-add","SYS_ADMIN"]"#]);
    refused(&home.run(&["run", "--task", "hw", "--", "true"]), "config.yaml --cap-add SYS_ADMIN");
    assert!(home.containers().is_empty(), "a sandbox was made");
    // The engine's default capabilities and private namespaces need no opt-in; with the opt-in the rest passes.
    let plain = r#"terminal.docker_extra_args=["--cap-add","NET_BIND_SERVICE","--ipc","private"]"#;
    let out = home.run(&["-c", plain, "run", "--task", "plain", "--", "true"]);
    assert!(out.status.success(), "default capability: {}", stderr(&out));
    let opted = ["-c", allow, "-c", "terminal.docker_extra_args=[\"--pid=host\",\"--cap-add=sys_ptrace\"]"];
    let out = home.run(&[&opted[..], &["run", "--task", "hw", "--", "true"]].concat());
    assert!(out.status.success(), "with the opt-in: {}", stderr(&out));
}

/// `kanban logs --run N --tail M` on a 1 GB log keeps only M lines of the run's part in memory (under a 512 MiB
/// address-space limit); before, it read the whole log and printed nothing.
#[test]
fn kanban_logs_run_tail_of_a_1_gb_log_stays_small() {
    let home = Home::new();
    home.ok(&["config", "set", "kanban.worker_command", "echo ran"]);
    let id = home.json(&["kanban", "create", "big", "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    home.ok(&["kanban", "dispatch"]);
    let log = home.path().join("kanban/logs").join(format!("{id}.log"));
    crate::support::wait_until("the worker's output", std::time::Duration::from_secs(20), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("\nran\n"))
    });
    let shown = home.json(&["kanban", "show", &id]);
    let run = shown["runs"][0]["id"].as_i64().unwrap_or_else(|| panic!("no run: {shown}"));
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len + (1 << 30)).unwrap(); // sparse: a gigabyte that takes no disk
    writeln!(f).unwrap();
    for i in 0..5 {
        writeln!(f, "line {i}").unwrap();
    }
    drop(f);
    let berth = home.cmd();
    let mut cmd = std::process::Command::new("prlimit");
    cmd.arg(format!("--as={}", 512u64 << 20)).arg(berth.get_program());
    cmd.args(["kanban", "logs", &id, "--run", &run.to_string(), "--tail", "2"]);
    for (k, v) in berth.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "line 3\nline 4\n");
}
