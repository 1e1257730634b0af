//! Process supervision, the one place berth touches host processes: detached spawn, the probe (pid + start
//! fingerprint), the verified stop of a worker's process group, and reaping children.
//!
//! The invariant: a signal goes only to a verified (pid, start) pair. A pid is a number the kernel reuses, so a
//! stored `worker_pid` alone names whatever process holds that number now; its start time (field 22 of
//! `/proc/<pid>/stat`, clock ticks since boot) is what tells the worker berth started from a stranger. The process
//! table is read through `procfs` and signals, `waitpid`, `flock` and ids go through `rustix`: no `unsafe` here.

use std::fs::File;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use domain::ports::ProcessProbe;
use procfs::process::{Process, Stat};
use rustix::process::{Pid, Signal, WaitOptions};

/// How long a stopped worker gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// How often a stop looks at the process table while it waits.
const POLL: Duration = Duration::from_millis(50);

/// How long a stop waits for SIGKILL to take effect, to reap the worker when it is our child.
const KILL_WAIT: Duration = Duration::from_secs(2);

/// Makes this process non-dumpable: its `/proc/<pid>/environ`, memory and descriptors are then readable by no other
/// process of its user (only by a privileged one), and it leaves no core dump. Every berth process may hold the
/// board's password (`kanban.database_url`) or forwarded secrets in its environment, while the commands it runs
/// are of the same user; a command's own exec makes it dumpable again, so this reaches no command.
pub fn keep_memory_private() {
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
}

/// Raises this process's soft limit of open files to its hard limit: a service holds a descriptor per connection,
/// per worker and per log, and the usual soft limit (1024) is far below what the hard limit allows.
pub fn raise_open_files_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    if let Some(hard) = getrlimit(Resource::Nofile).maximum {
        let _ = setrlimit(Resource::Nofile, Rlimit { current: Some(hard), maximum: Some(hard) });
    }
}

/// Whether process `pid` is `root` or one of its descendants, by the parent links of the process table (at most
/// 4096 steps up). What a worker's socket asks of a peer (`board/handoff.rs`): another task's command, though of the
/// same user, is not below this task's worker.
pub fn descends_from(pid: u32, root: u32) -> bool {
    let mut at = pid;
    for _ in 0..4096 {
        if at == root {
            return true;
        }
        match stat_of(at) {
            Some(s) if s.ppid > 0 => at = u32::try_from(s.ppid).unwrap_or(0),
            _ => return false,
        }
    }
    false
}

/// The process table through `/proc`: liveness with a start-time check against pid reuse.
pub struct ProcProbe;

fn stat_of(pid: u32) -> Option<Stat> {
    Process::new(i32::try_from(pid).ok()?).ok()?.stat().ok()
}

/// How long this process has existed, from its start in the process table (so time spent before `main` counts).
pub fn own_age() -> Option<std::time::Duration> {
    use procfs::Current;
    let start = Process::myself().ok()?.stat().ok()?.starttime;
    let uptime = procfs::Uptime::current().ok()?.uptime;
    #[allow(clippy::cast_precision_loss, reason = "clock ticks since boot fit an f64 exactly for centuries")]
    let started = start as f64 / procfs::ticks_per_second() as f64;
    Some(std::time::Duration::from_secs_f64((uptime - started).max(0.0)))
}

/// A zombie (exited, not yet reaped) or dead process no longer runs anything.
fn is_exited(stat: &Stat) -> bool {
    matches!(stat.state, 'Z' | 'X' | 'x')
}

impl ProcessProbe for ProcProbe {
    fn start_fingerprint(&self, pid: u32) -> Option<u64> {
        stat_of(pid).map(|s| s.starttime)
    }

    fn is_alive(&self, pid: u32, fingerprint: Option<u64>) -> bool {
        match stat_of(pid) {
            Some(s) if is_exited(&s) => false,
            Some(s) => fingerprint.is_none_or(|want| s.starttime == want),
            None => false,
        }
    }
}

/// A worker as the board records it: its pid and the start fingerprint read right after it was spawned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Worker {
    pub pid: u32,
    pub start: u64,
}

impl Worker {
    /// The worker of a task row; `None` unless both columns hold usable values (a pid without a start cannot be
    /// verified, so it is never signalled).
    pub fn from_row(pid: Option<i64>, start: Option<i64>) -> Option<Self> {
        let pid = u32::try_from(pid?).ok().filter(|p| *p > 1)?;
        let start = u64::try_from(start?).ok()?;
        Some(Self { pid, start })
    }
}

