//! `berth sandbox …` and `berth run`: acquire, exec, release and reap on the Docker Engine.

use std::io::Write;
use std::time::Duration;

use docker_adapter::DockerRuntime;
use domain::container::ContainerSummary;
use domain::ids::TaskId;
use domain::policy::cleanup::{CleanupPlan, ReleaseMode};
use domain::policy::reaper::{ReapScope, reaper_max_age_secs};
use domain::policy::reuse::is_candidate;
use domain::ports::{Clock, ContainerRuntime, ExecOutcome, ExecSpec, OutputSink, OutputStream};
use domain::sandbox::{HostFacts, SandboxIdentity, SandboxMode, build_create_spec, is_valid_env_name};
use domain::service::{self, AcquireRequest, ReapReport};
use serde_json::json;

use crate::cli::{RunArgs, SandboxCmd};
use crate::context::{Ctx, ProcProbe, SystemClock};
use crate::error::{Exit, Failure};
use crate::output;

/// How long a process waits for teardowns it started before it exits.
pub const TEARDOWN_WAIT: Duration = Duration::from_secs(15);

/// Connects to the engine, failing within the connect bound with one line naming the endpoint.
///
/// # Errors
/// An engine failure (exit 125).
pub async fn connect(ctx: &Ctx) -> Result<DockerRuntime, Failure> {
    let endpoint = ctx.docker_endpoint();
    let rt = DockerRuntime::connect(&endpoint).await?;
    // Remembered for `berth run` (see `connect_remembered`); written only when it changed.
    if let Some(id) = socket_identity(&endpoint) {
        let (cache, text) = (api_version_cache(ctx, &endpoint), format!("{id} {}", rt.api_version()));
        if read_small(&cache).is_none_or(|had| had != text) {
            write_atomically(&cache, &text);
        }
    }
    Ok(rt)
}

/// [`connect`] without the ping when this home already negotiated with the engine behind this very socket file:
/// the version is remembered with the socket's identity (device, inode, change time), and an engine that restarts,
/// is upgraded or is replaced makes a new socket, which misses. For `berth run`'s fast path, whose first request
/// the caller bounds by [`docker_adapter::CONNECT_TIMEOUT`] as the ping would have been.
///
/// # Errors
/// As [`connect`], on a miss.
pub async fn connect_remembered(ctx: &Ctx) -> Result<(DockerRuntime, bool), Failure> {
    let endpoint = ctx.docker_endpoint();
    if let Some(id) = socket_identity(&endpoint)
        && let Some(text) = read_small(&api_version_cache(ctx, &endpoint))
        && let Some((seen, version)) = text.trim().split_once(' ')
        && seen == id
        && let Ok(rt) = DockerRuntime::connect_at(&endpoint, version)
    {
        return Ok((rt, true));
    }
    Ok((connect(ctx).await?, false))
}

/// A small regular file's text; `None` for anything else (missing, a symlink, a directory, a FIFO, over 4 KiB).
fn read_small(path: &std::path::Path) -> Option<String> {
    crate::state_file::read_small(path, 4096)
}

