//! Exec with the caller's standard input and an optional TTY: what `berth run -i`/`-t` needs beyond the port's
//! output-only [`ContainerRuntime::exec`](domain::ports::ContainerRuntime::exec), which is this with no input.

use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use domain::ports::{ExecOutcome, ExecSpec, OutputSink, OutputStream, RuntimeError};
use futures_util::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc::Receiver;

use crate::{DockerRuntime, kill};

/// What an exec is attached to besides its output.
#[derive(Debug, Default)]
pub struct ExecIo {
    /// Allocate a TTY inside the container (output then arrives as one stream, as on a terminal).
    pub tty: bool,
    /// Chunks of standard input; the channel closing is end of input, which closes the command's stdin.
    /// `None`: the command gets no stdin at all.
    pub stdin: Option<Receiver<Vec<u8>>>,
    /// Terminal sizes as (rows, columns), applied to the TTY as they arrive (the first one right after start).
    pub resize: Option<Receiver<(u16, u16)>>,
}

impl DockerRuntime {
    /// Runs a command in a running container with `io` attached, streaming its output to `sink`.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`] when the container is gone; [`RuntimeError::Api`] when it is not running.
    pub async fn exec_io(
        &self,
        id: &str,
        spec: &ExecSpec,
        sink: &mut dyn OutputSink,
        io: ExecIo,
    ) -> Result<ExecOutcome, RuntimeError> {
        let ExecIo { tty, stdin, mut resize } = io;
        // A timed exec is marked, so a timeout can find its processes inside the container (see `kill`).
        let marker = spec.timeout.map(|_| kill::new_marker());
        let mut env = spec.env.clone();
        env.extend(marker.clone());
        let options = CreateExecOptions {
            attach_stdin: Some(stdin.is_some()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(tty),
            cmd: Some(spec.argv.clone()),
            env: (!env.is_empty()).then_some(env),
            working_dir: spec.workdir.clone(),
            user: spec.user.clone(),
            ..Default::default()
        };
        let exec = self.docker.create_exec(id, options).await.map_err(|e| self.map_err("exec", id, e))?;
        let started = self
            .docker
            .start_exec(&exec.id, Some(StartExecOptions { detach: false, tty, output_capacity: None }))
            .await
            .map_err(|e| self.map_err("exec", id, e))?;
        let StartExecResults::Attached { mut output, input } = started else {
            return Err(RuntimeError::Api { status: 0, message: "exec started detached".into() });
        };
        // Input is fed beside the output, never in turn with it: a command that writes before it reads fills its
        // output while a writer waits for it to read (the deadlock `docker exec -i` does not have either).
        let mut feed = std::pin::pin!(feed(stdin, input));
        let mut fed = false;
        let pump = async {
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
                    size = recv(&mut resize) => match size {
                        Some((height, width)) => {
                            let options = ResizeExecOptions { height, width };
                            if let Err(e) = self.docker.resize_exec(&exec.id, options).await {
                                tracing::debug!("resizing the exec's TTY: {e}");
                            }
                        }
                        None => resize = None,
                    },
                }
            }
        };
        // The engine resets the connection when the command exits with input it never read (`yes | … head`): that is
        // the command's own end, told by its exit code below, not a failure of berth's.
        let pump = async {
            match pump.await {
                Err(e) if self.exec_exited(&exec.id).await => {
                    tracing::debug!("the exec's stream ended with {e} after the command exited");
                    Ok(())
                }
                other => other.map_err(|e| self.map_err("exec", id, e)),
            }
        };
        let timed_out = match spec.timeout {
            Some(limit) => match tokio::time::timeout(limit, pump).await {
                Ok(res) => {
                    res?;
                    false
                }
                Err(_) => true,
            },
            None => {
                pump.await?;
                false
            }
        };
        if timed_out {
            if let Some(marker) = &marker
                && !self.kill_exec_from_host(id, &exec.id, marker).await
                && let Err(e) = kill::kill_marked(self, id, marker).await
            {
                tracing::warn!("killing the timed-out command in {id}: {e}");
            }
            return Ok(ExecOutcome::TimedOut);
        }
        // The stream closes when the process exits; the exit code may lag a moment behind.
        for _ in 0..50 {
            let info = self.docker.inspect_exec(&exec.id).await.map_err(|e| self.map_err("exec", id, e))?;
            if info.running != Some(true) {
                return Ok(ExecOutcome::Exited(info.exit_code.unwrap_or(-1)));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Err(RuntimeError::Timeout(format!("exit code of exec in {id}")))
    }
}

/// The bound of each inspect the host-side kill makes.
const CALL_BOUND: Duration = Duration::from_secs(5);

impl DockerRuntime {
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
/// the channel stops the reader of berth's own stdin. Without input it never ends, leaving the connection alone.
async fn feed(stdin: Option<Receiver<Vec<u8>>>, mut input: std::pin::Pin<Box<dyn AsyncWrite + Send>>) {
    let Some(mut stdin) = stdin else { return std::future::pending().await };
    while let Some(bytes) = stdin.recv().await {
        if input.write_all(&bytes).await.and(input.flush().await).is_err() {
            return;
        }
    }
    let _ = input.shutdown().await;
}

/// The next item of an optional channel; never resolves when there is none (or it has been dropped).
async fn recv<T>(rx: &mut Option<Receiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
