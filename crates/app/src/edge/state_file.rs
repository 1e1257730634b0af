//! The small files berth keeps for itself in its home (`gateway.json`, `cache/idle-since.json`, the remembered
//! engine API version): read only when they are small regular files, never through a symlink and never waiting on a
//! FIFO; written whole through a fresh temporary file (created exclusively, so nothing planted at a predictable
//! name is written through) and a rename, which replaces whatever sat at the name instead of following it.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

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

/// Replaces `path` whole with `bytes` (mode `mode`) through a temporary file beside it (`tempfile`: a random name,
/// created exclusively) and a rename, so a reader sees all of it or none and nothing planted at or beside `path` is
/// written through.
///
/// # Errors
/// When the folder cannot be written, or the rename fails (the temporary file is removed then).
pub fn replace(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| format!(".{}.", n.to_string_lossy())).unwrap_or_default();
    let mut tmp = tempfile::Builder::new()
        .prefix(&name)
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(mode))
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// [`replace`] with mode 0600, the folder made when missing. Best effort: a failure leaves `path` as it was.
pub fn write_atomically(path: &Path, bytes: &[u8]) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = replace(path, bytes, 0o600);
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
