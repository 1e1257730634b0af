//! The gateway's cleanup loop: idle stop and the periodic orphan reaper, in a task of its own beside the dispatch
//! ticks, each pass bounded in time, one log line per container stopped or removed.
//!
//! "Idle since" lives in this loop's memory ([`IdleMemory`]), not on disk or in a label: a label cannot change on a
//! running container, and a remembered time from before a gateway restart was not observed by anyone while the
//! gateway was down, so after a restart the count starts over (a sandbox is stopped at most one period late, never
//! early). The engine's `ExecIDs` were no help either: they only list execs still known to the daemon.

use std::sync::Arc;
use std::time::Duration;

use domain::policy::idle::{IdleMemory, IdleObservation, IdleSettings, IdleVerdict, plan_idle_stop};
use domain::policy::reaper::{ReapScope, reaper_max_age_secs};
use domain::ports::Clock;
use domain::ports::Engine;
use domain::service;

use crate::edge::context::{Ctx, ProcProbe, SystemClock};
use crate::sandbox::STOP_GRACE;
use crate::web::metrics;

/// The longest one pass may take; a pass past it is abandoned (and logged) so the next one starts on time.
const PASS_BOUND: Duration = Duration::from_secs(60);

/// Everything the loop needs, owned, so it runs as its own task.
#[derive(Clone, Debug)]
pub struct Housekeeper {
    endpoint: String,
    home: std::path::PathBuf,
    /// Sandbox folders (`terminal.sandbox_dir`): this profile's live in `docker/<profile label>/` under it.
    folders: crate::sandbox::folders::Folders,
    profile_label: String,
    /// This home's `berth.home` digest: idle stop and the reaper touch only its sandboxes (and unlabelled ones).
    home_id: String,
    idle: IdleSettings,
    /// `terminal.docker_suspend_after_seconds` (and its overrides), as idle stop's settings.
    suspend: IdleSettings,
    /// `terminal.docker_snapshot_keep`.
    snapshot_keep: usize,
    reaper_enabled: bool,
    /// `kanban.retention_days` in seconds (`None`: finished tasks' output is kept until archived).
    retention: Option<i64>,
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

/// The automatic suspend's settings of this context, in idle stop's shape.
pub fn suspend_settings(ctx: &Ctx) -> IdleSettings {
    let t = &ctx.settings.terminal;
    IdleSettings {
        default_secs: t.docker_suspend_after_seconds.get().cast_signed(),
        overrides: t.docker_suspend_after_seconds_overrides.clone(),
    }
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
        let suspend = suspend_settings(ctx);
        let profile_label = crate::sandbox::profile_label(ctx);
        // A third of the shortest period of any profile (idle stop's or suspend's), so a sandbox is stopped or
        // suspended within a third of a period past its idle time; at least a second.
        let shortest = [idle.shortest_period(), suspend.shortest_period()].into_iter().flatten().min();
        let idle_every = shortest.map(|p| {
            let p = u64::try_from(p).unwrap_or(1);
            Duration::from_millis((p * 1000 / 3).clamp(1000, 60_000))
        });
        Self {
            endpoint: ctx.docker_endpoint(),
            home: ctx.home.clone(),
            folders: crate::sandbox::folders::Folders::from_ctx(ctx),
            scope: ReapScope {
                home: Some(ctx.home_id()),
                profile_label: Some(profile_label.clone()),
                max_age_secs: reaper_max_age_secs(Some(ctx.settings.terminal.lifetime_seconds.get().cast_signed())),
                host: Some(crate::edge::context::hostname()),
            },
            profile_label,
            home_id: ctx.home_id(),
            idle,
            suspend,
            snapshot_keep: crate::sandbox::snapshots::keep_of(ctx),
            reaper_enabled: ctx.settings.terminal.docker_orphan_reaper,
            retention: crate::board::retention::retention_secs(ctx),
            reap_every: reap_interval(ctx),
            idle_every,
        }
    }

