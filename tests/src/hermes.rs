//! Interop with the real hermes-agent (pinned 0.19.0 from PyPI, in the virtual environment `.ci/run` makes): its
//! `DockerEnvironment`, orphan reaper and `hermes kanban` against the same engine and home as berth.
//!
//! The venv's python is found through `BERTH_HERMES_PYTHON` (set by `.ci/run`), else in `target/ci/hermes-venv`
//! (where `.ci/run` makes it).
//! With `CI=true` a missing venv fails every test here; elsewhere they say so on stderr and pass, so a developer
//! without Python is not blocked (CI is where parity is enforced).
//! hermes runs with `HOME` in a temporary directory and `HERMES_HOME=$HOME/.hermes/profiles/<profile>`, so its own
//! profile resolution yields the berth test's profile: both sides look for the same labels, nothing is patched.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::support::{Home, IMAGE, docker, ids, inspect, require_docker};

/// The hermes-agent version the suite pins (also pinned in `.ci/run`).
const HERMES_VERSION: &str = "0.19.0";

/// The venv's python, or `None` outside CI when there is none (inside CI that is a failure).
fn hermes_python() -> Option<PathBuf> {
    let configured = std::env::var_os("BERTH_HERMES_PYTHON").map(PathBuf::from);
    let found = configured.clone().or_else(|| {
        let default = crate::support::workspace().join("target/ci/hermes-venv/bin/python");
        default.exists().then_some(default)
    });
    match found {
        Some(p) if p.exists() => Some(p),
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("hermes-agent venv missing ({configured:?}): .ci/run creates it; CI must not skip the interop suite")
        }
        _ => {
            crate::support::skip("no hermes-agent venv: set BERTH_HERMES_PYTHON (`bash .ci/run` creates one)");
            None
        }
    }
}

/// The sandbox image for interop: hermes needs bash in it.
fn image() -> String {
    std::env::var("BERTH_TEST_IMAGE").unwrap_or_else(|_| IMAGE.to_owned())
}

fn driver() -> PathBuf {
    crate::support::workspace().join("tests/hermes/driver.py")
}

/// hermes's side of one test: a fake user home whose `.hermes/profiles/<profile>` is the hermes home.
struct Hermes {
    python: PathBuf,
    user_home: tempfile::TempDir,
    profile: String,
}

impl Hermes {
    fn new(python: PathBuf, home: &Home) -> Self {
        let user_home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(user_home.path().join(".hermes/profiles").join(&home.profile)).unwrap();
        let h = Self { python, user_home, profile: home.profile.clone() };
        let v = h.driver(&["version"]);
        assert_eq!(v["version"], HERMES_VERSION, "the venv holds another hermes-agent");
        h
    }

    fn hermes_home(&self) -> PathBuf {
        self.user_home.path().join(".hermes/profiles").join(&self.profile)
    }

    fn cmd(&self, program: &Path, hermes_home: &Path) -> Command {
        let mut c = Command::new(program);
        c.env("HOME", self.user_home.path())
            .env("HERMES_HOME", hermes_home)
            .env_remove("TERMINAL_SANDBOX_DIR")
            .stdin(Stdio::null());
        c
    }

    fn check(out: Output, what: &str) -> Value {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{what} failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
        // Pretty-printed (the CLI) or one line after log output (the driver).
        let last = stdout.lines().rev().find(|l| l.starts_with('{')).unwrap_or("");
        serde_json::from_str(stdout.trim())
            .or_else(|_| serde_json::from_str(last))
            .unwrap_or_else(|e| panic!("{what}: no JSON ({e}): {stdout}"))
    }

    /// Runs the driver (hermes's Python API).
    fn driver(&self, args: &[&str]) -> Value {
        let out = self.cmd(&self.python, &self.hermes_home()).arg(driver()).args(args).output().unwrap();
        Self::check(out, &format!("driver {args:?}"))
    }

    /// `DockerEnvironment(task_id=task).execute(command)`: the container id and the output.
    fn exec(&self, task: &str, command: &str) -> (String, String) {
        let v = self.driver(&["exec", &image(), task, "1", command]);
        assert_eq!(v["returncode"], 0, "hermes exec {command:?}: {v}");
        (v["container_id"].as_str().unwrap().to_owned(), v["output"].as_str().unwrap().to_owned())
    }

    /// The `hermes` CLI, with `hermes_home` as its home.
    fn cli(&self, hermes_home: &Path, args: &[&str]) -> Output {
        let bin = self.python.parent().unwrap().join("hermes");
        self.cmd(&bin, hermes_home).args(args).output().unwrap()
    }
}

fn setup() -> Option<(Home, Hermes)> {
    let python = hermes_python()?;
    require_docker();
    let home = Home::new();
    let hermes = Hermes::new(python, &home);
    Some((home, hermes))
}

