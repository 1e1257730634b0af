//! What a host folder holds that a sandbox must not reach: any berth home (this one's or another's, on the same
//! machine) and the container engine's socket (or a hard link of it) anywhere below it.
//!
//! A home is recognised by the marker every command leaves in it ([`MARKER`]), or, for a home no berth with the
//! marker has used since, by its layout: the board file `berth-kanban.db`, or `config.yaml` beside a `kanban/` folder.
//! A folder is walked without following symlinks (a symlink inside a mount resolves inside the sandbox) and within
//! bounds ([`MAX_ENTRIES`], [`MAX_DEPTH`]); a walk cut at a bound, or a folder it cannot read, refuses rather than
//! lets through what it did not see.

use std::path::{Path, PathBuf};

/// The file every berth home holds (written by each command when missing).
pub const MARKER: &str = ".berth-home";

/// The file a sandboxes folder (`terminal.sandbox_dir`) holds once berth made a sandbox's folder in it: the
/// canonical path of the home it belongs to, so another home recognises it wherever it is.
pub const SANDBOXES_MARKER: &str = ".berth-sandboxes";

/// What kind of berth folder a folder is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Home,
    Sandboxes,
}

impl Kind {
    /// The folder in words, and what a sandbox that mounted it would reach.
    pub fn words(self) -> (&'static str, &'static str) {
        match self {
            Kind::Home => ("a berth home", "whose config and board it exposes"),
            Kind::Sandboxes => ("a berth sandboxes folder", "whose sandboxes' files it exposes"),
        }
    }
}

/// The marker's text: what the file is for, to whoever finds it.
const MARKER_TEXT: &str =
    "This folder is a berth home. berth never mounts it, anything inside it or a folder holding it into a sandbox.\n";

/// The most entries (files, folders, anything) one mounted folder's walk reads before it gives up.
pub const MAX_ENTRIES: usize = 100_000;

/// The deepest folder level below a mounted folder the walk reads before it gives up.
pub const MAX_DEPTH: usize = 64;

/// Leaves the marker in `home` when it is missing; a failure is logged, never fatal (the layout still tells).
pub fn mark_home(home: &Path) {
    let marker = home.join(MARKER);
    if std::fs::symlink_metadata(&marker).is_ok() {
        return;
    }
    if let Err(e) = std::fs::write(&marker, MARKER_TEXT) {
        tracing::debug!("cannot write {}: {e}", marker.display());
    }
}

/// Leaves the marker of a sandboxes folder, naming `home`, in `dir` when it is missing; a failure is logged.
pub fn mark_sandboxes(dir: &Path, home: &Path) {
    let marker = dir.join(SANDBOXES_MARKER);
    if std::fs::symlink_metadata(&marker).is_ok() {
        return;
    }
    let text = format!("{}\n", super::canonical(home).display());
    if let Err(e) = std::fs::write(&marker, text) {
        tracing::debug!("cannot write {}: {e}", marker.display());
    }
}

/// The home the sandboxes folder `dir` belongs to, as its marker says.
pub fn sandboxes_owner(dir: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(dir.join(SANDBOXES_MARKER)).ok()?;
    Some(PathBuf::from(text.lines().next()?.trim()))
}

/// Whether `dir` is a berth home (its marker, or the layout of a home made before the marker) or a sandboxes folder.
pub fn kind_of(dir: &Path) -> Option<Kind> {
    let has = |name: &str| std::fs::symlink_metadata(dir.join(name));
    if has(MARKER).is_ok()
        || has(kanban_store::BOARD_FILE).is_ok()
        || (has("config.yaml").is_ok_and(|m| m.is_file()) && has("kanban").is_ok_and(|m| m.is_dir()))
    {
        return Some(Kind::Home);
    }
    has(SANDBOXES_MARKER).is_ok().then_some(Kind::Sandboxes)
}

/// The nearest berth folder at or above `path` (canonical), with its kind.
pub fn berth_dir_around(path: &Path) -> Option<(PathBuf, Kind)> {
    path.ancestors().find_map(|a| Some((a.to_path_buf(), kind_of(a)?)))
}

/// A device and inode: one file, under any of its names.
pub type FileId = (u64, u64);

/// The file ids of those of `paths` that exist.
pub fn file_ids(paths: &[PathBuf]) -> Vec<FileId> {
    use std::os::unix::fs::MetadataExt;
    paths.iter().filter_map(|p| std::fs::metadata(p).ok()).map(|m| (m.dev(), m.ino())).collect()
}

