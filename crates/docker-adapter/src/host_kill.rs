//! Killing a timed-out exec from the engine's host, by berth's own code: no program of the sandbox runs (a task
//! may have replaced them), a child that dropped its environment (`env -i … &`) is still found (by the process
//! tree, not only by the marker), and a fork bomb is frozen (SIGSTOP) before it is killed, round after round until
//! nothing of it is left.
//!
//! It acts only on processes it has verified to be the container's: their cgroup names the container's full id, as
//! seen from this process. When berth runs where the engine's processes are not visible (another pid namespace, a
//! remote engine, a user who may not read them) nothing is verified and [`kill_from_host`] declines, and the caller
//! kills from inside the container instead.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use procfs::process::Process;
use rustix::process::{Pid, Signal};

/// How long the rounds may take before giving up on stragglers.
const DEADLINE: Duration = Duration::from_secs(5);

/// Whether `p` is a process of the container `id` (its cgroup path names the container's full id).
fn in_container(p: &Process, id: &str) -> bool {
    p.cgroups().is_ok_and(|groups| groups.0.iter().any(|g| g.pathname.contains(id)))
}

/// Whether `p`'s environment holds `marker` (`KEY=VALUE`).
fn marked(p: &Process, marker: &str) -> bool {
    let Some((key, value)) = marker.split_once('=') else { return false };
    p.environ().is_ok_and(|env| env.get(std::ffi::OsStr::new(key)).is_some_and(|v| v == value))
}

/// The exec's processes now: its root, every process carrying the marker, and every descendant of those, among the
/// container's processes (the container's init excluded).
fn members(id: &str, init: i32, root: Option<i32>, marker: &str) -> BTreeSet<i32> {
    let Ok(all) = procfs::process::all_processes() else { return BTreeSet::new() };
    let mut ppid_of: Vec<(i32, i32)> = Vec::new();
    let mut set = BTreeSet::new();
    for p in all.flatten() {
        if p.pid == init || !in_container(&p, id) {
            continue;
        }
        let Ok(stat) = p.stat() else { continue };
        // A killed process waits as a zombie for its parent to reap it: nothing is left to kill in it.
        if matches!(stat.state, 'Z' | 'X') {
            continue;
        }
        if Some(p.pid) == root || marked(&p, marker) {
            set.insert(p.pid);
        }
        ppid_of.push((p.pid, stat.ppid));
    }
    // Close over children: a descendant that left the marker behind (`env -i`) is still the exec's.
    loop {
        let before = set.len();
        for (pid, ppid) in &ppid_of {
            if set.contains(ppid) {
                set.insert(*pid);
            }
        }
        if set.len() == before {
            return set;
        }
    }
}

/// Signals every process of `pids`; false when one may not be signalled by this user (the caller then leaves the
/// kill to the container).
fn signal_all(pids: &BTreeSet<i32>, sig: Signal) -> bool {
    let mut allowed = true;
    for pid in pids.iter().filter_map(|p| Pid::from_raw(*p)) {
        if rustix::process::kill_process(pid, sig) == Err(rustix::io::Errno::PERM) {
            allowed = false;
        }
    }
    allowed
}

/// Freezes and kills the exec's processes (see the module), from this host. `init` is the container's main process
/// and `root` the exec's, both as the engine reports them. Returns false when the container's processes are not
/// visible here as the container's, when this user may not signal them, or when some outlived the rounds: the
/// caller then kills from inside the container.
pub(crate) fn kill_from_host(id: &str, init: i64, root: Option<i64>, marker: &str) -> bool {
    let Ok(init) = i32::try_from(init) else { return false };
    if init <= 1 || Process::new(init).map_or(true, |p| !in_container(&p, id)) {
        return false;
    }
    let root = root.and_then(|r| i32::try_from(r).ok()).filter(|r| *r > 1);
    let started = Instant::now();
    while started.elapsed() < DEADLINE {
        let found = members(id, init, root, marker);
        if found.is_empty() {
            return true;
        }
        // Frozen first, so none forks between the look and the kill; the look is repeated on frozen processes,
        // catching children made just before.
        if !signal_all(&found, Signal::STOP) {
            return false;
        }
        let frozen = members(id, init, root, marker);
        signal_all(&frozen, Signal::STOP);
        signal_all(&frozen, Signal::KILL);
        signal_all(&found, Signal::KILL);
        std::thread::sleep(Duration::from_millis(20)); // the kernel reaps killed processes asynchronously
    }
    false
}
