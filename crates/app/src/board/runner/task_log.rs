//! The runner's writes to a task's log: the log and folder made as `berth worker run` makes them, the command's
//! output copied in, the runner's own lines.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::process::Child;

use domain::ports::Clock;

use super::TaskRun;
use crate::board::log_sink::LogSink;
use crate::edge::context::{Ctx, SystemClock};

/// A worker's log (rotated past `kanban.worker_log_rotate_bytes`, created when missing) and working directory
/// (created when missing), as `berth worker run` makes them; the reason when either cannot be had.
pub(super) fn set_up(ctx: &Ctx, t: &TaskRun) -> (Option<std::fs::File>, Result<(), String>) {
    let k = &ctx.settings.kanban;
    crate::board::worker::rotate(&t.log, k.worker_log_rotate_bytes, k.worker_log_backup_count.get());
    let log = std::fs::OpenOptions::new().create(true).append(true).read(true).open(&t.log);
    let dir = crate::edge::private_files::ensure_dir(&t.workdir)
        .map_err(|e| format!("cannot enter the working directory {}: {e}", t.workdir.display()));
    match log {
        Ok(f) => (Some(f), dir),
        Err(e) => (None, Err(format!("cannot open the worker log {}: {e}", t.log.display()))),
    }
}

/// Copies the worker's stdout and stderr into `sink`, each as its stream, until both end (one thread for both).
pub(super) fn pump(child: &mut Child, sink: &mut LogSink) {
    use domain::ports::{OutputSink, OutputStream};
    use rustix::event::{PollFd, PollFlags, poll};
    let mut pipes: Vec<(OutputStream, OwnedFd)> = Vec::new();
    pipes.extend(child.stdout.take().map(|p| (OutputStream::Stdout, OwnedFd::from(p))));
    pipes.extend(child.stderr.take().map(|p| (OutputStream::Stderr, OwnedFd::from(p))));
    let mut buf = vec![0_u8; 64 * 1024];
    while !pipes.is_empty() {
        let mut polled: Vec<PollFd<'_>> = pipes.iter().map(|(_, fd)| PollFd::new(fd, PollFlags::IN)).collect();
        match poll(&mut polled, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
        let ready: Vec<bool> = polled.iter().map(|p| !p.revents().is_empty()).collect();
        drop(polled);
        let mut i = 0;
        pipes.retain(|(stream, fd)| {
            let keep = !ready[i]
                || match rustix::io::read(fd, &mut buf) {
                    Ok(0) | Err(_) => false,
                    Ok(n) => {
                        sink.write(*stream, &buf[..n]);
                        true
                    }
                };
            i += 1;
            keep
        });
    }
}

/// A line of the runner's in a task's log, as the task's worker (`kanban logs` finds each run's part by its
/// `confirmed run` line): time-stamped, masked.
pub(super) fn say(log: &mut Option<std::fs::File>, text: &str) {
    let Some(log) = log else { return };
    if !ends_a_line(log) {
        let _ = writeln!(log);
    }
    let _ = writeln!(log, "[berth worker {}] {}", SystemClock.now(), crate::edge::redact::redact(text));
}

/// Whether the log (opened for reading too) is empty or ends with a newline (a command's last line may not: the
/// runner's line goes below it, where `kanban logs --run` finds it).
fn ends_a_line(log: &std::fs::File) -> bool {
    use std::os::unix::fs::FileExt;
    let len = log.metadata().map_or(0, |m| m.len());
    let mut last = [b'\n'];
    len == 0 || log.read_at(&mut last, len - 1).is_err() || last[0] == b'\n'
}
