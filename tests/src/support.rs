//! Test support: a hermetic home with a unique profile, the `berth` binary as a process, the container engines the
//! real-engine tests run against, and cleanup of what a test made.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

pub const IMAGE: &str = "berth-sandbox:latest";

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ sits in the workspace").to_path_buf()
}

/// The built `berth` binary (built by `cargo test --workspace` or `cargo build -p berth`).
pub fn berth_bin() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"));
    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    let bin = target.join(profile).join("berth");
    assert!(bin.exists(), "{} is missing: run `cargo build -p berth` (or `cargo test --workspace`)", bin.display());
    bin
}

/// The variable naming the file a skipped test appends its line to (`cargo xtask ci` sets it and counts the lines,
/// since libtest counts a skipped test as passed and shows its note only with `--nocapture`).
pub const SKIP_LOG_VAR: &str = "BERTH_TEST_SKIP_LOG";

/// Marks the running test as skipped: one `skipped: <test>: <reason>` line on stderr, and one `<test>\t<reason>`
/// line appended to the file [`SKIP_LOG_VAR`] names. The reason names how to get the missing prerequisite.
pub fn skip(reason: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    eprintln!("skipped: {test}: {reason}");
    if let Some(path) = std::env::var_os(SKIP_LOG_VAR) {
        let line = format!("{test}\t{}\n", reason.replace(['\n', '\t'], " "));
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&path);
        // One write of a short line to an O_APPEND file: lines of parallel tests do not interleave.
        file.and_then(|mut f| f.write_all(line.as_bytes())).expect("the skip log is writable");
    }
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

/// The variable naming the engines the real-engine sandbox suite runs against: `name=endpoint` pairs separated by
/// commas, e.g. `docker=unix:///var/run/docker.sock,podman=unix:///…/target/ci/podman/podman.sock` (`.ci/run` sets
/// it). Docker defaults to `DOCKER_HOST` or its standard socket when unnamed.
pub const ENGINES_VAR: &str = "BERTH_TEST_ENGINES";

/// A container engine under test: a name and the endpoint berth and the docker CLI are pointed at.
#[derive(Clone, Debug)]
pub struct Engine {
    pub name: &'static str,
    pub endpoint: String,
}

fn listed_endpoint(name: &str) -> Option<String> {
    let list = std::env::var(ENGINES_VAR).unwrap_or_default();
    list.split(',').find_map(|pair| {
        let (n, endpoint) = pair.trim().split_once('=')?;
        (n.trim() == name && !endpoint.trim().is_empty()).then(|| endpoint.trim().to_owned())
    })
}