/// What a walk found that refuses the mount.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// The engine's socket, or a hard link of it, at this path.
    Socket(PathBuf),
    /// A berth home or sandboxes folder at this path.
    Berth(PathBuf, Kind),
    /// A kernel filesystem ([`KERNEL_MAGICS`], the host's `/dev`) at this path: `/proc/<pid>/root` of any process
    /// the sandbox's user may trace is that process's whole root filesystem, the engine's socket included; a cgroup
    /// tree freezes host processes; a host terminal takes keystrokes.
    Kernel(PathBuf, &'static str),
    /// The walk stopped before it saw everything: why, in words.
    Unchecked(String),
}

/// Walks the folder `root` (canonical) for a berth home or one of the `sockets`; `None` when it holds neither.
pub fn scan(root: &Path, sockets: &[FileId]) -> Option<Found> {
    scan_within(root, sockets, MAX_ENTRIES, MAX_DEPTH)
}

fn scan_within(root: &Path, sockets: &[FileId], max_entries: usize, max_depth: usize) -> Option<Found> {
    if let Some(fs) = kernel_fs(root) {
        return Some(Found::Kernel(root.to_path_buf(), fs));
    }
    if !std::fs::symlink_metadata(root).is_ok_and(|m| m.is_dir()) {
        return None;
    }
    let mut seen = 0usize;
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        if let Some(fs) = kernel_fs(&dir) {
            return Some(Found::Kernel(dir, fs));
        }
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) => return Some(Found::Unchecked(format!("cannot read {} ({e})", dir.display()))),
        };
        let (mut config, mut kanban) = (false, false);
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => return Some(Found::Unchecked(format!("cannot read {} ({e})", dir.display()))),
            };
            seen += 1;
            if seen > max_entries {
                return Some(Found::Unchecked(format!("it holds more than {max_entries} entries")));
            }
            let name = entry.file_name();
            if name == MARKER || name == kanban_store::BOARD_FILE {
                return Some(Found::Berth(dir, Kind::Home));
            }
            if name == SANDBOXES_MARKER {
                return Some(Found::Berth(dir, Kind::Sandboxes));
            }
            let Ok(kind) = entry.file_type() else { continue };
            config |= name == "config.yaml" && kind.is_file();
            kanban |= name == "kanban" && kind.is_dir();
            if kind.is_dir() {
                if depth + 1 > max_depth {
                    return Some(Found::Unchecked(format!("it has folders more than {max_depth} levels deep")));
                }
                stack.push((entry.path(), depth + 1));
            } else if is_socket(&kind) && is_one_of(&entry.path(), sockets) {
                return Some(Found::Socket(entry.path()));
            }
        }
        if config && kanban {
            return Some(Found::Berth(dir, Kind::Home));
        }
    }
    None
}

/// The kernel filesystems a mount must not hand a sandbox, by their `statfs` magic: the host's processes and
/// kernel objects, its cgroups (freeze, kill or starve any host process), its terminals, its message queues, and
/// the kernel's debugging, tracing, security, BPF and firmware interfaces.
const KERNEL_MAGICS: &[(u64, &str)] = &[
    (0x9fa0, "proc"),
    (0x6265_6572, "sysfs"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0x1cd1, "devpts"),
    (0x1980_0202, "mqueue"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0xcafe_4a11, "bpf"),
    (0x6165_676c, "pstore"),
    (0xde5e_81e4, "efivarfs"),
    (0x6265_6570, "configfs"),
    (0x4249_4e4d, "binfmt_misc"),
    (0xf97c_ff8c, "selinuxfs"),
    (0x6573_5543, "fusectl"),
    (0x6e73_6673, "nsfs"),
];

/// The host's device and shared-memory mounts, which carry a tmpfs's magic (`devtmpfs` is one): known by the device
/// id of the filesystem mounted there, so a bind of them anywhere else is known too.
const KERNEL_MOUNTS: &[(&str, &str)] = &[("/dev", "devtmpfs"), ("/dev/shm", "shared memory (/dev/shm)")];

/// The kernel filesystem `path` is on, when it is one a mount must not hand a sandbox.
fn kernel_fs(path: &Path) -> Option<&'static str> {
    use std::os::unix::fs::MetadataExt;
    let kind = u64::try_from(rustix::fs::statfs(path).ok()?.f_type).ok()?;
    if let Some((_, name)) = KERNEL_MAGICS.iter().find(|(magic, _)| *magic == kind) {
        return Some(name);
    }
    let dev = std::fs::metadata(path).ok()?.dev();
    kernel_mounts().iter().find(|(d, _)| *d == dev).map(|(_, name)| *name)
}

