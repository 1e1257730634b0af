//! The egress denial log, bounded: JSON lines appended by every proxy of a home to one file, rotated at
//! [`LOG_CAP`] (one older file kept, `<log>.1`), and a denial repeated within [`REPEAT_WINDOW`] of its last row
//! counted instead of written: the next row of it, or the proxy's periodic flush, stands for all of them (`count`,
//! absent when 1), so the counts of a log's rows add up to its denials.
//! A sandbox that loops on a refused request costs a row per window, and one that varies its requests at most twice
//! the cap on disk. Reading (`sandbox denials`) goes from the end, so `--tail N` costs N rows, not the log.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The size at which the log is rotated.
pub const LOG_CAP: u64 = 4 << 20;

/// How long an identical denial (source, kind, destination, reason) is counted rather than written again.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(5);

/// The most distinct denials whose repeats are counted at once; past it a denial is written (the cap still holds).
const MAX_TRACKED: usize = 4096;

/// What makes two denials the same.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub source: String,
    pub kind: String,
    pub destination: String,
    pub reason: String,
}

#[derive(Debug)]
struct Seen {
    written: Instant,
    repeated: u64,
    /// The task its last row named, for the row that carries the count.
    task: String,
}

/// The log of one proxy (the file is shared with the home's other proxies, serialized by a lock file beside it).
#[derive(Debug)]
pub(super) struct DenialLog {
    path: PathBuf,
    file: Mutex<Option<std::fs::File>>,
    seen: Mutex<HashMap<Key, Seen>>,
}

/// One row to write: the denial, the task it came from, and how many identical denials it stands for.
pub(super) struct Row<'a> {
    pub key: &'a Key,
    pub task: &'a str,
    pub count: u64,
}

impl DenialLog {
    pub fn open(path: PathBuf) -> Self {
        let file = append(&path);
        if let Err(e) = &file {
            eprintln!("cannot open the denial log {}: {e}", path.display());
        }
        Self { path, file: Mutex::new(file.ok()), seen: Mutex::new(HashMap::new()) }
    }

    /// Whether this denial is to be written now, and how many denials its row stands for (itself and the repeats
    /// counted since its last row), or only counted.
    pub fn admit(&self, key: &Key, task: &str, now: Instant) -> Option<u64> {
        let Ok(mut seen) = self.seen.lock() else { return Some(1) };
        if let Some(s) = seen.get_mut(key) {
            if now.duration_since(s.written) < REPEAT_WINDOW {
                s.repeated += 1;
                task.clone_into(&mut s.task);
                return None;
            }
            let count = s.repeated + 1;
            *s = Seen { written: now, repeated: 0, task: task.to_owned() };
            return Some(count);
        }
        if seen.len() < MAX_TRACKED {
            seen.insert(key.clone(), Seen { written: now, repeated: 0, task: task.to_owned() });
        }
        Some(1)
    }

    /// The counts of repeats whose window ended with no row after them, taken (their rows are the caller's to
    /// write); entries with nothing pending and an ended window are forgotten.
    pub fn due(&self, now: Instant) -> Vec<(Key, String, u64)> {
        let Ok(mut seen) = self.seen.lock() else { return Vec::new() };
        let mut out = Vec::new();
        seen.retain(|key, s| {
            if now.duration_since(s.written) < REPEAT_WINDOW {
                return true;
            }
            if s.repeated > 0 {
                out.push((key.clone(), s.task.clone(), s.repeated));
            }
            false
        });
        out
    }

    /// Appends `line` (one JSON object, no newline), rotating first when the file reached [`LOG_CAP`].
    pub fn write(&self, line: &str) {
        let Ok(mut guard) = self.file.lock() else { return };
        // Every proxy of the home appends here: one at a time, so a rotation never loses another's rows.
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.path.with_extension("lock"))
            .and_then(|f| f.lock().map(|()| f));
        if let Err(e) = &lock {
            eprintln!("cannot lock the denial log {}: {e}", self.path.display());
        }
        // Another proxy rotated it: this one's file is the old one now.
        if guard.as_ref().is_none_or(|f| !same_file(f, &self.path)) {
            *guard = append(&self.path).ok();
        }
        if guard.as_ref().and_then(|f| f.metadata().ok()).is_some_and(|m| m.len() >= LOG_CAP) {
            if let Err(e) = std::fs::rename(&self.path, rotated(&self.path)) {
                eprintln!("cannot rotate the denial log {}: {e}", self.path.display());
            }
            *guard = append(&self.path).ok();
        }
        if let Some(file) = guard.as_mut() {
            let _ = file.write_all(format!("{line}\n").as_bytes());
        }
        drop(lock);
    }
}

impl Row<'_> {
    /// The row's JSON line, stamped `time` under `policy`.
    pub fn line(&self, time: &str, policy: &str) -> String {
        let k = self.key;
        let line = Line {
            time,
            task: self.task,
            source: &k.source,
            kind: &k.kind,
            destination: &k.destination,
            reason: &k.reason,
            policy,
            count: self.count,
        };
        serde_json::to_string(&line).unwrap_or_default()
    }
}

