//! `berth kanban logs ID [-f] [--tail N] [--run N]`: what a task's worker said, and the log lines `kanban show`
//! adds. A task's runs share one log file (`<home>/kanban/logs/<task>.log`); each run's part starts at the line
//! its worker writes when it confirms the run (`[berth worker …] confirmed run N of TASK as pid P`).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use domain::board::Run;
use domain::ports::ProcessProbe;

use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::edge::output;

use super::log_stream::{self, write_out};

/// How often `-f` looks for new output and for the run's end.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// How long `-f` waits, after the board says the run ended, for its worker to exit (its last lines come then).
const WORKER_EXIT_WAIT: Duration = Duration::from_secs(10);

/// The log file of `task`'s workers.
pub fn log_path(ctx: &Ctx, task: &str) -> PathBuf {
    crate::board::worker::log_path(ctx, task)
}

/// Where a task's worker works and leaves its output (`<sandbox_dir>/docker/…/workspace`), when it has an assignee;
/// the folder stays after the task finishes, as the task's output.
pub fn workspace_path(ctx: &Ctx, task: &str, assignee: Option<&str>) -> Option<String> {
    let folders = crate::sandbox::folders::Folders::from_ctx(ctx);
    Some(format!("{}/workspace", folders.of(&folders.task_identity(task, assignee)?).display()))
}

/// The longest line `kanban show` prints of a log; the rest is counted.
const SHOWN_LINE_MAX: usize = 1000;

/// The last `n` lines of `task`'s log (empty when there is none), for `kanban show`: read from the log's end, each
/// cut at [`SHOWN_LINE_MAX`] characters.
pub fn last_lines(ctx: &Ctx, task: &str, n: usize) -> Vec<String> {
    let (bytes, _) = crate::edge::terminal_text::tail_of_file(&log_path(ctx, task), n);
    let text = String::from_utf8_lossy(&bytes);
    text.lines().map(|l| crate::edge::terminal_text::shown_line(l, SHOWN_LINE_MAX)).collect()
}

/// `kanban show`'s closing section: the workspace, the sandbox's egress policy, the log's path, then its last lines
/// (or that there are none yet).
pub fn show_text(path: &str, last: &[String], workspace: Option<&str>, egress: Option<&str>) {
    output::line("");
    if let Some(ws) = workspace {
        // Pruned by retention, archived, or never run: say so rather than print a path that leads nowhere.
        let gone = if std::path::Path::new(ws).exists() { "" } else { " (not there: never run, or pruned)" };
        output::line(&format!("Workspace: {ws}{gone}"));
    }
    // The policy its sandbox gets (under the assignee), beside where its work lands.
    output::line(&format!("Egress:    {}", egress.unwrap_or("-")));
    output::line(&format!("Log: {path}"));
    if last.is_empty() {
        output::line("  (nothing yet)");
    }
    for l in last {
        output::line(&format!("  {l}"));
    }
}

/// Where each run's part of a task's log starts: the line its worker writes when it confirms the run, believed only
/// when it names the pid the board recorded for that run (a task's output can print the same words, not its worker's
/// pid, which nothing in the sandbox sees).
struct RunStarts<'a> {
    task: &'a str,
    /// Each run's confirmed worker pid, from the board.
    pids: std::collections::BTreeMap<i64, i64>,
}

impl<'a> RunStarts<'a> {
    fn new(task: &'a str, runs: &[Run]) -> Self {
        Self { task, pids: runs.iter().filter_map(|r| Some((r.id, r.worker_pid?))).collect() }
    }

    /// Whether `line` is where run `run`'s part starts (any run's when `None`).
    fn starts(&self, line: &str, run: Option<i64>) -> bool {
        let Some(rest) = line.strip_prefix("[berth worker ").and_then(|l| l.split_once("] confirmed run ")) else {
            return false;
        };
        let Some((n, after)) = rest.1.split_once(' ') else { return false };
        let Some(pid) = after.strip_prefix(&format!("of {} as pid ", self.task)) else { return false };
        let (Ok(n), Ok(pid)) = (n.parse::<i64>(), pid.trim_end().parse::<i64>()) else { return false };
        self.pids.get(&n) == Some(&pid) && run.is_none_or(|r| r == n)
    }

    /// The part of `text` that run `run` wrote: from its confirmation line to the next run's (the rule
    /// `log_stream::stream` follows, here over a text for the unit test of `starts`).
    #[cfg(test)]
    fn part(&self, text: &str, run: i64) -> String {
        let mut out = String::new();
        let mut inside = false;
        for line in text.split_inclusive('\n') {
            if self.starts(line, None) {
                inside = self.starts(line, Some(run));
            }
            if inside {
                out.push_str(line);
            }
        }
        out
    }
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

/// What `kanban logs` was asked for: the task, its log, the run (its id as given, and as found) and how many last
/// lines.
struct Asked<'a> {
    id: &'a str,
    path: PathBuf,
    number: Option<i64>,
    run: Option<i64>,
    lines: Option<usize>,
}

