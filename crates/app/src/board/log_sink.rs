//! A worker's log while its command runs: the command's output appended to it (forwarded secrets masked, the last
//! line kept for the result), capped at `kanban.worker_log_rotate_bytes`.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use domain::ports::{OutputSink, OutputStream};

use crate::edge::context::Ctx;

/// Caps a log that is being written: past `max_bytes`, it keeps only its last half (the tail is what explains how a
/// run ends), behind one line saying so. The writers hold it in append mode, so they go on at the new end.
pub fn cap_log(log: &Path, max_bytes: u64) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let len = std::fs::metadata(log)?.len();
    if max_bytes == 0 || len <= max_bytes {
        return Ok(());
    }
    let keep = max_bytes / 2;
    let mut f = OpenOptions::new().read(true).write(true).open(log)?;
    f.seek(SeekFrom::Start(len - keep))?;
    let mut tail = Vec::with_capacity(usize::try_from(keep).unwrap_or(0));
    Read::by_ref(&mut f).take(keep).read_to_end(&mut tail)?;
    // Start the kept part at a line boundary when there is one.
    let start = tail.iter().position(|b| *b == b'\n').map_or(0, |i| i + 1);
    f.set_len(0)?;
    f.seek(SeekFrom::Start(0))?;
    writeln!(f, "[berth] log over {max_bytes} bytes during the run: earlier output dropped, the last part follows")?;
    f.write_all(&tail[start..])?;
    Ok(())
}

/// Appends exec output to our stdout/stderr (the worker's log), keeps the last line for the result, and caps the
/// log while the run goes (`kanban.worker_log_rotate_bytes`). Forwarded secrets the command prints are masked on
/// the way (in the log and so in the result), each stream by its own [`crate::edge::redact::Redactor`].
#[derive(Default)]
pub(crate) struct LogSink {
    /// The result: the last non-blank line of stdout (its last [`RESULT_CHARS`] characters), set by `finish`.
    pub(crate) last_line: String,
    /// The end of stdout so far (at most [`TAIL_BYTES`]), whatever pieces it was written in; `cut` when more came
    /// before it.
    tail: Vec<u8>,
    cut: bool,
    log: Option<(PathBuf, u64)>,
    /// Where output goes when not to this process's stdout and stderr: the log file itself (the runner's tasks).
    file: Option<std::fs::File>,
    since_check: u64,
    masks: [crate::edge::redact::Redactor; 2],
}

impl LogSink {
    /// Bytes written between two looks at the log's size.
    const CHECK_EVERY: u64 = 64 * 1024;

    /// The sink of task `task`'s run: its log is capped while the run goes when this is a dispatched worker (whose
    /// stdout is `log`, its task's log file), not when a worker was started by hand (a terminal).
    pub(crate) fn for_run(ctx: &Ctx, log: PathBuf) -> Self {
        let cap = ctx.settings.kanban.worker_log_rotate_bytes;
        Self { log: ctx.env.get("BERTH_KANBAN_RUN_ID").is_some().then_some((log, cap)), ..Self::default() }
    }

    /// The sink of a run whose output goes straight to its log file `file` at `log` (the runner's tasks, `runner.rs`),
    /// capped at `kanban.worker_log_rotate_bytes`.
    pub(crate) fn to_file(ctx: &Ctx, file: Option<std::fs::File>, log: PathBuf) -> Self {
        let cap = ctx.settings.kanban.worker_log_rotate_bytes;
        Self { log: Some((log, cap)), file, ..Self::default() }
    }

    /// The log file a [`LogSink::to_file`] sink writes (for the runner's own lines about the run).
    pub(crate) fn file(&mut self) -> &mut Option<std::fs::File> {
        &mut self.file
    }

    /// Writes what the redactors still hold back (the command ended) and sets the result line.
    pub(crate) fn finish(&mut self) {
        for stream in [OutputStream::Stdout, OutputStream::Stderr] {
            let rest = self.masks[usize::from(stream == OutputStream::Stderr)].finish();
            self.write_masked(stream, &rest);
        }
        self.last_line = result_line(&self.tail, self.cut);
    }
}