/// A berth command using the interop image.
fn berth(home: &Home, args: &[&str]) -> String {
    let out = home.cmd().env("TERMINAL_DOCKER_IMAGE", image()).args(args).output().unwrap();
    assert!(out.status.success(), "berth {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ensure(home: &Home, task: &str) -> Value {
    serde_json::from_str(&berth(home, &["sandbox", "ensure", "--task", task, "--json"])).unwrap()
}

#[test]
fn a_hermes_made_sandbox_is_reused_by_berth_run_also_after_a_stop() {
    let Some((home, hermes)) = setup() else { return };
    let (hid, out) = hermes.exec("shared", "echo from-hermes > /root/h.txt; echo $BASH_VERSION");
    assert!(!out.trim().is_empty(), "hermes ran its command under bash");
    assert_eq!(berth(&home, &["run", "--task", "shared", "--", "cat", "/root/h.txt"]), "from-hermes\n");
    let v = ensure(&home, "shared");
    assert!(v["id"].as_str().unwrap().starts_with(&hid), "berth attached to hermes's container {hid}: {v}");
    assert_eq!(v["action"], "attached");
    assert_eq!(home.containers().len(), 1);
    // Stopped (as after a host reboot): berth starts the same container, the file is still there.
    assert!(docker(&["stop", "-t", "1", &hid]).status.success());
    assert_eq!(berth(&home, &["run", "--task", "shared", "--", "cat", "/root/h.txt"]), "from-hermes\n");
    assert_eq!(home.containers().len(), 1);
    assert!(home.containers()[0].starts_with(&hid));
}

#[test]
fn a_berth_sandbox_is_reused_by_hermes_and_found_by_the_current_upstream_filter() {
    let Some((home, hermes)) = setup() else { return };
    berth(&home, &["run", "--task", "shared", "--", "sh", "-c", "echo from-berth > /root/b.txt"]);
    let bid = home.containers().remove(0);
    // hermes 0.21's reuse filter: the three labels and hermes-egress (berth writes `off`).
    let upstream = ids(&docker(&[
        "ps",
        "-aq",
        "--no-trunc",
        "--filter",
        "label=hermes-agent=1",
        "--filter",
        "label=hermes-task-id=shared",
        "--filter",
        &format!("label=hermes-profile={}", home.profile),
        "--filter",
        "label=hermes-egress=off",
    ]));
    assert_eq!(upstream, std::slice::from_ref(&bid));
    // hermes 0.19 attaches and runs its commands with bash (the image carries it).
    let (hid, out) = hermes.exec("shared", "cat /root/b.txt; git --version >/dev/null && echo git-ok");
    assert!(bid.starts_with(&hid), "hermes used berth's container: {hid} vs {bid}");
    assert_eq!(out, "from-berth\ngit-ok\n");
    // After a stop hermes starts the same container.
    assert!(docker(&["stop", "-t", "1", &bid]).status.success());
    let (hid, out) = hermes.exec("shared", "cat /root/b.txt");
    assert!(bid.starts_with(&hid));
    assert_eq!(out, "from-berth\n");
    assert_eq!(home.containers(), [bid]);
}

/// Plants a container with hermes's labels in `profile`, optionally started and stopped.
fn plant(profile: &str, task: &str, state: &str) -> String {
    let out = docker(&[
        "create",
        "--label",
        "hermes-agent=1",
        "--label",
        &format!("hermes-task-id={task}"),
        "--label",
        &format!("hermes-profile={profile}"),
        &image(),
        "sleep",
        "infinity",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = ids(&out).remove(0);
    if state != "created" {
        assert!(docker(&["start", &id]).status.success());
    }
    if state == "exited" {
        assert!(docker(&["stop", "-t", "0", &id]).status.success());
    }
    id
}

#[test]
fn both_orphan_reapers_agree_on_the_same_planted_containers() {
    let Some((home, hermes)) = setup() else { return };
    let other = Home::new();
    let exited = [plant(&home.profile, "old-1", "exited"), plant(&home.profile, "old-2", "exited")];
    let running = plant(&home.profile, "live", "running");
    let elsewhere = plant(&other.profile, "old-3", "exited");
    let planned: Value =
        serde_json::from_str(&berth(&home, &["sandbox", "reap", "--dry-run", "--max-age", "0", "--json"])).unwrap();
    let berth_would: BTreeSet<String> =
        planned["removed"].as_array().unwrap().iter().map(|o| o["id"].as_str().unwrap().to_owned()).collect();
    let v = hermes.driver(&["reap", "0", &home.profile]);
    let gone: BTreeSet<String> = [&exited[0], &exited[1], &running, &elsewhere]
        .into_iter()
        .filter(|id| !docker(&["inspect", id]).status.success())
        .cloned()
        .collect();
    assert_eq!(v["removed"], 2);
    assert_eq!(gone, exited.iter().cloned().collect::<BTreeSet<_>>());
    assert_eq!(berth_would, gone, "berth's plan and hermes's removals differ");
    assert_eq!(inspect(&running, "{{.State.Status}}"), "running");
}

/// The JSON type of every value, recursively for array elements: the "shape" both tools must share.
fn shape(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
        Value::Array(a) => format!("[{}]", a.first().map(shape).unwrap_or_default()),
        Value::Object(o) => format!("{{{}}}", o.keys().cloned().collect::<Vec<_>>().join(",")),
    }
}

#[test]
fn kanban_dispatch_json_has_hermes_keys_and_shapes() {
    let Some((home, hermes)) = setup() else { return };
    // One unassigned ready task on each side, so a list carries an element.
    let hh = hermes.hermes_home();
    let out = hermes.cli(&hh, &["kanban", "create", "unassigned task"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    berth(&home, &["kanban", "create", "unassigned task", "--command", "true"]);
    let h = Hermes::check(hermes.cli(&hh, &["kanban", "dispatch", "--json"]), "hermes kanban dispatch");
    let b: Value = serde_json::from_str(&berth(&home, &["kanban", "dispatch", "--json"])).unwrap();
    let hk: Vec<&String> = h.as_object().unwrap().keys().collect();
    let bk: Vec<&String> = b.as_object().unwrap().keys().take(hk.len()).collect();
    assert_eq!(hk.len(), 11, "hermes printed {hk:?}");
    assert_eq!(bk, hk, "berth's dispatch JSON starts with hermes's eleven keys, in order");
    for k in hk {
        assert_eq!(shape(&b[k]), shape(&h[k]), "shape of {k}: berth {} vs hermes {}", b[k], h[k]);
    }
    assert_eq!(shape(&b["skipped_unassigned"]), "[string]");
}

#[test]
fn hermes_default_config_loads_without_warnings_and_berth_run_works() {
    let Some((home, hermes)) = setup() else { return };
    let v = hermes.driver(&["default-config"]);
    let written = PathBuf::from(v["path"].as_str().unwrap());
    let text = std::fs::read_to_string(&written).unwrap();
    assert!(text.contains("cwd: ."), "hermes's default still says cwd: \".\"");
    std::fs::copy(&written, home.path().join("config.yaml")).unwrap();
    let out = home.run(&["config", "ls"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.trim().is_empty(), "warnings: {err}");
    // The file stays as hermes wrote it; only the image comes from the environment (berth never pulls hermes's).
    let out = home
        .cmd()
        .env("TERMINAL_DOCKER_IMAGE", image())
        .args(["run", "--task", "cfg", "--", "bash", "-c", "pwd"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.trim().is_empty(), "warnings: {err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "/root\n");
    assert_eq!(std::fs::read_to_string(home.path().join("config.yaml")).unwrap(), text);
}

/// The typical hermes config of the interop suite: hermes's own config.yaml with `docker_extra_args: ["--cap-add",
/// "SYS_PTRACE"]` (for debuggers) runs unchanged, without a warning, and the sandbox has the capability: it acts
/// inside the sandbox's own pid namespace only, so it needs no opt-in (issue 38; before, it was refused).
#[test]
fn a_hermes_config_adding_sys_ptrace_runs_unchanged() {
    let Some((home, hermes)) = setup() else { return };
    let v = hermes.driver(&["default-config"]);
    let text = std::fs::read_to_string(v["path"].as_str().unwrap()).unwrap();
    let text = text.replace("docker_extra_args: []", r#"docker_extra_args: ["--cap-add", "SYS_PTRACE"]"#);
    assert!(text.contains("SYS_PTRACE"), "hermes's default config no longer says docker_extra_args: []");
    std::fs::write(home.path().join("config.yaml"), &text).unwrap();
    let out = home
        .cmd()
        .env("TERMINAL_DOCKER_IMAGE", image())
        .args(["run", "--task", "dbg", "--", "grep", "CapEff", "/proc/self/status"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.trim().is_empty(), "{err}");
    // CAP_SYS_PTRACE is bit 19 of the effective set.
    let eff = String::from_utf8_lossy(&out.stdout);
    let bits = u64::from_str_radix(eff.split_whitespace().last().unwrap_or_default(), 16).expect("CapEff");
    assert!(bits & (1 << 19) != 0, "the sandbox lacks SYS_PTRACE: {eff}");
}

#[test]
fn on_one_shared_home_each_tool_keeps_its_own_board() {
    let Some((home, hermes)) = setup() else { return };
    // HERMES_HOME = BERTH_HOME: hermes's board is <home>/kanban.db, berth's <home>/berth-kanban.db.
    let shared = home.path();
    let out = hermes.cli(shared, &["kanban", "create", "hermes task"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let hermes_db = shared.join("kanban.db");
    assert!(hermes_db.exists());
    berth(&home, &["kanban", "create", "berth task", "--command", "true"]);
    berth(&home, &["kanban", "dispatch", "--json"]);
    assert!(shared.join("berth-kanban.db").exists());
    let listed = berth(&home, &["kanban", "ls", "--json"]);
    assert!(listed.contains("berth task") && !listed.contains("hermes task"), "{listed}");
    // hermes still reads its board, which berth never adopted.
    let out = hermes.cli(shared, &["kanban", "list", "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "hermes kanban list: {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("hermes task") && !text.contains("berth task"), "{text}");
    let out = hermes.cli(shared, &["kanban", "dispatch", "--json"]);
    assert!(out.status.success(), "hermes dispatch on the shared home: {}", String::from_utf8_lossy(&out.stderr));
}
