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

/// The cleanup matrix of upstream's `cleanup(force_remove=…)`.
pub fn plan_cleanup(container: Option<&str>, persist_across_processes: bool, force: bool) -> CleanupPlan {
    let Some(id) = container else {
        return CleanupPlan::Nothing;
    };
    let id = id.to_owned();
    let grace_secs = STOP_GRACE.as_secs();
    if force {
        CleanupPlan::StopRemove { id, grace_secs, reason: RemoveReason::Forced }
    } else if persist_across_processes {
        CleanupPlan::Keep { id }
    } else {
        CleanupPlan::StopRemove { id, grace_secs, reason: RemoveReason::OptOut }
    }
}