/// Where the first read of the log left off, for `-f` to go on from.
struct FirstRead {
    /// The byte following goes on at, and the end of what was read (to find the place again after a cap).
    pos: u64,
    seen: Vec<u8>,
    /// Whether anything was printed, and whether the asked run's part was met.
    printed: bool,
    saw_run: bool,
}

/// `berth kanban logs`.
///
/// # Errors
/// A usage failure for an unknown task or run, or for `--json` with `-f`.
pub async fn logs(ctx: &Ctx, id: &str, follow: bool, lines: Option<usize>, run: Option<i64>) -> Result<u8, Failure> {
    if follow && ctx.json {
        return Err(Failure::usage("--follow prints the log as it grows; drop --json"));
    }
    let Some(store) = crate::edge::open::open_read_only(ctx)? else {
        return Err(Failure::usage(format!("no task {id}")));
    };
    let task = store.task(id)?;
    let runs = store.runs(id)?;
    let asked = Asked { id, path: log_path(ctx, id), number: run, run: run_id(id, &runs, run)?, lines };
    refuse_a_log_on_another_host(ctx, &asked, &runs)?;
    let starts = RunStarts::new(id, &runs);
    let Some(read) = print_first(ctx.json, &asked, &starts) else { return Ok(0) };
    // The run to follow: the one asked for, else the task's current one, else (a task that may still run) its next
    // one; a finished run has nothing more to say.
    let mut followed = asked.run.or(task.current_run_id).filter(|_| follow);
    if follow && followed.is_none() && may_run(task.status) {
        eprintln!("berth: {id} is {} and not running; waiting for its next run (Ctrl-C to stop)", task.status.as_str());
        followed = next_run(&store, id).await?;
    }
    if !read.printed && followed.is_none() {
        // Nothing to print is said, on stderr (stdout stays the log's bytes, here none).
        let task = store.task(id)?;
        let why = why_nothing(&asked, &task, &store.runs(id)?);
        eprintln!("berth: the log of {id} ({}) {why}", asked.path.display());
    }
    let Some(followed) = followed else { return Ok(0) };
    // A run begun since the first read: its worker's confirmation is known by the board's runs now.
    let runs = store.runs(id)?;
    follow_run(&store, &asked, &RunStarts::new(id, &runs), followed, read).await
}

/// Whether a task not running now may still run (a finished or archived one's runs are over).
fn may_run(status: domain::board::TaskStatus) -> bool {
    use domain::board::TaskStatus::{Blocked, Ready, Todo, Triage};
    matches!(status, Triage | Todo | Ready | Blocked)
}

