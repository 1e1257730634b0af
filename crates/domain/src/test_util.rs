//! Test doubles for the ports: an in-memory container runtime, board and launcher, a settable clock, and the
//! dispatcher suite every board store runs.

mod dispatcher_suite;
mod fake_launcher;
mod fake_store;

pub use dispatcher_suite::*;
pub use fake_launcher::FakeLauncher;
pub use fake_store::{FakeKanbanStore, FakeStoreError, FakeTask};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use crate::container::{ContainerDetails, ContainerState, ContainerSummary};
use crate::ports::{Clock, ContainerRuntime, ExecOutcome, ExecSpec, ListQuery, OutputSink, OutputStream, RuntimeError};
use crate::sandbox::CreateSpec;
use crate::time::Timestamp;

/// A clock tests set and advance by hand.
#[derive(Debug)]
pub struct FakeClock(AtomicI64);

impl FakeClock {
    pub fn new(now: Timestamp) -> Self {
        Self(AtomicI64::new(now.as_millis()))
    }

    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(d.as_millis() as i64, Ordering::SeqCst);
    }

    pub fn set(&self, t: Timestamp) {
        self.0.store(t.as_millis(), Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.0.load(Ordering::SeqCst))
    }
}

/// One container inside [`FakeRuntime`].
#[derive(Clone, Debug)]
pub struct FakeContainer {
    pub id: String,
    pub spec: CreateSpec,
    pub state: ContainerState,
    pub created: Timestamp,
    pub finished_at: String,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    containers: BTreeMap<String, FakeContainer>,
    fail_start: BTreeSet<String>,
    /// Containers with a command running besides their keep-alive (a live exec).
    busy: BTreeSet<String>,
    calls: Vec<String>,
    execs: Vec<(String, Vec<String>)>,
}

/// An in-memory [`ContainerRuntime`] with Docker's semantics where berth relies on them: unique names (409),
/// `start` on a running container is fine, removing a running container needs `force` (409), exec needs running.
#[derive(Debug)]
pub struct FakeRuntime {
    inner: Mutex<Inner>,
    clock_ms: AtomicI64,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        Self::new(Timestamp::from_secs(1_800_000_000))
    }
}

impl FakeRuntime {
    pub fn new(now: Timestamp) -> Self {
        Self { inner: Mutex::new(Inner::default()), clock_ms: AtomicI64::new(now.as_millis()) }
    }

    /// Sets the runtime's notion of now (creation and finish times).
    pub fn set_now(&self, now: Timestamp) {
        self.clock_ms.store(now.as_millis(), Ordering::SeqCst);
    }

    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.clock_ms.load(Ordering::SeqCst))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds a container directly (as another tool, e.g. hermes-agent, would have made it).
    pub fn insert(&self, spec: CreateSpec, state: ContainerState, created: Timestamp, finished_at: &str) -> String {
        let mut g = self.lock();
        g.next_id += 1;
        let id = format!("{:064x}", g.next_id);
        g.containers.insert(
            id.clone(),
            FakeContainer { id: id.clone(), spec, state, created, finished_at: finished_at.to_owned() },
        );
        id
    }

    /// Marks a container as running a command besides its keep-alive (a live exec), or not.
    pub fn set_busy(&self, id: &str, busy: bool) {
        let mut g = self.lock();
        if busy {
            g.busy.insert(id.to_owned());
        } else {
            g.busy.remove(id);
        }
    }

    /// Makes `start` fail for this container.
    pub fn fail_start(&self, id: &str) {
        self.lock().fail_start.insert(id.to_owned());
    }

    /// Stops a container out of band (a crash, an OOM kill, a daemon restart).
    pub fn kill(&self, id: &str) {
        let now = self.now();
        if let Some(c) = self.lock().containers.get_mut(id) {
            c.state = ContainerState::Exited;
            c.finished_at = now.to_rfc3339();
        }
    }

    /// Removes a container out of band (`docker rm -f` by a user).
    pub fn remove_out_of_band(&self, id: &str) {
        self.lock().containers.remove(id);
    }

    /// A copy of every container.
    pub fn containers(&self) -> Vec<FakeContainer> {
        self.lock().containers.values().cloned().collect()
    }

    /// The method names called so far, in order (`create`, `start`, …).
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// Every exec so far: container id and argv.
    pub fn execs(&self) -> Vec<(String, Vec<String>)> {
        self.lock().execs.clone()
    }

    fn summary(c: &FakeContainer) -> ContainerSummary {
        ContainerSummary {
            id: c.id.clone(),
            name: c.spec.name.clone(),
            labels: c.spec.labels.clone(),
            state: c.state.clone(),
            created: c.created,
            network_mode: Some(c.spec.network_mode.clone().unwrap_or_else(|| "default".to_owned())),
        }
    }
}

