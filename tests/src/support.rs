//! Test support: a hermetic home with a unique profile, the `berth` binary as a process, and Docker cleanup.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

pub const IMAGE: &str = "berth-sandbox:latest";

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ sits in the workspace").to_path_buf()
}

/// The built `berth` binary (built by `cargo test --workspace` or `cargo build -p app`).
pub fn berth_bin() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"));
    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    let bin = target.join(profile).join("berth");
    assert!(bin.exists(), "{} is missing: run `cargo build -p app` (or `cargo test --workspace`)", bin.display());
    bin
}

/// Runs the docker CLI (for setup and inspection in tests); panics if docker is missing.
pub fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).stdin(Stdio::null()).output().expect("the docker CLI runs")
}

/// Fails loudly when no daemon answers or the test image is missing: Docker tests never skip.
pub fn require_docker() {
    let v = docker(&["version", "--format", "{{.Server.APIVersion}}"]);
    assert!(v.status.success(), "no Docker daemon answers: {}", String::from_utf8_lossy(&v.stderr));
    let img = docker(&["image", "inspect", IMAGE]);
    assert!(img.status.success(), "image {IMAGE} is missing: run `cargo xtask image`");
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A temporary berth home with a unique profile; every container of that profile is removed on drop.
pub struct Home {
    pub dir: tempfile::TempDir,
    pub profile: String,
}

impl Home {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let profile = format!("bt{}x{n}x{:x}", std::process::id(), nanos);
        std::fs::create_dir_all(dir.path().join("profiles").join(&profile)).expect("profile dir");
        Self { dir, profile }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A `berth` command for this home and profile, with every setting variable cleared.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(berth_bin());
        for var in config_bridge::hermetic_vars() {
            c.env_remove(var);
        }
        c.env("BERTH_HOME", self.path()).env("BERTH_PROFILE", &self.profile).stdin(Stdio::null());
        // Small sandboxes so tests stay light; the image is the locally built one.
        c.env("TERMINAL_CONTAINER_MEMORY", "256").env("TERMINAL_CONTAINER_DISK", "0");
        c
    }

    /// Runs berth with `args` and returns its output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("berth runs")
    }

    /// Runs berth and asserts success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "berth {args:?} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs berth with `--json` and parses stdout.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.push("--json");
        let out = self.ok(&all);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("berth {args:?} printed no JSON ({e}): {out}"))
    }

    /// Ids of every container of this home's profile.
    pub fn containers(&self) -> Vec<String> {
        ids(&docker(&["ps", "-aq", "--no-trunc", "--filter", &format!("label=hermes-profile={}", self.profile)]))
    }
}

impl Default for Home {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let ids = self.containers();
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f"];
            args.extend(ids.iter().map(String::as_str));
            docker(&args);
        }
    }
}

/// Splits CLI output into ids.
pub fn ids(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect()
}

/// `docker inspect -f FORMAT ID`, trimmed.
pub fn inspect(id: &str, format: &str) -> String {
    String::from_utf8_lossy(&docker(&["inspect", "-f", format, id]).stdout).trim().to_owned()
}

/// Sends `sig` to the process `pid` this test started (errors, such as an already gone process, are ignored).
pub fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(p) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Sends `sig` to the process group led by `pid` (a worker this test's dispatcher started).
pub fn signal_group(pid: i64, sig: rustix::process::Signal) {
    if let Some(p) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process_group(p, sig);
    }
}
