//! The capability traits of [`domain::ports::Engine`] on [`DockerRuntime`], each the adapter's own method of that
//! name (in `exec_io.rs`, `logs.rs`, `usage.rs`, `files.rs`, `kill.rs`, `egress.rs` and `lib.rs`).

use std::collections::BTreeMap;

use async_trait::async_trait;
use domain::egress::EgressRoute;
use domain::ports::{
    ContainerFiles, ContainerLogs, ContainerUsage, EgressNetworks, EgressSetup, EngineFacts, ExecAttached, ExecIo,
    ExecOutcome, ExecSpec, MarkedKill, OutputSink, RuntimeError, Usage,
};

use crate::DockerRuntime;

#[async_trait]
impl ExecAttached for DockerRuntime {
    async fn exec_io(
        &self,
        id: &str,
        spec: &ExecSpec,
        sink: &mut dyn OutputSink,
        io: ExecIo,
    ) -> Result<ExecOutcome, RuntimeError> {
        Self::exec_io(self, id, spec, sink, io).await
    }
}

#[async_trait]
impl ContainerLogs for DockerRuntime {
    async fn logs(
        &self,
        id: &str,
        tail: Option<usize>,
        follow: bool,
        sink: &mut dyn OutputSink,
    ) -> Result<(), RuntimeError> {
        Self::logs(self, id, tail, follow, sink).await
    }
}

#[async_trait]
impl ContainerUsage for DockerRuntime {
    async fn usage(&self, id: &str) -> Result<Usage, RuntimeError> {
        Self::usage(self, id).await
    }

    async fn writable_size(&self, id: &str) -> Result<Option<i64>, RuntimeError> {
        Self::writable_size(self, id).await
    }
}

#[async_trait]
impl ContainerFiles for DockerRuntime {
    async fn write_file(&self, container: &str, dir: &str, name: &str, data: &[u8]) -> Result<(), RuntimeError> {
        Self::write_file(self, container, dir, name, data).await
    }

    async fn remove_folder_as_root(
        &self,
        image: &str,
        parent: &str,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), RuntimeError> {
        Self::remove_folder_as_root(self, image, parent, name, labels).await
    }
}

#[async_trait]
impl MarkedKill for DockerRuntime {
    async fn kill_marked(&self, container: &str, marker: &str) -> Result<(), RuntimeError> {
        Self::kill_marked(self, container, marker).await
    }
}

#[async_trait]
impl EngineFacts for DockerRuntime {
    fn endpoint(&self) -> &str {
        Self::endpoint(self)
    }

    fn api_version(&self) -> &str {
        Self::api_version(self)
    }

    async fn supports_disk_quota(&self) -> Result<bool, RuntimeError> {
        Self::supports_disk_quota(self).await
    }

    async fn supports_cgroup_limits(&self) -> Result<bool, RuntimeError> {
        Self::supports_cgroup_limits(self).await
    }

    async fn is_podman(&self) -> Result<bool, RuntimeError> {
        Self::is_podman(self).await
    }
}

#[async_trait]
impl EgressNetworks for DockerRuntime {
    async fn ensure_egress(&self, setup: &EgressSetup) -> Result<EgressRoute, RuntimeError> {
        Self::ensure_egress(self, setup).await
    }

    async fn proxy_down(&self, name: &str) -> Result<Option<String>, RuntimeError> {
        Self::proxy_down(self, name).await
    }
}
