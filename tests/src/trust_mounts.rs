//! The second trust round (issue 23), what a mount can reach beyond this home: another berth home on the same
//! machine (by its marker, or by its layout when no berth has marked it yet) and the engine's socket hard-linked
//! somewhere inside a mounted folder. Each is refused in one line naming `terminal.docker_allow_host_access`, at
//! create and at `config set`, and no sandbox is made; a folder too big or too deep to check is refused, not let
//! through.

use std::path::Path;
use std::process::Output;

use crate::support::{Home, require_docker};

/// Asserts the bad-input contract for a mount: exit 2, one line naming the opt-in and `want`.
fn assert_refused(out: &Output, want: &str, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{what}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{what}: one line expected: {err}");
    assert!(err.contains("refusing to mount") && err.contains(want), "{what}: {err}");
    assert!(err.contains("terminal.docker_allow_host_access"), "{what}: {err}");
}

/// Tries `source` as a bind through the settings (`-c`), the extra arguments (environment) and `config set`.
fn refused_everywhere(home: &Home, source: &Path, want: &str) {
    let s = source.display().to_string();
    let volumes = serde_json::to_string(&[format!("{s}:/m")]).unwrap();
    let pair = format!("terminal.docker_volumes={volumes}");
    assert_refused(&home.run(&["-c", &pair, "run", "--task", "m", "--", "true"]), want, &pair);
    let extra = serde_json::to_string(&["--mount", &format!("type=bind,src={s},dst=/m")]).unwrap();
    let out = home.cmd().env("TERMINAL_DOCKER_EXTRA_ARGS", &extra).args(["run", "--task", "m", "--", "true"]).output();
    assert_refused(&out.unwrap(), want, &extra);
    let config = home.path().join("config.yaml");
    let before = std::fs::read(&config).ok();
    assert_refused(&home.run(&["config", "set", "terminal.docker_volumes", &volumes]), want, "config set");
    assert_eq!(std::fs::read(&config).ok(), before, "config set {volumes} touched the file");
    assert!(home.containers().is_empty(), "{s}: a sandbox was made");
}

