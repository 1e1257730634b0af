//! Removal of a folder tree without recursion: a task controls what is in its workspace, and a tree a few thousand
//! levels deep overflows the stack of any removal that recurses per level (`std::fs::remove_dir_all` does).
//!
//! The walk keeps at most three descriptors open and one name per level in memory (a path that deep is longer than
//! any system call takes, so every step is relative to an open folder). It goes down by `openat(O_NOFOLLOW)`, so a
//! symlink is never followed, only unlinked; it comes back up through `..`, checked against the device and inode it
//! recorded on the way down, so a folder moved while the walk runs stops it rather than sending it elsewhere.

use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags, fstat, openat, statat, unlinkat};
use rustix::io::Errno;

const DIR: OFlags = OFlags::DIRECTORY.union(OFlags::RDONLY).union(OFlags::CLOEXEC).union(OFlags::NOFOLLOW);

/// What a folder is, whatever it is called now: (device, inode).
fn identity(fd: &OwnedFd) -> io::Result<(u64, u64)> {
    let st = fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

/// Removes `dir` and everything in it, however deep, without following a symlink (one is removed as a file).
/// `dir` itself must not be a symlink: it is opened with `O_NOFOLLOW`.
///
/// # Errors
/// The first failure (a permission refused keeps its kind, so a caller can retry as root); a folder moved out from
/// under the walk is an error, and what was not reached yet is left.
pub fn remove_tree(dir: &Path) -> io::Result<()> {
    let mut cur = openat(CWD, dir, DIR, Mode::empty())?;
    // The way down from `dir` to `cur`: each folder's name and the identity of the folder holding it.
    let mut trail: Vec<(CString, (u64, u64))> = Vec::new();
    loop {
        if let Some(name) = clear_files(&cur)? {
            match openat(&cur, name.as_c_str(), DIR, Mode::empty()) {
                Ok(child) => {
                    trail.push((name, identity(&cur)?));
                    cur = child;
                }
                // Gone, or no longer a folder, since it was listed: the next listing tells.
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => {}
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        // `cur` is empty: go back up and remove it.
        let Some((name, parent_id)) = trail.pop() else { break };
        let parent = openat(&cur, c"..", DIR, Mode::empty())?;
        if identity(&parent)? != parent_id {
            return Err(io::Error::other(format!(
                "a folder under {} was moved while it was being removed; the rest is left",
                dir.display()
            )));
        }
        drop(cur);
        match unlinkat(&parent, name.as_c_str(), AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
        cur = parent;
    }
    drop(cur);
    std::fs::remove_dir(dir)
}

/// Unlinks every entry of `dir` that is not a folder (a symlink included) and returns the name of the first folder
/// met, or `None` when `dir` is now empty.
fn clear_files(dir: &OwnedFd) -> io::Result<Option<CString>> {
    let mut entries = Dir::read_from(dir)?;
    while let Some(entry) = entries.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Directory => true,
            // A file system that does not say: ask, without following a symlink.
            FileType::Unknown => match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => FileType::from_raw_mode(st.st_mode) == FileType::Directory,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(e.into()),
            },
            _ => false,
        };
        if is_dir {
            return Ok(Some(name.to_owned()));
        }
        match unlinkat(dir, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            // Became a folder since it was listed.
            Err(Errno::ISDIR) => return Ok(Some(name.to_owned())),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deep_chain_wide_folders_and_symlinks_go_and_link_targets_stay() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(outside.join("keep")).unwrap();
        std::fs::write(outside.join("keep").join("precious"), "x").unwrap();
        let top = tmp.path().join("top");
        std::fs::create_dir_all(&top).unwrap();
        for i in 0..50 {
            std::fs::create_dir_all(top.join(format!("w{i}")).join("x")).unwrap();
            std::fs::write(top.join(format!("w{i}")).join("f"), "y").unwrap();
        }
        std::os::unix::fs::symlink(&outside, top.join("w3").join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("keep"), top.join("dirlink")).unwrap();
        // Deeper than a recursive removal survives on a small thread stack.
        let mut fd = openat(CWD, &top, DIR, Mode::empty()).unwrap();
        for _ in 0..20_000 {
            rustix::fs::mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
            fd = openat(&fd, "d", DIR, Mode::empty()).unwrap();
        }
        drop(fd);
        let small = std::thread::Builder::new().stack_size(64 * 1024);
        let top2 = top.clone();
        small.spawn(move || remove_tree(&top2)).unwrap().join().unwrap().unwrap();
        assert!(top.symlink_metadata().is_err());
        assert!(outside.join("keep").join("precious").exists());
    }

    #[test]
    fn a_symlink_given_as_the_top_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("real")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("real"), tmp.path().join("link")).unwrap();
        assert!(remove_tree(&tmp.path().join("link")).is_err());
        assert!(tmp.path().join("real").is_dir());
    }
}
