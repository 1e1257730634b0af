//! The gateway's cleanup loop: idle stop and the periodic orphan reaper, in a task of its own beside the dispatch
//! ticks, each pass bounded in time, one log line per container stopped or removed.
//!
//! "Idle since" lives in this loop's memory ([`IdleMemory`]), not on disk or in a label: a label cannot change on a
//! running container, and a remembered time from before a gateway restart was not observed by anyone while the
//! gateway was down, so after a restart the count starts over (a sandbox is stopped at most one period late, never
//! early). The engine's `ExecIDs` were no help either: they only list execs still known to the daemon.

use std::collections::BTreeSet;
use std::time::Duration;

use docker_adapter::DockerRuntime;
use domain::policy::folders::{FolderSeen, gone_folders};
use domain::policy::idle::{IdleMemory, IdleObservation, IdleSettings, IdleVerdict, plan_idle_stop};
use domain::policy::reaper::{ReapScope, reaper_max_age_secs};
use domain::ports::{Clock, ContainerRuntime};
use domain::service;

use crate::context::{Ctx, ProcProbe, SystemClock};

/// The longest one pass may take; a pass past it is abandoned (and logged) so the next one starts on time.
const PASS_BOUND: Duration = Duration::from_secs(60);
/// How long a stopping sandbox gets before the engine kills it (its keep-alive exits on SIGTERM at once).
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Everything the loop needs, owned, so it runs as its own task.
#[derive(Clone, Debug)]
pub struct Housekeeper {
    endpoint: String,
    home: std::path::PathBuf,
    /// The PostgreSQL board (`kanban.database_url`) and this host's id, when the board is not the home's file.
    board_url: Option<(String, String)>,
    /// `terminal.sandbox_dir`: this profile's folders live in `docker/<profile label>/` under it.
    sandbox_dir: String,
    profile_label: String,
    idle: IdleSettings,
    reaper_enabled: bool,
    scope: ReapScope,
    /// Between reaper passes.
    reap_every: Duration,
    /// Between idle observations; `None` when idle stop is off.
    idle_every: Option<Duration>,
}

/// `terminal.docker_reap_interval_seconds`, or, at 0, `max(60, terminal.lifetime_seconds)`: the reaper's threshold is
/// twice that, so a stale container waits at most half a threshold more.
pub fn reap_interval(ctx: &Ctx) -> Duration {
    let set = ctx.settings.terminal.docker_reap_interval_seconds.get();
    let secs = if set > 0 { set } else { ctx.settings.terminal.lifetime_seconds.get().max(60) };
    Duration::from_secs(secs)
}

/// The idle-stop settings of this context.
pub fn idle_settings(ctx: &Ctx) -> IdleSettings {
    let t = &ctx.settings.terminal;
    IdleSettings {
        default_secs: t.docker_idle_stop_seconds.get().cast_signed(),
        overrides: t.docker_idle_stop_seconds_overrides.clone(),
    }
}

impl Housekeeper {
    pub fn from_ctx(ctx: &Ctx) -> Self {
        let idle = idle_settings(ctx);
        let profile_label = crate::sandbox::profile_label(ctx);
        // A third of the shortest period, so a sandbox is stopped within a third of a period past its idle time;
        // at least a second.
        let idle_every = idle.period_for(Some(&profile_label)).map(|p| {
            let p = u64::try_from(p).unwrap_or(1);
            Duration::from_millis((p * 1000 / 3).clamp(1000, 60_000))
        });
        Self {
            endpoint: ctx.docker_endpoint(),
            home: ctx.home.clone(),
            board_url: ctx.database_url().map(|u| (u.to_owned(), ctx.host_id())),
            sandbox_dir: ctx.settings.terminal.sandbox_dir.clone(),
            scope: ReapScope {
                profile_label: Some(profile_label.clone()),
                max_age_secs: reaper_max_age_secs(Some(ctx.settings.terminal.lifetime_seconds.get().cast_signed())),
                host: Some(crate::context::hostname()),
            },
            profile_label,
            idle,
            reaper_enabled: ctx.settings.terminal.docker_orphan_reaper,
            reap_every: reap_interval(ctx),
            idle_every,
        }
    }

    /// Logs what the loop will do, once, at the gateway's start.
    pub fn log_config(&self) {
        let idle = match self.idle.period_for(Some(&self.profile_label)) {
            Some(p) => format!("idle stop after {p}s"),
            None => "idle stop off".to_owned(),
        };
        let reap = if self.reaper_enabled {
            format!("orphan reaper every {}s", self.reap_every.as_secs())
        } else {
            "orphan reaper off".to_owned()
        };
        tracing::info!("gateway cleanup: {idle}, {reap} (profile {})", self.profile_label);
    }

