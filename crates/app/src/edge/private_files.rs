//! Berth's files are its user's alone: the process creates files 0600 and folders 0700, and the home is kept 0700.
//!
//! Worker logs and the board hold what tasks printed, caches and the gateway's state say what runs; in a 0755 home
//! with 0644 files every local user could read them. A umask set once at the start covers every file berth or a
//! library it uses creates (SQLite's journal included) without a mode at each call site; the home folder itself is
//! tightened on every command, so a home made by an older berth stops being readable by others at its next use,
//! and with it every file inside, whatever that file's own mode.

use std::sync::atomic::{AtomicU32, Ordering};

use rustix::fs::Mode;

/// The umask the process was started with, for a program berth `exec`s on the user's behalf
/// (`kanban.worker_command`): its files are the user's business, not berth's.
static STARTED_WITH: AtomicU32 = AtomicU32::new(0o022);

/// Makes every file and folder the process creates from now on private to its user.
pub fn enter() {
    let old = rustix::process::umask(Mode::from_raw_mode(0o077));
    STARTED_WITH.store(old.as_raw_mode(), Ordering::SeqCst);
}

/// Gives back the umask the process started with (right before it `exec`s another program).
pub fn restore() {
    rustix::process::umask(Mode::from_raw_mode(STARTED_WITH.load(Ordering::SeqCst)));
}

/// `create_dir_all`, looking first: a `mkdir` of a folder that exists still takes its parent's lock, which every
/// worker start and every command would pay.
///
/// # Errors
/// What `create_dir_all` says.
pub fn ensure_dir(dir: &std::path::Path) -> std::io::Result<()> {
    if dir.is_dir() { Ok(()) } else { std::fs::create_dir_all(dir) }
}

/// Takes group and other permissions off the home folder when this user owns it (a home shared on purpose with
/// another user is theirs to set; a failure is logged, never fatal). The user's own home folder (`user_home`, a
/// `BERTH_HOME=$HOME`) is left alone: other programs may need it open (`~/public_html`).
pub fn tighten_home(home: &std::path::Path, user_home: Option<&str>) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Ok(meta) = std::fs::symlink_metadata(home) else { return };
    if !meta.is_dir() || meta.uid() != rustix::process::geteuid().as_raw() || meta.mode() & 0o077 == 0 {
        return;
    }
    let same = |other: &str| std::fs::canonicalize(other).ok() == std::fs::canonicalize(home).ok();
    if user_home.is_some_and(same) {
        return;
    }
    let mode = meta.mode() & 0o700;
    if let Err(e) = std::fs::set_permissions(home, std::fs::Permissions::from_mode(mode)) {
        tracing::warn!("cannot make the home {} private to its user: {e}", home.display());
    }
}
