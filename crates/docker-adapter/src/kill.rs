//! Killing a timed-out exec and everything it started when `host_kill` cannot (a remote engine, a user who may not
//! signal the sandbox's processes).
//!
//! Every exec with a timeout carries a marker variable (`BERTH_EXEC=<nonce>`) that its children inherit; on timeout
//! a one-shot helper container joins the sandbox's process namespace (`--pid container:<sandbox>`) and kills every
//! process whose environment holds that exact entry. The helper runs from the sandbox's image, by its id: the image's
//! own POSIX `sh`, `tr`, `grep` and `kill`, which no task can change (a task writes the sandbox's own layer, never
//! its image), not the sandbox's files, which a task may have replaced. It uses no host pid and no host file, so it
//! works for a remote engine too; it has no network and only the capabilities the kill needs.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, RemoveContainerOptions, StartContainerOptions, WaitContainerOptions,
};
use futures_util::StreamExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use domain::ports::{MarkedKill, RuntimeError};

use crate::DockerRuntime;

/// The variable that marks a timed exec's processes.
pub(crate) const EXEC_MARKER_VAR: &str = "BERTH_EXEC";

/// How long the in-container kill may take.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// Kills, as root, every process in the namespace whose environment has the line `$1` exactly, and every descendant
/// of one (a child started with `env -i` dropped the marker), in rounds until a round finds none: each round freezes
/// the marked processes, then their descendants as they are found (a frozen process forks no more), then kills them
/// all. Its own shell does not carry the marker: it arrives as an argument, never in the environment.
const KILL_SCRIPT: &str = r#"m="$1"; n=0
while [ "$n" -lt 20 ]; do
  all=" "
  for d in /proc/[0-9]*; do
    p="${d#/proc/}"
    [ "$p" = "$$" ] && continue
    if tr '\000' '\n' < "$d/environ" 2>/dev/null | grep -qxF -e "$m"; then kill -STOP "$p" 2>/dev/null; all="$all$p "; fi
  done
  [ "$all" = " " ] && exit 0
  grew=1
  while [ -n "$grew" ]; do
    grew=
    for d in /proc/[0-9]*; do
      p="${d#/proc/}"
      case "$all" in *" $p "*) continue ;; esac
      read -r s < "$d/stat" 2>/dev/null || continue
      set -- ${s##*) }
      case "$all" in *" $2 "*) kill -STOP "$p" 2>/dev/null; all="$all$p "; grew=1 ;; esac
    done
  done
  for p in $all; do kill -KILL "$p" 2>/dev/null; done
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

/// Kills every process carrying `marker` (a whole `KEY=VALUE` environment entry) in `container`'s process namespace,
/// from a helper container of the sandbox's image (see the module); the helper is removed whatever happens.
///
/// # Errors
/// The engine's error when the helper cannot run, or a timeout.
pub(crate) async fn kill_marked(
    rt: &DockerRuntime,
    container: &str,
    marker: &str,
) -> Result<(), domain::ports::RuntimeError> {
    let inspected = tokio::time::timeout(KILL_TIMEOUT, rt.docker.inspect_container(container, None)).await;
    let c = match inspected {
        Ok(r) => r.map_err(|e| rt.map_err("inspect", container, e))?,
        Err(_) => return Err(domain::ports::RuntimeError::Timeout(format!("inspect {container}"))),
    };
    let (Some(id), Some(image)) = (c.id, c.image) else {
        return Err(domain::ports::RuntimeError::Api { status: 500, message: format!("{container} has no image") });
    };
    let labels = HashMap::from([(crate::files::LABEL_HELPER.to_owned(), "kill".to_owned())]);
    let body = ContainerCreateBody {
        image: Some(image),
        entrypoint: Some(vec!["sh".into()]),
        cmd: Some(vec!["-c".into(), KILL_SCRIPT.into(), "sh".into(), marker.into()]),
        user: Some("0:0".into()),
        labels: Some(labels),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            pid_mode: Some(format!("container:{id}")),
            cap_drop: Some(vec!["ALL".into()]),
            // Reading another user's /proc/PID/environ and signalling it.
            cap_add: Some(vec!["KILL".into(), "SYS_PTRACE".into(), "DAC_OVERRIDE".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = rt
        .docker
        .create_container(None::<CreateContainerOptions>, body)
        .await
        .map_err(|e| rt.map_err("create", "kill helper", e))?;
    let helper = created.id;
    let run = async {
        rt.docker
            .start_container(&helper, None::<StartContainerOptions>)
            .await
            .map_err(|e| rt.map_err("start", &helper, e))?;
        let mut wait = rt.docker.wait_container(&helper, None::<WaitContainerOptions>);
        match wait.next().await {
            Some(Ok(r)) if r.status_code == 0 => Ok(()),
            Some(Ok(r)) => Err(r.status_code),
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Err(code),
            Some(Err(e)) => return Err(rt.map_err("wait", &helper, e)),
            None => Ok(()),
        }
        .map_err(|code| domain::ports::RuntimeError::Api {
            status: 500,
            message: format!("the kill helper in {container} exited {code}"),
        })
    };
    let outcome = match tokio::time::timeout(KILL_TIMEOUT, run).await {
        Ok(r) => r,
        Err(_) => Err(domain::ports::RuntimeError::Timeout(format!("kill in {container}"))),
    };
    let rm = RemoveContainerOptions { force: true, ..Default::default() };
    let _ = rt.docker.remove_container(&helper, Some(rm)).await;
    outcome
}

#[async_trait]
impl MarkedKill for DockerRuntime {
    /// Kills, from inside `container`'s own pid namespace, every process whose environment holds the entry
    /// `marker` (`KEY=VALUE`, matched as a whole line); children inherit it, so a command's whole tree goes.
    ///
    /// # Errors
    /// A mapped [`RuntimeError`] when the kill exec cannot run.
    async fn kill_marked(&self, container: &str, marker: &str) -> Result<(), RuntimeError> {
        kill_marked(self, container, marker).await
    }
}
