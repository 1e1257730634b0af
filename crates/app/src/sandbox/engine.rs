//! The engine for every sandbox command: connecting (its API version remembered per socket), a task's sandbox identity and create request (with the engine facts it needs, cached),
//! the reaper gate, forwarded secrets, and stopping a marked command inside a sandbox.

use std::time::Duration;

use domain::container::ContainerSummary;
use domain::ids::{ProfileName, TaskId};
use domain::policy::cleanup::ReleaseMode;
use domain::policy::reaper::{ReapScope, reaper_max_age_secs};
use domain::policy::reuse::is_candidate;
use domain::ports::Clock;
use domain::ports::Engine;
use domain::sandbox::{HostFacts, SandboxIdentity, SandboxMode, build_create_spec, is_valid_env_name};
use domain::service::{self, AcquireRequest};

use crate::edge::context::{Ctx, ProcProbe, SystemClock};
use crate::edge::error::Failure;
use crate::sandbox::connect::{cgroup_limits_available, storage_opt_supported};
pub use crate::sandbox::connect::{connect, connect_remembered};
use crate::sandbox::folders::shared_key;

/// How long a process waits for teardowns it started before it exits.
pub const TEARDOWN_WAIT: Duration = Duration::from_secs(15);

/// The identity of `task` under the active profile.
///
/// # Errors
/// A usage failure for an over-long task id.
pub fn identity(ctx: &Ctx, task: &str) -> Result<SandboxIdentity, Failure> {
    let task = TaskId::parse(task).map_err(Failure::usage_of)?;
    Ok(SandboxIdentity::new(task, ctx.profile.clone()).shared(&shared_key(ctx)).in_home(&ctx.home_id()))
}

/// The identity of `task` under `profile` in this home (a worker's task under its assignee).
pub fn identity_of(ctx: &Ctx, task: TaskId, profile: ProfileName) -> SandboxIdentity {
    SandboxIdentity::new(task, profile).shared(&shared_key(ctx)).in_home(&ctx.home_id())
}

/// The `hermes-profile` label this process's sandboxes carry: the profile's, or the shared key's form. The reaper
/// and `sandbox ls` scope by it.
pub fn profile_label(ctx: &Ctx) -> String {
    let key = shared_key(ctx);
    if key.is_empty() {
        domain::label::LabelValue::sanitize(ctx.profile.as_str()).as_str().to_owned()
    } else {
        domain::sandbox::shared_profile_label(&key).as_str().to_owned()
    }
}

