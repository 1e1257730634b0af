//! The second trust round (issue 23) through the real binary: every mount a create spec makes is checked however it
//! is spelled; a deep tree in a workspace does not abort the commands that remove it; `berth run` pumps input and
//! output at once and ends with the command; `-t` without a terminal is refused; `config set` edits the file in
//! place.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Home, require_docker};

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

/// Every spelling of a mount of the home, the socket or `/` in `docker_extra_args` (here from the environment and
/// `-c`, as a task's settings would carry it), relative paths and symlinks included, is refused at create and at
/// `config set`, and no container is made. The socket passes with the opt-in; the home never does.
#[test]
fn every_mount_the_extra_args_make_is_checked_at_create_and_at_config_set() {
    require_docker();
    let home = Home::new();
    let h = home.path().canonicalize().unwrap();
    let hs = h.display().to_string();
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("to-home");
    std::os::unix::fs::symlink(&h, &link).unwrap();
    let ls = link.display().to_string();
    let mut hostile: Vec<Vec<String>> = vec![
        vec!["--mount".into(), format!("type=bind,source={hs},target=/m")],
        vec![format!("--mount=type=bind,src={hs}/config.yaml,dst=/c")],
        vec!["--mount".into(), format!("type=bind,source={ls},target=/m")],
        vec!["--mount".into(), "type=bind,source=/var/run/docker.sock,target=/var/run/docker.sock".into()],
        vec!["--mount".into(), "type=bind,src=/,dst=/host,readonly".into()],
        vec!["--mount".into(), "dst=/m,source=/opt,source=/,type=bind".into()],
        vec!["--mount".into(), "type=bind,src=.,dst=/m".into()],
        vec!["-v=/:/host".into()],
        vec![format!("-v{ls}/..:/p")],
        vec!["--volume".into(), "./:/m".into()],
    ];
    // A hard link of the engine's socket elsewhere is the socket all the same (the check compares files, not only
    // paths). A link needs the same filesystem: where /tmp is another one, this case cannot be made and says so.
    let hard = links.path().join("engine.sock");
    match std::fs::hard_link("/var/run/docker.sock", &hard) {
        Ok(()) => hostile.push(vec!["--volume".into(), format!("{}:/s", hard.display())]),
        Err(e) => eprintln!("not tried: a hard link of /var/run/docker.sock in {} ({e})", links.path().display()),
    }
    let config = h.join("config.yaml");
    home.ok(&["config", "set", "terminal.timeout", "120"]);
    let before = std::fs::read(&config).unwrap();
    for args in &hostile {
        let value = serde_json::to_string(args).unwrap();
        // At create: from the environment, run from the home (a relative path would resolve there).
        let out = home
            .cmd()
            .current_dir(&h)
            .env("TERMINAL_DOCKER_EXTRA_ARGS", &value)
            .args(["run", "--task", "t", "--", "true"])
            .output()
            .unwrap();
        let err = assert_refused(&out, &format!("create with {value}"));
        assert!(err.contains("refusing to mount"), "{value}: {err}");
        assert!(home.containers().is_empty(), "{value}: a container was made");
        // And through `-c`.
        let pair = format!("terminal.docker_extra_args={value}");
        let out = home.cmd().current_dir(&h).args(["-c", &pair, "run", "--task", "t", "--", "true"]).output().unwrap();
        assert!(assert_refused(&out, &pair).contains("refusing to mount"));
        assert!(home.containers().is_empty(), "{pair}: a container was made");
        // At config set: refused, the file untouched.
        let out = home.run(&["config", "set", "terminal.docker_extra_args", &value]);
        assert!(assert_refused(&out, &format!("config set {value}")).contains("refusing to mount"));
        assert_eq!(std::fs::read(&config).unwrap(), before, "config set {value} touched the file");
    }
    // The socket with the opt-in is allowed (config set only: no sandbox gets the socket in a test).
    let sock =
        serde_json::to_string(&["--mount", "type=bind,src=/var/run/docker.sock,dst=/var/run/docker.sock"]).unwrap();
    let allow = "terminal.docker_allow_host_mounts=true";
    home.ok(&["-c", allow, "config", "set", "terminal.docker_extra_args", &sock]);
    let home_mount = serde_json::to_string(&["--mount", &format!("type=bind,src={hs},dst=/m")]).unwrap();
    assert_refused(&home.run(&["-c", allow, "config", "set", "terminal.docker_extra_args", &home_mount]), "home");
    // A harmless mount still runs.
    let out = home
        .cmd()
        .env("TERMINAL_DOCKER_EXTRA_ARGS", r#"["--mount","type=tmpfs,dst=/scratch"]"#)
        .args(["run", "--task", "ok", "--", "sh", "-c", "touch /scratch/x && echo fine"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "fine");
}

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

/// Makes a chain of `depth` nested folders `d/d/d/…` under `dir`, one level at a time relative to the last (a full
/// path that deep is longer than any system call takes), holding one descriptor at a time.
fn deep_tree(dir: &Path, depth: usize) {
    use rustix::fs::{Mode, OFlags, mkdirat, openat};
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let mut fd = openat(rustix::fs::CWD, dir, flags, Mode::empty()).unwrap();
    for _ in 0..depth {
        mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
        fd = openat(&fd, "d", flags, Mode::empty()).unwrap();
    }
    // A file at the bottom, so the deepest folder is not empty either.
    let file = openat(&fd, "leaf", OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC, Mode::from_raw_mode(0o644));
    drop(file.unwrap());
}

/// Takes a chain `deep_tree` made apart without recursion, should the test fail with it still there: the temporary
/// home's own removal recurses and would abort the test process.
struct Unchain(PathBuf);

impl Drop for Unchain {
    fn drop(&mut self) {
        // Move `top/d/d` up to `top/d` step by step: every path stays three levels short.
        let (d, up) = (self.0.join("d"), self.0.join("up"));
        while d.is_dir() {
            if std::fs::rename(&d, &up).is_err() {
                return;
            }
            let _ = std::fs::remove_file(up.join("leaf"));
            let _ = std::fs::rename(up.join("d"), &d);
            let _ = std::fs::remove_dir(&up);
        }
    }
}

/// A 15 000-level tree in a task's workspace (as a task could make) is removed by `sandbox rm` like any other
/// folder: the removal walks it without recursing on the stack, instead of aborting by stack overflow.
#[test]
fn a_15000_level_tree_in_a_workspace_is_removed_by_sandbox_rm() {
    require_docker();
    let home = Home::new();
    home.ok(&["run", "--task", "deep", "--", "true"]);
    let folder = sandbox_folder(&home, "deep");
    let _unchain = Unchain(folder.join("workspace"));
    deep_tree(&folder.join("workspace"), 15_000);
    let out = home.run(&["sandbox", "rm", "--task", "deep"]);
    assert!(out.status.success(), "sandbox rm failed ({}): {}", out.status, stderr(&out));
    assert!(folder.symlink_metadata().is_err(), "{} is still there: {}", folder.display(), stderr(&out));
    assert!(home.containers().is_empty(), "the sandbox is still there");
}

/// Spawns `berth run --task TASK -- ARGV` with a piped stdin and stdout.
fn spawn_run(home: &Home, task: &str, extra: &[&str], argv: &[&str]) -> Child {
    let mut cmd = home.cmd();
    cmd.args(["run", "--task", task]).args(extra).arg("--").args(argv);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

/// Waits for `child` at most `limit`; kills it and returns `None` when it is still running then.
fn wait_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    crate::support::wait_exit(child, limit)
}

/// `head -c 4000000 /dev/zero | berth run -- cat | wc -c`, and a command that writes its 4 MB before it reads its
/// input: input still being sent while output piles up must not deadlock (`docker exec -i` takes half a second).
#[test]
fn berth_run_pumps_4_mb_in_and_out_at_once() {
    require_docker();
    let home = Home::new();
    home.ok(&["run", "--task", "pump", "--", "true"]);
    for argv in [&["cat"][..], &["sh", "-c", "head -c 4000000 /dev/zero; cat >/dev/null"]] {
        pump_4_mb(&home, argv);
    }
}

fn pump_4_mb(home: &Home, argv: &[&str]) {
    let started = Instant::now();
    let mut child = spawn_run(home, "pump", &["--timeout", "60"], argv);
    let mut input = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || input.write_all(&vec![0u8; 4_000_000]));
    let mut output = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut n = 0usize;
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(k) = output.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k;
        }
        n
    });
    let status = wait_within(&mut child, Duration::from_secs(90)).expect("berth run did not end");
    let got = reader.join().unwrap();
    let _ = writer.join();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(0), "{argv:?}: {err}");
    assert_eq!(got, 4_000_000, "{argv:?}: {err}");
    assert!(started.elapsed() < Duration::from_secs(20), "{argv:?} took {:?}", started.elapsed());
}