/// A row as the log holds it; `count` (the identical denials it stands for) only when not 1.
#[derive(serde::Serialize)]
struct Line<'a> {
    time: &'a str,
    task: &'a str,
    source: &'a str,
    kind: &'a str,
    destination: &'a str,
    reason: &'a str,
    policy: &'a str,
    #[serde(skip_serializing_if = "is_one")]
    count: u64,
}

fn is_one(n: &u64) -> bool {
    *n == 1
}

fn append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().create(true).append(true).open(path)
}

fn same_file(f: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (f.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The older file a rotation keeps: `<log>.1`.
pub fn rotated(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

/// Calls `each` with the lines of the file at `path` from its last to its first, until it returns false; reads
/// backwards in blocks, so what is not reached is not read. A missing file has no lines.
///
/// # Errors
/// The file exists but cannot be read.
pub fn lines_from_end(path: &Path, mut each: impl FnMut(&[u8]) -> bool) -> std::io::Result<()> {
    const BLOCK: u64 = 64 * 1024;
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut start = f.metadata()?.len();
    // The bytes after `start` not yet handed out: a line's tail waiting for its head.
    let mut carry: Vec<u8> = Vec::new();
    while start > 0 {
        let from = start.saturating_sub(BLOCK);
        let mut block = vec![0; usize::try_from(start - from).unwrap_or(0)];
        f.seek(SeekFrom::Start(from))?;
        f.read_exact(&mut block)?;
        block.extend_from_slice(&carry);
        start = from;
        let mut end = block.len();
        while let Some(nl) = block[..end].iter().rposition(|b| *b == b'\n') {
            if nl + 1 < end && !each(&block[nl + 1..end]) {
                return Ok(());
            }
            end = nl;
        }
        block.truncate(end);
        carry = block;
    }
    if !carry.is_empty() {
        each(&carry);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(d: &str) -> Key {
        Key { source: "10.0.0.130".into(), kind: "http".into(), destination: d.into(), reason: "not listed".into() }
    }

    #[test]
    fn a_repeat_within_the_window_is_counted_and_its_count_written_after() {
        let log = DenialLog { path: PathBuf::new(), file: Mutex::new(None), seen: Mutex::new(HashMap::new()) };
        let t0 = Instant::now();
        assert_eq!(log.admit(&key("a:80"), "t1", t0), Some(1));
        for _ in 0..3 {
            assert_eq!(log.admit(&key("a:80"), "t1", t0 + Duration::from_secs(1)), None);
        }
        assert_eq!(log.admit(&key("b:80"), "t1", t0), Some(1), "another destination is its own");
        assert!(log.due(t0 + Duration::from_secs(1)).is_empty(), "nothing due within the window");
        assert_eq!(log.admit(&key("a:80"), "t2", t0 + REPEAT_WINDOW), Some(4), "the next row stands for them too");
        assert_eq!(log.admit(&key("a:80"), "t2", t0 + REPEAT_WINDOW), None);
        let due = log.due(t0 + REPEAT_WINDOW * 2);
        assert_eq!(due, vec![(key("a:80"), "t2".to_owned(), 1)]);
        assert!(log.due(t0 + REPEAT_WINDOW * 3).is_empty(), "taken once");
    }

    #[test]
    fn the_log_rotates_at_its_cap_keeping_one_older_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("denied.jsonl");
        std::fs::write(&path, vec![b'x'; usize::try_from(LOG_CAP).unwrap()]).unwrap();
        std::fs::write(rotated(&path), "oldest\n").unwrap();
        let log = DenialLog::open(path.clone());
        log.write("{\"n\":1}");
        log.write("{\"n\":2}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"n\":1}\n{\"n\":2}\n");
        assert_eq!(std::fs::metadata(rotated(&path)).unwrap().len(), LOG_CAP, "the full one kept, the oldest gone");
        // Another proxy's rotation: this one follows the new file.
        std::fs::rename(&path, rotated(&path)).unwrap();
        log.write("{\"n\":3}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"n\":3}\n");
    }

    #[test]
    fn lines_come_from_the_end_across_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l");
        let long = "y".repeat(70_000);
        std::fs::write(&path, format!("a\n{long}\nb\n\nc")).unwrap();
        let mut got = Vec::new();
        lines_from_end(&path, |l| {
            got.push(String::from_utf8_lossy(l).into_owned());
            true
        })
        .unwrap();
        assert_eq!(got, vec!["c".to_owned(), "b".into(), long, "a".into()]);
        let mut first = Vec::new();
        lines_from_end(&path, |l| {
            first.push(l.to_vec());
            false
        })
        .unwrap();
        assert_eq!(first, vec![b"c".to_vec()]);
        lines_from_end(&dir.path().join("missing"), |_| panic!("no lines")).unwrap();
    }
}
