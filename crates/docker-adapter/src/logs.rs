//! A container's own output (`docker logs`): what its main process, or anything writing to that process's stdout or
//! stderr, wrote: the engine's [`ContainerLogs`], for `berth sandbox logs`.

use async_trait::async_trait;
use bollard::container::LogOutput;
use bollard::query_parameters::LogsOptionsBuilder;
use domain::ports::{ContainerLogs, OutputSink, OutputStream, RuntimeError};
use futures_util::StreamExt;

use crate::DockerRuntime;

#[async_trait]
impl ContainerLogs for DockerRuntime {
    /// Streams `id`'s output to `sink`: the last `tail` lines (all with `None`), then, with `follow`, what it writes
    /// until the container stops.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`] when the container is gone, another mapped [`RuntimeError`] otherwise.
    async fn logs(
        &self,
        id: &str,
        tail: Option<usize>,
        follow: bool,
        sink: &mut dyn OutputSink,
    ) -> Result<(), RuntimeError> {
        let tail = tail.map_or_else(|| "all".to_owned(), |n| n.to_string());
        let options = LogsOptionsBuilder::new().stdout(true).stderr(true).follow(follow).tail(&tail).build();
        let mut stream = self.docker.logs(id, Some(options));
        while let Some(item) = stream.next().await {
            match item.map_err(|e| self.map_err("logs", id, e))? {
                LogOutput::StdErr { message } => sink.write(OutputStream::Stderr, &message),
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    sink.write(OutputStream::Stdout, &message);
                }
                LogOutput::StdIn { .. } => {}
            }
        }
        Ok(())
    }
}