/// A second home cannot mount the first home, a file or folder inside it, or a folder holding it; nor a home an
/// older berth made (`config.yaml` beside `kanban/`, no marker). Before, only the running home's own folder was
/// refused: a second home gave its sandboxes the first one's `config.yaml` and board.
#[test]
fn another_berth_home_is_refused_however_it_is_reached() {
    require_docker();
    let outer = tempfile::tempdir().unwrap();
    let mut first = Home::new();
    first.dir = tempfile::tempdir_in(outer.path()).unwrap();
    std::fs::create_dir_all(first.path().join("profiles").join(&first.profile)).unwrap();
    first.ok(&["config", "set", "terminal.timeout", "120"]);
    first.ok(&["kanban", "ls"]);
    let a = first.path().canonicalize().unwrap();
    assert!(a.join(".berth-home").is_file(), "a home gets its marker");
    let second = Home::new();
    let holder = tempfile::tempdir().unwrap();
    let legacy = holder.path().join("nested").join("old-home");
    std::fs::create_dir_all(legacy.join("kanban").join("logs")).unwrap();
    std::fs::write(legacy.join("config.yaml"), "terminal:\n  timeout: 60\n").unwrap();
    for (source, want) in [
        (a.clone(), "inside a berth home"),
        (a.join("config.yaml"), "inside a berth home"),
        (a.join("kanban"), "inside a berth home"),
        (a.join("no-such-folder-yet"), "inside a berth home"),
        (outer.path().to_path_buf(), "holds a berth home"),
        (legacy.clone(), "inside a berth home"),
        (legacy.join("config.yaml"), "inside a berth home"),
        (holder.path().to_path_buf(), "holds a berth home"),
    ] {
        refused_everywhere(&second, &source, want);
    }
    // Nor can its sandboxes folder be put inside the first home.
    let inside = format!("terminal.sandbox_dir={}", a.join("kanban").join("sb").display());
    let out = second.run(&["-c", &inside, "run", "--task", "m", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(2) && err.contains("another berth home"), "{inside}: {err}");
    assert!(!legacy.join(".berth-home").exists(), "a refusal wrote into the other home");
    // An ordinary folder still mounts.
    let plain = tempfile::tempdir().unwrap();
    std::fs::write(plain.path().join("data.txt"), "plain").unwrap();
    let pair = format!("terminal.docker_volumes=[\"{}:/m:ro\"]", plain.path().display());
    let out = second.run(&["-c", &pair, "run", "--task", "ok", "--", "cat", "/m/data.txt"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "plain");
}

/// A folder holding a hard link of the engine's socket a few levels down is refused, naming the link; so are the
/// engine's own folders, containerd's socket, a process's folder in `/proc` and a folder too deep to walk to the end. Before, only the socket's own path (or its
/// folder) was refused.
#[test]
fn a_folder_hiding_the_engine_socket_or_too_deep_to_check_is_refused() {
    require_docker();
    let home = Home::new();
    let dir = tempfile::tempdir().unwrap();
    let hidden = dir.path().join("a").join("b");
    std::fs::create_dir_all(&hidden).unwrap();
    match std::fs::hard_link("/var/run/docker.sock", hidden.join("innocent")) {
        Ok(()) => refused_everywhere(&home, dir.path(), "b/innocent inside it is the container engine's socket"),
        // A link needs the same filesystem as the socket: where /tmp is another one, this case cannot be made.
        Err(e) => eprintln!("not tried: a hard link of /var/run/docker.sock in {} ({e})", dir.path().display()),
    }
    // The engine's own folders and the runtimes below it (containerd starts containers as root too), whether or not
    // this host has them.
    for engine in ["/var/lib/docker/containers", "/run/containerd", "/run/docker/containerd/containerd.sock"] {
        refused_everywhere(&home, Path::new(engine), "the container engine's");
    }
    // A process's folder in /proc: its `root` link is that process's whole filesystem, socket included.
    let mut sleeper = std::process::Command::new("sleep").arg("600").spawn().unwrap();
    refused_everywhere(&home, Path::new(&format!("/proc/{}", sleeper.id())), "the host's proc filesystem");
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    let deep = tempfile::tempdir().unwrap();
    let mut d = deep.path().to_path_buf();
    for _ in 0..70 {
        d.push("d");
    }
    std::fs::create_dir_all(&d).unwrap();
    refused_everywhere(&home, deep.path(), "more than 64 levels deep");
    // With the opt-in, the deep folder mounts (it holds nothing of the engine's).
    let pair = format!("terminal.docker_volumes=[\"{}:/m:ro\"]", deep.path().display());
    let allow = "terminal.docker_allow_host_mounts=true";
    let out = home.run(&["-c", allow, "-c", &pair, "run", "--task", "deep", "--", "test", "-d", "/m/d/d"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A named volume removed when dropped.
struct Volume<'a>(&'a Home, String);

impl Drop for Volume<'_> {
    fn drop(&mut self) {
        for id in self.0.containers() {
            self.0.docker(&["rm", "-f", &id]);
        }
        self.0.docker(&["volume", "rm", "-f", &self.1]);
    }
}

/// A named volume that binds a host folder (`local`, `o=bind,device=…`) is that folder under another name: one that
/// binds another berth home or the engine's socket folder is refused like a bind of it, in `docker_volumes` and in a
/// `--mount type=volume`. Before, any volume name passed, and a task rewrote the other home's `config.yaml`.
#[test]
fn a_volume_that_binds_a_protected_host_folder_is_refused() {
    require_docker();
    let first = Home::new();
    first.ok(&["kanban", "ls"]);
    let a = first.path().canonicalize().unwrap();
    let second = Home::new();
    let make = |suffix: &str, device: &str| {
        let name = format!("{}-{suffix}", second.profile);
        let opts = ["--opt", "type=none", "--opt", "o=bind", "--opt"];
        let out = second.docker(&[&["volume", "create"][..], &opts, &[&format!("device={device}"), &name]].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Volume(&second, name)
    };
    let home_vol = make("home", &a.display().to_string());
    let run_vol = make("run", "/var/run");
    for (volume, want) in [(&home_vol, "inside a berth home"), (&run_vol, "the container engine's socket")] {
        let name = &volume.1;
        let pair = format!("terminal.docker_volumes=[\"{name}:/m\"]");
        let out = second.run(&["-c", &pair, "run", "--task", "v", "--", "sh", "-c", "echo x > /m/config.yaml"]);
        assert_refused(&out, want, &pair);
        let extra = format!("terminal.docker_extra_args=[\"--mount\",\"type=volume,src={name},dst=/m\"]");
        assert_refused(&second.run(&["-c", &extra, "run", "--task", "v", "--", "true"]), want, &extra);
        assert!(second.containers().is_empty(), "{name}: a sandbox was made");
    }
    assert!(!a.join("config.yaml").exists(), "the other home's config.yaml was written");
    // A volume that mounts a kernel filesystem of its own (a re-attack of issue 38: `type=proc` gave the sandbox the
    // host's processes and a writable /proc/sys/kernel/core_pattern; `type=sysfs` the host's /sys) is that folder.
    for (fs, want) in [("proc", "/proc"), ("sysfs", "/sys")] {
        let name = format!("{}-{fs}", second.profile);
        let out = second.docker(&[
            "volume",
            "create",
            "--opt",
            &format!("type={fs}"),
            "--opt",
            &format!("device={fs}"),
            &name,
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let _volume = Volume(&second, name.clone());
        let pair = format!("terminal.docker_volumes=[\"{name}:/p\"]");
        let out = second.run(&["-c", &pair, "run", "--task", "v", "--", "cat", "/p/1/comm"]);
        assert_refused(&out, want, &pair);
        assert!(second.containers().is_empty(), "{name}: a sandbox was made");
    }
    // A plain bind volume of an ordinary folder mounts.
    let plain = tempfile::tempdir().unwrap();
    std::fs::write(plain.path().join("data.txt"), "plain").unwrap();
    let plain_vol = make("plain", &plain.path().display().to_string());
    let pair = format!("terminal.docker_volumes=[\"{}:/m:ro\"]", plain_vol.1);
    let out = second.run(&["-c", &pair, "run", "--task", "ok", "--", "cat", "/m/data.txt"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "plain");
}

/// A home's sandboxes folder kept outside it (`terminal.sandbox_dir`) is marked as that home's: another home can
/// neither mount it (its sandboxes' `/root` and `/workspace`) nor use it as its own sandboxes folder, where the two
/// homes' sandboxes of one task would share a folder. Before, both passed.
#[test]
fn another_homes_sandboxes_folder_is_neither_mounted_nor_shared() {
    require_docker();
    let first = Home::new();
    let folder = tempfile::tempdir().unwrap();
    let sb = folder.path().canonicalize().unwrap().join("sb");
    let setting = format!("terminal.sandbox_dir={}", sb.display());
    let out = first.run(&["-c", &setting, "run", "--task", "s", "--", "sh", "-c", "echo secret > /root/note"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(sb.join(".berth-sandboxes").is_file(), "the sandboxes folder gets its marker");
    // The first home keeps using it.
    let out = first.run(&["-c", &setting, "run", "--task", "s", "--", "cat", "/root/note"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "secret", "{}", String::from_utf8_lossy(&out.stderr));
    let second = Home::new();
    refused_everywhere(&second, &sb, "inside a berth sandboxes folder");
    refused_everywhere(&second, &sb.join("docker"), "inside a berth sandboxes folder");
    refused_everywhere(&second, folder.path(), "holds a berth sandboxes folder");
    let out = second.run(&["-c", &setting, "run", "--task", "s", "--", "cat", "/root/note"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(2) && err.contains("another home's sandboxes folder"), "{err}");
    assert!(out.stdout.is_empty() && second.containers().is_empty(), "the second home used the first one's folder");
}
