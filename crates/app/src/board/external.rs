//! `kanban.worker_command`: an external worker command, run by the berth worker that confirmed its run.
//!
//! The worker stays the process the run records (pid and start time) and the leader of the group the command runs
//! in, so the verified stop reaches both. The command's output goes through the worker's log sink, as the
//! built-in worker's does: forwarded secrets masked and the log capped while the command runs (an exec'd command
//! would write to the log file unchecked).

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};

use domain::ports::{OutputSink, OutputStream};

use crate::edge::error::Failure;

/// Runs `sh -c rendered` (its environment changed by `env`: set, or removed when `None`), pumping its stdout and stderr through `sink` until both end; the command's exit code
/// (128 + the signal when a signal ended it), which the worker exits with.
///
/// # Errors
/// A one-line reason when the command cannot be started.
pub(super) fn run(
    rendered: &str,
    env: &[(String, Option<String>)],
    sink: &mut (dyn OutputSink + Send),
) -> Result<u8, Failure> {
    use std::os::unix::process::ExitStatusExt;
    crate::edge::private_files::restore();
    let mut cmd = Command::new("sh");
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let mut child = cmd
        .args(["-c", rendered])
        // Not the dispatcher's gate: its bytes are other workers'.
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Failure::other(format!("cannot start kanban.worker_command: {e}")))?;
    let sink = Mutex::new(sink);
    let out = child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>);
    let err = child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>);
    std::thread::scope(|s| {
        for (stream, pipe) in [(OutputStream::Stdout, out), (OutputStream::Stderr, err)] {
            let sink = &sink;
            if let Some(pipe) = pipe {
                s.spawn(move || pump(pipe, stream, sink));
            }
        }
    });
    let status = child.wait().map_err(|e| Failure::other(format!("kanban.worker_command: {e}")))?;
    let code = status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(1);
    Ok(u8::try_from(code).unwrap_or(1))
}

/// Copies `pipe` into `sink` as `stream` until it ends.
fn pump(mut pipe: Box<dyn Read + Send>, stream: OutputStream, sink: &Mutex<&mut (dyn OutputSink + Send)>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => sink.lock().unwrap_or_else(PoisonError::into_inner).write(stream, &buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Substitutes `{task_id}`, `{assignee}` and `{board}` into the template, each quoted as one shell word, so a value
/// is never read as shell syntax.
pub(super) fn render_worker_command(template: &str, task_id: &str, assignee: &str, board: &str) -> String {
    use config_bridge::shell_quote as q;
    template.replace("{task_id}", &q(task_id)).replace("{assignee}", &q(assignee)).replace("{board}", &q(board))
}

#[cfg(test)]
mod tests {
    use super::render_worker_command;

    #[test]
    fn substituted_values_stay_one_shell_word() {
        let rendered = render_worker_command("run {task_id} --as {assignee} --on {board}", "t 1;id", "a$(x)", "b'c");
        assert_eq!(
            shlex::split(&rendered).unwrap(),
            ["run", "t 1;id", "--as", "a$(x)", "--on", "b'c"].map(String::from).to_vec()
        );
        assert_eq!(render_worker_command("w {task_id}", "plain", "", ""), "w plain");
    }
}
