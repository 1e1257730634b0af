//! The fair-share order and the start-rate limits of a tick: what a board-wide limit leaves to share, each profile's
//! own room, and the key the candidates are taken in (see [`super::Planner`]).

use super::{Decision, Planner};
use crate::board::RATE_WINDOW_SECS;
use crate::time::Timestamp;

/// What limits the starts of one tick board-wide, when anything does.
#[derive(Clone, Debug)]
pub(super) struct Budget {
    /// Starts this tick can still make; `None` when no board-wide limit is set.
    pub(super) left: Option<u32>,
    /// Why a task past the budget waits: the limit that leaves the fewest starts.
    pub(super) why: Decision,
}

/// One profile's state in a tick: its candidates so far (the next one's rank), what it ran when the tick began, and
/// its own room (see [`Planner::profile_room`]).
#[derive(Clone, Debug)]
pub(super) struct Lane {
    pub(super) rank: u32,
    pub(super) running: u32,
    pub(super) room: Option<(u32, Decision)>,
}

/// A candidate waiting for [`Planner::finish`], owned (a streamed row does not outlive its decision).
#[derive(Clone, Debug)]
pub(super) struct Pending {
    pub(super) key: FairKey,
    pub(super) assignee: String,
    pub(super) auto_assigned: bool,
}

/// A candidate's place in the fair order (see [`fair_key`]); ordered as it sorts.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FairKey {
    /// Negated, so that a higher priority sorts first.
    neg_priority: i64,
    /// The profile's running tasks when the tick began plus its candidates ahead of this one.
    turn: u32,
    created_at: Timestamp,
    pub(super) id: String,
}

/// The fair-share order of a candidate: priority (higher first), then `running + rank` (the profile's running tasks
/// plus its candidates ahead of this one in dispatch order, lower first), then age, then id. Taking candidates in
/// this order is the greedy round robin "the next slot to the profile with the fewest running, a tie to the oldest
/// next task", because each profile's own candidates are in dispatch order and their keys rise along it.
pub fn fair_key(priority: i64, running: u32, rank: u32, created_at: Timestamp, id: &str) -> FairKey {
    FairKey {
        neg_priority: priority.saturating_neg(),
        turn: running.saturating_add(rank),
        created_at,
        id: id.to_owned(),
    }
}

/// How many more starts `limit` allows at `now` given the earlier ones in `times` (oldest first), and when a task
/// past them may start: once the start that must leave the window for one more has left it (the tick's own starts,
/// at `now`, count as the newest).
pub(super) fn rate_room(times: &[Timestamp], limit: u32, now: Timestamp) -> (u32, Timestamp) {
    let from = now.as_millis() - RATE_WINDOW_SECS * 1000;
    let inside: Vec<Timestamp> = times.iter().copied().filter(|t| t.as_millis() > from).collect();
    let n = u32::try_from(inside.len()).unwrap_or(u32::MAX);
    let leaving = if n < limit { inside.first().copied().unwrap_or(now) } else { inside[(n - limit) as usize] };
    (limit.saturating_sub(n), Timestamp::from_millis(leaving.as_millis() + RATE_WINDOW_SECS * 1000))
}

fn rate_limited(limit: u32, per_profile: bool, now: Timestamp, until: Timestamp) -> Decision {
    Decision::DeferredRateLimited { limit, per_profile, wait_secs: until.secs_since(now).ceil().max(0.0) as i64, until }
}

impl Planner<'_> {
    /// The board-wide budget of this tick, from the running tasks counted so far (read once, at the first ready task).
    pub(super) fn budget(&self) -> Budget {
        let caps = &self.cfg.caps;
        let mut limits: Vec<(u32, Decision)> = Vec::new();
        if let Some(cap) = caps.max_in_progress {
            limits.push((
                cap.saturating_sub(self.total_running),
                Decision::DeferredMaxInProgress { running: self.total_running.max(cap), cap },
            ));
        }
        if let Some(cap) = caps.max_spawn {
            limits.push((cap, Decision::DeferredMaxSpawn { cap }));
        }
        if let Some(limit) = caps.rate_per_minute {
            let (left, until) = rate_room(&self.all_starts, limit, self.now);
            limits.push((left, rate_limited(limit, false, self.now, until)));
        }
        // The limit that leaves the fewest starts is the one a task past them waits for (the first of a tie).
        match limits.into_iter().reduce(|a, b| if b.0 < a.0 { b } else { a }) {
            Some((left, why)) => Budget { left: Some(left), why },
            None => Budget { left: None, why: Decision::Spawn },
        }
    }

    /// The lane of `assignee` this tick: its own room and running count, computed at its first ready task.
    pub(super) fn lane(&self, assignee: &str) -> Lane {
        Lane {
            rank: 0,
            running: self.per_profile.get(assignee).copied().unwrap_or(0),
            room: self.profile_room(assignee),
        }
    }

    /// How many starts `assignee` can still make this tick on its own limits (its cap, its start rate), and the
    /// decision of a task past them; `None` when it has no limit of its own.
    pub(super) fn profile_room(&self, assignee: &str) -> Option<(u32, Decision)> {
        let caps = &self.cfg.caps;
        let current = self.per_profile.get(assignee).copied().unwrap_or(0);
        // A task past the room waits while its profile runs its cap (what ran, plus this tick's own starts).
        let cap = caps.cap_for(assignee).map(|cap| {
            (cap.saturating_sub(current), Decision::SkippedPerProfileCapped { current: current.max(cap), cap })
        });
        let rate = caps.rate_for(assignee).map(|limit| {
            let times = self.starts.get(assignee).map_or(&[][..], Vec::as_slice);
            let (left, until) = rate_room(times, limit, self.now);
            (left, rate_limited(limit, true, self.now, until))
        });
        match (cap, rate) {
            (Some(c), Some(r)) => Some(if r.0 < c.0 { r } else { c }),
            (c, r) => c.or(r),
        }
    }
}
