//! The engine connection and the engine facts a sandbox spec needs (cgroup limits, storage-opt support), with what
//! a home remembers of them under `<home>/cache/`, keyed by the engine's identity.

use std::sync::Arc;

use domain::ports::Engine;

use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::edge::open::{open_engine, open_engine_at};

/// Connects to the engine, failing within the connect bound with one line naming the endpoint.
///
/// # Errors
/// An engine failure (exit 125).
pub async fn connect(ctx: &Ctx) -> Result<Arc<dyn Engine>, Failure> {
    let endpoint = ctx.docker_endpoint();
    let rt = open_engine(&endpoint).await?;
    // Remembered for `berth run` (see `connect_remembered`); written only when it changed.
    if let Some(id) = socket_identity(&endpoint) {
        let (cache, text) = (api_version_cache(ctx, &endpoint), format!("{id} {}", rt.api_version()));
        if read_small(&cache).is_none_or(|had| had != text) {
            crate::edge::state_file::write_atomically(&cache, text.as_bytes());
        }
    }
    Ok(rt)
}

/// [`connect`] without the ping when this home already negotiated with the engine behind this very socket file:
/// the version is remembered with the socket's identity (device, inode, change time), and an engine that restarts,
/// is upgraded or is replaced makes a new socket, which misses. For `berth run`'s fast path, whose first request
/// the caller bounds by [`crate::edge::open::CONNECT_TIMEOUT`] as the ping would have been.
///
/// # Errors
/// As [`connect`], on a miss.
pub async fn connect_remembered(ctx: &Ctx) -> Result<(Arc<dyn Engine>, bool), Failure> {
    let endpoint = ctx.docker_endpoint();
    if let Some(id) = socket_identity(&endpoint)
        && let Some(text) = read_small(&api_version_cache(ctx, &endpoint))
        && let Some((seen, version)) = text.trim().split_once(' ')
        && seen == id
        && let Ok(rt) = open_engine_at(&endpoint, version)
    {
        return Ok((rt, true));
    }
    Ok((connect(ctx).await?, false))
}

/// A small regular file's text; `None` for anything else (missing, a directory, a FIFO, over 4 KiB).
fn read_small(path: &std::path::Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    (meta.is_file() && meta.len() <= 4096).then(|| std::fs::read_to_string(path).ok()).flatten()
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

/// Whether the storage driver can enforce `--storage-opt size=` (overlay2 on XFS), cached per home and endpoint; an
/// engine that cannot answer counts as `false`.
pub(crate) async fn storage_opt_supported(ctx: &Ctx, rt: &dyn Engine) -> bool {
    cached_probe(ctx, rt, "storage-opt", rt.supports_disk_quota(), false).await
}

/// Whether the engine can apply cgroup limits (cpu, memory, pids), asked once per process: hermes probes once per
/// process too, and an engine without the controllers would otherwise fail every create. An engine that cannot
/// answer counts as `true`.
pub(crate) async fn cgroup_limits_available(ctx: &Ctx, rt: &dyn Engine) -> bool {
    static PROBED: tokio::sync::OnceCell<bool> = tokio::sync::OnceCell::const_new();
    *PROBED
        .get_or_init(|| async { cached_probe(ctx, rt, "cgroup-limits", rt.supports_cgroup_limits(), true).await })
        .await
}

/// How long a cached engine fact is trusted at most.
const FACT_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

/// An engine fact asked once per home and engine (an `info` call costs a round trip on every command otherwise),
/// kept in `<home>/cache/<what>-<endpoint hash>` as `<engine> yes|no`, where `<engine>` is the identity of the
/// socket file the engine listens on (device, inode, change time, as for the remembered API version): an engine that
/// restarts (new cgroup controllers, another storage driver), is upgraded or is replaced by another one at the same
/// path makes a new socket, so a stale answer is never used — a stale "no cgroup limits" once created sandboxes with
/// no limits, a stale "storage-opt supported" failed every create. A TCP endpoint has no such identity: it is asked
/// once per process, never cached. The file is replaced whole (written beside it, then renamed), so a concurrent
/// reader sees the old answer or the new one, never a torn one. Anything else in the file (an older berth's bare
/// `yes`/`no`) counts as not cached; an engine that cannot answer gives `on_error`, not cached. An answer is also
/// asked again after [`FACT_TTL`]: a socket that systemd holds open across restarts of its service (Podman's socket
/// activation) keeps its identity, so the identity alone cannot bound how stale an answer gets there.
async fn cached_probe(
    ctx: &Ctx,
    rt: &dyn Engine,
    what: &str,
    probe: impl std::future::Future<Output = Result<bool, domain::ports::RuntimeError>>,
    on_error: bool,
) -> bool {
    // A fact berth can do without waits no longer than the ping did: an engine that answers its ping and hangs on
    // `info` fails the command's next call instead, and a busy one is asked again next time.
    let probe = async {
        tokio::time::timeout(docker_adapter::CONNECT_TIMEOUT, probe)
            .await
            .unwrap_or_else(|_| Err(domain::ports::RuntimeError::Timeout(format!("{what} probe"))))
    };
    let Some(engine) = socket_identity(rt.endpoint()) else { return probe.await.unwrap_or(on_error) };
    let hash = domain::sha256::hex_digest(rt.endpoint().as_bytes());
    let cache = ctx.home.join("cache").join(format!("{what}-{}", hash.get(..12).unwrap_or("x")));
    let fresh =
        std::fs::metadata(&cache).and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().is_ok_and(|age| age < FACT_TTL));
    if fresh
        && let Some(text) = read_small(&cache)
        && let Some((seen, answer)) = text.trim().rsplit_once(' ')
        && seen == engine
    {
        match answer {
            "yes" => return true,
            "no" => return false,
            _ => {}
        }
    }
    let Ok(answer) = probe.await else { return on_error };
    crate::edge::state_file::write_atomically(
        &cache,
        format!("{engine} {}", if answer { "yes" } else { "no" }).as_bytes(),
    );
    answer
}
