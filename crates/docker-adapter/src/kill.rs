//! Killing a timed-out exec and everything it started from inside the container (where `host_kill` cannot).
//!
//! Every exec with a timeout carries a marker variable (`BERTH_EXEC=<nonce>`) that its children inherit; on timeout
//! an exec of POSIX `sh`, `tr`, `grep` and `kill` in the same container kills every process whose environment holds
//! that exact entry. It uses no host pid: it is the way when berth cannot see the container's processes as the
//! container's (itself in a container with the engine's socket mounted, where the engine's pids belong to another
//! namespace, or a remote engine).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use domain::ports::{CapturedOutput, ContainerRuntime, ExecSpec};

use crate::DockerRuntime;

/// The variable that marks a timed exec's processes.
pub(crate) const EXEC_MARKER_VAR: &str = "BERTH_EXEC";

/// How long the in-container kill may take.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// Kills, as root, every process in the container whose environment has the line `$1` exactly, in rounds until a
/// round finds none (a process forking while the sweep runs is caught by the next round). Its own shell does not
/// carry the marker: it arrives as an argument, never in the environment.
const KILL_SCRIPT: &str = r#"m="$1"; n=0
while [ "$n" -lt 20 ]; do
  found=
  for d in /proc/[0-9]*; do
    p="${d#/proc/}"
    [ "$p" = "$$" ] && continue
    if tr '\000' '\n' < "$d/environ" 2>/dev/null | grep -qxF -e "$m"; then kill -KILL "$p" 2>/dev/null; found=1; fi
  done
  [ -z "$found" ] && exit 0
  n=$((n+1))
done
exit 1"#;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh `BERTH_EXEC=<nonce>` entry, unique per exec in this process and across processes on this host.
pub(crate) fn new_marker() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{EXEC_MARKER_VAR}={:x}-{nanos:x}-{n}", std::process::id())
}

/// Kills every process carrying `marker` (a whole `KEY=VALUE` environment entry) inside `container`.
///
/// # Errors
/// The engine's error when the kill exec cannot run.
pub(crate) async fn kill_marked(
    rt: &DockerRuntime,
    container: &str,
    marker: &str,
) -> Result<(), domain::ports::RuntimeError> {
    let spec = ExecSpec {
        argv: vec!["sh".into(), "-c".into(), KILL_SCRIPT.into(), "sh".into(), marker.into()],
        user: Some("0".into()),
        timeout: None,
        ..ExecSpec::default()
    };
    match tokio::time::timeout(KILL_TIMEOUT, Box::pin(rt.exec(container, &spec, &mut CapturedOutput::default()))).await
    {
        Ok(res) => res.map(|_| ()),
        Err(_) => Err(domain::ports::RuntimeError::Timeout(format!("kill in {container}"))),
    }
}