    /// Logs what the loop will do, once, at the gateway's start.
    pub fn log_config(&self) {
        let idle = match (self.idle.period_for(None), self.idle.overrides.is_empty()) {
            (Some(p), true) => format!("idle stop after {p}s"),
            (None, true) => "idle stop off".to_owned(),
            (p, false) => {
                let over: Vec<String> = self.idle.overrides.iter().map(|(k, v)| format!("{k} {v}s")).collect();
                let default = p.map_or_else(|| "off".to_owned(), |p| format!("{p}s"));
                format!("idle stop after {default} ({})", over.join(", "))
            }
        };
        let reap = if self.reaper_enabled {
            format!("orphan reaper every {}s", self.reap_every.as_secs())
        } else {
            "orphan reaper off".to_owned()
        };
        let retention = match self.retention {
            Some(s) => format!("finished tasks' output kept {}", crate::board::retention::span(s)),
            None => "finished tasks' output kept until archived".to_owned(),
        };
        let suspend = match self.suspend.period_for(None) {
            Some(p) => format!(", suspend after {p}s idle or stopped"),
            None if self.suspend.any_enabled() => ", suspend per profile".to_owned(),
            None => String::new(),
        };
        tracing::info!("gateway cleanup: {idle}{suspend}, {reap}, {retention} (profile {})", self.profile_label);
    }

    /// Runs the loop as a task of its own; dropping the guard ends it.
    pub fn spawn(self) -> AbortOnDrop {
        self.log_config();
        AbortOnDrop(tokio::spawn(self.run()))
    }

