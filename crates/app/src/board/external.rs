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

/// The worker command of one task: the template rendered for it, and, when the template is plain words (no shell
/// syntax at all), the same command as its words, which runs without a shell between (one process less a task).
pub(super) struct WorkerCommand {
    pub rendered: String,
    pub words: Option<Vec<String>>,
}

impl WorkerCommand {
    pub(super) fn of(template: &str, task_id: &str, assignee: &str, board: &str) -> Self {
        Self {
            rendered: render_worker_command(template, task_id, assignee, board),
            words: plain_words(template, task_id, assignee, board),
        }
    }
}

/// The template's words with the values substituted, when every word is plain: letters, digits and `/._-+=:,@%`
/// only (around the placeholders), the first not an assignment. Anything else is the shell's to read.
fn plain_words(template: &str, task_id: &str, assignee: &str, board: &str) -> Option<Vec<String>> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c);
    // A shell's blanks are spaces and tabs; a newline (a second command) or any other control is not plain.
    let words: Vec<&str> = template.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
    let first_ok = words.first().is_some_and(|w| !w.contains('=') && !w.contains('{'));
    let all_ok = words.iter().all(|w| {
        let bare = w.replace("{task_id}", "").replace("{assignee}", "").replace("{board}", "");
        bare.chars().all(plain)
    });
    (first_ok && all_ok).then(|| {
        words
            .iter()
            .map(|w| w.replace("{task_id}", task_id).replace("{assignee}", assignee).replace("{board}", board))
            .collect()
    })
}

/// Runs the command (its environment changed by `env`: set, or removed when `None`), pumping its stdout and stderr
/// through `sink` until both end; the command's exit code (128 + the signal when a signal ended it), which the
/// worker exits with. Plain words run as they are; a program that cannot be started that way goes through
/// `sh -c` after all, which says why in the log as a shell would (and exits 127).
///
/// # Errors
/// A one-line reason when the command cannot be started.
pub(super) fn run(
    command: &WorkerCommand,
    env: &[(String, Option<String>)],
    sink: &mut (dyn OutputSink + Send),
) -> Result<u8, Failure> {
    use std::os::unix::process::ExitStatusExt;
    crate::edge::private_files::restore();
    let spawn = |argv: &[&str]| {
        let mut cmd = Command::new(argv[0]);
        for (k, v) in env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd.args(&argv[1..])
            // Not the dispatcher's gate: its bytes are other workers'.
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
    };
    let direct = command.words.as_ref().and_then(|w| spawn(&w.iter().map(String::as_str).collect::<Vec<_>>()).ok());
    let mut child = match direct {
        Some(child) => child,
        None => spawn(&["sh", "-c", &command.rendered])
            .map_err(|e| Failure::other(format!("cannot start kanban.worker_command: {e}")))?,
    };
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
    use super::{plain_words, render_worker_command};

    #[test]
    fn plain_templates_run_without_a_shell_and_anything_else_with_one() {
        let w = |t: &str| plain_words(t, "t_1", "a b", "default");
        assert_eq!(
            w("/usr/bin/berth kanban complete {task_id}").unwrap(),
            ["/usr/bin/berth", "kanban", "complete", "t_1"]
        );
        assert_eq!(w("hermes -p {assignee} --board={board}").unwrap(), ["hermes", "-p", "a b", "--board=default"]);
        assert_eq!(w("\tx\t {task_id} ").unwrap(), ["x", "t_1"]);
        for shell in [
            "a && b",
            "a | b",
            "a; b",
            "a $X",
            "a `b`",
            "a 'b'",
            "a \"b\"",
            "X=1 a",
            "a > f",
            "~/a",
            "a *",
            "a {x}",
            "a #c",
            "a\nb",
            "a\r",
            "a\x0cb",
            "{task_id}",
            "",
        ] {
            assert!(w(shell).is_none(), "{shell:?} is the shell's");
        }
    }

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