/// What a stop did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopOutcome {
    /// No process with that pid runs any more (or only its zombie was left, now reaped when it was ours).
    Gone,
    /// The pid belongs to another process now (its start differs): nothing was signalled.
    Reused,
    /// The caller is the worker itself or runs inside its process group (a worker finishing its own task):
    /// nothing was signalled.
    Own,
    /// The group got SIGTERM and ended within the grace period.
    Terminated,
    /// The group outlived the grace period and got SIGKILL.
    Killed,
}

fn pid_of(n: u32) -> Option<Pid> {
    Pid::from_raw(i32::try_from(n).ok()?)
}

/// Whether this process is `w` or runs under it: in its process group, or with it among its ancestors.
fn is_own(w: Worker) -> bool {
    let me = std::process::id();
    if rustix::process::getpgrp().as_raw_nonzero().get().unsigned_abs() == w.pid {
        return true;
    }
    let mut pid = me;
    // Bounded walk up the parent chain; each hop is checked against the start too, so a reused pid never counts.
    for _ in 0..64 {
        let Some(stat) = stat_of(pid) else { return false };
        if pid == w.pid {
            return stat.starttime == w.start;
        }
        match u32::try_from(stat.ppid) {
            Ok(parent) if parent > 0 => pid = parent,
            _ => return false,
        }
    }
    false
}

/// Reaps `pid` if it is an exited child of this process; a no-op for anyone else's process.
fn reap(pid: Pid) {
    let _ = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG);
}

/// Reaps every exited child of this process (workers the gateway started), so none lingers as a zombie; returns the
/// exit codes of those that exited (not killed by a signal).
pub fn reap_children() -> Vec<i32> {
    reap_children_by_pid().into_iter().filter_map(|(_, code)| code).collect()
}

/// Reaps every exited child of this process; returns each one's pid and exit code (`None`: killed by a signal).
pub fn reap_children_by_pid() -> Vec<(i32, Option<i32>)> {
    // `wait` is waitpid(-1): any child (`waitpid(None)` would only see children in our own process group).
    let mut ended = Vec::new();
    while let Ok(Some((pid, status))) = rustix::process::wait(WaitOptions::NOHANG) {
        ended.push((pid.as_raw_nonzero().get(), status.exit_status()));
    }
    ended
}

/// Whether `pid` is still a child of this process that nobody has reaped (running, or exited and waiting to be):
/// asked without reaping it.
pub fn is_unreaped_child(pid: i32) -> bool {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    let Some(pid) = Pid::from_raw(pid) else { return false };
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    waitid(WaitId::Pid(pid), options).is_ok()
}

/// Live (non-zombie) members of process group `pgid`.
fn live_members(pgid: u32) -> usize {
    let Ok(all) = procfs::process::all_processes() else { return 0 };
    all.filter_map(|p| p.ok()?.stat().ok())
        .filter(|s| u32::try_from(s.pgrp).ok() == Some(pgid) && !is_exited(s))
        .count()
}