    async fn run(self) {
        let start = tokio::time::Instant::now();
        // The gateway reaped once at its start; the next sweep is a period later.
        let mut next_reap = start + self.reap_every;
        let mut next_idle = start;
        let mut memory = IdleMemory::new();
        let mut rt: Option<Arc<dyn Engine>> = None;
        loop {
            let wake = match self.idle_every {
                // The reap pass also applies retention, so it is scheduled even with the reaper off.
                Some(_) => next_idle.min(next_reap),
                None => next_reap,
            };
            tokio::time::sleep_until(wake).await;
            let now = tokio::time::Instant::now();
            let runtime = match &rt {
                Some(r) => r.clone(),
                None => match crate::edge::open::open_engine(&self.endpoint).await {
                    Ok(r) => {
                        rt = Some(r.clone());
                        r
                    }
                    Err(e) => {
                        tracing::warn!("gateway cleanup: {e}; trying again next pass");
                        // Retention is files on this host: it goes on without the engine (only files a sandbox's
                        // root user left need it, and they wait for the next pass).
                        if now >= next_reap {
                            self.retention_pass(None).await;
                            next_reap = now + self.reap_every;
                        }
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
                match tokio::time::timeout(PASS_BOUND, self.idle_pass(&*runtime, &memory)).await {
                    Ok(Ok(m)) => {
                        memory = m;
                        // For `sandbox ls`'s idle column: what this loop has seen, while it is fresh.
                        let pass_ms = i64::try_from(every.as_millis()).unwrap_or(i64::MAX);
                        crate::sandbox::cost::write_idle_since(&self.home, SystemClock.now(), pass_ms, &memory);
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
            if now >= next_reap {
                if tokio::time::timeout(PASS_BOUND, self.reap_pass(&*runtime)).await.is_err() {
                    tracing::warn!("gateway cleanup: orphan reaper took over {}s; abandoned", PASS_BOUND.as_secs());
                }
                next_reap = tokio::time::Instant::now() + self.reap_every;
            }
        }
    }

    /// Observes the running sandboxes of every profile of this home (each profile's period from the overrides), stops
    /// those idle for their period; returns the new memory.
    async fn idle_pass(&self, rt: &dyn Engine, memory: &IdleMemory) -> Result<IdleMemory, domain::ports::RuntimeError> {
        let mut listed = service::list_managed(rt, None, Some(&self.home_id)).await?;
        // A sandbox without a home label (hermes-made, or from a berth before the label) may be anyone's on this
        // engine: only those of the gateway's profile and of the profiles this home has are this gateway's to stop.
        let mine = self.home_profile_labels();
        listed.retain(|c| c.home().is_some() || c.profile_label().is_some_and(|p| mine.contains(p)));
        let suspended = self.suspend_stopped(rt, &listed).await;
        let running: Vec<_> = listed.into_iter().filter(|c| c.state.is_live()).collect();
        let lists = service::join_all(running.iter().map(|c| rt.processes(&c.id))).await;
        let observations: Vec<IdleObservation> = running
            .iter()
            .zip(lists)
            .map(|(c, procs)| IdleObservation {
                id: c.id.clone(),
                name: c.name.clone(),
                // Overrides are per profile: a shared container key's sandbox carries the key's form in
                // `hermes-profile`, its profile in `berth.profile`.
                profile_label: c.made_by_profile().map(str::to_owned),
                mode: c.label(domain::label::LABEL_MODE).map(str::to_owned),
                state: c.state.clone(),
                processes: procs.ok(),
            })
            .collect();
        let now = SystemClock.now();
        let plan = plan_idle_stop(now, &observations, memory, &self.idle);
        // Suspend's count of idle time is idle stop's: one memory serves both (each keeps what it saw idle, from the
        // same previous memory, so the two agree on every sandbox both count).
        let suspend_plan = plan_idle_stop(now, &observations, memory, &self.suspend);
        let mut memory = plan.memory.clone();
        memory.extend(suspend_plan.memory.clone());
        let mut gone = suspended;
        for (d, idle_secs) in suspend_plan.to_stop() {
            memory.remove(&d.id);
            let Some(c) = running.iter().find(|c| c.id == d.id) else { continue };
            // `suspend_container` looks once more right before: a command that started since keeps it running.
            match crate::sandbox::snapshots::suspend_container(self.snapshot_keep, rt, c).await {
                Ok(done) => {
                    gone.insert(d.id.clone());
                    tracing::info!(
                        "gateway cleanup: suspended idle sandbox {} ({}; idle {idle_secs}s; snapshot {})",
                        d.name,
                        short(&d.id),
                        done.snapshot.name
                    );
                }
                Err(e) => tracing::info!("gateway cleanup: did not suspend idle sandbox {}: {}", d.name, e.message),
            }
        }
        for (d, idle_secs) in plan.to_stop() {
            if gone.contains(&d.id) {
                continue;
            }
            // Look once more right before stopping: a command that started since the observation keeps it running.
            let again = rt.processes(&d.id).await.ok();
            let still_idle = again.is_some_and(|p| p.iter().all(|p| domain::policy::idle::is_keep_alive(&p.command)));
            memory.remove(&d.id);
            if !still_idle {
                continue;
            }
            match rt.stop(&d.id, STOP_GRACE).await {
                Ok(()) => {
                    metrics::count_idle_stopped();
                    tracing::info!(
                        "gateway cleanup: stopped idle sandbox {} ({}; idle {idle_secs}s, nothing but its keep-alive \
                     inside)",
                        d.name,
                        short(&d.id)
                    );
                }
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

    /// Suspends the stopped persistent sandboxes that have been stopped for their suspend period (by the engine's
    /// `FinishedAt`); returns their ids.
    async fn suspend_stopped(
        &self,
        rt: &dyn Engine,
        listed: &[domain::container::ContainerSummary],
    ) -> std::collections::BTreeSet<String> {
        let mut done = std::collections::BTreeSet::new();
        if !self.suspend.any_enabled() {
            return done;
        }
        let now = SystemClock.now();
        for c in listed.iter().filter(|c| c.state == domain::container::ContainerState::Exited) {
            let Some(period) = self.suspend.period_for(c.made_by_profile()) else { continue };
            if c.label(domain::label::LABEL_MODE) == Some("ephemeral") || c.identity().is_none() {
                continue;
            }
            let Ok(d) = rt.inspect(&c.id).await else { continue };
            let Some(finished) = d.finished_at() else { continue };
            let stopped_secs = now.secs_since(finished).floor() as i64;
            if stopped_secs < period {
                continue;
            }
            match crate::sandbox::snapshots::suspend_container(self.snapshot_keep, rt, c).await {
                Ok(s) => {
                    done.insert(c.id.clone());
                    tracing::info!(
                        "gateway cleanup: suspended stopped sandbox {} ({}; stopped {stopped_secs}s; snapshot {})",
                        c.name,
                        short(&c.id),
                        s.snapshot.name
                    );
                }
                Err(e) => {
                    tracing::warn!("gateway cleanup: could not suspend stopped sandbox {}: {}", c.name, e.message)
                }
            }
        }
        done
    }

    /// The profile labels of this home: the gateway's (or its shared key's) and every profile folder's.
    fn home_profile_labels(&self) -> std::collections::BTreeSet<String> {
        let dirs = std::fs::read_dir(self.home.join("profiles")).into_iter().flatten().filter_map(Result::ok);
        let names =
            dirs.filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).filter_map(|e| e.file_name().into_string().ok());
        let mut labels: std::collections::BTreeSet<String> =
            names.map(|n| domain::label::LabelValue::sanitize(&n).as_str().to_owned()).collect();
        labels.insert(self.profile_label.clone());
        labels
    }

    /// One orphan sweep, one line per container removed.
    async fn reap_pass(&self, rt: &dyn Engine) {
        if self.reaper_enabled {
            self.orphans_pass(rt).await;
        }
        self.retention_pass(Some(rt)).await;
    }

    /// Finished tasks' expired output (workspace folders, logs): removed, reported in one line per pass.
    async fn retention_pass(&self, rt: Option<&dyn Engine>) {
        let kept = match self.retention {
            Some(s) => format!("kept {}", crate::board::retention::span(s)),
            None => "kept until archived".to_owned(),
        };
        let mut plan = match crate::board::retention::plan(&self.folders, SystemClock.now(), self.retention) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("gateway cleanup: retention ({kept}) skipped: {e}");
                return;
            }
        };
        crate::board::retention::apply(&self.folders, rt, &mut plan).await;
        let (failed, done): (Vec<_>, Vec<_>) = plan.iter().partition(|p| p.error.is_some());
        let folders = done.iter().filter(|p| p.folder.is_some()).count();
        let logs = done.iter().filter(|p| !p.logs.is_empty()).count();
        let tasks: Vec<&str> = done.iter().map(|p| p.task.as_str()).collect();
        let mut line = format!(
            "gateway cleanup: retention ({kept}): removed the output of {} finished task(s) ({folders} workspace \
             folder(s), {logs} log(s))",
            done.len()
        );
        if !tasks.is_empty() {
            line.push_str(&format!(": {}", tasks.join(", ")));
        }
        if let Some(first) = failed.first() {
            line.push_str(&format!(
                "; {} failed, first {}: {}",
                failed.len(),
                first.task,
                first.error.as_deref().unwrap_or("")
            ));
            tracing::warn!("{line}");
        } else {
            tracing::info!("{line}");
        }
    }

    /// The orphan reaper and the sweep of gone sandboxes' folders.
    async fn orphans_pass(&self, rt: &dyn Engine) {
        match service::reap(rt, SystemClock.now(), &self.scope, &ProcProbe, false).await {
            Ok(r) => {
                metrics::count_reaped(r.removed.len());
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
                // A reaped sandbox's snapshots go with it.
                crate::sandbox::snapshots::reaped(rt, r.removed.iter().map(|o| o.name.clone()).collect()).await;
            }
            Err(e) => tracing::warn!("gateway cleanup: orphan reaper failed: {e}"),
        }
        if let Err(e) = self.folders_pass(rt).await {
            tracing::warn!("gateway cleanup: folder sweep skipped: {e}");
        }
    }

    /// Removes this profile's sandbox folders that no container (in any state) claims and no task on a board owns,
    /// once untouched for the reaper's threshold; one line per folder.
    async fn folders_pass(&self, rt: &dyn Engine) -> Result<(), domain::ports::RuntimeError> {
        let swept = self
            .folders
            .sweep(rt, Some(&self.profile_label), self.scope.max_age_secs, false, &Default::default())
            .await?;
        for f in swept {
            match f.error {
                None => {
                    metrics::count_folders_removed(1);
                    tracing::info!(
                        "gateway cleanup: removed sandbox folder {} (its sandbox is gone; untouched {}s)",
                        f.path,
                        f.age_secs
                    );
                }
                Some(e) => tracing::warn!("gateway cleanup: could not remove {}: {e}", f.path),
            }
        }
        Ok(())
    }
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