    /// Runs the loop as a task of its own; dropping the guard ends it.
    pub fn spawn(self) -> AbortOnDrop {
        self.log_config();
        AbortOnDrop(tokio::spawn(self.run()))
    }

    async fn run(self) {
        if self.idle_every.is_none() && !self.reaper_enabled {
            return;
        }
        let start = tokio::time::Instant::now();
        // The gateway reaped once at its start; the next sweep is a period later.
        let mut next_reap = start + self.reap_every;
        let mut next_idle = start;
        let mut memory = IdleMemory::new();
        let mut rt: Option<DockerRuntime> = None;
        loop {
            let wake = match self.idle_every {
                Some(_) if self.reaper_enabled => next_idle.min(next_reap),
                Some(_) => next_idle,
                None => next_reap,
            };
            tokio::time::sleep_until(wake).await;
            let now = tokio::time::Instant::now();
            let runtime = match &rt {
                Some(r) => r.clone(),
                None => match DockerRuntime::connect(&self.endpoint).await {
                    Ok(r) => {
                        rt = Some(r.clone());
                        r
                    }
                    Err(e) => {
                        tracing::warn!("gateway cleanup: {e}; trying again next pass");
                        memory.clear();
                        next_idle = now + self.idle_every.unwrap_or(self.reap_every);
                        next_reap = next_reap.max(next_idle);
                        continue;
                    }
                },
            };
            if let Some(every) = self.idle_every
                && now >= next_idle
            {
                match tokio::time::timeout(PASS_BOUND, self.idle_pass(&runtime, &memory)).await {
                    Ok(Ok(m)) => {
                        memory = m;
                        // For `sandbox ls`'s idle column: what this loop has seen, while it is fresh.
                        let pass_ms = i64::try_from(every.as_millis()).unwrap_or(i64::MAX);
                        crate::sandbox_cost::write_idle_since(&self.home, SystemClock.now(), pass_ms, &memory);
                    }
                    Ok(Err(e)) => {
                        tracing::warn!("gateway cleanup: idle check failed: {e}");
                        memory.clear();
                    }
                    Err(_) => {
                        tracing::warn!("gateway cleanup: idle check took over {}s; abandoned", PASS_BOUND.as_secs());
                        memory.clear();
                    }
                }
                next_idle = tokio::time::Instant::now() + every;
            }
            if self.reaper_enabled && now >= next_reap {
                if tokio::time::timeout(PASS_BOUND, self.reap_pass(&runtime)).await.is_err() {
                    tracing::warn!("gateway cleanup: orphan reaper took over {}s; abandoned", PASS_BOUND.as_secs());
                }
                next_reap = tokio::time::Instant::now() + self.reap_every;
            }
        }
    }

    /// Observes this profile's running sandboxes, stops those idle for their period; returns the new memory.
    async fn idle_pass(
        &self,
        rt: &dyn ContainerRuntime,
        memory: &IdleMemory,
    ) -> Result<IdleMemory, domain::ports::RuntimeError> {
        let listed = service::list_managed(rt, Some(&self.profile_label)).await?;
        let running: Vec<_> = listed.into_iter().filter(|c| c.state.is_live()).collect();
        let lists = service::join_all(running.iter().map(|c| rt.processes(&c.id))).await;
        let observations: Vec<IdleObservation> = running
            .iter()
            .zip(lists)
            .map(|(c, procs)| IdleObservation {
                id: c.id.clone(),
                name: c.name.clone(),
                profile_label: c.profile_label().map(str::to_owned),
                mode: c.label(domain::label::LABEL_MODE).map(str::to_owned),
                state: c.state.clone(),
                processes: procs.ok(),
            })
            .collect();
        let plan = plan_idle_stop(SystemClock.now(), &observations, memory, &self.idle);
        let mut memory = plan.memory.clone();
        for (d, idle_secs) in plan.to_stop() {
            // Look once more right before stopping: a command that started since the observation keeps it running.
            let again = rt.processes(&d.id).await.ok();
            let still_idle = again.is_some_and(|p| p.iter().all(|p| domain::policy::idle::is_keep_alive(&p.command)));
            memory.remove(&d.id);
            if !still_idle {
                continue;
            }
            match rt.stop(&d.id, STOP_GRACE).await {
                Ok(()) => tracing::info!(
                    "gateway cleanup: stopped idle sandbox {} ({}; idle {idle_secs}s, nothing but its keep-alive \
                     inside)",
                    d.name,
                    short(&d.id)
                ),
                Err(e) => tracing::warn!("gateway cleanup: could not stop idle sandbox {}: {e}", d.name),
            }
        }
        for d in &plan.decisions {
            if let IdleVerdict::IdleFor { idle_secs, period_secs } = d.verdict {
                tracing::debug!("gateway cleanup: {} idle {idle_secs}s of {period_secs}s", d.name);
            }
        }
        Ok(memory)
    }

