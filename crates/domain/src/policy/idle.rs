//! Idle stop: which running persistent sandboxes have had nothing but their keep-alive inside for long enough.
//!
//! A pass observes each running sandbox's process list; the caller keeps the returned [`IdleMemory`] (when each
//! sandbox was first seen idle) for the next pass. Memory is only ever built from observations, so a caller that
//! starts afresh (a restarted gateway) waits a whole period again before stopping anything: idle must be seen, not
//! assumed.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::container::{ContainerProcess, ContainerState};
use crate::label::LabelValue;
use crate::time::Timestamp;

/// Init programs engines run as a container's first process (`--init`): Docker's `docker-init` (tini), Podman's
/// `catatonit`, and the usual stand-alone ones.
pub const INIT_PROGRAMS: &[&str] = &["docker-init", "tini", "catatonit", "podman-init", "dumb-init"];

/// Whether a process is part of a sandbox's keep-alive: its init, or the `sleep infinity` both berth and hermes-agent
/// start sandboxes with. Anything else (a shell, a background job, an exec'd command) counts as use.
pub fn is_keep_alive(command: &str) -> bool {
    let mut words = command.split_whitespace();
    let Some(program) = words.next() else { return false };
    let base = program.rsplit('/').next().unwrap_or(program);
    if INIT_PROGRAMS.contains(&base) {
        return true;
    }
    base == "sleep" && words.next() == Some("infinity") && words.next().is_none()
}

/// The idle-stop settings: the default period and per-profile replacements; a period of 0 means off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdleSettings {
    /// `terminal.docker_idle_stop_seconds`; 0 (or negative) is off.
    pub default_secs: i64,
    /// `terminal.docker_idle_stop_seconds_overrides`, by profile name.
    pub overrides: BTreeMap<String, u32>,
}

impl IdleSettings {
    /// The period for sandboxes carrying `profile_label`, `None` when idle stop is off for them. Overrides are keyed
    /// by profile name and matched by its label form, as the sandbox carries it.
    pub fn period_for(&self, profile_label: Option<&str>) -> Option<i64> {
        let over = profile_label.and_then(|label| {
            self.overrides.iter().find(|(name, _)| LabelValue::sanitize(name).as_str() == label).map(|(_, v)| *v)
        });
        let secs = over.map_or(self.default_secs, i64::from);
        (secs > 0).then_some(secs)
    }

    /// The shortest period of any profile (the default or an override), `None` when idle stop is off for all.
    pub fn shortest_period(&self) -> Option<i64> {
        let overs = self.overrides.values().map(|v| i64::from(*v));
        std::iter::once(self.default_secs).chain(overs).filter(|s| *s > 0).min()
    }

    /// Whether idle stop applies to anything at all.
    pub fn any_enabled(&self) -> bool {
        self.default_secs > 0 || !self.overrides.is_empty()
    }
}

/// What one pass saw of one sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdleObservation {
    pub id: String,
    pub name: String,
    pub profile_label: Option<String>,
    /// The `berth.mode` label: `ephemeral` sandboxes are never idle-stopped (their owner removes them).
    pub mode: Option<String>,
    pub state: ContainerState,
    /// The process list, `None` when the engine could not give it (then the sandbox counts as busy).
    pub processes: Option<Vec<ContainerProcess>>,
}

/// When each sandbox was first seen idle, by container id.
pub type IdleMemory = BTreeMap<String, Timestamp>;

/// The decision for one sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IdleDecision {
    pub id: String,
    pub name: String,
    pub verdict: IdleVerdict,
}

/// Stop it, or keep it and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum IdleVerdict {
    /// Nothing but the keep-alive for `idle_secs`, at least the period.
    Stop { idle_secs: i64, period_secs: i64 },
    /// Idle stop is off for its profile.
    Off,
    /// Not running: nothing to stop.
    NotRunning,
    /// An ephemeral sandbox: its owning process removes it, the reaper covers a dead owner.
    Ephemeral,
    /// Something besides the keep-alive runs inside (the first few command lines).
    Busy { processes: Vec<String> },
    /// The process list could not be read: never stop what cannot be seen.
    Unknown,
    /// Idle, but not yet for the whole period.
    IdleFor { idle_secs: i64, period_secs: i64 },
}

