//! The runner's worker script (`runner.rs`): the `sh` program that stands for one task's worker.

use std::path::Path;

use super::external::WorkerCommand;

/// The worker of one task: waits at the gate (its stdin, a socket), runs the command, reports its exit and waits
/// for the runner's `ok` (its run looks alive until the outcome is recorded). One line, so the shell's complaints
/// name line 1, as `sh -c COMMAND`'s do. The script runs as `sh -c SCRIPT sh COMMAND`: plain words run as a simple
/// command, the first quoted (a reserved word such as `fi` is then a name the shell looks up, not a syntax error
/// that would end the script before its report); anything else, and a builtin that would change the script itself,
/// is `eval`ed in a subshell with no positional parameters, where a syntax error ends the subshell (exit 2, reported)
/// and not the script.
///
/// A command whose exit is not its outcome (`reports` false: hermes's protocol, the command records its own outcome
/// with `kanban complete|block`) needs no report: the script becomes the command after the gate (`exec`, plain
/// words directly, anything else as `sh -c`), so the worker the run records is the command itself, as its parent is
/// a berth process, and its end is its worker's end (the board's crash verdict when it recorded nothing).
pub(super) fn script(command: &WorkerCommand, workdir: &Path, reports: bool) -> String {
    let dir = config_bridge::shell_quote(&workdir.display().to_string());
    let plain = command.words.as_ref().filter(|w| !w.first().is_some_and(|w| SHELL_ITSELF.contains(&w.as_str())));
    let words = plain.map(|words| {
        let quoted = |(i, w): (usize, &String)| {
            if i == 0 { format!("'{}'", w.replace('\'', r"'\''")) } else { config_bridge::shell_quote(w) }
        };
        words.iter().enumerate().map(quoted).collect::<Vec<_>>().join(" ")
    });
    if !reports {
        let run = words.unwrap_or_else(|| "/bin/sh -c \"$1\"".to_owned());
        return format!("IFS= read -r g && [ \"$g\" = go ] && cd -- {dir} || exit 125; exec {run} </dev/null");
    }
    let run = words.unwrap_or_else(|| "( __berth=$1; shift; eval \"unset __berth; $__berth\" )".to_owned());
    format!(
        "IFS= read -r g && [ \"$g\" = go ] && cd -- {dir} || exit 125; {run} </dev/null; s=$?; exec >/dev/null 2>&1; \
         echo \"exit $s\" >&0; IFS= read -r a"
    )
}

/// The special builtins and others that act on the shell running them (a plain-words command starting with one
/// runs in a subshell, so the script still reports its exit).
const SHELL_ITSELF: &[&str] = &[
    "exit", "exec", "return", "eval", "set", "trap", "shift", "break", "continue", "unset", "readonly", "export", ".",
    "cd", "read", "wait", "umask", "ulimit", "alias", "unalias", "local", "command", "builtin",
];

#[cfg(test)]
mod tests {
    use super::script;
    use crate::board::external::WorkerCommand;

    #[test]
    fn the_script_waits_at_the_gate_and_reports_the_exit_with_its_output_closed() {
        let dir = std::path::Path::new("/w d");
        let plain = script(&WorkerCommand::of("run {task_id}", "t_1", "a", "b"), dir, true);
        assert!(plain.starts_with("IFS= read -r g && [ \"$g\" = go ] && cd -- '/w d' || exit 125; "), "{plain}");
        assert!(plain.contains("; 'run' t_1 </dev/null; "), "a simple command, its first word quoted: {plain}");
        let reserved = script(&WorkerCommand::of("fi", "t_1", "a", "b"), dir, true);
        assert!(reserved.contains("; 'fi' </dev/null; "), "a name, not a syntax error: {reserved}");
        let eval = "; ( __berth=$1; shift; eval \"unset __berth; $__berth\" ) </dev/null; ";
        for shell in ["exit 3", "a && b # {task_id}", "echo hi )"] {
            let s = script(&WorkerCommand::of(shell, "t_1", "a", "b"), dir, true);
            assert!(s.contains(eval), "evaluated in a subshell: {s}");
        }
        assert!(!plain.contains('\n'), "one line: {plain}");
        assert!(plain.ends_with("; s=$?; exec >/dev/null 2>&1; echo \"exit $s\" >&0; IFS= read -r a"), "{plain}");
    }

    #[test]
    fn a_command_that_records_its_own_outcome_becomes_the_worker_after_the_gate() {
        let dir = std::path::Path::new("/w");
        let plain = script(&WorkerCommand::of("hermes work {task_id}", "t_1", "a", "b"), dir, false);
        assert_eq!(
            plain,
            "IFS= read -r g && [ \"$g\" = go ] && cd -- /w || exit 125; exec 'hermes' work t_1 </dev/null"
        );
        for shell in ["exit 3", "a && b # {task_id}"] {
            let s = script(&WorkerCommand::of(shell, "t_1", "a", "b"), dir, false);
            assert!(s.ends_with("; exec /bin/sh -c \"$1\" </dev/null"), "{s}");
        }
    }
}