/// The most characters of a result line kept (its end, after `…` when longer).
const RESULT_CHARS: usize = 500;
/// The end of stdout kept for the result line.
const TAIL_BYTES: usize = 8 * 1024;

/// The last non-blank line of `tail` (the end of a stream; `cut` when the stream was longer), masked, without NUL
/// (PostgreSQL's text holds none), at most [`RESULT_CHARS`] characters: a longer line keeps its end behind `…`.
fn result_line(tail: &[u8], cut: bool) -> String {
    let text = String::from_utf8_lossy(tail);
    let lines: Vec<&str> = text.lines().collect();
    let Some(at) = lines.iter().rposition(|l| !l.trim().is_empty()) else { return String::new() };
    // The first line of a cut tail is the end of a longer one (perhaps from the middle of a character).
    let started_before = cut && at == 0;
    let chars: Vec<char> = lines[at].chars().filter(|c| *c != '\0').collect();
    let from = chars.len().saturating_sub(RESULT_CHARS);
    let mut line: String = chars[from..].iter().collect();
    if from > 0 || started_before {
        line = format!("…{}", line.trim_start_matches('\u{fffd}'));
    }
    crate::edge::redact::redact(&line)
}

impl OutputSink for LogSink {
    fn write(&mut self, stream: OutputStream, bytes: &[u8]) {
        let masked = self.masks[usize::from(stream == OutputStream::Stderr)].push(bytes);
        self.write_masked(stream, &masked);
    }
}

impl LogSink {
    fn write_masked(&mut self, stream: OutputStream, bytes: &[u8]) {
        use std::io::Write;
        if bytes.is_empty() {
            return;
        }
        let _ = match (&mut self.file, stream) {
            (Some(f), _) => f.write_all(bytes),
            (None, OutputStream::Stdout) => std::io::stdout().lock().write_all(bytes),
            (None, OutputStream::Stderr) => std::io::stderr().lock().write_all(bytes),
        };
        self.since_check += bytes.len() as u64;
        if let Some((log, max)) = &self.log
            && self.since_check >= Self::CHECK_EVERY.min(*max / 4).max(1)
        {
            self.since_check = 0;
            let _ = cap_log(log, *max);
        }
        if stream == OutputStream::Stdout {
            self.tail.extend_from_slice(bytes);
            if self.tail.len() > TAIL_BYTES {
                self.tail.drain(..self.tail.len() - TAIL_BYTES);
                self.cut = true;
            }
        }
    }
}

/// A line of the worker's own in its log (its stderr): time-stamped, masked.
pub(super) fn log_line(text: &str) {
    use domain::ports::Clock;
    eprintln!("[berth worker {}] {}", crate::edge::context::SystemClock.now(), crate::edge::redact::redact(text));
}

#[cfg(test)]
mod tests {
    use super::{RESULT_CHARS, result_line};

    #[test]
    fn the_result_is_the_last_non_blank_line_and_the_end_of_a_long_one() {
        assert_eq!(result_line(b"first\nthe result\n\n  \n", false), "the result");
        assert_eq!(result_line(b"no newline at the end", false), "no newline at the end");
        assert_eq!(result_line(b"a\0b\r\n", false), "ab");
        assert_eq!(result_line(b"\n\n", false), "");
        let long = format!("{}END\n", "x".repeat(2000));
        let got = result_line(long.as_bytes(), false);
        assert!(got.starts_with('…') && got.ends_with("END"), "{got}");
        assert_eq!(got.chars().count(), RESULT_CHARS + 1);
        // A tail that starts inside a line (and inside a character) says the line began before it.
        assert_eq!(result_line(&[0xa9, b'o', b'k'], true), "…ok");
        assert_eq!(result_line(b"end of a long one\nlast\n", true), "last");
    }
}
