//! The board's URL handed to a berth process that berth starts (a `berth worker run`, the runner) on one of its
//! standard descriptors, never in its environment or arguments.
//!
//! A process is open to every process of its user (`/proc/<pid>/environ`, `cmdline`, its descriptors, ptrace) from
//! its exec until `main` makes it non-dumpable (`process::keep_memory_private`), and task commands of that user run
//! all the while. So a URL holding a password travels only in a socket: the parent writes it into one end of a
//! socket pair, gives the other end to the child as its stdin or stdout and names which in [`VAR`] (the number
//! alone); the child reads it once it is non-dumpable and not traced, then puts `/dev/null` in its place. Unlike a
//! pipe or a file, a socket cannot be opened again through `/proc/<pid>/fd`, so the window shows nothing. A URL
//! without a password is an ordinary setting and travels in the environment as before.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};

/// The variable naming the descriptor (`0`: stdin, `1`: stdout) that holds the board's URL.
pub const VAR: &str = "BERTH_BOARD_URL_FD";

/// The longest URL taken from the socket.
const MAX_URL: usize = 64 * 1024;

/// Where the child finds the URL: a descriptor it does not otherwise read before `main`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    Stdin,
    Stdout,
}

/// Makes `cmd` (a berth child) receive the board's URL `url` through a socket instead of its environment: every
/// variable holding the password is taken out of its environment (those set on `cmd` and those it would inherit),
/// [`VAR`] names `slot`, and the child's end of the socket is returned, to be set as `slot` by the caller. `None`
/// when the URL holds no password: it then travels as any setting.
///
/// # Errors
/// The OS error when the socket cannot be made or written.
pub fn hand_over(cmd: &mut Command, url: &str, slot: Slot) -> std::io::Result<Option<Stdio>> {
    let secrets = kanban_postgres::url_secrets(url);
    if secrets.is_empty() {
        return Ok(None);
    }
    let holds = |v: &OsStr| {
        let v = v.to_string_lossy();
        secrets.iter().any(|s| v.contains(s.as_str()))
    };
    let set: Vec<OsString> = cmd.get_envs().filter(|(_, v)| v.is_some_and(holds)).map(|(k, _)| k.to_owned()).collect();
    let inherited = std::env::vars_os().filter(|(_, v)| holds(v)).map(|(k, _)| k);
    for k in set.into_iter().chain(inherited) {
        cmd.env_remove(k);
    }
    cmd.env_remove(config_bridge::env_var_for("kanban.database_url"));
    let (mut ours, theirs) = UnixStream::pair()?;
    ours.write_all(url.as_bytes())?;
    // Closed: the child reads to the end of the stream (what was written stays for it).
    drop(ours);
    cmd.env(VAR, if slot == Slot::Stdin { "0" } else { "1" });
    Ok(Some(Stdio::from(OwnedFd::from(theirs))))
}

/// In a process started by [`hand_over`] (its environment names [`VAR`]): takes the URL from that descriptor into
/// `env` as `kanban.database_url`'s variable, and leaves `/dev/null` in the descriptor's place. Called once, after
/// the process made itself non-dumpable; nothing happens without [`VAR`].
///
/// # Errors
/// One line when the descriptor is not the socket it should be, or the process is traced (a tracer attached before
/// the process was non-dumpable would read the URL too).
pub fn receive(env: &mut config_bridge::EnvMap) -> Result<(), String> {
    let Some(which) = env.0.remove(VAR) else { return Ok(()) };
    if let Some(tracer) = tracer().filter(|t| *t != 0) {
        return Err(format!("refusing to read the board's URL: this process is traced (by pid {tracer})"));
    }
    let url = match which.as_str() {
        "0" => read_socket(std::io::stdin()),
        "1" => read_socket(std::io::stdout()),
        other => Err(format!("{VAR} must be 0 or 1, not {other:?}")),
    }?;
    let null = std::fs::File::options().read(true).write(true).open("/dev/null").map_err(|e| e.to_string())?;
    let _ = if which == "0" { rustix::stdio::dup2_stdin(&null) } else { rustix::stdio::dup2_stdout(&null) };
    env.0.insert(config_bridge::env_var_for("kanban.database_url"), url);
    Ok(())
}

/// The pid tracing this process (0: none), from `/proc/self/status`.
fn tracer() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("TracerPid:"))?.trim().parse().ok()
}

/// Reads the socket at `fd` to its end.
fn read_socket(fd: impl std::os::fd::AsFd) -> Result<String, String> {
    let fd = fd.as_fd();
    let kind = rustix::fs::fstat(fd).map(|s| rustix::fs::FileType::from_raw_mode(s.st_mode));
    if kind != Ok(rustix::fs::FileType::Socket) {
        return Err(format!("{VAR} names no socket: the board's URL cannot be read"));
    }
    let mut url = Vec::new();
    let mut buf = [0_u8; 4096];
    loop {
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => break,
            Ok(n) if url.len() + n <= MAX_URL => url.extend_from_slice(&buf[..n]),
            Ok(_) => return Err("the board's URL handed over is too long".into()),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("cannot read the board's URL: {e}")),
        }
    }
    String::from_utf8(url).map_err(|_| "the board's URL handed over is not UTF-8".into())
}
