//! `berth kanban logs ID [-f] [--tail N] [--run N]`: what a task's worker said, and the log lines `kanban show`
//! adds. A task's runs share one log file (`<home>/kanban/logs/<task>.log`); each run's part starts at the line
//! its worker writes when it confirms the run (`[berth worker …] confirmed run N of TASK as pid P`).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use domain::ports::ProcessProbe;
use kanban_store::Run;
use serde_json::json;

use crate::context::Ctx;
use crate::error::Failure;
use crate::output;

/// How often `-f` looks for new output and for the run's end.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// How long `-f` waits, after the board says the run ended, for its worker to exit (its last lines come then).
const WORKER_EXIT_WAIT: Duration = Duration::from_secs(10);

/// The log file of `task`'s workers.
pub fn log_path(ctx: &Ctx, task: &str) -> PathBuf {
    crate::worker::log_path(ctx, task)
}

/// Where a task's worker works and leaves its output (`<sandbox_dir>/docker/…/workspace`), when it has an assignee;
/// the folder stays after the task finishes, as the task's output.
pub fn workspace_path(ctx: &Ctx, task: &str, assignee: Option<&str>) -> Option<String> {
    let folders = crate::host_folders::Folders::from_ctx(ctx);
    Some(format!("{}/workspace", folders.of(&folders.task_identity(task, assignee)?).display()))
}

/// The longest line `kanban show` prints of a log; the rest is counted.
const SHOWN_LINE_MAX: usize = 1000;

/// The last `n` lines of `task`'s log (empty when there is none), for `kanban show`: read from the log's end, each
/// cut at [`SHOWN_LINE_MAX`] characters.
pub fn last_lines(ctx: &Ctx, task: &str, n: usize) -> Vec<String> {
    let (bytes, _) = crate::terminal_text::tail_of_file(&log_path(ctx, task), n);
    let text = String::from_utf8_lossy(&bytes);
    text.lines().map(|l| crate::terminal_text::shown_line(l, SHOWN_LINE_MAX)).collect()
}

/// `kanban show`'s log section: the path, then the last lines (or that there are none yet).
pub fn show_text(path: &str, last: &[String], workspace: Option<&str>) {
    output::line("");
    if let Some(ws) = workspace {
        // Pruned by retention, archived, or never run: say so rather than print a path that leads nowhere.
        let gone = if std::path::Path::new(ws).exists() { "" } else { " (not there: never run, or pruned)" };
        output::line(&format!("Workspace: {ws}{gone}"));
    }
    output::line(&format!("Log: {path}"));
    if last.is_empty() {
        output::line("  (nothing yet)");
    }
    for l in last {
        output::line(&format!("  {l}"));
    }
}

/// Whether `line` is where run `run`'s part of the log starts (any run when `None`).
fn starts_run(line: &str, task: &str, run: Option<i64>) -> bool {
    let Some(rest) = line.split_once("] confirmed run ").map(|(_, r)| r) else { return false };
    let Some((n, after)) = rest.split_once(' ') else { return false };
    after.starts_with(&format!("of {task} as pid")) && run.is_none_or(|r| n == r.to_string())
}

/// The part of `text` that run `run` wrote: from its confirmation line to the next run's.
fn run_part(text: &str, task: &str, run: i64) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.split_inclusive('\n') {
        if starts_run(line, task, None) {
            inside = starts_run(line, task, Some(run));
        }
        if inside {
            out.push_str(line);
        }
    }
    out
}

