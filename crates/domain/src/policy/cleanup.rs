//! The cleanup matrix: what releasing a sandbox does, by mode and force.

use std::time::Duration;

use serde::Serialize;

/// The grace period `docker stop` gets before the kill, as upstream (`stop -t 10`).
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// What release does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum CleanupPlan {
    /// No container handle: nothing to do.
    Nothing,
    /// Persist mode: leave the container running; only the handle goes.
    Keep { id: String },
    /// Stop (with grace) and remove.
    StopRemove { id: String, grace_secs: u64, reason: RemoveReason },
}

/// Why a release removes the container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RemoveReason {
    /// `--force` or `sandbox rm`: removal in any mode.
    Forced,
    /// Opt-out mode: containers do not outlive their process (regardless of `container_persistent`).
    OptOut,
}

/// How a release treats its sandbox: the three rows of upstream's cleanup matrix, named instead of two booleans
/// (`persist_across_processes`, `force_remove`) whose four combinations collapse to three behaviours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseMode {
    /// Persist mode: the sandbox outlives the process; only the handle goes.
    Keep,
    /// Opt-out (ephemeral) mode: the sandbox does not outlive its process.
    OptOut,
    /// `--force` or `sandbox rm`: removed in any mode.
    Force,
}

impl ReleaseMode {
    /// The mode for a sandbox that persists across processes or not, released with or without force.
    pub fn new(persist_across_processes: bool, force: bool) -> Self {
        match (force, persist_across_processes) {
            (true, _) => Self::Force,
            (false, true) => Self::Keep,
            (false, false) => Self::OptOut,
        }
    }
}

/// The cleanup matrix of upstream's `cleanup(force_remove=…)`.
pub fn plan_cleanup(container: Option<&str>, mode: ReleaseMode) -> CleanupPlan {
    let Some(id) = container else {
        return CleanupPlan::Nothing;
    };
    let id = id.to_owned();
    let grace_secs = STOP_GRACE.as_secs();
    match mode {
        ReleaseMode::Force => CleanupPlan::StopRemove { id, grace_secs, reason: RemoveReason::Forced },
        ReleaseMode::Keep => CleanupPlan::Keep { id },
        ReleaseMode::OptOut => CleanupPlan::StopRemove { id, grace_secs, reason: RemoveReason::OptOut },
    }
}
