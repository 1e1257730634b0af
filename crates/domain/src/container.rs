//! What the runtime reports about a container: its state, summary and details.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::label::{LABEL_AGENT, LABEL_FINGERPRINT, LABEL_HOME, LABEL_IDENTITY, LABEL_PROFILE, LABEL_TASK};
use crate::time::Timestamp;

/// A container's lifecycle state as the Engine API names it (Podman's extra names folded in).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerState {
    Created,
    Running,
    Paused,
    Restarting,
    Removing,
    Exited,
    Dead,
    /// A state this version does not know; treated as "not running" but never reaped.
    Other(String),
}

impl ContainerState {
    /// Parses the Engine API's state string, case-insensitively, mapping Podman's `stopped`/`stopping`.
    pub fn parse(raw: &str) -> Self {
        match raw.trim().to_ascii_lowercase().as_str() {
            "created" | "configured" | "initialized" => Self::Created,
            "running" | "stopping" => Self::Running,
            "paused" => Self::Paused,
            "restarting" => Self::Restarting,
            "removing" => Self::Removing,
            "exited" | "stopped" => Self::Exited,
            "dead" => Self::Dead,
            other => Self::Other(other.to_owned()),
        }
    }

    /// The Engine API's name for the state.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Created => "created",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Restarting => "restarting",
            Self::Removing => "removing",
            Self::Exited => "exited",
            Self::Dead => "dead",
            Self::Other(s) => s,
        }
    }

    /// Whether a process may be running inside (running, restarting or paused): such containers are never reaped.
    pub fn is_live(&self) -> bool {
        matches!(self, Self::Running | Self::Restarting | Self::Paused)
    }
}

impl fmt::Display for ContainerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One container as listed by the runtime.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ContainerSummary {
    pub id: String,
    /// The name without Docker's leading `/`.
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub state: ContainerState,
    pub created: Timestamp,
    /// `HostConfig.NetworkMode` (`none`, `bridge`, `default`, …) when the runtime reports it; reuse checks it
    /// against `terminal.docker_network` so a networked container never serves an air-gapped request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_mode: Option<String>,
}

impl ContainerSummary {
    /// The value of label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    /// Whether the container carries the `hermes-agent=1` label.
    pub fn is_managed(&self) -> bool {
        self.label(LABEL_AGENT) == Some("1")
    }

    /// The sanitized task label.
    pub fn task_label(&self) -> Option<&str> {
        self.label(LABEL_TASK)
    }

    /// The sanitized profile label.
    pub fn profile_label(&self) -> Option<&str> {
        self.label(LABEL_PROFILE)
    }

    /// The sanitized profile that made it: `berth.profile`, else (a hermes-made or older sandbox) `hermes-profile`,
    /// which is the profile unless a shared container key replaced it.
    pub fn made_by_profile(&self) -> Option<&str> {
        self.label(crate::label::LABEL_MADE_BY).or_else(|| self.profile_label())
    }

    /// Berth's identity digest, absent on containers hermes-agent made.
    pub fn identity(&self) -> Option<&str> {
        self.label(LABEL_IDENTITY)
    }

    /// The digest of the berth home that made it (`berth.home`), absent on containers hermes-agent or a berth from
    /// before homes were labelled made.
    pub fn home(&self) -> Option<&str> {
        self.label(LABEL_HOME)
    }

    /// Whether the home `home` (its digest; `None`: no home, as in the domain's own tests) may manage it: a container
    /// labelled by another home belongs to that home only; an unlabelled one (hermes-made, or from an older berth)
    /// belongs to every home.
    pub fn in_home(&self, home: Option<&str>) -> bool {
        self.home().is_none_or(|h| Some(h) == home)
    }

    /// Berth's spec fingerprint, absent on containers hermes-agent made.
    pub fn fingerprint(&self) -> Option<&str> {
        self.label(LABEL_FINGERPRINT)
    }
}

/// The details an inspect adds to a summary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ContainerDetails {
    pub summary: ContainerSummary,
    /// `State.FinishedAt` as the runtime printed it (Docker's zero time for a container that never stopped).
    pub finished_at_raw: String,
    /// `State.StartedAt` as the runtime printed it.
    pub started_at_raw: String,
    pub exit_code: Option<i64>,
    pub oom_killed: bool,
    /// The environment stored in the container's config, as `KEY=VALUE` lines.
    pub env: Vec<String>,
}

impl ContainerDetails {
    /// `FinishedAt`, or `None` when zero or unparseable.
    pub fn finished_at(&self) -> Option<Timestamp> {
        Timestamp::parse_docker(&self.finished_at_raw)
    }
}

/// One process inside a running container, as the engine's process list (`top`) reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ContainerProcess {
    /// The host pid as the engine prints it (kept as text: berth never signals by it).
    pub pid: String,
    /// The command line (`CMD`/`COMMAND` column).
    pub command: String,
}