/// Signals `w`'s process group when `w` leads it (berth starts every worker as a group leader), else `w` alone.
fn signal(w: Worker, leads_group: bool, sig: Signal) {
    let Some(pid) = pid_of(w.pid) else { return };
    if leads_group {
        let _ = rustix::process::kill_process_group(pid, sig);
    } else {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// Stops a worker: verifies its start fingerprint FIRST, then SIGTERM to its process group, waits up to `grace`
/// (polling, reaping it when it is our child), then SIGKILL to what is left.
///
/// A pid whose start time differs is never signalled, and neither is the caller's own worker (a worker command
/// that runs `berth kanban complete` on its own task).
pub async fn stop(w: Worker, grace: Duration) -> StopOutcome {
    let Some(pid) = pid_of(w.pid).filter(|_| w.pid > 1) else { return StopOutcome::Gone };
    match stat_of(w.pid) {
        None => return stop_orphaned_group(w, pid),
        Some(s) if s.starttime != w.start => {
            tracing::debug!(
                "pid {} now belongs to another process (start {} != {}); not signalled",
                w.pid,
                s.starttime,
                w.start
            );
            return StopOutcome::Reused;
        }
        Some(s) if is_exited(&s) => {
            reap(pid);
            return stop_orphaned_group(w, pid);
        }
        Some(_) => {}
    }
    if is_own(w) {
        tracing::debug!("worker {} is this process or its ancestor; not signalled", w.pid);
        return StopOutcome::Own;
    }
    let leads_group = stat_of(w.pid).is_some_and(|s| u32::try_from(s.pgrp).ok() == Some(w.pid));
    signal(w, leads_group, Signal::TERM);
    let deadline = Instant::now() + grace;
    loop {
        reap(pid);
        // The leader still holds its pid (running, or a zombie nobody reaped yet) only with the same start.
        let leader = stat_of(w.pid).filter(|s| s.starttime == w.start);
        let leader_running = leader.as_ref().is_some_and(|s| !is_exited(s));
        let members = if leads_group { live_members(w.pid) } else { usize::from(leader_running) };
        if members == 0 {
            reap(pid);
            return StopOutcome::Terminated;
        }
        if Instant::now() >= deadline {
            // A group id is not handed out again while any member lives, so the group is still the worker's.
            if leader_running || leads_group {
                signal(w, leads_group, Signal::KILL);
            }
            // SIGKILL lands asynchronously: wait for the leader to exit, so a child of ours is reaped now.
            let killed_by = Instant::now() + KILL_WAIT;
            while stat_of(w.pid).is_some_and(|s| s.starttime == w.start && !is_exited(&s)) && Instant::now() < killed_by
            {
                tokio::time::sleep(POLL).await;
            }
            reap(pid);
            return StopOutcome::Killed;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// When `w`'s own process is gone, kills what is left of its process group at once (see [`stop`]); a live worker is
/// left to [`stop`] and its grace period.
pub fn kill_leftovers(w: Worker) {
    // Gone, or a zombie of this very worker (its pid, and so its group id, still held: not reusable).
    if let Some(pid) = pid_of(w.pid).filter(|_| w.pid > 1)
        && stat_of(w.pid).is_none_or(|s| is_exited(&s) && s.starttime == w.start)
    {
        stop_orphaned_group(w, pid);
    }
}

/// A worker whose leader is gone may leave its group behind (a worker command's children, still running the task's
/// command). The kernel does not hand a pid out again while it names a live process group, so members of a group
/// whose leader's pid has no process are the worker's own: they are killed, so a crashed run never overlaps its
/// retry. The caller's own group is never signalled.
fn stop_orphaned_group(w: Worker, pid: Pid) -> StopOutcome {
    let own = rustix::process::getpgrp().as_raw_nonzero().get().unsigned_abs() == w.pid;
    if own || live_members(w.pid) == 0 {
        return StopOutcome::Gone;
    }
    tracing::debug!("worker {} is gone but its process group lives on; killing it", w.pid);
    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    StopOutcome::Killed
}

/// Stops every worker in `workers` concurrently and waits for all of them.
pub async fn stop_all(workers: Vec<Worker>) {
    let mut set = tokio::task::JoinSet::new();
    for w in workers {
        set.spawn(stop(w, STOP_GRACE));
    }
    while set.join_next().await.is_some() {}
}

/// Starts `cmd` detached: in a process group of its own (so a stop reaches everything it starts and a terminal's
/// Ctrl-C does not), returning the child and its start fingerprint.
///
/// # Errors
/// The OS error when the process cannot be started.
pub fn spawn_detached(cmd: &mut Command) -> std::io::Result<(Child, Option<u64>)> {
    use std::os::unix::process::CommandExt;
    let child = cmd.process_group(0).spawn()?;
    let start = ProcProbe.start_fingerprint(child.id());
    Ok((child, start))
}

/// Takes an exclusive advisory lock on `file` without waiting; `false` when another process holds it.
pub fn try_lock(file: &File) -> bool {
    rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok()
}

/// Releases a lock taken with [`try_lock`].
pub fn unlock(file: &File) {
    let _ = rustix::fs::flock(file, rustix::fs::FlockOperation::Unlock);
}

/// Whether another process holds the lock on the file at `path` right now (a successful probe is released at once).
pub fn lock_held(path: &std::path::Path) -> bool {
    let Ok(file) = std::fs::OpenOptions::new().read(true).write(true).open(path) else { return false };
    if try_lock(&file) {
        unlock(&file);
        false
    } else {
        true
    }
}

/// `uid:gid` of this process (sandboxes run commands as the invoking user).
pub fn user_spec() -> String {
    format!("{}:{}", rustix::process::getuid().as_raw(), rustix::process::getgid().as_raw())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `sh -c SCRIPT` child leading its own process group, as workers are started.
    fn child(script: &str) -> (Child, Worker) {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]).stdin(std::process::Stdio::null());
        let (child, start) = spawn_detached(&mut cmd).unwrap();
        let w = Worker { pid: child.id(), start: start.expect("a fresh child has a start time") };
        (child, w)
    }

    fn exists(pid: u32) -> bool {
        stat_of(pid).is_some()
    }

    #[test]
    fn a_child_is_unreaped_while_it_runs_and_after_it_exits_until_someone_reaps_it() {
        let (mut running, _) = child("sleep 30");
        let (mut exited, w) = child("exit 3");
        let pid = |c: &Child| i32::try_from(c.id()).unwrap();
        assert!(is_unreaped_child(pid(&running)));
        while stat_of(w.pid).is_some_and(|s| !is_exited(&s)) {
            std::thread::sleep(Duration::from_millis(5)); // polling the child's exit
        }
        assert!(is_unreaped_child(pid(&exited)), "a zombie of ours, asked without reaping it");
        assert!(is_unreaped_child(pid(&exited)), "still there: the question reaps nothing");
        assert_eq!(exited.wait().unwrap().code(), Some(3), "its exit code kept for whoever reaps it");
        assert!(!is_unreaped_child(pid(&exited)), "reaped elsewhere");
        assert!(!is_unreaped_child(1), "not our child");
        running.kill().unwrap();
        running.wait().unwrap();
    }

    #[test]
    fn a_row_without_a_usable_pid_and_start_names_no_worker() {
        assert_eq!(Worker::from_row(Some(42), Some(7)), Some(Worker { pid: 42, start: 7 }));
        for (pid, start) in
            [(None, Some(7)), (Some(42), None), (Some(1), Some(7)), (Some(-5), Some(7)), (Some(42), Some(-1))]
        {
            assert_eq!(Worker::from_row(pid, start), None, "{pid:?} {start:?}");
        }
    }

    #[tokio::test]
    async fn a_wrong_start_is_never_signalled() {
        let (mut c, w) = child("sleep 30");
        let outcome = stop(Worker { start: w.start + 1, ..w }, Duration::from_millis(200)).await;
        assert_eq!(outcome, StopOutcome::Reused);
        assert!(c.try_wait().unwrap().is_none(), "the process with the reused pid was signalled");
        assert_eq!(stop(w, Duration::from_secs(5)).await, StopOutcome::Terminated);
        assert!(!exists(w.pid), "a stopped child of ours is reaped, not left a zombie");
    }

    #[tokio::test]
    async fn a_worker_ignoring_sigterm_gets_sigkill_after_the_grace_period_with_its_group() {
        // The shell's child inherits the ignored SIGTERM, so only the group SIGKILL ends both.
        let (_c, w) = child("trap '' TERM; sleep 30 & wait");
        // Stop only once the shell has set its trap and started its child (two live members).
        let deadline = Instant::now() + Duration::from_secs(5);
        while live_members(w.pid) < 2 {
            assert!(Instant::now() < deadline, "the shell did not start its child");
            std::thread::sleep(POLL);
        }
        let started = Instant::now();
        assert_eq!(stop(w, Duration::from_millis(300)).await, StopOutcome::Killed);
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(!exists(w.pid));
        // SIGKILL went to the whole group; a member may take a moment to finish exiting on a loaded machine.
        let deadline = Instant::now() + Duration::from_secs(3);
        while live_members(w.pid) > 0 && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        assert_eq!(live_members(w.pid), 0, "the group's other members are gone too");
    }

    #[tokio::test]
    async fn the_caller_is_never_its_own_victim() {
        let me = Worker { pid: std::process::id(), start: ProcProbe.start_fingerprint(std::process::id()).unwrap() };
        assert_eq!(stop(me, Duration::from_millis(100)).await, StopOutcome::Own);
    }

    #[test]
    fn the_probe_tells_a_reused_pid_and_a_zombie_from_a_live_worker() {
        let (mut c, w) = child("exit 0");
        assert!(!ProcProbe.is_alive(w.pid, Some(w.start + 1)));
        let deadline = Instant::now() + Duration::from_secs(5);
        // Until reaped, the exited child is a zombie: not alive.
        while ProcProbe.is_alive(w.pid, Some(w.start)) {
            assert!(Instant::now() < deadline, "the child did not exit");
            std::thread::sleep(POLL);
        }
        c.wait().unwrap();
    }
}
