//! Orphan selection: which managed, non-running containers are old enough to remove, each with a reason.

use serde::Serialize;

use std::collections::BTreeSet;

use crate::container::{ContainerDetails, ContainerState};
use crate::label::{LABEL_MODE, LABEL_OWNER};
use crate::time::Timestamp;

/// The reaper's age threshold from `terminal.lifetime_seconds`: `2 × max(60, lifetime)`, 300 when unset.
pub fn reaper_max_age_secs(lifetime_seconds: Option<i64>) -> i64 {
    // Saturating: a huge lifetime means "never", not a wrapped negative threshold that removes everything.
    lifetime_seconds.unwrap_or(300).max(60).saturating_mul(2)
}

/// Which containers a sweep considers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReapScope {
    /// Only this sanitized profile label; `None` means every profile (`--all-profiles`).
    pub profile_label: Option<String>,
    pub max_age_secs: i64,
    /// This host's name: ephemeral containers owned by a dead process of this host are orphans too (and those owned
    /// from another host whose lease lapsed).
    pub host: Option<String>,
    /// Only containers this home may manage ([`ContainerSummary::in_home`]: its own and unlabelled ones); `None`
    /// means every home's.
    pub home: Option<String>,
}

/// A container chosen for removal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Orphan {
    pub id: String,
    pub name: String,
    pub state: ContainerState,
    pub age_secs: i64,
    pub reason: ReapReason,
}

/// Why a container goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReapReason {
    /// Exited longer ago than the threshold (by `FinishedAt`).
    ExitedTooLong,
    /// Left in `created` (a create whose start never came) longer than the threshold (by creation time).
    CreatedLeftover,
    /// `dead` longer than the threshold (by creation time).
    DeadLeftover,
    /// A running ephemeral (opt-out) sandbox whose owning process on this host is gone, created longer ago than the
    /// threshold.
    OwnerGone,
    /// A running ephemeral (opt-out) sandbox whose owner on another host stopped renewing its lease (see
    /// [`crate::policy::lease`]), created longer ago than the threshold.
    LeaseExpired,
}

/// A container the sweep leaves alone, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Spared {
    pub id: String,
    pub name: String,
    pub reason: SpareReason,
}

/// Why a container stays.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum SpareReason {
    /// It lacks `hermes-agent=1`.
    NotManaged,
    /// It belongs to another profile.
    OtherProfile { profile: String },
    /// Running, paused or restarting: it may belong to a live sibling process.
    Live,
    /// Younger than the threshold.
    TooYoung { age_secs: i64, max_age_secs: i64 },
    /// `FinishedAt` is zero or unparseable.
    NoTimestamp,
    /// A state berth does not reap (`removing`, or unknown).
    OtherState { state: String },
}

/// The result of a sweep plan.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReapPlan {
    pub remove: Vec<Orphan>,
    pub spare: Vec<Spared>,
}

/// Parses an owner label `<host>:<pid>:<start>`.
pub fn parse_owner(raw: &str) -> Option<(&str, u32, u64)> {
    let mut parts = raw.rsplitn(3, ':');
    let start = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    Some((parts.next()?, pid, start))
}

/// Decides one container: `Ok` to remove, `Err` with the reason to spare.
///
/// `gone_owners` holds the owner labels whose process is known to have exited: by a pid check on this host, or by a
/// lapsed lease for an owner on another host (both checked at the edge).
pub fn judge_orphan(
    now: Timestamp,
    c: &ContainerDetails,
    scope: &ReapScope,
    gone_owners: &BTreeSet<String>,
) -> Result<Orphan, SpareReason> {
    let s = &c.summary;
    if !s.is_managed() {
        return Err(SpareReason::NotManaged);
    }
    if let Some(want) = &scope.profile_label {
        let have = s.profile_label().unwrap_or("");
        if have != want {
            return Err(SpareReason::OtherProfile { profile: have.to_owned() });
        }
    }
    let (since, reason) = match &s.state {
        st if st.is_live() => {
            let orphaned = s.label(LABEL_MODE) == Some("ephemeral")
                && s.label(LABEL_OWNER).is_some_and(|o| gone_owners.contains(o));
            if !orphaned {
                return Err(SpareReason::Live);
            }
            let here = s.label(LABEL_OWNER).and_then(parse_owner).map(|(h, _, _)| h) == scope.host.as_deref();
            (s.created, if here { ReapReason::OwnerGone } else { ReapReason::LeaseExpired })
        }
        ContainerState::Exited => (c.finished_at().ok_or(SpareReason::NoTimestamp)?, ReapReason::ExitedTooLong),
        ContainerState::Created => (s.created, ReapReason::CreatedLeftover),
        ContainerState::Dead => (s.created, ReapReason::DeadLeftover),
        other => {
            return Err(SpareReason::OtherState { state: other.to_string() });
        }
    };
    if since.as_millis() <= 0 {
        return Err(SpareReason::NoTimestamp);
    }
    let age_secs = now.secs_since(since).floor() as i64;
    if age_secs < scope.max_age_secs {
        return Err(SpareReason::TooYoung { age_secs, max_age_secs: scope.max_age_secs });
    }
    Ok(Orphan { id: s.id.clone(), name: s.name.clone(), state: s.state.clone(), age_secs, reason })
}

/// Splits inspected containers into those to remove and those to spare.
pub fn find_orphans(
    now: Timestamp,
    containers: &[ContainerDetails],
    scope: &ReapScope,
    gone_owners: &BTreeSet<String>,
) -> ReapPlan {
    let mut plan = ReapPlan::default();
    for c in containers {
        match judge_orphan(now, c, scope, gone_owners) {
            Ok(o) => plan.remove.push(o),
            Err(reason) => plan.spare.push(Spared { id: c.summary.id.clone(), name: c.summary.name.clone(), reason }),
        }
    }
    plan
}
