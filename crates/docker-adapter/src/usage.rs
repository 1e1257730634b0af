//! What a container costs, from the engine's own figures: memory and CPU from its stats (computed the way `docker
//! stats` computes them, so the two agree), and the size of its writable layer from inspect with `size`.

use std::time::Duration;

use async_trait::async_trait;
use bollard::query_parameters::{InspectContainerOptions, StatsOptions};
use domain::ports::{ContainerUsage, RuntimeError, Usage};
use futures_util::StreamExt;

use crate::{CALL_TIMEOUT_SECS, DockerRuntime};

#[async_trait]
impl ContainerUsage for DockerRuntime {
    /// Samples a running container's memory and CPU use. The engine takes two readings about a second apart for
    /// the CPU figure (as `docker stats --no-stream` does); sample several containers concurrently.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`]; [`RuntimeError::Timeout`].
    async fn usage(&self, id: &str) -> Result<Usage, RuntimeError> {
        let options = StatsOptions { stream: false, one_shot: false };
        let mut stream = self.docker.stats(id, Some(options));
        let first = tokio::time::timeout(Duration::from_secs(CALL_TIMEOUT_SECS), stream.next()).await;
        let stats = match first {
            Ok(Some(res)) => res.map_err(|e| self.map_err("stats", id, e))?,
            Ok(None) => return Ok(Usage::default()),
            Err(_) => return Err(RuntimeError::Timeout(format!("stats {id}"))),
        };
        let memory = stats.memory_stats.unwrap_or_default();
        // cgroup v2 names the page cache `inactive_file`, v1 `total_inactive_file`; `docker stats` subtracts it.
        let cache = memory
            .stats
            .as_ref()
            .and_then(|s| s.get("inactive_file").or_else(|| s.get("total_inactive_file")).copied())
            .unwrap_or(0);
        let memory_bytes = memory.usage.map(|u| if cache < u { u - cache } else { u });
        let (cpu, pre) = (stats.cpu_stats.unwrap_or_default(), stats.precpu_stats.unwrap_or_default());
        let total = |c: &bollard::models::ContainerCpuStats| c.cpu_usage.as_ref().and_then(|u| u.total_usage);
        let cpu_percent = match (total(&cpu), total(&pre), cpu.system_cpu_usage, pre.system_cpu_usage) {
            (Some(t), Some(pt), Some(s), Some(ps)) if s > ps && t >= pt => {
                let online = cpu
                    .online_cpus
                    .map(u64::from)
                    .or_else(|| cpu.cpu_usage.as_ref().and_then(|u| u.percpu_usage.as_ref()).map(|p| p.len() as u64))
                    .unwrap_or(1);
                Some((t - pt) as f64 / (s - ps) as f64 * online as f64 * 100.0)
            }
            // The first reading had nothing to compare with (a container that just started).
            (Some(_), _, _, _) => Some(0.0),
            _ => None,
        };
        Ok(Usage {
            memory_bytes,
            memory_limit_bytes: memory.limit,
            cpu_percent,
            pids: stats.pids_stats.and_then(|p| p.current),
        })
    }

    /// The size of a container's writable layer (`SizeRw` of inspect with `size`; slow on big layers).
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`]; [`RuntimeError::Timeout`].
    async fn writable_size(&self, id: &str) -> Result<Option<i64>, RuntimeError> {
        let call = self.docker.inspect_container(id, Some(InspectContainerOptions { size: true }));
        match tokio::time::timeout(Duration::from_secs(CALL_TIMEOUT_SECS), call).await {
            Ok(res) => Ok(res.map_err(|e| self.map_err("inspect", id, e))?.size_rw),
            Err(_) => Err(RuntimeError::Timeout(format!("inspect --size {id}"))),
        }
    }
}
