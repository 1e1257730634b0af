//! Exec with the caller's standard input and an optional TTY: what `berth run -i`/`-t` needs beyond the port's
//! output-only [`ContainerRuntime::exec`](domain::ports::ContainerRuntime::exec), which is this with no input.

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use domain::ports::{ExecAttached, ExecIo, ExecOutcome, ExecSpec, OutputSink, OutputStream, RuntimeError};
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::{DockerRuntime, kill};

/// The bound of each inspect the host-side kill makes.
const CALL_BOUND: Duration = Duration::from_secs(5);

/// An exec's output as the engine streams it.
type ExecOutput = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// A started exec with its streams attached.
struct Attached {
    exec_id: String,
    output: ExecOutput,
    input: Pin<Box<dyn AsyncWrite + Send>>,
}

#[async_trait]
impl ExecAttached for DockerRuntime {
    /// Runs a command in a running container with `io` attached, streaming its output to `sink`.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`] when the container is gone; [`RuntimeError::Api`] when it is not running.
    async fn exec_io(
        &self,
        id: &str,
        spec: &ExecSpec,
        sink: &mut dyn OutputSink,
        io: ExecIo,
    ) -> Result<ExecOutcome, RuntimeError> {
        let ExecIo { tty, stdin, mut resize } = io;
        // A timed exec is marked, so a timeout can find its processes inside the container (see `kill`).
        let marker = spec.timeout.map(|_| kill::new_marker());
        let Attached { exec_id, mut output, input } =
            self.start_attached(id, spec, tty, stdin.is_some(), marker.as_deref()).await?;
        // The streams are this function's, lent to the pump: they stay open until the command's end is known, also
        // while a timed-out command is killed.
        let mut feed = std::pin::pin!(feed(stdin, input));
        let streams = self.stream_to_exit(id, &exec_id, &mut output, feed.as_mut(), &mut resize, sink);
        let finished = match spec.timeout {
            Some(limit) => tokio::time::timeout(limit, streams).await.ok(),
            None => Some(streams.await),
        };
        match finished {
            Some(streamed) => {
                streamed?;
                self.exit_code(id, &exec_id).await
            }
            None => {
                self.kill_timed_out(id, &exec_id, marker.as_deref()).await;
                Ok(ExecOutcome::TimedOut)
            }
        }
    }
}