    /// One orphan sweep, one line per container removed.
    async fn reap_pass(&self, rt: &dyn ContainerRuntime) {
        match service::reap(rt, SystemClock.now(), &self.scope, &ProcProbe, false).await {
            Ok(r) => {
                for o in &r.removed {
                    tracing::info!(
                        "gateway cleanup: removed stale sandbox {} ({}; {} {:?}, age {}s)",
                        o.name,
                        short(&o.id),
                        o.state,
                        o.reason,
                        o.age_secs
                    );
                }
                for (id, e) in &r.failed {
                    tracing::warn!("gateway cleanup: could not remove {}: {e}", short(id));
                }
            }
            Err(e) => tracing::warn!("gateway cleanup: orphan reaper failed: {e}"),
        }
        if let Err(e) = self.folders_pass(rt).await {
            tracing::warn!("gateway cleanup: folder sweep skipped: {e}");
        }
    }

    /// Removes this profile's sandbox folders that no container (in any state) claims any more, once untouched for
    /// the reaper's threshold; one line per folder.
    async fn folders_pass(&self, rt: &dyn ContainerRuntime) -> Result<(), domain::ports::RuntimeError> {
        let root =
            std::path::Path::new(self.sandbox_dir.trim_end_matches('/')).join("docker").join(&self.profile_label);
        let Ok(entries) = std::fs::read_dir(&root) else { return Ok(()) };
        let now = std::time::SystemTime::now();
        let seen: Vec<FolderSeen> = entries
            .flatten()
            .filter_map(|e| {
                // Only real folders: a symlink placed here is never followed, let alone removed through.
                let meta = e.path().symlink_metadata().ok().filter(std::fs::Metadata::is_dir)?;
                let age = now.duration_since(meta.modified().ok()?).unwrap_or_default();
                Some(FolderSeen {
                    name: e.file_name().to_str()?.to_owned(),
                    age_secs: i64::try_from(age.as_secs()).unwrap_or(i64::MAX),
                })
            })
            .collect();
        if seen.is_empty() {
            return Ok(());
        }
        // Listed after the folders were read: a sandbox created in between claims its folder in this listing.
        let listed = service::list_managed(rt, Some(&self.profile_label)).await?;
        let mut live: BTreeSet<String> = listed.iter().filter_map(|c| c.identity().map(str::to_owned)).collect();
        // A finished task's workspace is its output: it stays, container or not, until the task is archived or
        // removed from its board.
        live.extend(board_task_digests(&self.home, self.board_url.as_ref()));
        for gone in gone_folders(&seen, &live, self.scope.max_age_secs) {
            match std::fs::remove_dir_all(root.join(&gone.name)) {
                Ok(()) => tracing::info!(
                    "gateway cleanup: removed sandbox folder {} (its sandbox is gone; untouched {}s)",
                    root.join(&gone.name).display(),
                    gone.age_secs
                ),
                Err(e) => tracing::warn!("gateway cleanup: could not remove {}: {e}", root.join(&gone.name).display()),
            }
        }
        Ok(())
    }
}

/// The sandbox identity digests of every task on the boards of `home` that is not archived: their folders are kept.
/// An unreadable board keeps nothing extra (the sweep still needs the age and the missing container).
fn board_task_digests(home: &std::path::Path, board_url: Option<&(String, String)>) -> Vec<String> {
    use domain::ids::{ProfileName, TaskId};
    let server = board_url.map(|(url, host)| (url.as_str(), host.as_str()));
    let Ok(Some(store)) = crate::kanban::open_read_only_at(home, server) else { return Vec::new() };
    let boards = store.boards().unwrap_or_default();
    let slugs = boards.iter().filter_map(|b| domain::ids::BoardSlug::parse(&b.slug).ok());
    slugs
        .flat_map(|slug| store.tasks(&slug, None, None).unwrap_or_default())
        .filter(|t| t.status != domain::kanban::TaskStatus::Archived)
        .filter_map(|t| {
            let (task, profile) = (TaskId::parse(&t.id).ok()?, ProfileName::parse(t.assignee.as_deref()?).ok()?);
            Some(domain::sandbox::SandboxIdentity::new(task, profile).digest())
        })
        .collect()
}

fn short(id: &str) -> &str {
    &id[..12.min(id.len())]
}

/// Ends the loop's task when the gateway returns.
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
