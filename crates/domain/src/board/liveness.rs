//! Is a task's worker alive, seen from one host? The one rule every store's tick and every view (`kanban ls`,
//! `kanban show`, the gateway) uses: a worker on this host is judged by its pid and start fingerprint, a worker on
//! another host by that host's heartbeat, never by this host's process table.

use std::time::Duration;

use serde::Serialize;

/// Looks at the host's process table: is a worker still the process we started? (A port: `app` reads `/proc`.)
pub trait ProcessProbe: Send + Sync {
    /// A fingerprint of the process's start (boot-relative start time), used against pid reuse.
    fn start_fingerprint(&self, pid: u32) -> Option<u64>;

    /// Whether `pid` is alive, not a zombie, and (when `fingerprint` is given) started at that time.
    fn is_alive(&self, pid: u32, fingerprint: Option<u64>) -> bool;
}

/// What a task row records of its worker, and how long its host has been silent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerFacts<'a> {
    pub pid: Option<i64>,
    pub start: Option<i64>,
    /// The host the worker runs on (`worker_host`); `None` for a row from before hosts were recorded (local).
    pub host: Option<&'a str>,
    /// How long since that host last renewed its heartbeat row; `None` when it never did.
    pub host_silent: Option<Duration>,
}

/// A worker as one host judges it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Liveness {
    /// No worker is recorded (a claim waiting for its worker).
    NoWorker,
    /// On this host: the pid still carries its start. Elsewhere: its host heartbeats.
    Alive { host: Option<String> },
    /// On this host: the pid is gone or was reused.
    Gone { host: Option<String> },
    /// Its host stopped heartbeating longer ago than the host timeout: the worker is taken for dead.
    HostLost { host: String, silent_secs: u64 },
    /// Its host never heartbeated (a berth from before host heartbeats): only its claim's lease says anything.
    Unknown { host: String },
}

impl Liveness {
    /// `Some(true)` alive, `Some(false)` dead (gone or its host lost), `None` when nothing can be said.
    pub fn alive(&self) -> Option<bool> {
        match self {
            Self::Alive { .. } => Some(true),
            Self::Gone { .. } | Self::HostLost { .. } => Some(false),
            Self::NoWorker | Self::Unknown { .. } => None,
        }
    }

    /// The worker's host, when one is known.
    pub fn host(&self) -> Option<&str> {
        match self {
            Self::Alive { host } | Self::Gone { host } => host.as_deref(),
            Self::HostLost { host, .. } | Self::Unknown { host } => Some(host),
            Self::NoWorker => None,
        }
    }
}

/// Whether a worker recorded on `worker_host` is this host's own (an unrecorded host is: single-host boards).
pub fn is_local(this_host: &str, worker_host: Option<&str>) -> bool {
    this_host.is_empty() || worker_host.is_none_or(|h| h == this_host)
}

/// Judges a worker from `this_host` (empty: a single-host board, every worker is local). `host_timeout` zero
/// never judges a host lost.
pub fn judge(this_host: &str, w: &WorkerFacts<'_>, host_timeout: Duration, probe: &dyn ProcessProbe) -> Liveness {
    let host = w.host.map(str::to_owned);
    if is_local(this_host, w.host) {
        let Some(pid) = w.pid.and_then(|p| u32::try_from(p).ok()) else { return Liveness::NoWorker };
        let start = w.start.and_then(|s| u64::try_from(s).ok());
        return if probe.is_alive(pid, start) { Liveness::Alive { host } } else { Liveness::Gone { host } };
    }
    let host = w.host.unwrap_or_default().to_owned();
    match w.host_silent {
        None => Liveness::Unknown { host },
        Some(silent) if !host_timeout.is_zero() && silent > host_timeout => {
            Liveness::HostLost { host, silent_secs: silent.as_secs() }
        }
        Some(_) => Liveness::Alive { host: Some(host) },
    }
}

