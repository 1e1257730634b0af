//! The gate a tick's workers wait at (their stdin, see `launcher.rs`), and what its word is worth.

use crate::edge::context::Ctx;
use crate::edge::process;

/// How a worker's gate (its stdin: see `launcher.rs`) opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// The dispatcher recorded this worker and confirmed its run for it.
    Confirmed,
    /// The gate closed without saying so (the dispatcher is gone, or its record confirmed not every run), or there
    /// was none: the worker confirms its own run (compare-and-swap; a superseded run runs nothing).
    Closed,
}

impl Gate {
    /// The byte that says "confirmed", one per worker.
    pub const CONFIRMED: u8 = b'c';

    /// Waits at the gate for one byte or the end of the file, unbuffered: the other bytes are other workers'.
    pub fn wait() -> Self {
        let mut byte = [0_u8; 1];
        loop {
            match rustix::io::read(std::io::stdin(), &mut byte) {
                Ok(1) if byte[0] == Self::CONFIRMED => return Self::Confirmed,
                Err(rustix::io::Errno::INTR) => {}
                _ => return Self::Closed,
            }
        }
    }

    /// Whether the dispatcher's confirmation still holds for this worker without asking the board. It does when it
    /// came promptly: a run can be taken from a live host's worker only after its host was silent for
    /// `kanban.host_timeout_seconds` (or, on one host, once the worker's process is gone), so within a third of the
    /// shorter of that and the claim TTL of the worker's start nobody can have taken it yet. A dispatcher held up
    /// (stopped, swapped out) between its record and the gate is caught here: the worker then confirms itself.
    pub(super) fn trusted(self, ctx: &Ctx) -> bool {
        let window =
            ctx.settings.kanban.host_timeout_seconds.duration().min(ctx.settings.kanban.claim_ttl_seconds.duration())
                / 3;
        self == Self::Confirmed && process::own_age().is_some_and(|age| age < window)
    }
}
