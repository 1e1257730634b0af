//! The sandbox's typed views: a sandbox as every listing names it, and `sandbox ls`'s row with its costs. `sandbox ls
//! --json` prints them, its table reads them, and the dashboard's `/api/sandboxes` serves them (masked).

use std::collections::BTreeMap;

use domain::container::ContainerSummary;
use serde::Serialize;

/// A sandbox as listings name it: ids, labels, state and egress policy.
#[derive(Clone, Debug, Serialize)]
pub struct SandboxSummary {
    /// The container's id; a suspended sandbox (no container) has its name here.
    pub id: String,
    pub name: String,
    pub task: Option<String>,
    pub profile: Option<String>,
    pub state: String,
    /// When it was created, RFC 3339.
    pub created: String,
    pub mode: Option<String>,
    pub egress: String,
    pub labels: BTreeMap<String, String>,
}

impl SandboxSummary {
    pub fn of(c: &ContainerSummary) -> Self {
        Self {
            id: c.id.clone(),
            name: c.name.clone(),
            task: c.task_label().map(str::to_owned),
            profile: c.profile_label().map(str::to_owned),
            state: c.state.as_str().to_owned(),
            created: c.created.to_rfc3339(),
            mode: c.label(domain::label::LABEL_MODE).map(str::to_owned),
            egress: domain::egress::shown_egress(c),
            labels: c.labels.clone(),
        }
    }
}

/// One `sandbox ls` row: the sandbox, when it stopped, its age and idle time, and what it uses now.
#[derive(Clone, Debug, Serialize)]
pub struct SandboxRow {
    #[serde(flatten)]
    pub sandbox: SandboxSummary,
    /// When it last stopped, RFC 3339 (`null` while it has not).
    pub finished: Option<String>,
    pub age_secs: i64,
    /// Whether anything but its keep-alive runs inside (`null` when it is not running).
    pub busy: Option<bool>,
    /// How long the gateway has seen it idle (`null` when no gateway watches).
    pub idle_secs: Option<i64>,
    pub memory_bytes: Option<u64>,
    pub memory_limit_bytes: Option<u64>,
    /// Percent of one core, two decimals.
    pub cpu_percent: Option<f64>,
    pub pids: Option<u64>,
    /// How many snapshots it has (`sandbox snapshot|suspend`); a `suspended` sandbox is only its snapshots.
    pub snapshots: usize,
    /// What its snapshots add to their base image, together (`null` without any).
    pub snapshot_bytes: Option<i64>,
    /// With `--size` only.
    #[serde(flatten)]
    pub size: Option<SandboxSize>,
}

/// What a sandbox holds on disk (`sandbox ls --size`).
#[derive(Clone, Debug, Serialize)]
pub struct SandboxSize {
    /// Its writable layer.
    pub size_rw_bytes: Option<i64>,
    /// Its host folder (berth-made sandboxes).
    pub host_dir_bytes: Option<u64>,
}

/// `sandbox top`: a sandbox and the processes inside it.
#[derive(Clone, Debug, Serialize)]
pub struct SandboxTop {
    pub id: String,
    pub name: String,
    pub processes: Vec<ProcessRow>,
}

/// One process inside a sandbox; `keep_alive` marks the command that only keeps the sandbox up.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessRow {
    pub pid: String,
    pub command: String,
    pub keep_alive: bool,
}

/// `sandbox ensure`: the sandbox and what acquiring it did (`attached`, `started`, `created`, …).
#[derive(Clone, Debug, Serialize)]
pub struct Ensured {
    pub id: String,
    pub name: String,
    pub action: String,
    pub labels: BTreeMap<String, String>,
    pub notes: Vec<String>,
}

/// `sandbox stop`: the sandbox stopped.
#[derive(Clone, Debug, Serialize)]
pub struct Stopped {
    pub id: String,
    pub name: String,
    /// Always `stopped`.
    pub action: &'static str,
}

/// One container of `sandbox rm|release`: what became of it (`kept` or `removed`), the plan that decided it, and its
/// host folder's fate.
#[derive(Clone, Debug, Serialize)]
pub struct ReleasedRow {
    pub id: String,
    pub name: String,
    pub action: &'static str,
    pub plan: domain::policy::cleanup::CleanupPlan,
    pub folder: Option<FolderFate>,
    /// The sandbox's snapshot images removed with it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<String>,
}

/// A host folder's fate: a note (`removed`, `kept (--keep-files)`, …) or the error that kept it.
#[derive(Clone, Debug, Serialize)]
pub struct FolderFate {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `sandbox reap`: the sandboxes removed (or that would be), those spared and why, the failures, and the folders
/// swept.
#[derive(Clone, Debug, Serialize)]
pub struct Reaped<'a> {
    pub dry_run: bool,
    pub removed: &'a [domain::policy::reaper::Orphan],
    pub skipped: &'a [domain::policy::reaper::Spared],
    pub failed: Vec<ReapFailure>,
    pub folders: &'a [crate::sandbox::folders::SweptFolder],
}

/// A sandbox the reaper could not remove.
#[derive(Clone, Debug, Serialize)]
pub struct ReapFailure {
    pub id: String,
    pub error: String,
}

/// `sandbox logs --json`: the container's own output, a line at a time with its stream.
#[derive(Clone, Debug, Serialize)]
pub struct SandboxLogs {
    pub id: String,
    pub name: String,
    pub lines: Vec<LogLine>,
}

/// One line of a container's output, `stdout` or `stderr`.
#[derive(Clone, Debug, Serialize)]
pub struct LogLine {
    pub stream: &'static str,
    pub line: String,
}

/// What the gateway's cleanup loop leaves in `cache/idle-since.json` for `sandbox ls`: when it wrote it, its pass
/// length, and when it first saw each sandbox idle (milliseconds since the epoch).
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct IdleState {
    pub written_at_ms: Option<i64>,
    pub pass_ms: Option<i64>,
    #[serde(default)]
    pub idle_since_ms: BTreeMap<String, i64>,
}
