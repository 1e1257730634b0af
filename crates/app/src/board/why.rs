//! A dispatch decision in words: the `WHY` of `kanban dispatch --explain` and a dashboard card's reason.

use domain::policy::dispatch::Decision;

/// A decision in words, as a card of the dashboard and the `WHY` column of `kanban dispatch --explain` give it (the
/// code stays beside it).
pub(crate) fn words(d: &Decision, assignee: Option<&str>) -> String {
    let who = assignee.unwrap_or("its assignee");
    match d {
        Decision::Spawn => "starts at the next tick".to_owned(),
        Decision::SkippedUnassigned => "no assignee (and no kanban.default_assignee)".to_owned(),
        Decision::SkippedNonspawnable => format!("{who} is no profile on this host"),
        Decision::SkippedPerProfileCapped { current, cap } => {
            format!("{who} is at its cap ({current} of {cap} running)")
        }
        Decision::DeferredMaxInProgress { running, cap } => {
            format!("kanban.max_in_progress reached ({running} of {cap} running)")
        }
        Decision::DeferredMaxSpawn { cap } => format!("{cap} start(s) a tick already planned (kanban.max_spawn)"),
        Decision::DeferredRateLimited { limit, per_profile: true, wait_secs, .. } => {
            format!("start rate: {who} started {limit} task(s) in the last minute; next start in {wait_secs} s")
        }
        Decision::DeferredRateLimited { limit, wait_secs, .. } => {
            format!("start rate: the board started {limit} task(s) in the last minute; next start in {wait_secs} s")
        }
        Decision::DeferredSandboxElsewhere { wait_secs } => {
            format!("its sandbox is on another host, left to it for {wait_secs} s")
        }
        Decision::DeferredEngineUnavailable { wait_secs } => {
            format!("the container engine was unreachable; tries again in {wait_secs} s")
        }
        Decision::DeferredScheduled { wait_secs, .. } => format!("waits for its time: {wait_secs} s"),
        other => other.reason(),
    }
}
