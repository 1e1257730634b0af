//! The gateway's backoff while the container engine is unavailable (unreachable, hung, or answering with server
//! errors; `RuntimeError::is_infrastructure`): its workers say so by their exit code (125,
//! after recording their run as `infra_unavailable`, which counts no failure), and the gateway then claims nothing
//! for a while that doubles with every wave that fails again, instead of handing the tasks to workers that fail at
//! once and wake it for another try.

use std::time::Duration;

use domain::time::Timestamp;

use crate::edge::error::Exit;

/// The first pause after an engine fault.
const FIRST: Duration = Duration::from_secs(1);
/// The longest pause: an engine that comes back is used again within this.
const LONGEST: Duration = Duration::from_secs(30);

/// What the gateway remembers of its workers' engine faults.
#[derive(Debug, Default)]
pub struct EngineBackoff {
    /// Waves of workers in a row that found the engine unreachable.
    streak: u32,
    /// No claims before this.
    until: Option<Timestamp>,
}

impl EngineBackoff {
    /// Takes in the exit codes of the workers that ended since the last look. A fault while a pause runs belongs to
    /// the wave that started it; one after it ends doubles the pause. A worker that ran its command (exit 0 or 1)
    /// shows the engine answers: the streak ends.
    pub fn observe(&mut self, codes: &[i32], now: Timestamp) {
        let engine = i32::from(Exit::ENGINE);
        if codes.iter().any(|c| *c == i32::from(Exit::OK) || *c == i32::from(Exit::FAILURE)) {
            self.streak = 0;
        }
        if !codes.contains(&engine) || self.until.is_some_and(|u| u > now) {
            return;
        }
        self.streak = self.streak.saturating_add(1);
        let pause = FIRST.saturating_mul(1 << self.streak.saturating_sub(1).min(5)).min(LONGEST);
        self.until = Some(now.plus(pause));
        tracing::warn!(
            "kanban dispatcher: workers found the container engine unreachable, hung or failing; claiming nothing for {}s",
            pause.as_secs()
        );
    }

    /// Until when nothing is claimed (passed to the planner), while it lasts.
    pub fn until(&self, now: Timestamp) -> Option<Timestamp> {
        self.until.filter(|u| *u > now)
    }

    /// The next tick: at `next`, or sooner when a pause ends before (the tick after a pause comes when it ends,
    /// not at the interval).
    pub fn sooner(&self, next: std::time::Instant, now: Timestamp) -> std::time::Instant {
        match self.until(now) {
            Some(u) => next.min(std::time::Instant::now() + Duration::from_secs_f64(u.secs_since(now))),
            None => next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failing_wave_doubles_the_pause_and_a_run_that_reached_the_engine_ends_it() {
        let t = |s: i64| Timestamp::from_secs(s);
        let mut b = EngineBackoff::default();
        b.observe(&[0, 143], t(0));
        assert_eq!(b.until(t(0)), None);
        b.observe(&[125], t(10));
        assert_eq!(b.until(t(10)), Some(t(11)));
        // The same wave's other workers do not lengthen it.
        b.observe(&[125, 125], t(10));
        assert_eq!(b.until(t(10)), Some(t(11)));
        b.observe(&[125], t(11));
        assert_eq!(b.until(t(11)), Some(t(13)));
        b.observe(&[125], t(13));
        assert_eq!(b.until(t(13)), Some(t(17)));
        for s in [17, 25, 41, 71] {
            b.observe(&[125], t(s));
        }
        assert_eq!(b.until(t(71)), Some(t(101)), "capped at 30 s");
        b.observe(&[1], t(101));
        b.observe(&[125], t(101));
        assert_eq!(b.until(t(101)), Some(t(102)), "a run that reached the engine starts over");
    }
}
