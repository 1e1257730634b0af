//! The small files berth keeps for itself in its home (`gateway.json`, `cache/idle-since.json`, the remembered
//! engine API version): read only when they are small regular files, never through a symlink and never waiting on a
//! FIFO; written whole through a fresh temporary file (created exclusively, so nothing planted at a predictable
//! name is written through) and a rename, which replaces whatever sat at the name instead of following it.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// The text of the regular file at `path` when it is at most `max` bytes; `None` for anything else (missing, a
/// symlink, a FIFO, a device, a directory, too large, not UTF-8).
pub fn read_small(path: &Path, max: u64) -> Option<String> {
    let flags = (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits();
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags.cast_signed()).open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > max {
        return None;
    }
    let mut text = String::new();
    file.take(max).read_to_string(&mut text).ok()?;
    Some(text)
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` (its folder made when missing) through a temporary file of a name no one can plant in
/// advance (pid, time and a counter; created exclusively, mode 0600) and a rename, so a reader sees all of it or
/// none and nothing at `path` or beside it is written through. Best effort: a failure leaves `path` as it was.
pub fn write_atomically(path: &Path, bytes: &[u8]) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return };
    let _ = std::fs::create_dir_all(dir);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{}.{}.{nanos:x}.{n}.tmp", name.to_string_lossy(), std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes));
    if written.is_err() || std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_and_symlinks_are_neither_read_nor_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, 0o600.into(), 0).unwrap();
        assert_eq!(read_small(&fifo, 4096), None);
        let target = dir.path().join("target");
        std::fs::write(&target, "mine").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(read_small(&link, 4096), None);
        write_atomically(&link, b"state");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine");
        assert_eq!(read_small(&link, 4096).as_deref(), Some("state"));
        write_atomically(&fifo, b"x");
        assert_eq!(read_small(&fifo, 4096).as_deref(), Some("x"));
    }
}