/// The last `n` lines of `text` (all of it when `None`).
fn tail(text: &str, n: Option<usize>) -> &str {
    let Some(n) = n else { return text };
    if n == 0 {
        return "";
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    match body.rmatch_indices('\n').nth(n - 1) {
        Some((i, _)) => &text[i + 1..],
        None => text,
    }
}

/// `berth kanban logs`.
///
/// # Errors
/// A usage failure for an unknown task or run, or for `--json` with `-f`.
pub async fn logs(ctx: &Ctx, id: &str, follow: bool, lines: Option<usize>, run: Option<i64>) -> Result<u8, Failure> {
    if follow && ctx.json {
        return Err(Failure::usage("--follow prints the log as it grows; drop --json"));
    }
    let Some(store) = crate::kanban::open_read_only(ctx)? else {
        return Err(Failure::usage(format!("no task {id}")));
    };
    let task = store.task(id)?;
    let runs = store.runs(id)?;
    if let Some(r) = run
        && !runs.iter().any(|x| x.id == r)
    {
        let known: Vec<String> = runs.iter().map(|x| x.id.to_string()).collect();
        let known = if known.is_empty() { "none yet".to_owned() } else { known.join(", ") };
        return Err(Failure::usage(format!("task {id} has no run {r} (its runs: {known})")));
    }
    let path = log_path(ctx, id);
    // A run of a shared board that ran on another host wrote its log there: say which, rather than "never run".
    let this_host = ctx.host_id();
    let elsewhere =
        runs.iter().rev().find(|x| run.is_none_or(|r| r == x.id) && x.worker_host.is_some()).and_then(|x| {
            x.worker_host.clone().filter(|h| !domain::liveness::is_local(&this_host, Some(h))).map(|h| (x.id, h))
        });
    if !path.is_file()
        && let Some((r, host)) = elsewhere
    {
        return Err(Failure::other(format!(
            "run {r} of {id} ran on host {host}: its log is there (`berth kanban logs {id}` on {host})"
        )));
    }
    // The last lines of the whole log are read from its end (a log of any size costs its tail only).
    let (text, mut pos) = match (run, lines) {
        (None, Some(n)) => {
            let (bytes, len) = crate::terminal_text::tail_of_file(&path, n);
            // Only whole lines: a partial last line is printed with its end when following.
            let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            let partial = (bytes.len() - whole) as u64;
            (String::from_utf8_lossy(&bytes[..whole]).into_owned(), len - partial)
        }
        _ => read_from(&path, 0),
    };
    let shown = match run {
        Some(r) => run_part(&text, id, r),
        None => text,
    };
    let shown = tail(&shown, lines);
    if ctx.json {
        let lines: Vec<&str> = shown.lines().collect();
        output::json(&json!({"task": id, "path": path.display().to_string(), "run": run, "lines": lines}));
        return Ok(0);
    }
    write_out(shown.as_bytes());
    if shown.is_empty() && !follow {
        // Nothing to print is said, on stderr (stdout stays the log's bytes, here none).
        let why = match run {
            _ if !path.is_file() => "does not exist yet (no worker has run)".to_owned(),
            Some(r) => format!("has no lines of run {r}"),
            None => "is empty".to_owned(),
        };
        eprintln!("berth: the log of {id} ({}) {why}", path.display());
    }
    // The run to follow: the one asked for, else the task's current one; a finished run has nothing more to say.
    let followed = run.or(task.current_run_id);
    let Some(followed) = followed.filter(|_| follow) else { return Ok(0) };
    let mut ended_at: Option<std::time::Instant> = None;
    let mut inside = run.is_none() || starts_run_seen(shown, id, followed);
    // Prints the new whole lines of the followed run; false once another run's output begins.
    let drain = |pos: &mut u64, inside: &mut bool| -> bool {
        let (more, next) = read_from(&path, *pos);
        *pos = next;
        for line in more.split_inclusive('\n') {
            if starts_run(line, id, None) {
                if *inside && !starts_run(line, id, Some(followed)) {
                    return false;
                }
                *inside = starts_run(line, id, Some(followed));
            }
            if *inside {
                write_out(line.as_bytes());
            }
        }
        true
    };
    loop {
        if !drain(&mut pos, &mut inside) || ended_at.is_some_and(|t| t.elapsed() > WORKER_EXIT_WAIT) {
            return Ok(0);
        }
        match store.runs(id)?.into_iter().find(|r| r.id == followed) {
            // The run is over once the board closed it and its worker has exited (its last lines are written).
            Some(r) if r.ended_at.is_some() => {
                if !worker_alive(&r) {
                    drain(&mut pos, &mut inside);
                    return Ok(0);
                }
                ended_at.get_or_insert_with(std::time::Instant::now);
            }
            None => return Ok(0),
            Some(_) => {}
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}

/// Whether `text` already holds run `run`'s confirmation line.
fn starts_run_seen(text: &str, task: &str, run: i64) -> bool {
    text.lines().any(|l| starts_run(l, task, Some(run)))
}

fn worker_alive(r: &Run) -> bool {
    match r.worker_pid.and_then(|p| u32::try_from(p).ok()) {
        Some(pid) => crate::process::ProcProbe.is_alive(pid, r.worker_start.and_then(|s| u64::try_from(s).ok())),
        None => false,
    }
}

/// Reads `path` from byte `from`; a file that shrank (its log was capped) is read again from the start.
fn read_from(path: &Path, from: u64) -> (String, u64) {
    let Ok(mut f) = std::fs::File::open(path) else { return (String::new(), from) };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let from = if len < from { 0 } else { from };
    let mut buf = Vec::new();
    if f.seek(SeekFrom::Start(from)).is_err() || f.read_to_end(&mut buf).is_err() {
        return (String::new(), from);
    }
    // Only whole lines: a partial last line is read again with its end on the next look.
    let whole = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    buf.truncate(whole);
    (String::from_utf8_lossy(&buf).into_owned(), from + whole as u64)
}

/// Writes log bytes to stdout: as they are into a pipe or a file, with control characters shown as escapes on a
/// terminal (a task's output must not drive the operator's terminal).
fn write_out(bytes: &[u8]) {
    use std::io::IsTerminal;
    let mut out = std::io::stdout().lock();
    let _ = if out.is_terminal() {
        out.write_all(crate::terminal_text::sanitize(&String::from_utf8_lossy(bytes)).as_bytes())
    } else {
        out.write_all(bytes)
    };
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "[berth worker 1] confirmed run 3 of t_a as pid 9\none\n[berth worker 2] confirmed run 7 of t_a \
                       as pid 10\ntwo\nthree\n";

    #[test]
    fn a_runs_part_runs_from_its_confirmation_to_the_next() {
        assert_eq!(run_part(LOG, "t_a", 3), "[berth worker 1] confirmed run 3 of t_a as pid 9\none\n");
        assert!(run_part(LOG, "t_a", 7).ends_with("two\nthree\n"));
        assert_eq!(run_part(LOG, "t_a", 5), "");
        // Another task's id inside a line is not a run start.
        assert!(!starts_run("[x] confirmed run 3 of t_ab as pid 1", "t_a", None));
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", Some(2)), "b\nc\n");
        assert_eq!(tail("a\nb\nc", Some(1)), "c");
        assert_eq!(tail("a\n", Some(5)), "a\n");
        assert_eq!(tail("a\n", Some(0)), "");
        assert_eq!(tail("a\nb\n", None), "a\nb\n");
    }
}