/// `yes | berth run -- head -c 10`: a command that stops reading its input ends the run with its own exit code at
/// once (`docker exec -i` exits 0 in 0.09 s), not with a connection reset and not by hanging.
#[test]
fn a_command_that_stops_reading_stdin_ends_the_run_with_its_own_code() {
    require_docker();
    let home = Home::new();
    home.ok(&["run", "--task", "yes", "--", "true"]);
    for (argv, code) in [(&["head", "-c", "10"][..], 0), (&["sh", "-c", "head -c 4 >/dev/null; exit 7"][..], 7)] {
        let started = Instant::now();
        let mut child = spawn_run(&home, "yes", &["--timeout", "120"], argv);
        let mut input = child.stdin.take().unwrap();
        // `yes`: lines until the pipe breaks.
        std::thread::spawn(move || while input.write_all(&b"y\n".repeat(4096)).is_ok() {});
        let status = wait_within(&mut child, Duration::from_secs(30));
        let mut out = String::new();
        child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let status = status.unwrap_or_else(|| panic!("{argv:?}: berth run hung with its command gone: {err}"));
        assert_eq!(status.code(), Some(code), "{argv:?}: {err}");
        if code == 0 {
            assert_eq!(out, "y\ny\ny\ny\ny\n", "{err}");
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{argv:?} took {:?}", started.elapsed());
    }
}

/// `-t` without a terminal is refused at once with one line, as `docker exec -it` refuses it, before any sandbox
/// is made; the command never runs.
#[test]
fn run_with_t_and_no_terminal_is_refused_at_once() {
    let home = Home::new();
    for stdin in ["null", "pipe"] {
        let mut cmd = home.cmd();
        cmd.args(["run", "-t", "--task", "tty", "--", "sh", "-c", "sleep 30"]);
        if stdin == "pipe" {
            cmd.stdin(Stdio::piped());
        }
        let started = Instant::now();
        let out = cmd.output().unwrap();
        let err = assert_refused(&out, stdin);
        assert!(err.contains("the input device is not a TTY"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5), "{stdin}: {:?}", started.elapsed());
    }
    assert!(home.containers().is_empty(), "a sandbox was made");
}

/// `config set` edits `config.yaml` where it is: through a symlink to its target (the link stays a link), keeping
/// the file's mode and owner.
#[test]
fn config_set_writes_through_a_symlink_and_keeps_mode_and_owner() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let home = Home::new();
    let elsewhere = tempfile::tempdir().unwrap();
    let real = elsewhere.path().join("shared.yaml");
    std::fs::write(&real, "# shared settings\nterminal:\n  timeout: 60\n").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
    let root = rustix::process::geteuid().is_root();
    if root {
        std::os::unix::fs::chown(&real, Some(4242), Some(4343)).unwrap();
    }
    let link = home.path().join("config.yaml");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    home.ok(&["config", "set", "terminal.timeout", "77"]);
    home.ok(&["config", "set", "kanban.failure_limit", "5"]);
    home.ok(&["config", "unset", "kanban.failure_limit"]);
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink(), "config.yaml is no longer a symlink");
    let text = std::fs::read_to_string(&real).unwrap();
    assert!(text.contains("# shared settings") && text.contains("timeout: 77"), "{text}");
    let meta = real.metadata().unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o640, "the mode changed");
    if root {
        assert_eq!((meta.uid(), meta.gid()), (4242, 4343), "the owner changed");
    }
    assert_eq!(home.ok(&["config", "get", "terminal.timeout"]).trim(), "77");
    // Nothing was left beside the link or the target.
    let strays = |d: &Path| {
        std::fs::read_dir(d).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".tmp")).count()
    };
    assert_eq!(strays(home.path()) + strays(elsewhere.path()), 0);
}
