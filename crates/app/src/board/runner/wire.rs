//! What crosses the runner's socket besides its messages: the challenge a launcher answers to be taken for the
//! dispatcher, the dispatch's environment without the board's password, and lines read with a deadline and a bound.
//!
//! The socket's folder is 0700, so only the user's own processes reach it, a task's command among them. Such a
//! process may stand in for the runner (unlink its socket, bind its own) or talk to it as a launcher. So a launcher
//! sends nothing that holds the board's password (the runner has it from its start), and proves it holds that
//! password by answering the runner's challenge (a nonce in the answer to its hello; a runner from before the
//! challenge sends none, and gets no proof): an HMAC, keyed by the board's URL, of the nonce and the pid the
//! launcher's socket sees at the other end. A process standing in for the runner and passing the real runner's
//! nonce on gets a proof for its own pid, which the runner refuses; a task's command has the URL without the
//! password and cannot make one. A SQLite board has no password: its key is its path, and its file is the user's to
//! write anyway.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::edge::context::Ctx;

/// A launcher's answer to the runner's challenge (the nonce in its hello's answer), before its starts.
#[derive(Serialize, Deserialize)]
pub(in crate::board) struct Proof {
    pub proof: String,
}

/// The longest line either side reads: a dispatch's whole environment fits many times over.
pub(in crate::board) const LINE_MAX: usize = 8 << 20;

/// The key of the challenge's HMAC: the board's URL with its password, or a SQLite board's path.
pub(in crate::board) fn key(ctx: &Ctx) -> String {
    ctx.database_url().map_or_else(|| ctx.db_path().display().to_string(), str::to_owned)
}

/// The answer to the challenge `nonce` of the runner whose pid is `runner_pid`.
pub(in crate::board) fn proof(key: &str, nonce: &str, runner_pid: u32) -> String {
    domain::sha256::hmac_hex(key.as_bytes(), format!("{nonce}:{runner_pid}").as_bytes())
}

/// The pid at the other end of `conn`, as the kernel saw it when it connected (or listened).
pub(in crate::board) fn peer_pid(conn: &UnixStream) -> Option<u32> {
    let cred = rustix::net::sockopt::socket_peercred(conn).ok()?;
    u32::try_from(cred.pid.as_raw_nonzero().get()).ok()
}

/// A dispatch's environment as a launcher sends it: on a PostgreSQL board no variable holding the board's password,
/// and its URL without it (the runner puts its own back).
pub(in crate::board) fn without_password(ctx: &Ctx, env: Vec<(String, String)>) -> Vec<(String, String)> {
    let Some(url) = ctx.database_url() else { return env };
    let secrets = kanban_postgres::url_secrets(url);
    let var = config_bridge::env_var_for("kanban.database_url");
    let mut kept: Vec<(String, String)> =
        env.into_iter().filter(|(k, v)| *k != var && !secrets.iter().any(|s| v.contains(s.as_str()))).collect();
    kept.push((var, kanban_postgres::without_password(url)));
    kept
}

/// The next line (without its newline) by `deadline`, whatever the other side sends meanwhile, and at most
/// [`LINE_MAX`] bytes; `Ok(None)` at the end of the stream.
///
/// # Errors
/// A one-line reason: no line by the deadline, one too long, or one that is not UTF-8.
pub(in crate::board) fn read_line(
    reader: &mut BufReader<UnixStream>,
    deadline: Option<Instant>,
) -> Result<Option<String>, String> {
    let mut line = Vec::new();
    loop {
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("no answer in time".to_owned());
            }
            reader.get_ref().set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        }
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("no answer: {e}")),
        };
        if buf.is_empty() {
            return if line.is_empty() { Ok(None) } else { Err("the line was cut off".to_owned()) };
        }
        let (taken, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        line.extend_from_slice(&buf[..taken]);
        reader.consume(taken);
        if line.len() > LINE_MAX {
            return Err(format!("a line longer than {} MiB", LINE_MAX >> 20));
        }
        if done {
            line.pop();
            return String::from_utf8(line).map(Some).map_err(|_| "a line that is not UTF-8".to_owned());
        }
    }
}