impl DockerRuntime {
    /// Creates the exec (carrying `marker` in its environment, when the exec is timed) and starts it attached.
    async fn start_attached(
        &self,
        id: &str,
        spec: &ExecSpec,
        tty: bool,
        with_stdin: bool,
        marker: Option<&str>,
    ) -> Result<Attached, RuntimeError> {
        let mut env = spec.env.clone();
        env.extend(marker.map(str::to_owned));
        let options = CreateExecOptions {
            attach_stdin: Some(with_stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(tty),
            cmd: Some(spec.argv.clone()),
            env: (!env.is_empty()).then_some(env),
            working_dir: spec.workdir.clone(),
            user: spec.user.clone(),
            ..Default::default()
        };
        let exec = self.call("exec", id, self.docker.create_exec(id, options)).await?;
        let start = StartExecOptions { detach: false, tty, output_capacity: None };
        let started = self.call("exec", id, self.docker.start_exec(&exec.id, Some(start))).await?;
        let StartExecResults::Attached { output, input } = started else {
            return Err(RuntimeError::Api { status: 0, message: "exec started detached".into() });
        };
        Ok(Attached { exec_id: exec.id, output, input })
    }

    /// Streams the exec's output to `sink`, with its input and resizes alongside, until the command exits.
    ///
    /// The engine resets the connection when the command exits with input it never read (`yes | … head`): that is
    /// the command's own end, told by its exit code afterwards, not a failure of berth's.
    async fn stream_to_exit(
        &self,
        id: &str,
        exec_id: &str,
        output: &mut ExecOutput,
        feed: Pin<&mut impl Future<Output = ()>>,
        resize: &mut Option<BoxStream<'static, (u16, u16)>>,
        sink: &mut dyn OutputSink,
    ) -> Result<(), RuntimeError> {
        match self.pump(exec_id, output, feed, resize, sink).await {
            Err(e) if self.exec_exited(exec_id).await => {
                tracing::debug!("the exec's stream ended with {e} after the command exited");
                Ok(())
            }
            other => other.map_err(|e| self.map_err("exec", id, e)),
        }
    }

    /// Moves output to `sink` until the stream ends, while `feed` writes the input and each size in `resize` is
    /// applied to the TTY.
    ///
    /// Input is fed beside the output, never in turn with it: a command that writes before it reads fills its output
    /// while a writer waits for it to read (the deadlock `docker exec -i` does not have either).
    async fn pump(
        &self,
        exec_id: &str,
        output: &mut ExecOutput,
        mut feed: Pin<&mut impl Future<Output = ()>>,
        resize: &mut Option<BoxStream<'static, (u16, u16)>>,
        sink: &mut dyn OutputSink,
    ) -> Result<(), bollard::errors::Error> {
        let mut fed = false;
        loop {
            tokio::select! {
                chunk = output.next() => match chunk {
                    Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message })) => {
                        sink.write(OutputStream::Stdout, &message);
                    }
                    Some(Ok(LogOutput::StdErr { message })) => sink.write(OutputStream::Stderr, &message),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e),
                    // The stream ends when the process exits, whether or not its input was finished.
                    None => return Ok(()),
                },
                () = &mut feed, if !fed => fed = true,
                size = recv(resize) => match size {
                    Some((height, width)) => {
                        let options = ResizeExecOptions { height, width };
                        if let Err(e) = self.docker.resize_exec(exec_id, options).await {
                            tracing::debug!("resizing the exec's TTY: {e}");
                        }
                    }
                    None => *resize = None,
                },
            }
        }
    }

    /// Kills what a timed-out exec left running: from this host by berth's own code when the container's processes
    /// are visible here, else inside the container by its marker; a failure is logged, the timeout stands.
    async fn kill_timed_out(&self, id: &str, exec_id: &str, marker: Option<&str>) {
        if let Some(marker) = marker
            && !self.kill_exec_from_host(id, exec_id, marker).await
            && let Err(e) = kill::kill_marked(self, id, marker).await
        {
            tracing::warn!("killing the timed-out command in {id}: {e}");
        }
    }

    /// The exit code of an exec whose stream has closed: the stream closes when the process exits, and the exit
    /// code may lag a moment behind.
    async fn exit_code(&self, id: &str, exec_id: &str) -> Result<ExecOutcome, RuntimeError> {
        for _ in 0..50 {
            let info = self.call("exec", id, self.docker.inspect_exec(exec_id)).await?;
            if info.running != Some(true) {
                return Ok(ExecOutcome::Exited(info.exit_code.unwrap_or(-1)));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Err(RuntimeError::Timeout(format!("exit code of exec in {id}")))
    }

    /// Kills the timed-out exec `exec_id` in `container` from this host (`host_kill`), when the container's
    /// processes are visible here as its own; false when they are not (the caller then kills from inside).
    async fn kill_exec_from_host(&self, container: &str, exec_id: &str, marker: &str) -> bool {
        let Ok(Ok(c)) = tokio::time::timeout(CALL_BOUND, self.docker.inspect_container(container, None)).await else {
            return false;
        };
        let (Some(id), Some(init)) = (c.id, c.state.and_then(|s| s.pid)) else { return false };
        let root = match tokio::time::timeout(CALL_BOUND, self.docker.inspect_exec(exec_id)).await {
            Ok(Ok(e)) => e.pid,
            _ => None,
        };
        let marker = marker.to_owned();
        tokio::task::spawn_blocking(move || crate::host_kill::kill_from_host(&id, init, root, &marker))
            .await
            .unwrap_or(false)
    }

    /// Whether the exec `exec_id` has finished (a failed inspect says no: the caller's error stands).
    async fn exec_exited(&self, exec_id: &str) -> bool {
        self.docker.inspect_exec(exec_id).await.is_ok_and(|info| info.running != Some(true))
    }
}

/// Writes the chunks of `stdin` to the exec's input, then half-closes it so the command sees end of input while its
/// output still arrives. A command that stops reading (or exits) refuses the rest: the feed ends there, and dropping
/// the stream stops the reader of berth's own stdin. Without input it never ends, leaving the connection alone.
async fn feed(stdin: Option<BoxStream<'static, Vec<u8>>>, mut input: std::pin::Pin<Box<dyn AsyncWrite + Send>>) {
    let Some(mut stdin) = stdin else { return std::future::pending().await };
    while let Some(bytes) = stdin.next().await {
        if input.write_all(&bytes).await.and(input.flush().await).is_err() {
            return;
        }
    }
    let _ = input.shutdown().await;
}

/// The next item of an optional stream; never resolves when there is none (or it has been dropped).
async fn recv<T>(rx: &mut Option<BoxStream<'static, T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.next().await,
        None => std::future::pending().await,
    }
}