/// Builds the acquire request for `identity` from the settings; logs the spec's warnings.
///
/// # Errors
/// A failure when a host directory cannot be created.
pub async fn request(ctx: &Ctx, rt: &dyn Engine, identity: SandboxIdentity) -> Result<AcquireRequest, Failure> {
    let mut settings = ctx.settings.sandbox();
    settings.egress = ctx.settings.egress_for(identity.profile.as_str());
    settings.credentials = ctx.settings.credentials_for(identity.profile.as_str());
    // Credentials without an allowlist are refused here, before any network, proxy or sandbox is made.
    settings.credentials.check(&settings.egress, &settings.forward_env).map_err(Failure::usage)?;
    let egress_route = match &settings.egress {
        domain::egress::EgressPolicy::Allow(_) => Some(crate::egress::ensure_route(ctx, rt, &settings.egress).await?),
        _ => None,
    };
    let credential_facts =
        if settings.credentials.is_empty() { None } else { Some(crate::egress::credentials::prepare(ctx).await?) };
    // Commands in the sandbox run as the invoking user, so files in mounted folders stay theirs.
    let user = Some(crate::edge::process::user_spec());
    // Both facts at once: each waits at most the connect bound (see `cached_probe`), so together no longer.
    let (storage_opt, cgroup_limits) = tokio::join!(
        async { settings.disk_mb > 0 && storage_opt_supported(ctx, rt).await },
        cgroup_limits_available(ctx, rt)
    );
    let host = HostFacts {
        user,
        cwd: std::env::current_dir().ok().map(|p| p.display().to_string()),
        storage_opt_supported: storage_opt,
        owner: Some(crate::edge::context::owner_label()),
        cgroup_limits_unavailable: !cgroup_limits,
        egress_route,
        credential_facts,
    };
    let (mode, name) = if settings.persist_across_processes {
        (SandboxMode::Persist, identity.persistent_name())
    } else {
        let nonce = format!("{:x}{:x}", std::process::id(), SystemClock.now().as_millis());
        (SandboxMode::Ephemeral, identity.ephemeral_name(&nonce))
    };
    let parser = crate::edge::open::extra_args_parser();
    let built = build_create_spec(&identity, mode, name, &settings, &host, parser).map_err(Failure::usage_of)?;
    for w in &built.warnings {
        // The disk limit is unenforceable on most hosts; say so quietly.
        if w.contains("container_disk") { tracing::debug!("{w}") } else { tracing::warn!("{w}") }
    }
    // Nothing of berth's own (home, other sandboxes) and no engine socket reaches a sandbox, whatever the settings.
    crate::sandbox::mounts::check_spec(ctx, &identity, &built.spec)?;
    crate::sandbox::mounts::check_volumes(ctx, rt, &identity, &built.spec).await?;
    for dir in &built.host_dirs {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::other(format!("cannot create sandbox directory {dir}: {e}")))?;
    }
    // So that any other home on this machine knows this folder as this home's and never mounts it.
    if !built.host_dirs.is_empty() {
        crate::sandbox::mounts::mark_sandboxes(std::path::Path::new(&ctx.settings.terminal.sandbox_dir), &ctx.home);
    }
    Ok(AcquireRequest {
        identity,
        spec: built.spec,
        persist_across_processes: settings.persist_across_processes,
        recreate_on_config_change: settings.recreate_on_config_change,
    })
}

/// Hands the real values of the profile's `terminal.docker_credentials` to the egress proxy of the sandbox
/// `acquired` (a no-op without credentials), before any command runs in it.
///
/// # Errors
/// One line when the proxy does not take them.
pub async fn admit_credentials(
    ctx: &Ctx,
    rt: &dyn Engine,
    req: &AcquireRequest,
    acquired: &service::Acquired,
) -> Result<(), Failure> {
    let credentials = ctx.settings.credentials_for(req.identity.profile.as_str());
    crate::egress::credentials::admit(ctx, rt, &credentials, req, acquired).await
}

/// Whether the profile of `req` has credentials (its sandbox must be acquired, and its proxy told, before a command).
pub fn has_credentials(ctx: &Ctx, req: &AcquireRequest) -> bool {
    !ctx.settings.credentials_for(req.identity.profile.as_str()).is_empty()
}

static REAPER: service::ReaperGate = service::ReaperGate::new();

/// Runs the orphan reaper once per process before the first sandbox acquire, when enabled; never fails. Returns how
/// many sandboxes it removed (for the gateway's metrics).
pub async fn maybe_reap(ctx: &Ctx, rt: &dyn Engine) -> usize {
    let scope = ReapScope {
        home: Some(ctx.home_id()),
        profile_label: Some(profile_label(ctx)),
        max_age_secs: reaper_max_age_secs(Some(ctx.settings.terminal.lifetime_seconds.get().cast_signed())),
        host: Some(crate::edge::context::hostname()),
    };
    let enabled = ctx.settings.terminal.docker_orphan_reaper;
    let swept = REAPER.run_once(enabled, rt, SystemClock.now(), &scope, &ProcProbe).await;
    if let Some(Ok(r)) = &swept {
        crate::sandbox::snapshots::reaped(rt, r.removed.iter().map(|o| o.name.clone()).collect()).await;
    }
    match &swept {
        Some(Ok(r)) if !r.removed.is_empty() => {
            tracing::info!(
                "docker orphan reaper removed {} stale container(s) for profile {}",
                r.removed.len(),
                ctx.profile
            )
        }
        // A failing sweep never blocks the sandbox, but stale sandboxes leak while it fails: say so by default.
        // An engine that does not answer fails the command's own next call, which says so: one line, not two.
        Some(Err(e @ domain::ports::RuntimeError::Unavailable { .. })) => tracing::debug!("orphan reaper failed: {e}"),
        Some(Err(e)) => tracing::warn!("orphan reaper failed: {e}"),
        _ => {}
    }
    if let Some(Ok(r)) = &swept
        && let Some((id, e)) = r.failed.first()
    {
        tracing::warn!(
            "orphan reaper could not remove {} container(s), first {}: {e}",
            r.failed.len(),
            &id[..12.min(id.len())]
        );
    }
    match swept {
        Some(Ok(r)) => r.removed.len(),
        _ => 0,
    }
}