/// `dev:inode:ctime` of a unix endpoint's socket file; `None` for TCP endpoints or a missing socket.
fn socket_identity(endpoint: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if !path.starts_with('/') {
        return None;
    }
    let m = std::fs::metadata(path).ok()?;
    Some(format!("{}:{}:{}.{}", m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

/// Where the engine's API version is remembered for `endpoint`: `<home>/cache/api-version-<hash>`.
fn api_version_cache(ctx: &Ctx, endpoint: &str) -> std::path::PathBuf {
    let hash = domain::sha256::hex_digest(endpoint.as_bytes());
    ctx.home.join("cache").join(format!("api-version-{}", hash.get(..12).unwrap_or("x")))
}

/// Writes `text` to `path` through a temporary file and a rename, so a concurrent reader sees all of it or none.
fn write_atomically(path: &std::path::Path, text: &str) {
    crate::state_file::write_atomically(path, text.as_bytes());
}

/// The identity of `task` under the active profile.
///
/// # Errors
/// A usage failure for an over-long task id.
pub fn identity(ctx: &Ctx, task: &str) -> Result<SandboxIdentity, Failure> {
    let task = TaskId::parse(task).map_err(Failure::usage_of)?;
    Ok(SandboxIdentity::new(task, ctx.profile.clone()).shared(&shared_key(ctx)))
}

/// `terminal.docker_shared_container_key` (empty when unset).
pub fn shared_key(ctx: &Ctx) -> String {
    ctx.settings.terminal.docker_shared_container_key.clone()
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

/// Whether the storage driver can enforce `--storage-opt size=` (overlay2 on XFS), cached per home and endpoint; an
/// engine that cannot answer counts as `false`.
async fn storage_opt_supported(ctx: &Ctx, rt: &DockerRuntime) -> bool {
    cached_probe(ctx, rt, "storage-opt", rt.supports_disk_quota(), false).await
}

/// Whether the engine can apply cgroup limits (cpu, memory, pids), asked once per process: hermes probes once per
/// process too, and an engine without the controllers would otherwise fail every create. An engine that cannot
/// answer counts as `true`.
async fn cgroup_limits_available(ctx: &Ctx, rt: &DockerRuntime) -> bool {
    static PROBED: tokio::sync::OnceCell<bool> = tokio::sync::OnceCell::const_new();
    *PROBED
        .get_or_init(|| async { cached_probe(ctx, rt, "cgroup-limits", rt.supports_cgroup_limits(), true).await })
        .await
}

/// An engine fact asked once per home and endpoint (an `info` call costs a round trip on every command otherwise),
/// kept in `<home>/cache/<what>-<endpoint hash>` as `yes` or `no`. The file is replaced whole (written beside it,
/// then renamed), so a process reading while another writes sees the old answer or the new one, never a torn one:
/// concurrent first commands once read a half-written file as `no`, built specs without limits and recreated each
/// other's sandboxes. Anything but `yes`/`no` counts as not cached; an engine that cannot answer gives `on_error`,
/// not cached.
async fn cached_probe(
    ctx: &Ctx,
    rt: &DockerRuntime,
    what: &str,
    probe: impl std::future::Future<Output = Result<bool, domain::ports::RuntimeError>>,
    on_error: bool,
) -> bool {
    let hash = domain::sha256::hex_digest(rt.endpoint().as_bytes());
    let cache = ctx.home.join("cache").join(format!("{what}-{}", hash.get(..12).unwrap_or("x")));
    match read_small(&cache).as_deref().map(str::trim) {
        Some("yes") => return true,
        Some("no") => return false,
        _ => {}
    }
    let Ok(answer) = probe.await else { return on_error };
    write_atomically(&cache, if answer { "yes" } else { "no" });
    answer
}

/// Builds the acquire request for `identity` from the settings; logs the spec's warnings.
///
/// # Errors
/// A failure when a host directory cannot be created.
pub async fn request(ctx: &Ctx, rt: &DockerRuntime, identity: SandboxIdentity) -> Result<AcquireRequest, Failure> {
    let settings = ctx.settings.sandbox();
    // Commands in the sandbox run as the invoking user, so files in mounted folders stay theirs.
    let user = Some(crate::process::user_spec());
    let host = HostFacts {
        user,
        cwd: std::env::current_dir().ok().map(|p| p.display().to_string()),
        storage_opt_supported: settings.disk_mb > 0 && storage_opt_supported(ctx, rt).await,
        owner: Some(crate::context::owner_label()),
        cgroup_limits_unavailable: !cgroup_limits_available(ctx, rt).await,
    };
    let (mode, name) = if settings.persist_across_processes {
        (SandboxMode::Persist, identity.persistent_name())
    } else {
        let nonce = format!("{:x}{:x}", std::process::id(), SystemClock.now().as_millis());
        (SandboxMode::Ephemeral, identity.ephemeral_name(&nonce))
    };
    let built = build_create_spec(&identity, mode, name, &settings, &host).map_err(Failure::usage_of)?;
    for w in &built.warnings {
        // The disk limit is unenforceable on most hosts; say so quietly.
        if w.contains("container_disk") { tracing::debug!("{w}") } else { tracing::warn!("{w}") }
    }
    // Nothing of berth's own (home, other sandboxes) and no engine socket reaches a sandbox, whatever the settings.
    crate::mounts::check_spec(ctx, &identity, &built.spec)?;
    for dir in &built.host_dirs {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::other(format!("cannot create sandbox directory {dir}: {e}")))?;
    }
    Ok(AcquireRequest {
        identity,
        spec: built.spec,
        persist_across_processes: settings.persist_across_processes,
        recreate_on_config_change: settings.recreate_on_config_change,
    })
}

static REAPER: service::ReaperGate = service::ReaperGate::new();

/// Runs the orphan reaper once per process before the first sandbox acquire, when enabled; never fails.
pub async fn maybe_reap(ctx: &Ctx, rt: &DockerRuntime) {
    let scope = ReapScope {
        profile_label: Some(profile_label(ctx)),
        max_age_secs: reaper_max_age_secs(Some(ctx.settings.terminal.lifetime_seconds.get().cast_signed())),
        host: Some(crate::context::hostname()),
    };
    let enabled = ctx.settings.terminal.docker_orphan_reaper;
    let swept = REAPER.run_once(enabled, rt, SystemClock.now(), &scope, &ProcProbe).await;
    match &swept {
        Some(Ok(r)) if !r.removed.is_empty() => {
            tracing::info!(
                "docker orphan reaper removed {} stale container(s) for profile {}",
                r.removed.len(),
                ctx.profile
            )
        }
        // A failing sweep never blocks the sandbox, but stale sandboxes leak while it fails: say so by default.
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
}

/// Writes exec output straight to our stdout and stderr as it arrives.
struct StdSink;

impl OutputSink for StdSink {
    fn write(&mut self, stream: OutputStream, bytes: &[u8]) {
        let _ = match stream {
            OutputStream::Stdout => std::io::stdout().lock().write_all(bytes).and_then(|()| std::io::stdout().flush()),
            OutputStream::Stderr => std::io::stderr().lock().write_all(bytes),
        };
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

/// The exec environment: forwarded host variables plus `-e` pairs.
fn exec_env(ctx: &Ctx, extra: &[String]) -> Result<Vec<String>, Failure> {
    let mut env = forwarded_env(ctx);
    for kv in extra {
        match kv.split_once('=') {
            Some((k, _)) if is_valid_env_name(k) => env.push(kv.clone()),
            _ => return Err(Failure::usage(format!("-e expects KEY=VALUE with a valid variable name, got {kv:?}"))),
        }
    }
    Ok(env)
}

/// `berth run`: returns the command's exit code (124 on timeout).
///
/// # Errors
/// A failure before the command ran (exit 125, or 2 for bad input).
pub async fn run(ctx: &Ctx, args: &RunArgs) -> Result<u8, Failure> {
    ctx.require_profile()?;
    let identity = identity(ctx, &args.task)?;
    let env = exec_env(ctx, &args.env)?;
    crate::run_io::check_tty(args.tty)?;
    let (rt, remembered) = connect_remembered(ctx).await?;
    // The fast path: the sandbox already runs under its deterministic name (one inspect). The orphan reaper runs
    // once per process before a sandbox is created, so only when that misses.
    let first_contact = async {
        if args.interactive || args.tty || !ctx.settings.terminal.docker_persist_across_processes {
            return Ok::<_, Failure>((request(ctx, &rt, identity).await?, None));
        }
        // The inspect of the deterministic name goes out first; the request is built while it is answered.
        let name = identity.persistent_name();
        let (inspected, req) = tokio::join!(rt.inspect(&name), request(ctx, &rt, identity));
        let req = req?;
        let found = if req.spec.name == name {
            service::attach_inspected(&req, inspected)?
        } else {
            service::attach_running(&rt, &req).await?
        };
        Ok((req, found))
    };
    let (req, found) = if remembered {
        // The first requests to an engine not pinged: bounded as the ping is, so a hung engine fails as fast.
        let bound = docker_adapter::CONNECT_TIMEOUT;
        tokio::time::timeout(bound, first_contact).await.map_err(|_| {
            Failure::from(domain::ports::RuntimeError::Unavailable {
                endpoint: rt.endpoint().to_owned(),
                message: format!("no answer within {}s; is the Docker daemon running?", bound.as_secs()),
            })
        })??
    } else {
        first_contact.await?
    };
    if found.is_none() {
        maybe_reap(ctx, &rt).await;
    }
    let timeout = args.timeout.unwrap_or(ctx.settings.terminal.timeout.get());
    let exec = ExecSpec {
        argv: args.argv.clone(),
        env,
        workdir: Some(args.workdir.clone().unwrap_or_else(|| req.spec.workdir.clone())),
        user: None,
        timeout: (timeout > 0).then(|| Duration::from_secs(timeout)),
    };
    // The marker finds this command's processes inside the sandbox if we are interrupted.
    let marker = format!("BERTH_RUN={}", crate::context::owner_label());
    let mut exec = exec;
    exec.env.push(marker.clone());
    let mut std_sink = StdSink;
    let mut sink = crate::exec_errors::StartFailureSink::new(&mut std_sink);
    // A throw-away sandbox carries a lease this process renews while it runs, for reapers on other hosts.
    let _lease = (!req.persist_across_processes).then(|| crate::lease::hold(ctx, &rt, &req.spec.name));
    // Input (and a TTY) are wired only when asked for or piped; the terminal is restored when `io` drops.
    let io = crate::run_io::attach(args.interactive, args.tty)?;
    let exec_run = async {
        match io {
            None => service::run_from(&rt, &req, found, &exec, &mut sink).await,
            Some(mut io) => {
                // Input cannot be replayed, so an exec with input is not retried the way `service::run` retries.
                let acquired = match found {
                    Some(a) => a,
                    None => service::acquire(&rt, &req).await?,
                };
                let outcome = rt.exec_io(&acquired.id, &exec, &mut sink, io.take()).await;
                drop(io);
                Ok((acquired, outcome?))
            }
        }
    };
    let result = tokio::select! {
        r = exec_run => r,
        code = interrupted() => {
            // Stop the command inside, and in opt-out mode remove the container this process made.
            let owner = (!req.persist_across_processes).then(crate::context::owner_label);
            stop_marked(ctx, &req.identity, &marker, owner.as_deref()).await;
            if owner.is_some() && !args.keep_files {
                remove_folder_bounded(ctx, &req.identity).await;
            }
            return Ok(code);
        }
    };
    if let Ok((acquired, _)) = &result {
        for note in &acquired.notes {
            tracing::warn!("{note}");
        }
        tracing::debug!("ran in {} ({})", acquired.name, acquired.action.as_str());
        if !req.persist_across_processes {
            let teardown = async {
                service::release(&rt, Some(&acquired.id), ReleaseMode::OptOut).await?;
                // A throw-away sandbox's folder goes with it, unless kept or still used (see `remove_for`).
                if !args.keep_files
                    && let Some(Err(e)) =
                        crate::host_folders::Folders::from_ctx(ctx).remove_for(&rt, &req.identity).await
                {
                    tracing::warn!("{e}");
                }
                Ok::<_, domain::ports::RuntimeError>(())
            };
            if tokio::time::timeout(TEARDOWN_WAIT, teardown).await.is_err() {
                tracing::warn!(
                    "teardown of {} did not finish within {}s; the reaper will remove it",
                    acquired.name,
                    TEARDOWN_WAIT.as_secs()
                );
            }
        }
    }
    match result?.1 {
        ExecOutcome::Exited(code) => {
            let code = sink.finish(code, args.argv.first().map_or("", String::as_str));
            Ok(u8::try_from(code).unwrap_or(Exit::FAILURE))
        }
        ExecOutcome::TimedOut => {
            eprintln!("berth: command timed out after {timeout}s and was killed");
            Ok(Exit::TIMEOUT)
        }
    }
}

/// Resolves on SIGINT (130) or SIGTERM (143).
async fn interrupted() -> u8 {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => Exit::INTERRUPTED,
        _ = term.recv() => Exit::TERMINATED,
    }
}

/// Kills the processes carrying `marker` in their environment inside `identity`'s sandboxes, then removes the
/// ephemeral ones owned by `owner` (when given). Best effort and bounded.
pub async fn stop_marked(ctx: &Ctx, identity: &SandboxIdentity, marker: &str, owner: Option<&str>) {
    let work = async {
        let rt = connect(ctx).await.ok()?;
        let listed = identity_containers(&rt, identity).await.ok()?;
        for c in &listed {
            // Inside the container's own pid namespace, by the exact marker entry (never by host pid).
            let _ = rt.kill_marked(&c.id, marker).await;
            if owner.is_some() && c.label(domain::label::LABEL_OWNER) == owner {
                let _ = service::release(&rt, Some(&c.id), ReleaseMode::Force).await;
            }
        }
        Some(())
    };
    if tokio::time::timeout(TEARDOWN_WAIT, work).await.is_err() {
        tracing::warn!("stopping the interrupted command did not finish in time");
    }
}

/// Removes `identity`'s folder after its throw-away sandbox went (see `Folders::remove_for`); bounded, best effort.
async fn remove_folder_bounded(ctx: &Ctx, identity: &SandboxIdentity) {
    let work = async {
        let rt = connect(ctx).await.ok()?;
        crate::host_folders::Folders::from_ctx(ctx).remove_for(&rt, identity).await
    };
    if let Ok(Some(Err(e))) = tokio::time::timeout(TEARDOWN_WAIT, work).await {
        tracing::warn!("{e}");
    }
}

pub fn summary_json(c: &ContainerSummary) -> serde_json::Value {
    json!({
        "id": c.id,
        "name": c.name,
        "task": c.task_label(),
        "profile": c.profile_label(),
        "state": c.state.as_str(),
        "created": c.created.to_rfc3339(),
        "mode": c.label(domain::label::LABEL_MODE),
        "labels": c.labels,
    })
}

/// The managed containers that belong to `identity` (any mode, hermes-made ones included).
pub(crate) async fn identity_containers(
    rt: &DockerRuntime,
    identity: &SandboxIdentity,
) -> Result<Vec<ContainerSummary>, Failure> {
    let listed = rt.list(&domain::ports::ListQuery { labels: identity.upstream_labels(), states: Vec::new() }).await?;
    Ok(listed
        .into_iter()
        .filter(|c| is_candidate(identity, c) || (c.identity() == Some(identity.digest().as_str())))
        .collect())
}

/// `berth sandbox …`.
///
/// # Errors
/// Usage (2) or engine (125) failures.
pub async fn command(ctx: &Ctx, cmd: &SandboxCmd) -> Result<u8, Failure> {
    match cmd {
        SandboxCmd::Ensure(t) => {
            ctx.require_profile()?;
            let identity = identity(ctx, &t.task)?;
            let rt = connect(ctx).await?;
            let req = request(ctx, &rt, identity).await?;
            maybe_reap(ctx, &rt).await;
            let got = output::with_progress(
                ctx.json,
                &format!("acquiring sandbox {}", req.spec.name),
                service::acquire(&rt, &req),
            )
            .await?;
            for note in &got.notes {
                tracing::warn!("{note}");
            }
            if ctx.json {
                output::json(
                    &json!({"id": got.id, "name": got.name, "action": got.action.as_str(), "labels": got.labels, "notes": got.notes}),
                );
            } else {
                output::line(&format!("{} {} ({})", got.action.as_str(), got.name, &got.id[..12.min(got.id.len())]));
            }
            Ok(Exit::OK)
        }
        SandboxCmd::Ls { all_profiles, size } => crate::sandbox_cost::ls(ctx, *all_profiles, *size).await,
        SandboxCmd::Top { id, all_profiles } => crate::sandbox_cost::top(ctx, id, *all_profiles).await,
        SandboxCmd::Logs { id, task, all_profiles, tail, follow } => {
            crate::sandbox_logs::logs(ctx, id.as_deref(), task.as_deref(), *all_profiles, *tail, *follow).await
        }
        SandboxCmd::Release { task, force, keep_files } => release(ctx, &task.task, *force, *keep_files).await,
        SandboxCmd::Rm { id: None, task, keep_files } => release(ctx, &task.task, true, *keep_files).await,
        SandboxCmd::Rm { id: Some(id), keep_files, .. } => {
            // A sandbox named by id or name is its task's: removed as `--task` would, with its folder.
            let rt = connect(ctx).await?;
            let found = crate::sandbox_logs::find(ctx, &rt, Some(id), None, false).await?;
            let Some(task) = found.labels.get(domain::label::LABEL_TASK) else {
                return Err(Failure::usage(format!(
                    "{id:?} is not a task's sandbox (no {} label)",
                    domain::label::LABEL_TASK
                )));
            };
            release(ctx, task, true, *keep_files).await
        }
        SandboxCmd::Reap { dry_run, all_profiles, max_age } => {
            let rt = connect(ctx).await?;
            let max_age_secs = max_age.unwrap_or_else(|| {
                reaper_max_age_secs(Some(ctx.settings.terminal.lifetime_seconds.get().cast_signed()))
            });
            let profile = profile_label(ctx);
            let host = Some(crate::context::hostname());
            let scope = ReapScope { profile_label: (!all_profiles).then_some(profile), max_age_secs, host };
            let sweep = service::reap(&rt, SystemClock.now(), &scope, &ProcProbe, *dry_run);
            let report = output::with_progress(ctx.json, "sweeping stale sandboxes", sweep).await?;
            // Then the host folders whose sandbox (in any state) and task are both gone, by the same age threshold;
            // a dry run counts the containers it would remove as gone, as the real sweep will find them.
            let reaped: std::collections::BTreeSet<String> = report.removed.iter().map(|o| o.id.clone()).collect();
            let folders = crate::host_folders::Folders::from_ctx(ctx)
                .sweep(&rt, scope.profile_label.as_deref(), max_age_secs, *dry_run, &reaped)
                .await?;
            print_reap(ctx, &report, &folders);
            let failed = !report.failed.is_empty() || folders.iter().any(|f| f.error.is_some());
            Ok(if failed { 1 } else { 0 })
        }
    }
}

async fn release(ctx: &Ctx, task: &str, force: bool, keep_files: bool) -> Result<u8, Failure> {
    let identity = identity(ctx, task)?;
    let rt = connect(ctx).await?;
    let persist = ctx.settings.terminal.docker_persist_across_processes;
    let targets = identity_containers(&rt, &identity).await?;
    let mut results = Vec::new();
    for c in &targets {
        // An ephemeral container always goes at release; a persistent one only when forced or in opt-out mode.
        let ephemeral = c.label(domain::label::LABEL_MODE) == Some("ephemeral");
        let mode = ReleaseMode::new(persist && !ephemeral, force);
        let plan =
            output::with_progress(ctx.json, &format!("releasing {}", c.name), service::release(&rt, Some(&c.id), mode))
                .await?;
        results.push((c, plan));
    }
    // The host folder goes with the last sandbox that used it, unless kept.
    let removed_any = results.iter().any(|(_, p)| !matches!(p, CleanupPlan::Keep { .. }));
    let folders = crate::host_folders::Folders::from_ctx(ctx);
    let host_dir = folders.of(&identity).display().to_string();
    let folder = if removed_any && !keep_files { folders.remove_for(&rt, &identity).await } else { None };
    if ctx.json {
        // One row per container; the folder's fate (one folder per identity) is on each row.
        let folder_json = match &folder {
            Some(Ok(note)) => json!({"path": host_dir, "note": note}),
            Some(Err(e)) => json!({"path": host_dir, "error": e}),
            None if keep_files => json!({"path": host_dir, "note": "kept (--keep-files)"}),
            None => serde_json::Value::Null,
        };
        let rows: Vec<serde_json::Value> = results
            .iter()
            .map(|(c, p)| json!({"id": c.id, "name": c.name, "action": match p { CleanupPlan::Keep { .. } => "kept", _ => "removed" }, "plan": p, "folder": folder_json}))
            .collect();
        output::json(&json!(rows));
    } else if results.is_empty() {
        output::line(&format!("no sandbox for task {task:?} (profile {})", ctx.profile));
    } else {
        for (c, p) in &results {
            match p {
                CleanupPlan::Keep { .. } => {
                    output::line(&format!("kept {} running (persist mode; use --force to remove)", c.name))
                }
                _ => output::line(&format!("removed {}", c.name)),
            }
        }
        if let Some(Ok(note)) = &folder {
            output::line(note);
        }
    }
    if let Some(Err(e)) = &folder {
        eprintln!("berth: {e}");
        return Ok(Exit::FAILURE);
    }
    Ok(Exit::OK)
}

fn print_reap(ctx: &Ctx, report: &ReapReport, folders: &[crate::host_folders::SweptFolder]) {
    if ctx.json {
        output::json(&json!({
            "dry_run": report.dry_run,
            "removed": report.removed,
            "skipped": report.skipped,
            "failed": report.failed.iter().map(|(id, e)| json!({"id": id, "error": e})).collect::<Vec<_>>(),
            "folders": folders,
        }));
        return;
    }
    let verb = if report.dry_run { "would remove" } else { "removed" };
    let mut rows: Vec<Vec<String>> = report
        .removed
        .iter()
        .map(|o| vec![o.name.clone(), verb.to_owned(), crate::reap_words::removed(o.reason, o.age_secs)])
        .collect();
    rows.extend(
        report.skipped.iter().map(|s| vec![s.name.clone(), "kept".to_owned(), crate::reap_words::kept(&s.reason)]),
    );
    rows.extend(
        report.failed.iter().map(|(id, e)| vec![id[..12.min(id.len())].to_owned(), "failed".to_owned(), e.clone()]),
    );
    rows.extend(folders.iter().map(|f| match &f.error {
        None => vec![f.path.clone(), verb.to_owned(), crate::reap_words::folder_gone(f.age_secs)],
        Some(e) => vec![f.path.clone(), "failed".to_owned(), e.clone()],
    }));
    if rows.is_empty() {
        output::line("nothing to reap");
        return;
    }
    output::table(&["CONTAINER", "ACTION", "REASON"], &rows);
}