/// A process table read once, before a store's transaction: the verdicts for the workers
/// [`crate::board::KanbanStore::local_workers`] named. A tick judges from these, so it reads no process table while it
/// holds the board; a worker recorded after the read (started meanwhile, so alive) counts as alive, and the next tick
/// judges it. A stale verdict is harmless: every write it leads to is guarded by the run it judged.
pub struct Probed {
    verdicts: std::collections::HashMap<(u32, Option<u64>), bool>,
}

impl Probed {
    /// Probes each `(pid, start)` once through `probe`.
    pub fn read(workers: &[(i64, Option<i64>)], probe: &dyn ProcessProbe) -> Self {
        let verdicts = workers
            .iter()
            .filter_map(|&(pid, start)| Some((u32::try_from(pid).ok()?, start.and_then(|s| u64::try_from(s).ok()))))
            .map(|(pid, start)| ((pid, start), probe.is_alive(pid, start)))
            .collect();
        Self { verdicts }
    }
}

impl ProcessProbe for Probed {
    /// Not read before the tick: a tick never asks (only a spawn's recording does, through the real table).
    fn start_fingerprint(&self, _pid: u32) -> Option<u64> {
        None
    }

    fn is_alive(&self, pid: u32, fingerprint: Option<u64>) -> bool {
        self.verdicts.get(&(pid, fingerprint)).copied().unwrap_or(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::FakeProcessProbe;

    fn facts(host: Option<&str>, silent: Option<u64>) -> WorkerFacts<'_> {
        WorkerFacts { pid: Some(42), start: Some(7), host, host_silent: silent.map(Duration::from_secs) }
    }

    #[test]
    fn a_remote_worker_is_judged_by_its_hosts_heartbeat_never_by_the_local_process_table() {
        // Pid 42 is not alive here; on host "b" that says nothing.
        let probe = FakeProcessProbe::default();
        let t = Duration::from_secs(30);
        assert_eq!(judge("a", &facts(Some("b"), Some(5)), t, &probe).alive(), Some(true));
        assert_eq!(
            judge("a", &facts(Some("b"), Some(31)), t, &probe),
            Liveness::HostLost { host: "b".into(), silent_secs: 31 }
        );
        assert_eq!(judge("a", &facts(Some("b"), None), t, &probe), Liveness::Unknown { host: "b".into() });
        assert_eq!(judge("a", &facts(Some("b"), Some(999)), Duration::ZERO, &probe).alive(), Some(true));
    }

    #[test]
    fn a_local_worker_is_judged_by_pid_and_start() {
        let probe = FakeProcessProbe::default();
        probe.set_alive(42, true);
        let t = Duration::from_secs(30);
        assert_eq!(judge("a", &facts(Some("a"), Some(999)), t, &probe).alive(), Some(true));
        assert_eq!(judge("", &facts(Some("b"), None), t, &probe).alive(), Some(true), "single-host: all local");
        assert_eq!(judge("a", &facts(None, None), t, &probe).alive(), Some(true), "no host recorded: local");
        probe.set_alive(42, false);
        assert_eq!(judge("a", &facts(Some("a"), None), t, &probe), Liveness::Gone { host: Some("a".into()) });
        assert_eq!(judge("a", &WorkerFacts::default(), t, &probe), Liveness::NoWorker);
    }

    #[test]
    fn a_pre_read_answers_for_the_workers_it_read_and_takes_a_later_one_for_alive() {
        let probe = FakeProcessProbe::default();
        probe.set_alive(42, true);
        let probed = Probed::read(&[(42, Some(7)), (43, None)], &probe);
        // The table changes after the read: the tick still judges from what was read.
        probe.set_alive(42, false);
        probe.set_alive(43, true);
        assert!(probed.is_alive(42, Some(7)));
        assert!(!probed.is_alive(43, None));
        // A worker recorded after the read (or with another start) was started meanwhile: alive until the next tick.
        assert!(probed.is_alive(44, Some(1)));
        assert!(probed.is_alive(42, Some(8)));
        let t = Duration::from_secs(30);
        let dead = WorkerFacts { pid: Some(43), start: None, host: Some("a"), host_silent: None };
        assert_eq!(judge("a", &dead, t, &probed), Liveness::Gone { host: Some("a".into()) });
    }
}
