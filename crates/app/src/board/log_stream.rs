//! `kanban logs` without `--tail`: the whole log (or one run's part) streamed to stdout a piece at a time, so a log
//! of any size costs a buffer, not its size in memory; `--json` writes the same document `output::json` would,
//! one line at a time.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;

/// The longest piece of one line held at a time: a longer line is printed in pieces.
const PIECE: u64 = 1 << 20;

/// What streaming the log left for `-f`: where following goes on, the end of what was read (to find the place again
/// after a cap), whether anything was printed, and whether the asked run's confirmation line was among it.
pub(super) struct Streamed {
    pub(super) pos: u64,
    pub(super) seen: Vec<u8>,
    pub(super) printed: bool,
    pub(super) saw_run: bool,
}

/// Where the printed lines go: the log's bytes (escaped on a terminal), the `lines` of a JSON document, or only the
/// last `n` kept (`--run N --tail M`).
pub(super) enum Sink {
    Text(Vec<u8>),
    Json { first: bool },
    Last(std::collections::VecDeque<String>, usize),
}

impl Sink {
    fn line(&mut self, line: &str) {
        match self {
            Self::Text(buf) => {
                buf.extend_from_slice(line.as_bytes());
                if buf.len() >= 64 * 1024 {
                    write_out(buf);
                    buf.clear();
                }
            }
            Self::Json { first } => {
                let text = line.strip_suffix('\n').unwrap_or(line);
                let text = text.strip_suffix('\r').unwrap_or(text);
                let sep = if *first { "\n" } else { ",\n" };
                *first = false;
                let _ = write!(std::io::stdout().lock(), "{sep}    {}", serde_json::Value::from(text));
            }
            Self::Last(kept, n) => {
                kept.push_back(line.to_owned());
                if kept.len() > *n {
                    kept.pop_front();
                }
            }
        }
    }
}

/// The last `n` lines of a run's part of `path` (streamed: at most `n` lines held), and what following needs.
pub(super) fn last_lines(
    path: &Path,
    is_start: impl Fn(&str) -> bool,
    is_run_start: impl Fn(&str) -> bool,
    n: usize,
) -> (Streamed, String) {
    let (s, sink) = stream(path, true, is_start, is_run_start, Sink::Last(Default::default(), n), String::new);
    let Sink::Last(kept, _) = sink else { return (s, String::new()) };
    (s, kept.into_iter().collect())
}

/// Streams `path` from its start to `sink`: every line, or with `run` only that run's part (from its confirmation
/// line, as `is_start`/`is_run_start` tell, to the next run's). A partial last line is left for `-f`.
pub(super) fn stream(
    path: &Path,
    run: bool,
    is_start: impl Fn(&str) -> bool,
    is_run_start: impl Fn(&str) -> bool,
    mut sink: Sink,
    json_tail: impl FnOnce() -> String,
) -> (Streamed, Sink) {
    let mut out = Streamed { pos: 0, seen: Vec::new(), printed: false, saw_run: false };
    if let Sink::Json { .. } = sink {
        let _ = write!(std::io::stdout().lock(), "{{\n  \"lines\": [");
    }
    let mut inside = !run;
    if let Ok(f) = std::fs::File::open(path) {
        let mut reader = BufReader::with_capacity(64 * 1024, f);
        let mut piece = Vec::new();
        let mut at_line_start = true;
        loop {
            piece.clear();
            let n = match Read::by_ref(&mut reader).take(PIECE).read_until(b'\n', &mut piece) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let ended = piece.last() == Some(&b'\n');
            if !ended && (n as u64) < PIECE {
                break; // the partial last line: printed with its end when following
            }
            out.pos += n as u64;
            out.seen.extend_from_slice(&piece);
            if out.seen.len() > 16 * 1024 {
                out.seen.drain(..out.seen.len() - 4096);
            }
            let text = String::from_utf8_lossy(&piece);
            if run && at_line_start && is_start(&text) {
                inside = is_run_start(&text);
                out.saw_run |= inside;
            }
            if inside {
                sink.line(&text);
                out.printed = true;
            }
            at_line_start = ended;
        }
    }
    match &mut sink {
        Sink::Text(buf) => write_out(buf),
        Sink::Json { first } => {
            let close = if *first { "]" } else { "\n  ]" };
            let _ = writeln!(std::io::stdout().lock(), "{close},\n{}\n}}", json_tail());
        }
        Sink::Last(..) => {}
    }
    out.seen = out.seen[out.seen.len().saturating_sub(4096)..].to_vec();
    (out, sink)
}

/// Writes log bytes to stdout: as they are into a pipe or a file, with control characters shown as escapes on a
/// terminal (a task's output must not drive the operator's terminal).
pub(super) fn write_out(bytes: &[u8]) {
    use std::io::IsTerminal;
    let mut out = std::io::stdout().lock();
    let _ = if out.is_terminal() {
        out.write_all(crate::edge::terminal_text::sanitize(&String::from_utf8_lossy(bytes)).as_bytes())
    } else {
        out.write_all(bytes)
    };
    let _ = out.flush();
}
