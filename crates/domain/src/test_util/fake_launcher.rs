//! `FakeLauncher`: a worker launcher that starts no process; it records launches, stops and releases, and keeps a
//! process table of its own (launched pids alive until stopped or killed).

use std::collections::BTreeSet;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::board::{Claimed, WorkerRef};
use crate::ids::BoardSlug;
use crate::ports::{LaunchError, Launched, WorkerLauncher};
use crate::test_util::FakeProcessProbe;

#[derive(Debug, Default)]
struct State {
    next_pid: u32,
    launched: Vec<(Claimed, u32)>,
    stopped: Vec<WorkerRef>,
    released: Vec<(String, String)>,
    failing: BTreeSet<String>,
}

/// See the module docs; `probe` is the process table to hand to the tick.
#[derive(Debug, Default)]
pub struct FakeLauncher {
    pub probe: FakeProcessProbe,
    state: Mutex<State>,
}

impl FakeLauncher {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Launches for `task` fail from now on.
    pub fn fail_for(&self, task: &str) {
        self.state().failing.insert(task.to_owned());
    }

    /// Every launch so far: the claim and the pid given to it.
    pub fn launched(&self) -> Vec<(Claimed, u32)> {
        self.state().launched.clone()
    }

    pub fn stopped(&self) -> Vec<WorkerRef> {
        self.state().stopped.clone()
    }

    /// `(task, assignee)` of every released sandbox.
    pub fn released(&self) -> Vec<(String, String)> {
        self.state().released.clone()
    }

    /// The worker process dies (a crash, or it exited after completing).
    pub fn kill(&self, pid: u32) {
        self.probe.set_alive(pid, false);
    }
}

#[async_trait]
impl WorkerLauncher for FakeLauncher {
    fn launch(&self, _board: &BoardSlug, claimed: &Claimed) -> Result<Launched, LaunchError> {
        let mut s = self.state();
        if s.failing.contains(&claimed.task_id) {
            return Err(LaunchError(format!("cannot start a worker for {}", claimed.task_id)));
        }
        s.next_pid += 1;
        let pid = 10_000 + s.next_pid;
        s.launched.push((claimed.clone(), pid));
        drop(s);
        self.probe.set_alive(pid, true);
        Ok(Launched {
            pid,
            start: Some(u64::from(pid)),
            log: String::new(),
            sandbox: format!("sandbox-{}", claimed.task_id),
        })
    }

    async fn stop(&self, workers: Vec<WorkerRef>) {
        for w in &workers {
            if let Ok(pid) = u32::try_from(w.pid) {
                self.probe.set_alive(pid, false);
            }
        }
        self.state().stopped.extend(workers);
    }

    async fn release_sandbox(&self, task_id: &str, assignee: &str) {
        self.state().released.push((task_id.to_owned(), assignee.to_owned()));
    }
}