/// Forwarded host variables (`terminal.docker_forward_env`) as `KEY=VALUE` pairs for one exec.
pub fn forwarded_env(ctx: &Ctx) -> Vec<String> {
    let mut env = Vec::new();
    for name in &ctx.settings.terminal.docker_forward_env {
        if !is_valid_env_name(name) {
            tracing::warn!("skipping docker_forward_env entry {name:?}: not a valid variable name");
        } else if let Some(v) = ctx.env.get(name) {
            env.push(format!("{name}={v}"));
        }
    }
    env
}

/// Kills the processes carrying `marker` in their environment inside `identity`'s sandboxes, then removes the
/// ephemeral ones owned by `owner` (when given). Best effort and bounded.
pub async fn stop_marked(ctx: &Ctx, identity: &SandboxIdentity, marker: &str, owner: Option<&str>) {
    let work = async {
        let rt = connect(ctx).await.ok()?;
        let listed = identity_containers(&*rt, identity).await.ok()?;
        for c in &listed {
            // Inside the container's own pid namespace, by the exact marker entry (never by host pid).
            let _ = rt.kill_marked(&c.id, marker).await;
            if owner.is_some() && c.label(domain::label::LABEL_OWNER) == owner {
                let _ = service::release(&*rt, Some(&c.id), ReleaseMode::Force).await;
            }
        }
        Some(())
    };
    if tokio::time::timeout(TEARDOWN_WAIT, work).await.is_err() {
        tracing::warn!("stopping the interrupted command did not finish in time");
    }
}

/// Kills the command carrying `marker` in `identity`'s sandboxes after the engine connection broke under it (the
/// exec goes on inside the container without its caller), asking again on a fresh connection until the engine
/// answers or `patience` has passed; whether the kill is confirmed: the kill ran in every running sandbox of the
/// identity and left none of the marked processes (or their descendants). Only then may the task run again.
pub async fn kill_marked_confirmed(ctx: &Ctx, identity: &SandboxIdentity, marker: &str, patience: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + patience;
    let mut pause = Duration::from_millis(250);
    loop {
        match kill_marked_once(ctx, identity, marker).await {
            Ok(()) => return true,
            Err(e) => tracing::debug!("killing the interrupted command: {}", e.message),
        }
        if tokio::time::Instant::now() + pause > deadline {
            return false;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// One try of [`kill_marked_confirmed`] on a fresh connection (the broken one may count the engine as stalled).
async fn kill_marked_once(ctx: &Ctx, identity: &SandboxIdentity, marker: &str) -> Result<(), Failure> {
    use domain::container::ContainerState;
    let rt = connect(ctx).await?;
    for c in identity_containers(&*rt, identity).await? {
        // A stopped sandbox runs nothing; a removed one neither.
        if !matches!(c.state, ContainerState::Running | ContainerState::Paused | ContainerState::Restarting) {
            continue;
        }
        match rt.kill_marked(&c.id, marker).await {
            Ok(()) | Err(domain::ports::RuntimeError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The managed containers that belong to `identity` (any mode, hermes-made ones included).
pub(crate) async fn identity_containers(
    rt: &dyn Engine,
    identity: &SandboxIdentity,
) -> Result<Vec<ContainerSummary>, Failure> {
    let listed = rt.list(&domain::ports::ListQuery { labels: identity.upstream_labels(), states: Vec::new() }).await?;
    Ok(listed.into_iter().filter(|c| is_candidate(identity, c) || identity.owns(c)).collect())
}
