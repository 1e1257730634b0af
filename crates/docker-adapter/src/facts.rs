//! What berth asks about the engine itself ([`EngineFacts`]): where it answers, the API version in use, whether it
//! can enforce a disk quota and cgroup limits, whether it is Podman, and the host folder a named volume binds.

use async_trait::async_trait;
use domain::ports::{EngineFacts, RuntimeError};

use crate::DockerRuntime;

#[async_trait]
impl EngineFacts for DockerRuntime {
    /// The endpoint this runtime talks to.
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The negotiated Engine API version, e.g. `1.41`.
    fn api_version(&self) -> &str {
        &self.api_version
    }

    /// Whether the engine can enforce `--storage-opt size=`: overlay on an XFS backing filesystem (Docker names the
    /// driver `overlay2`, Podman `overlay`).
    ///
    /// # Errors
    /// A mapped [`RuntimeError`].
    async fn supports_disk_quota(&self) -> Result<bool, RuntimeError> {
        let info = self.info().await?;
        let xfs = info
            .driver_status
            .unwrap_or_default()
            .iter()
            .any(|kv| kv.len() == 2 && kv[0] == "Backing Filesystem" && kv[1] == "xfs");
        Ok(matches!(info.driver.as_deref(), Some("overlay2" | "overlay")) && xfs)
    }

    /// Whether the engine can apply cgroup limits: `docker info` reports the memory, CPU-quota and pids
    /// controllers (an unprivileged LXC or some rootless set-ups lack them, and every limited create would fail).
    ///
    /// # Errors
    /// A mapped [`RuntimeError`].
    async fn supports_cgroup_limits(&self) -> Result<bool, RuntimeError> {
        let info = self.info().await?;
        Ok(info.memory_limit != Some(false) && info.cpu_cfs_quota != Some(false) && info.pids_limit != Some(false))
    }

    /// Whether the engine is Podman (its compatible `/version` names the component).
    ///
    /// # Errors
    /// A mapped [`RuntimeError`].
    async fn is_podman(&self) -> Result<bool, RuntimeError> {
        let v = self.call("version", "", self.docker.version()).await?;
        Ok(v.components.unwrap_or_default().iter().any(|c| c.name.to_ascii_lowercase().contains("podman")))
    }

    /// The host folder the named volume `name` binds ([`crate::volumes::bound_host_path`]); `None` when it binds
    /// none or does not exist (the engine then makes an empty one).
    ///
    /// # Errors
    /// A mapped [`RuntimeError`] other than "not found", or a timeout.
    async fn volume_host_path(&self, name: &str) -> Result<Option<String>, RuntimeError> {
        match tokio::time::timeout(crate::volumes::INSPECT_TIMEOUT, self.docker.inspect_volume(name)).await {
            Ok(Ok(v)) => Ok(crate::volumes::bound_host_path(&v.driver, &v.options)),
            Ok(Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })) => Ok(None),
            Ok(Err(e)) => Err(self.map_err("inspect volume", name, e)),
            Err(_) => Err(RuntimeError::Timeout(format!("inspecting volume {name}"))),
        }
    }
}
