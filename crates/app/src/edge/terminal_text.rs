//! Text from tasks (titles, commands, results, worker output) made safe for an operator's terminal: control
//! characters and bidirectional overrides are shown as escapes instead of being obeyed, so a task cannot set the
//! terminal's title, clipboard (OSC 52) or links, clear the screen, or reorder what the operator reads. And the tail
//! of a log, read from its end, so a log of any size costs a look at its last part only.

use std::borrow::Cow;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Whether `c` acts on a terminal or reorders text instead of showing as itself: the C0 controls but tab and
/// newline, DEL, the C1 controls, and the bidirectional embeddings, overrides and isolates.
fn is_unsafe(c: char) -> bool {
    (c.is_control() && c != '\t' && c != '\n') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every character that would act on a terminal written as an escape (`\x1b`, `\u{202e}`).
pub fn sanitize(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !is_unsafe(c) => out.push(c),
            c if u32::from(c) < 0x100 => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
        }
    }
    Cow::Owned(out)
}

/// One line for a listing: sanitized and cut at `max` characters, saying how much was left out.
pub fn shown_line(line: &str, max: usize) -> String {
    let safe = sanitize(line);
    let count = safe.chars().count();
    if count <= max {
        return safe.into_owned();
    }
    let cut: String = safe.chars().take(max).collect();
    format!("{cut}… ({} more characters)", count - max)
}

/// The longest run of characters without a space an error line shows whole.
const ERROR_WORD_MAX: usize = 120;

/// An error line as printed: sanitized, and each run of characters without a space longer than [`ERROR_WORD_MAX`]
/// (a 300-digit number, a value pasted by mistake) cut, saying how much was left out, so a refusal stays readable.
pub fn error_line(text: &str) -> String {
    // One line whatever it quotes (a task id typed with a newline in it, say).
    let one = text.trim_end().replace('\n', "\\n");
    let safe = sanitize(&one);
    if !safe.split(' ').any(|w| w.chars().count() > ERROR_WORD_MAX) {
        return safe.into_owned();
    }
    let words: Vec<String> = safe
        .split(' ')
        .map(|w| {
            let count = w.chars().count();
            if count <= ERROR_WORD_MAX {
                return w.to_owned();
            }
            let cut: String = w.chars().take(ERROR_WORD_MAX).collect();
            format!("{cut}… ({} more characters)", count - ERROR_WORD_MAX)
        })
        .collect();
    words.join(" ")
}

/// The bytes of the last read back from a log's end at most: a longer line is shown from this far before its end.
const TAIL_READ_MAX: u64 = 4 * 1024 * 1024;

/// The last `n` lines of the file at `path` (its whole lines; a last line without its newline included), read
/// backwards from its end, at most [`TAIL_READ_MAX`] bytes; and the file's length when read. Nothing when it cannot
/// be read.
pub fn tail_of_file(path: &Path, n: usize) -> (Vec<u8>, u64) {
    let Ok(mut f) = std::fs::File::open(path) else { return (Vec::new(), 0) };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if n == 0 {
        return (Vec::new(), len);
    }
    let mut buf: Vec<u8> = Vec::new();
    let mut start = len;
    const BLOCK: u64 = 64 * 1024;
    while start > 0 && len - start < TAIL_READ_MAX {
        let from = start.saturating_sub(BLOCK);
        let mut block = vec![0; usize::try_from(start - from).unwrap_or(0)];
        if f.seek(SeekFrom::Start(from)).is_err() || f.read_exact(&mut block).is_err() {
            break;
        }
        block.extend_from_slice(&buf);
        buf = block;
        start = from;
        // n lines need n newlines before them (the last one may lack its own).
        let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
        if body.iter().filter(|b| **b == b'\n').count() >= n {
            break;
        }
    }
    let body_len = buf.strip_suffix(b"\n").map_or(buf.len(), <[u8]>::len);
    let cut = buf[..body_len].iter().enumerate().rev().filter(|(_, b)| **b == b'\n').nth(n - 1).map(|(i, _)| i + 1);
    match cut {
        Some(i) => (buf.split_off(i), len),
        None => (buf, len),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_overrides_show_as_text() {
        assert_eq!(sanitize("plain\ttext"), "plain\ttext");
        assert_eq!(sanitize("\x1b]52;c;aGk=\x07"), "\\x1b]52;c;aGk=\\x07");
        assert_eq!(sanitize("a\x1b[2Jb\u{9b}c"), "a\\x1b[2Jb\\x9bc");
        assert_eq!(sanitize("\u{202e}gnp.exe"), "\\u{202e}gnp.exe");
        assert_eq!(shown_line("abcdef", 3), "abc… (3 more characters)");
    }

    #[test]
    fn an_error_line_is_sanitized_and_long_words_cut() {
        assert_eq!(error_line("no task x\x1b]0;T\x07"), "no task x\\x1b]0;T\\x07");
        let long = format!("invalid value \"{}\" for --priority", "9".repeat(300));
        let line = error_line(&long);
        assert!(line.starts_with("invalid value \"999") && line.ends_with("… (182 more characters) for --priority"));
        assert_eq!(error_line("short words stay"), "short words stay");
        assert_eq!(error_line("no task why\nnot\n"), "no task why\\nnot");
    }

    #[test]
    fn the_tail_is_read_from_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        std::fs::write(&p, "a\nb\nc\n").unwrap();
        assert_eq!(tail_of_file(&p, 2).0, b"b\nc\n");
        assert_eq!(tail_of_file(&p, 9).0, b"a\nb\nc\n");
        std::fs::write(&p, "a\nb\nc").unwrap();
        assert_eq!(tail_of_file(&p, 1).0, b"c");
        let big = format!("{}\nlast\n", "x".repeat(200_000));
        std::fs::write(&p, &big).unwrap();
        assert_eq!(tail_of_file(&p, 1), (b"last\n".to_vec(), big.len() as u64));
        assert_eq!(tail_of_file(&p, 2).0.len(), big.len());
    }
}