/// The decisions of one pass and the memory to hand to the next.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct IdlePlan {
    pub decisions: Vec<IdleDecision>,
    #[serde(skip)]
    pub memory: IdleMemory,
}

impl IdlePlan {
    /// The sandboxes to stop, with their idle time.
    pub fn to_stop(&self) -> impl Iterator<Item = (&IdleDecision, i64)> {
        self.decisions.iter().filter_map(|d| match d.verdict {
            IdleVerdict::Stop { idle_secs, .. } => Some((d, idle_secs)),
            _ => None,
        })
    }
}

/// Decides one pass. A sandbox is stopped when every observation since `previous` recorded it idle says it has been
/// idle for its profile's period; a busy, unreadable or stopped sandbox is forgotten, so its count starts over.
pub fn plan_idle_stop(
    now: Timestamp,
    observations: &[IdleObservation],
    previous: &IdleMemory,
    settings: &IdleSettings,
) -> IdlePlan {
    let mut plan = IdlePlan::default();
    for o in observations {
        let verdict = judge(now, o, previous, settings, &mut plan.memory);
        plan.decisions.push(IdleDecision { id: o.id.clone(), name: o.name.clone(), verdict });
    }
    plan
}

fn judge(
    now: Timestamp,
    o: &IdleObservation,
    previous: &IdleMemory,
    settings: &IdleSettings,
    memory: &mut IdleMemory,
) -> IdleVerdict {
    let Some(period_secs) = settings.period_for(o.profile_label.as_deref()) else { return IdleVerdict::Off };
    if o.state != ContainerState::Running {
        return IdleVerdict::NotRunning;
    }
    if o.mode.as_deref() == Some("ephemeral") {
        return IdleVerdict::Ephemeral;
    }
    let Some(processes) = &o.processes else { return IdleVerdict::Unknown };
    let busy: Vec<String> =
        processes.iter().filter(|p| !is_keep_alive(&p.command)).map(|p| p.command.clone()).take(3).collect();
    if !busy.is_empty() {
        return IdleVerdict::Busy { processes: busy };
    }
    // A clock that went backwards must not make a sandbox idle for longer than it was seen: clamp to `now`.
    let since = previous.get(&o.id).copied().filter(|t| *t <= now).unwrap_or(now);
    memory.insert(o.id.clone(), since);
    let idle_secs = now.secs_since(since).floor() as i64;
    if idle_secs >= period_secs {
        IdleVerdict::Stop { idle_secs, period_secs }
    } else {
        IdleVerdict::IdleFor { idle_secs, period_secs }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(cmd: &str) -> ContainerProcess {
        ContainerProcess { pid: "1".into(), command: cmd.into() }
    }

    fn obs(id: &str, cmds: Option<&[&str]>) -> IdleObservation {
        IdleObservation {
            id: id.into(),
            name: format!("n-{id}"),
            profile_label: Some("alpha".into()),
            mode: Some("persist".into()),
            state: ContainerState::Running,
            processes: cmds.map(|c| c.iter().map(|s| proc(s)).collect()),
        }
    }

    const KEEP: &[&str] = &["/sbin/docker-init -- sleep infinity", "sleep infinity"];

    fn on(secs: i64) -> IdleSettings {
        IdleSettings { default_secs: secs, overrides: BTreeMap::new() }
    }

    #[test]
    fn keep_alive_is_init_and_sleep_infinity_only() {
        assert!(is_keep_alive("/sbin/docker-init -- sleep infinity"));
        assert!(is_keep_alive("catatonit -- sleep infinity"));
        assert!(is_keep_alive("sleep infinity"));
        assert!(is_keep_alive("/usr/bin/sleep infinity"));
        assert!(!is_keep_alive("sleep 30"));
        assert!(!is_keep_alive("sleep infinity extra"));
        assert!(!is_keep_alive("bash -c sleep infinity"));
        assert!(!is_keep_alive("npm run watch"));
        assert!(!is_keep_alive(""));
    }

    #[test]
    fn idle_is_counted_from_the_first_idle_observation() {
        let t0 = Timestamp::from_secs(1_000);
        let first = plan_idle_stop(t0, &[obs("a", Some(KEEP))], &IdleMemory::new(), &on(3));
        assert_eq!(first.decisions[0].verdict, IdleVerdict::IdleFor { idle_secs: 0, period_secs: 3 });
        let second = plan_idle_stop(Timestamp::from_secs(1_002), &[obs("a", Some(KEEP))], &first.memory, &on(3));
        assert_eq!(second.decisions[0].verdict, IdleVerdict::IdleFor { idle_secs: 2, period_secs: 3 });
        let third = plan_idle_stop(Timestamp::from_secs(1_003), &[obs("a", Some(KEEP))], &second.memory, &on(3));
        assert_eq!(third.decisions[0].verdict, IdleVerdict::Stop { idle_secs: 3, period_secs: 3 });
        assert_eq!(third.to_stop().count(), 1);
    }

    #[test]
    fn a_background_job_resets_the_count() {
        let t0 = Timestamp::from_secs(1_000);
        let first = plan_idle_stop(t0, &[obs("a", Some(KEEP))], &IdleMemory::new(), &on(3));
        let mut busy = KEEP.to_vec();
        busy.push("sleep 30");
        let second = plan_idle_stop(Timestamp::from_secs(1_010), &[obs("a", Some(&busy))], &first.memory, &on(3));
        assert!(
            matches!(second.decisions[0].verdict, IdleVerdict::Busy { ref processes } if processes == &["sleep 30"])
        );
        assert!(second.memory.is_empty());
        let third = plan_idle_stop(Timestamp::from_secs(1_011), &[obs("a", Some(KEEP))], &second.memory, &on(3));
        assert_eq!(third.decisions[0].verdict, IdleVerdict::IdleFor { idle_secs: 0, period_secs: 3 });
    }

    #[test]
    fn unreadable_ephemeral_stopped_and_off_are_never_stopped() {
        let long_ago = IdleMemory::from([("a".to_owned(), Timestamp::from_secs(0))]);
        let now = Timestamp::from_secs(10_000);
        let unknown = plan_idle_stop(now, &[obs("a", None)], &long_ago, &on(3));
        assert_eq!(unknown.decisions[0].verdict, IdleVerdict::Unknown);
        let mut eph = obs("a", Some(KEEP));
        eph.mode = Some("ephemeral".into());
        assert_eq!(plan_idle_stop(now, &[eph], &long_ago, &on(3)).decisions[0].verdict, IdleVerdict::Ephemeral);
        let mut exited = obs("a", Some(KEEP));
        exited.state = ContainerState::Exited;
        assert_eq!(plan_idle_stop(now, &[exited], &long_ago, &on(3)).decisions[0].verdict, IdleVerdict::NotRunning);
        assert_eq!(
            plan_idle_stop(now, &[obs("a", Some(KEEP))], &long_ago, &on(0)).decisions[0].verdict,
            IdleVerdict::Off
        );
    }

    #[test]
    fn hermes_made_sandboxes_without_a_mode_label_are_covered() {
        let mut o = obs("h", Some(KEEP));
        o.mode = None;
        let mem = IdleMemory::from([("h".to_owned(), Timestamp::from_secs(0))]);
        let plan = plan_idle_stop(Timestamp::from_secs(5), &[o], &mem, &on(3));
        assert_eq!(plan.decisions[0].verdict, IdleVerdict::Stop { idle_secs: 5, period_secs: 3 });
    }

    #[test]
    fn per_profile_overrides_replace_the_default() {
        let s = IdleSettings { default_secs: 0, overrides: BTreeMap::from([("alpha".to_owned(), 60)]) };
        assert_eq!(s.period_for(Some("alpha")), Some(60));
        assert_eq!(s.period_for(Some("beta")), None);
        assert_eq!(s.period_for(None), None);
        assert!(s.any_enabled());
        let s = IdleSettings { default_secs: 600, overrides: BTreeMap::from([("alpha".to_owned(), 5)]) };
        assert_eq!(s.period_for(Some("alpha")), Some(5));
        assert_eq!(s.period_for(Some("beta")), Some(600));
    }

    #[test]
    fn a_clock_that_went_back_restarts_the_count() {
        let future = IdleMemory::from([("a".to_owned(), Timestamp::from_secs(5_000))]);
        let plan = plan_idle_stop(Timestamp::from_secs(1_000), &[obs("a", Some(KEEP))], &future, &on(3));
        assert_eq!(plan.decisions[0].verdict, IdleVerdict::IdleFor { idle_secs: 0, period_secs: 3 });
    }
}