/// The device ids of [`KERNEL_MOUNTS`] that are mount points on this host (a `/dev` on the root filesystem is not
/// told this way: the path check covers it), read once.
fn kernel_mounts() -> &'static [(u64, &'static str)] {
    use std::os::unix::fs::MetadataExt;
    static MOUNTS: std::sync::OnceLock<Vec<(u64, &'static str)>> = std::sync::OnceLock::new();
    MOUNTS.get_or_init(|| {
        let dev = |p: &Path| std::fs::metadata(p).ok().map(|m| m.dev());
        KERNEL_MOUNTS
            .iter()
            .filter_map(|(path, name)| {
                let path = Path::new(path);
                let own = dev(path)?;
                (Some(own) != path.parent().and_then(dev)).then_some((own, *name))
            })
            .collect()
    })
}

fn is_socket(kind: &std::fs::FileType) -> bool {
    use std::os::unix::fs::FileTypeExt;
    kind.is_socket()
}

fn is_one_of(path: &Path, ids: &[FileId]) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| ids.contains(&(m.dev(), m.ino())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn a_home_is_its_marker_or_its_layout() {
        let t = tmp();
        let d = t.path();
        assert_eq!(kind_of(d), None);
        std::fs::write(d.join("config.yaml"), "").unwrap();
        assert_eq!(kind_of(d), None, "config.yaml alone is any project's");
        std::fs::create_dir(d.join("kanban")).unwrap();
        assert_eq!(kind_of(d), Some(Kind::Home));
        let other = tmp();
        mark_home(other.path());
        assert_eq!(kind_of(other.path()), Some(Kind::Home));
        assert!(std::fs::read_to_string(other.path().join(MARKER)).unwrap().contains("berth home"));
        let deep = other.path().join("a/b");
        std::fs::create_dir_all(&deep).unwrap();
        assert_eq!(berth_dir_around(&deep), Some((other.path().to_path_buf(), Kind::Home)));
        // A sandboxes folder names its home.
        let sb = tmp();
        mark_sandboxes(sb.path(), other.path());
        assert_eq!(kind_of(sb.path()), Some(Kind::Sandboxes));
        assert_eq!(sandboxes_owner(sb.path()), Some(super::super::canonical(other.path())));
    }

    #[test]
    fn a_walk_finds_a_home_or_a_socket_deep_inside_and_refuses_what_it_cannot_see() {
        let t = tmp();
        let root = t.path();
        std::fs::create_dir_all(root.join("a/b/c")).unwrap();
        assert_eq!(scan(root, &[]), None);
        std::fs::write(root.join("a/b/c").join(kanban_store::BOARD_FILE), "").unwrap();
        assert_eq!(scan(root, &[]), Some(Found::Berth(root.join("a/b/c"), Kind::Home)));
        std::fs::remove_file(root.join("a/b/c").join(kanban_store::BOARD_FILE)).unwrap();
        // A socket is the engine's only by its file id; a hard link of it anywhere is found.
        let sock = root.join("a/b/s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert_eq!(scan(root, &[]), None, "a socket that is not the engine's");
        let ids = file_ids(std::slice::from_ref(&sock));
        std::fs::hard_link(&sock, root.join("a/b/c/link")).unwrap();
        assert!(matches!(scan(root, &ids), Some(Found::Socket(p)) if p.ends_with("link") || p.ends_with("s.sock")));
        // Bounds: too many entries or too deep is not checked, so refused.
        let wide = tmp();
        for i in 0..5 {
            std::fs::write(wide.path().join(i.to_string()), "").unwrap();
        }
        assert!(matches!(scan_within(wide.path(), &[], 4, 8), Some(Found::Unchecked(w)) if w.contains("4 entries")));
        assert_eq!(scan_within(wide.path(), &[], 5, 8), None);
        assert!(matches!(scan_within(root, &ids, 100, 1), Some(Found::Unchecked(w)) if w.contains("1 levels")));
        // The process filesystem, whichever part of it; the host's cgroups and devices, a file of them too.
        let me = PathBuf::from(format!("/proc/{}", std::process::id()));
        assert!(matches!(scan(&me, &[]), Some(Found::Kernel(_, "proc"))));
        if Path::new("/sys/fs/cgroup").exists() {
            assert!(matches!(scan(Path::new("/sys/fs/cgroup"), &[]), Some(Found::Kernel(..))), "the cgroup tree");
        }
        assert!(matches!(scan(Path::new("/dev/pts"), &[]), Some(Found::Kernel(_, "devpts"))));
        if !kernel_mounts().is_empty() {
            assert!(matches!(scan(Path::new("/dev/null"), &[]), Some(Found::Kernel(_, "devtmpfs"))), "a device file");
        }
    }
}