#[async_trait]
impl ContainerRuntime for FakeRuntime {
    async fn processes(&self, id: &str) -> Result<Vec<crate::container::ContainerProcess>, RuntimeError> {
        let g = self.lock();
        let c = g.containers.get(id).ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
        if c.state != ContainerState::Running {
            return Err(RuntimeError::Api { status: 409, message: format!("container {id} is not running") });
        }
        let proc = |pid: &str, command: &str| crate::container::ContainerProcess {
            pid: pid.to_owned(),
            command: command.to_owned(),
        };
        let mut list = vec![proc("1", "/sbin/docker-init -- sleep infinity"), proc("2", "sleep infinity")];
        if g.busy.contains(id) {
            list.push(proc("3", "sh -c work"));
        }
        Ok(list)
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<ContainerSummary>, RuntimeError> {
        let mut g = self.lock();
        g.calls.push("list".into());
        Ok(g.containers
            .values()
            .filter(|c| query.labels.iter().all(|(k, v)| c.spec.labels.get(k) == Some(v)))
            .filter(|c| query.states.is_empty() || query.states.contains(&c.state))
            .map(Self::summary)
            .collect())
    }

    async fn inspect(&self, id: &str) -> Result<ContainerDetails, RuntimeError> {
        let mut g = self.lock();
        g.calls.push("inspect".into());
        // Like Docker, inspect takes an id or a name.
        let c = match g.containers.get(id) {
            Some(c) => c,
            None => g
                .containers
                .values()
                .find(|c| c.spec.name == id)
                .ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?,
        };
        Ok(ContainerDetails {
            summary: Self::summary(c),
            finished_at_raw: c.finished_at.clone(),
            started_at_raw: String::new(),
            exit_code: None,
            oom_killed: false,
            env: c.spec.env.clone(),
        })
    }

    async fn create(&self, spec: &CreateSpec) -> Result<String, RuntimeError> {
        let now = self.now();
        let mut g = self.lock();
        g.calls.push("create".into());
        if g.containers.values().any(|c| c.spec.name == spec.name) {
            return Err(RuntimeError::NameConflict(spec.name.clone()));
        }
        g.next_id += 1;
        let id = format!("{:064x}", g.next_id);
        let c = FakeContainer {
            id: id.clone(),
            spec: spec.clone(),
            state: ContainerState::Created,
            created: now,
            finished_at: "0001-01-01T00:00:00Z".into(),
        };
        g.containers.insert(id.clone(), c);
        Ok(id)
    }

    async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        let mut g = self.lock();
        g.calls.push("start".into());
        if g.fail_start.contains(id) {
            return Err(RuntimeError::Api { status: 500, message: "cannot start container".into() });
        }
        let c = g.containers.get_mut(id).ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
        match c.state {
            ContainerState::Dead | ContainerState::Removing => Err(RuntimeError::Api {
                status: 500,
                message: "container is marked for removal and cannot be started".into(),
            }),
            _ => {
                c.state = ContainerState::Running;
                Ok(())
            }
        }
    }

    async fn stop(&self, id: &str, _grace: Duration) -> Result<(), RuntimeError> {
        let now = self.now();
        let mut g = self.lock();
        g.calls.push("stop".into());
        let c = g.containers.get_mut(id).ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
        if c.state.is_live() {
            c.state = ContainerState::Exited;
            c.finished_at = now.to_rfc3339();
        }
        Ok(())
    }

    async fn remove(&self, id: &str, force: bool) -> Result<(), RuntimeError> {
        let mut g = self.lock();
        g.calls.push("remove".into());
        let c = g.containers.get(id).ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
        if c.state.is_live() && !force {
            return Err(RuntimeError::Api {
                status: 409,
                message: "cannot remove a running container; stop it first".into(),
            });
        }
        g.containers.remove(id);
        Ok(())
    }

    async fn exec<'s>(
        &self,
        id: &str,
        spec: &ExecSpec,
        sink: &'s mut (dyn OutputSink + 's),
    ) -> Result<ExecOutcome, RuntimeError> {
        let mut g = self.lock();
        g.calls.push("exec".into());
        let c = g.containers.get(id).ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
        if c.state != ContainerState::Running {
            return Err(RuntimeError::Api { status: 409, message: format!("container {id} is not running") });
        }
        g.execs.push((id.to_owned(), spec.argv.clone()));
        drop(g);
        sink.write(OutputStream::Stdout, spec.argv.join(" ").as_bytes());
        Ok(ExecOutcome::Exited(0))
    }
}

/// Sandbox settings with upstream's defaults and a fake image, for tests.
pub fn sandbox_settings() -> crate::sandbox::SandboxSettings {
    crate::sandbox::SandboxSettings {
        egress: crate::egress::EgressPolicy::All,
        credentials: crate::egress::credentials::Credentials::default(),
        image: "img:1".into(),
        cwd: "/root".into(),
        persist_across_processes: true,
        recreate_on_config_change: true,
        orphan_reaper: true,
        lifetime_seconds: 300,
        timeout_seconds: 180,
        cpu: 1.0,
        memory_mb: 5120,
        disk_mb: 51200,
        container_persistent: true,
        sandbox_dir: "/sb".into(),
        volumes: vec![],
        env: std::collections::BTreeMap::new(),
        forward_env: vec![],
        extra_args: vec![],
        network: true,
        run_as_host_user: false,
        mount_cwd_to_workspace: false,
        shm_size: "1g".into(),
    }
}

/// A tick configuration for tests: profiles alpha, beta and default, failure limit 2, an optional per-profile cap.
pub fn tick_config(per_profile_cap: Option<u32>) -> crate::board::TickConfig {
    crate::board::TickConfig {
        caps: crate::board::DispatchCaps { per_profile: per_profile_cap, ..crate::board::DispatchCaps::default() },
        profiles: ["alpha", "beta", "default"].map(String::from).into_iter().collect(),
        failure_limit: 2,
        ..crate::board::TickConfig::default()
    }
}

/// A process table tests control: the pids in the set are alive (with any start fingerprint).
#[derive(Debug, Default)]
pub struct FakeProcessProbe(Mutex<BTreeSet<u32>>);

impl FakeProcessProbe {
    pub fn set_alive(&self, pid: u32, alive: bool) {
        let mut g = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if alive {
            g.insert(pid);
        } else {
            g.remove(&pid);
        }
    }
}

impl crate::ports::ProcessProbe for FakeProcessProbe {
    fn start_fingerprint(&self, pid: u32) -> Option<u64> {
        Some(u64::from(pid))
    }

    fn is_alive(&self, pid: u32, _fingerprint: Option<u64>) -> bool {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(&pid)
    }
}

/// Drives a future to completion on the current thread; the fakes never return `Pending`.
pub fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}
