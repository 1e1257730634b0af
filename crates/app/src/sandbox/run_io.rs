//! Standard input and the terminal for `berth run`: forward stdin (piped, or with `-i`), and with `-t` put our
//! terminal in raw mode for the command's TTY and forward window-size changes, as `docker exec -it` does.

use std::io::{IsTerminal, Read};

use domain::ports::ExecIo;
use rustix::termios::{OptionalActions, Termios, tcgetattr, tcgetwinsize, tcsetattr};
use tokio::sync::mpsc;

use crate::edge::error::Failure;

/// Input wired to one exec; dropping it restores the terminal and stops forwarding resizes.
pub struct Attached {
    io: ExecIo,
    raw: Option<RawMode>,
    winch: Option<tokio::task::JoinHandle<()>>,
}

impl Attached {
    /// The exec's side of the wiring (taken once).
    pub fn take(&mut self) -> ExecIo {
        std::mem::take(&mut self.io)
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        if let Some(w) = self.winch.take() {
            w.abort();
        }
        self.raw.take();
    }
}

/// Our terminal's settings before raw mode, put back on drop (also on an early return or an interrupt).
struct RawMode(Termios);

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = tcsetattr(std::io::stdin(), OptionalActions::Now, &self.0);
    }
}

/// Whether standard input is `/dev/null` (a job runner's or a script's "no input"): nothing to forward, so the exec
/// attaches no stdin, as `docker exec` without `-i` does.
fn stdin_is_dev_null() -> bool {
    rustix::fs::fstat(std::io::stdin()).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::CharacterDevice
            && rustix::fs::major(st.st_rdev) == 1
            && rustix::fs::minor(st.st_rdev) == 3
    })
}

/// `-t` needs a terminal on stdin, as `docker exec -it` does: without one there are no keys to make raw and no size
/// to follow, and the command would wait on a TTY nobody types into. Refused before anything is made, with
/// docker's words.
///
/// # Errors
/// A usage failure (exit 2) when `tty` is asked for and stdin is not a terminal.
pub fn check_tty(tty: bool) -> Result<(), Failure> {
    if tty && !std::io::stdin().is_terminal() {
        return Err(Failure::usage(
            "the input device is not a TTY; -t needs a terminal on stdin (leave -t out to pipe input)",
        ));
    }
    Ok(())
}

/// Wires stdin when `interactive`, `tty`, or stdin is not a terminal (a pipe, a file); `None` when the command gets
/// no input (also for `/dev/null` without `-i`: the command then reads end of input at once, as it would anyway).
/// Must be called inside the runtime (the resize forwarder is a task).
///
/// # Errors
/// Failing to put the terminal in raw mode.
pub fn attach(interactive: bool, tty: bool) -> Result<Option<Attached>, Failure> {
    let stdin_is_tty = std::io::stdin().is_terminal();
    let asked = interactive || tty;
    if !asked && (stdin_is_tty || stdin_is_dev_null()) {
        return Ok(None);
    }
    let (tx, rx) = mpsc::channel::<Vec<u8>>(16);
    // A plain thread, not tokio's stdin: a blocked read must not keep the runtime from shutting down when the
    // command exits first; the thread dies with the process.
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
        // Dropping the sender is end of input: the command's stdin is closed.
    });
    let mut attached =
        Attached { io: ExecIo { tty, stdin: Some(stream_of(rx)), resize: None }, raw: None, winch: None };
    if tty && stdin_is_tty {
        let saved = tcgetattr(std::io::stdin())
            .map_err(|e| Failure::other(format!("cannot read the terminal's settings: {e}")))?;
        let mut raw = saved.clone();
        raw.make_raw();
        tcsetattr(std::io::stdin(), OptionalActions::Now, &raw)
            .map_err(|e| Failure::other(format!("cannot put the terminal in raw mode: {e}")))?;
        attached.raw = Some(RawMode(saved));
    }
    if tty {
        let (size_tx, size_rx) = mpsc::channel::<(u16, u16)>(4);
        // The first size goes right after start; every SIGWINCH sends the new one.
        if let Some(size) = window_size() {
            let _ = size_tx.try_send(size);
        }
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut winch) = signal(SignalKind::window_change()) {
            attached.winch = Some(tokio::spawn(async move {
                while winch.recv().await.is_some() {
                    if let Some(size) = window_size()
                        && size_tx.send(size).await.is_err()
                    {
                        break;
                    }
                }
            }));
        }
        attached.io.resize = Some(stream_of(size_rx));
    }
    Ok(Some(attached))
}

/// Our terminal's size as (rows, columns), from whichever of stdin, stdout is a terminal.
fn window_size() -> Option<(u16, u16)> {
    let ws = tcgetwinsize(std::io::stdin()).or_else(|_| tcgetwinsize(std::io::stdout())).ok()?;
    (ws.ws_row > 0 && ws.ws_col > 0).then_some((ws.ws_row, ws.ws_col))
}

/// A channel's receiving end as the stream an exec reads: it ends when every sender is dropped.
fn stream_of<T: Send + 'static>(rx: tokio::sync::mpsc::Receiver<T>) -> futures_util::stream::BoxStream<'static, T> {
    use futures_util::StreamExt;
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) }).boxed()
}