impl Engine {
    /// The Docker engine; it must answer and hold the test image (Docker tests never skip).
    pub fn docker() -> Self {
        let endpoint = listed_endpoint("docker")
            .or_else(|| std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(|| "unix:///var/run/docker.sock".to_owned());
        let engine = Self { name: "docker", endpoint };
        engine.require();
        engine
    }

    /// Podman's Docker-compatible socket when [`ENGINES_VAR`] names one; `None` (the test is skipped, with a note)
    /// otherwise, except under `CI=true`, where a missing Podman fails the test.
    pub fn podman() -> Option<Self> {
        let Some(endpoint) = listed_endpoint("podman") else {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(!ci, "CI=true but {ENGINES_VAR} names no podman endpoint: `.ci/run` starts one");
            skip(&format!("{ENGINES_VAR} names no podman endpoint (`bash .ci/run` starts one)"));
            return None;
        };
        let engine = Self { name: "podman", endpoint };
        engine.require();
        Some(engine)
    }

    /// Every engine configured for this run: Docker, and Podman when named.
    pub fn all() -> Vec<Self> {
        let mut all = vec![Self::docker()];
        all.extend(Self::podman());
        all
    }

    /// Runs the docker CLI against this engine.
    pub fn docker_cli(&self, args: &[&str]) -> Output {
        Command::new("docker")
            .arg("-H")
            .arg(&self.endpoint)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("the docker CLI runs")
    }

    /// Fails loudly when the engine does not answer or lacks the test image.
    fn require(&self) {
        let v = self.docker_cli(&["version", "--format", "{{.Server.APIVersion}}"]);
        assert!(
            v.status.success(),
            "{} at {} does not answer: {}",
            self.name,
            self.endpoint,
            String::from_utf8_lossy(&v.stderr)
        );
        let img = self.docker_cli(&["image", "inspect", IMAGE]);
        assert!(
            img.status.success(),
            "image {IMAGE} is missing on {}: run `cargo xtask image` (and load it there)",
            self.name
        );
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A temporary berth home with a unique profile; every container of that profile is removed on drop.
pub struct Home {
    pub dir: tempfile::TempDir,
    pub profile: String,
    /// The engine berth is pointed at; `None` leaves `DOCKER_HOST` as the test process has it.
    pub engine: Option<Engine>,
    /// The PostgreSQL board this home's commands use (`kanban.database_url`); `None` keeps the SQLite file.
    pub board_url: Option<String>,
    /// The test database this home owns (dropped with it), when it made one.
    pub board_db: Option<crate::pg::TestDb>,
}

impl Home {
    /// A home whose berth commands and docker CLI calls go to `engine`.
    pub fn on(engine: &Engine) -> Self {
        let mut home = Self::new();
        home.engine = Some(engine.clone());
        home
    }

    /// Runs the docker CLI against this home's engine.
    pub fn docker(&self, args: &[&str]) -> Output {
        match &self.engine {
            Some(e) => e.docker_cli(args),
            None => docker(args),
        }
    }

    /// `docker inspect -f FORMAT ID` on this home's engine, trimmed.
    pub fn inspect(&self, id: &str, format: &str) -> String {
        String::from_utf8_lossy(&self.docker(&["inspect", "-f", format, id]).stdout).trim().to_owned()
    }

    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let profile = format!("bt{}x{n}x{:x}", std::process::id(), nanos);
        std::fs::create_dir_all(dir.path().join("profiles").join(&profile)).expect("profile dir");
        Self { dir, profile, engine: None, board_url: None, board_db: None }
    }

    /// A home whose board is a fresh PostgreSQL database; `None` without a test server (outside CI).
    pub fn on_postgres() -> Option<Self> {
        let db = crate::pg::TestDb::create()?;
        let mut home = Self::new();
        home.board_url = Some(db.url.clone());
        home.board_db = Some(db);
        Some(home)
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
        if let Some(e) = &self.engine {
            c.env("DOCKER_HOST", &e.endpoint);
        }
        if let Some(url) = &self.board_url {
            c.env("KANBAN_DATABASE_URL", url);
        }
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

    /// `gateway status --json`: exit 0 while a gateway runs, 3 when it is stopped; either way its JSON.
    pub fn gateway_status(&self) -> serde_json::Value {
        let out = self.run(&["gateway", "status", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("gateway status printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stderr))
        });
        let want = if v["running"] == true { 0 } else { 3 };
        assert_eq!(out.status.code(), Some(want), "gateway status: {v}");
        v
    }

    /// Ids of every container of this home's profile.
    pub fn containers(&self) -> Vec<String> {
        ids(&self.docker(&["ps", "-aq", "--no-trunc", "--filter", &format!("label=hermes-profile={}", self.profile)]))
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
            self.docker(&args);
        }
        // The profile's sandbox snapshots (`sandbox snapshot|suspend`), which a test left behind.
        let images = self.snapshot_images();
        if !images.is_empty() {
            let mut args = vec!["rmi", "-f"];
            args.extend(images.iter().map(String::as_str));
            self.docker(&args);
        }
    }
}

impl Home {
    /// Ids of every snapshot image of this home's profile.
    pub fn snapshot_images(&self) -> Vec<String> {
        let profile = format!("label=hermes-profile={}", self.profile);
        let mut found = ids(&self.docker(&[
            "images",
            "-q",
            "--no-trunc",
            "--filter",
            "label=berth.snapshot",
            "--filter",
            &profile,
        ]));
        found.dedup();
        found
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

/// The pid of `home`'s runner (`berth worker runner`, which runs `kanban.worker_exit_outcome` commands), if one runs.
pub fn runner_of(home: &Home) -> Option<u32> {
    let want = format!("BERTH_HOME={}", home.path().display());
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        (cmdline.windows(14).any(|w| w == b"worker\0runner\0")
            && environ.split(|c| *c == 0).any(|v| v == want.as_bytes()))
        .then_some(pid)
    })
}

/// Sends `sig` to the process `pid` this test started (errors, such as an already gone process, are ignored).
pub fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(p) = i32::try_from(pid).ok().filter(|p| *p > 1).and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Sends `sig` to the process group led by `pid`, a worker of `home`'s board, but only while `pid` is still such a
/// worker: its environment names this home. A worker that already exited may have had its pid reused by any process
/// group leader on the machine (another test's worker, a container's shim, a shell's job); those are never signalled.
pub fn signal_group(home: &Home, pid: i64, sig: rustix::process::Signal) {
    let Some(raw) = i32::try_from(pid).ok().filter(|p| *p > 1) else { return };
    let Ok(environ) = std::fs::read(format!("/proc/{raw}/environ")) else { return };
    let want = format!("BERTH_HOME={}", home.path().display());
    if !environ.split(|b| *b == 0).any(|entry| entry == want.as_bytes()) {
        return;
    }
    if let Some(p) = rustix::process::Pid::from_raw(raw) {
        let _ = rustix::process::kill_process_group(p, sig);
    }
}

/// What one look of a poll saw: done (with its value), or not yet (with what it saw, for the failure message).
pub trait Observation {
    type Value;
    fn done(self) -> Result<Self::Value, String>;
}

impl Observation for bool {
    type Value = ();
    fn done(self) -> Result<(), String> {
        if self { Ok(()) } else { Err("not yet".to_owned()) }
    }
}

impl<T> Observation for Option<T> {
    type Value = T;
    fn done(self) -> Result<T, String> {
        self.ok_or_else(|| "nothing yet".to_owned())
    }
}

/// `Err(seen)`: not yet, and `seen` is what the look saw.
impl<T, E: std::fmt::Debug> Observation for Result<T, E> {
    type Value = T;
    fn done(self) -> Result<T, String> {
        self.map_err(|seen| format!("{seen:?}"))
    }
}

/// The interval between two looks of [`poll`]: the first ones close together (most waits are short), then
/// doubling up to [`POLL_INTERVAL_MAX`] (many looks start a process).
const POLL_INTERVAL_FIRST: std::time::Duration = std::time::Duration::from_millis(10);
const POLL_INTERVAL_MAX: std::time::Duration = std::time::Duration::from_millis(200);

/// Looks with `look` until it is done or `timeout` has passed: its value, or what the last look saw. The one deadline
/// poll of the tests (the way a test waits for something another process does; never a fixed sleep).
pub fn poll<R: Observation>(timeout: std::time::Duration, mut look: impl FnMut() -> R) -> Result<R::Value, String> {
    let deadline = std::time::Instant::now() + timeout;
    let mut interval = POLL_INTERVAL_FIRST;
    loop {
        let seen = match look().done() {
            Ok(v) => return Ok(v),
            Err(seen) => seen,
        };
        if std::time::Instant::now() >= deadline {
            return Err(seen);
        }
        std::thread::sleep(interval);
        interval = (interval * 2).min(POLL_INTERVAL_MAX);
    }
}

/// [`poll`], failing the test with `what` and the last observation after `timeout`.
pub fn wait_until<R: Observation>(what: &str, timeout: std::time::Duration, look: impl FnMut() -> R) -> R::Value {
    poll(timeout, look)
        .unwrap_or_else(|seen| panic!("timed out after {timeout:?} waiting for {what}; last seen: {seen}"))
}

/// Waits up to `limit` for `child` to exit; its status, or `None` (the child killed and reaped) when it did not.
pub fn wait_exit(child: &mut std::process::Child, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
    let status = poll(limit, || child.try_wait().expect("the child can be waited for")).ok();
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    status
}

/// A running gateway, killed on drop if a test fails before stopping it; its stderr is collected as it comes, so
/// a test can wait for a line instead of sleeping.
pub struct Gateway {
    child: Option<std::process::Child>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Gateway {
    /// Starts `berth gateway run` at a 1 s interval with the `extra` arguments (`-c key=value` pairs) and waits
    /// until it runs.
    pub fn start(home: &Home, extra: &[&str]) -> Self {
        let mut args = vec!["-c", "kanban.dispatch_interval_seconds=1"];
        args.extend_from_slice(extra);
        Self::start_with(home, home.cmd().args(&args))
    }

    /// Starts `cmd` (a `berth` command of `home`, its global arguments and variables set) with `gateway run`
    /// appended, and waits until it runs.
    pub fn start_with(home: &Home, cmd: &mut Command) -> Self {
        let mut child = cmd.args(["gateway", "run"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = std::sync::Arc::clone(&stderr);
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut pipe, &mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        // Owned first, so a failed wait below still kills it (Drop).
        let gateway = Self { child: Some(child), stderr, reader: Some(reader) };
        // Wait until it holds the lock and has written its state.
        wait_until("the gateway to start", std::time::Duration::from_secs(10), || {
            home.gateway_status()["running"].as_bool().unwrap_or(false)
        });
        gateway
    }

    /// The gateway's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the gateway runs").id()
    }

    /// What the gateway wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends SIGTERM and returns (exit code, time to exit, stderr).
    pub fn stop(mut self) -> (Option<i32>, std::time::Duration, String) {
        let mut child = self.child.take().unwrap();
        let start = std::time::Instant::now();
        signal(child.id(), rustix::process::Signal::TERM);
        let status = child.wait().unwrap();
        let took = start.elapsed();
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        (status.code(), took, self.stderr())
    }
}

impl Drop for Gateway {
    /// A gateway a test did not stop (it ended early, or left it running): stopped as `stop` does (SIGTERM), killed
    /// when it has not exited within 15 s, and reaped either way.
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            signal(c.id(), rustix::process::Signal::TERM);
            wait_exit(&mut c, std::time::Duration::from_secs(15));
        }
    }
}

/// A port on 127.0.0.1 whose server accepts every connection and holds it, never reading or writing (a board server
/// that never answers); it lives as long as the test process.
pub fn silent_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
        }
    });
    port
}