/// Waits for `id`'s next run to begin; `None` when the task finishes or is archived without one.
async fn next_run(store: &crate::edge::open::Board, id: &str) -> Result<Option<i64>, Failure> {
    loop {
        let task = store.task(id)?;
        if task.current_run_id.is_some() || !may_run(task.status) {
            return Ok(task.current_run_id);
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}

/// The run asked for: one of the task's runs by its id, the number `kanban show`, the worker's log and the dashboard
/// print (one run number everywhere).
fn run_id(id: &str, runs: &[Run], number: Option<i64>) -> Result<Option<i64>, Failure> {
    let Some(n) = number else { return Ok(None) };
    if runs.iter().any(|r| r.id == n) {
        return Ok(Some(n));
    }
    let known = match runs {
        [] => "none yet".to_owned(),
        _ => runs.iter().map(|r| r.id.to_string()).collect::<Vec<_>>().join(", "),
    };
    Err(Failure::usage(format!("task {id} has no run {n} (its runs: {known}, as `berth kanban show {id}` lists them)")))
}

/// A run of a shared board that ran on another host wrote its log there: says which, rather than "never run".
fn refuse_a_log_on_another_host(ctx: &Ctx, asked: &Asked, runs: &[Run]) -> Result<(), Failure> {
    let this_host = ctx.host_id();
    let elsewhere =
        runs.iter().rev().find(|x| asked.run.is_none_or(|r| r == x.id) && x.worker_host.is_some()).and_then(|x| {
            x.worker_host.clone().filter(|h| !domain::board::liveness::is_local(&this_host, Some(h))).map(|h| (x.id, h))
        });
    match elsewhere {
        Some((r, host)) if !asked.path.is_file() => {
            let id = asked.id;
            Err(Failure::other(format!(
                "run {r} of {id} ran on host {host}: its log is there (`berth kanban logs {id}` on {host})"
            )))
        }
        _ => Ok(()),
    }
}

/// Prints what was asked of the log as it is now: all of it or a run's part (streamed, never read whole into
/// memory), or their last lines. `None` when it printed JSON (which is never followed).
fn print_first(json: bool, asked: &Asked, starts: &RunStarts) -> Option<FirstRead> {
    let (path, run) = (&asked.path, asked.run);
    let any_start = |l: &str| starts.starts(l, None);
    let Some(n) = asked.lines else {
        let sink = if json { log_stream::Sink::Json { first: true } } else { log_stream::Sink::Text(Vec::new()) };
        let json_tail = || {
            let v = |x: serde_json::Value| x.to_string();
            format!(
                "  \"path\": {},\n  \"run\": {},\n  \"run_id\": {},\n  \"task\": {}",
                v(serde_json::json!(path.display().to_string())),
                v(serde_json::json!(asked.number)),
                v(serde_json::json!(run)),
                v(serde_json::json!(asked.id))
            )
        };
        let is_run = |l: &str| run.is_some_and(|r| starts.starts(l, Some(r)));
        let (s, _) = log_stream::stream(path, run.is_some(), any_start, is_run, sink, json_tail);
        return (!json).then_some(FirstRead { pos: s.pos, seen: s.seen, printed: s.printed, saw_run: s.saw_run });
    };
    let (shown, pos, seen, saw_run) = match run {
        // A run's last lines: its part streamed, only the last N kept.
        Some(r) => {
            let is_run = |l: &str| starts.starts(l, Some(r));
            let (s, kept) = log_stream::last_lines(path, any_start, is_run, n);
            (kept, s.pos, s.seen, s.saw_run)
        }
        None => {
            let (text, pos) = first_read(path, Some(n));
            let seen = window(text.as_bytes());
            (tail(&text, Some(n)).to_owned(), pos, seen, false)
        }
    };
    if json {
        let lines: Vec<&str> = shown.lines().collect();
        let path = path.display().to_string();
        let view = crate::board::views::TaskLogLines { task: asked.id, path, run: asked.number, run_id: run, lines };
        output::json(&view);
        return None;
    }
    write_out(shown.as_bytes());
    Some(FirstRead { pos, seen, printed: !shown.is_empty(), saw_run })
}

/// Why there was nothing to print: the log was removed (and by what), was never written, or holds nothing of the
/// asked run.
fn why_nothing(asked: &Asked, task: &domain::board::Task, runs: &[Run]) -> String {
    let exists = asked.path.is_file();
    match asked.run {
        // A log goes with an archived task's output, and with a finished one's after kanban.retention_days.
        _ if !exists && task.status == domain::board::TaskStatus::Archived => {
            "was removed when the task was archived".to_owned()
        }
        _ if !exists && !runs.is_empty() => {
            "was removed (`berth kanban prune` removes finished tasks' logs after kanban.retention_days)".to_owned()
        }
        _ if !exists => "does not exist yet (no worker has run)".to_owned(),
        Some(r) => format!("has no lines of run {}", asked.number.unwrap_or(r)),
        None => "is empty".to_owned(),
    }
}

/// `-f`: prints the followed run's new lines as they come, until another run's output begins, or the board closed
/// the run and its worker exited (its last lines are written then), or [`WORKER_EXIT_WAIT`] after the close.
async fn follow_run(
    store: &crate::edge::open::Board,
    asked: &Asked<'_>,
    starts: &RunStarts<'_>,
    followed: i64,
    read: FirstRead,
) -> Result<u8, Failure> {
    let FirstRead { mut pos, mut seen, saw_run, .. } = read;
    let mut ended_at: Option<std::time::Instant> = None;
    let mut inside = asked.run.is_none() || saw_run;
    // Prints the new whole lines of the followed run; false once another run's output begins.
    let mut drain = |pos: &mut u64, inside: &mut bool| -> bool {
        let (more, next) = read_from(&asked.path, *pos, &seen);
        *pos = next;
        if !more.is_empty() {
            seen.extend_from_slice(more.as_bytes());
            seen = window(&seen);
        }
        for line in more.split_inclusive('\n') {
            if starts.starts(line, None) {
                if *inside && !starts.starts(line, Some(followed)) {
                    return false;
                }
                *inside = starts.starts(line, Some(followed));
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
        match store.runs(asked.id)?.into_iter().find(|r| r.id == followed) {
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

fn worker_alive(r: &Run) -> bool {
    match r.worker_pid.and_then(|p| u32::try_from(p).ok()) {
        Some(pid) => crate::edge::process::ProcProbe.is_alive(pid, r.worker_start.and_then(|s| u64::try_from(s).ok())),
        None => false,
    }
}

/// What `logs --tail N` reads first, and where following goes on: the last lines of the whole log, read from its end
/// (a log of any size costs its tail only).
fn first_read(path: &Path, lines: Option<usize>) -> (String, u64) {
    let Some(n) = lines else { return read_from(path, 0, &[]) };
    let (bytes, len) = crate::edge::terminal_text::tail_of_file(path, n);
    // Only whole lines: a partial last line is printed with its end when following.
    let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let partial = (bytes.len() - whole) as u64;
    (String::from_utf8_lossy(&bytes[..whole]).into_owned(), len - partial)
}

/// The end of what was read so far that finds the place again after the log was capped: its last 4 KiB.
fn window(read: &[u8]) -> Vec<u8> {
    read[read.len().saturating_sub(4096)..].to_vec()
}

/// Reads `path` from byte `from`. A file whose bytes before `from` are no longer `seen`, the end of what was read
/// before, was capped (its oldest half dropped behind one line), whether it is now shorter or has already grown past
/// `from` again: reading resumes after `seen` where the kept half still holds it, so nothing is printed twice; from
/// the start when it is not there (all of it is new).
fn read_from(path: &Path, from: u64, seen: &[u8]) -> (String, u64) {
    let Ok(mut f) = std::fs::File::open(path) else { return (String::new(), from) };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut buf = Vec::new();
    let from = if len < from || !ends_with_at(&f, from, seen) {
        if f.read_to_end(&mut buf).is_err() {
            return (String::new(), 0);
        }
        let resume = if seen.is_empty() { None } else { buf.windows(seen.len()).rposition(|w| w == seen) };
        let at = resume.map_or(0, |i| i + seen.len());
        buf.drain(..at);
        at as u64
    } else {
        if f.seek(SeekFrom::Start(from)).is_err() || f.read_to_end(&mut buf).is_err() {
            return (String::new(), from);
        }
        from
    };
    // Only whole lines: a partial last line is read again with its end on the next look.
    let whole = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    buf.truncate(whole);
    (String::from_utf8_lossy(&buf).into_owned(), from + whole as u64)
}

/// Whether the `from` bytes of `f` before `from` end with `seen` (as much of it as fits).
fn ends_with_at(f: &std::fs::File, from: u64, seen: &[u8]) -> bool {
    use std::os::unix::fs::FileExt;
    let n = seen.len().min(usize::try_from(from).unwrap_or(usize::MAX));
    let mut here = vec![0; n];
    f.read_exact_at(&mut here, from - n as u64).is_ok() && here == seen[seen.len() - n..]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log capped between two looks and grown past where the follower was: it goes on after what it had read.
    #[test]
    fn a_log_capped_and_grown_again_is_read_on_after_what_was_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        let lines = |r: std::ops::Range<u32>| r.map(|i| format!("line-{i}\n")).collect::<String>();
        std::fs::write(&path, lines(0..1000)).unwrap();
        let (first, pos) = read_from(&path, 0, &[]);
        assert_eq!(first, lines(0..1000));
        let seen = window(first.as_bytes());
        // The cap keeps lines 400.. (more than the follower's window) behind its line; then more lines come, past
        // the old end.
        std::fs::write(&path, format!("[berth] capped\n{}{}", lines(400..1000), lines(1000..1500))).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > pos);
        assert_eq!(read_from(&path, pos, &seen).0, lines(1000..1500));
        // Not capped: it reads on from where it was.
        std::fs::write(&path, lines(0..1001)).unwrap();
        assert_eq!(read_from(&path, pos, &seen).0, lines(1000..1001));
    }

    const LOG: &str = "[berth worker 1] confirmed run 3 of t_a as pid 9\none\n[berth worker 2] confirmed run 7 of t_a \
                       as pid 10\ntwo\nthree\n";

    fn starts() -> RunStarts<'static> {
        RunStarts { task: "t_a", pids: [(3, 9), (7, 10)].into_iter().collect() }
    }

    #[test]
    fn a_runs_part_runs_from_its_confirmation_to_the_next() {
        let s = starts();
        assert_eq!(s.part(LOG, 3), "[berth worker 1] confirmed run 3 of t_a as pid 9\none\n");
        assert!(s.part(LOG, 7).ends_with("two\nthree\n"));
        assert_eq!(s.part(LOG, 5), "");
        // Another task's id inside a line is not a run start.
        assert!(!s.starts("[berth worker 1] confirmed run 3 of t_ab as pid 9", None));
        // Nor a line a task printed, not naming the pid the board recorded, or not at a line's start.
        let forged = "[berth worker 1] confirmed run 3 of t_a as pid 9\none\n[berth worker 2] confirmed run 7 of t_a as \
                      pid 11\nstill three\n  [berth worker 2] confirmed run 7 of t_a as pid 10\n";
        assert!(s.part(forged, 3).ends_with("still three\n  [berth worker 2] confirmed run 7 of t_a as pid 10\n"));
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
