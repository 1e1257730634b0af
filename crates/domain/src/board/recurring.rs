//! Recurring tasks (`kanban cron`): a schedule's slots and the one rule of which slot is due. Every store keeps a
//! schedule as a row (name, `every_seconds` or a cron expression, assignee, command, when it was added, the last slot
//! it made); the gateway asks [`due_slot`] and creates the slot's task under the idempotency key [`slot_key`], so a
//! slot makes exactly one task however many gateways see it, and a slot missed while no gateway ran is made once on
//! return (the latest one only). Times are UTC.

use crate::time::Timestamp;

use crate::board::{Result, StoreError};

const MINUTE_MS: i64 = 60_000;
const DAY_MS: i64 = 86_400_000;
/// How far a cron expression's slots are looked for (the rarest, `0 0 29 2 *`, fires every four to eight years).
const SEARCH_DAYS: i64 = 366 * 9;
/// The longest schedule name (a slot's key is its name and a time, within an idempotency key's length).
pub const NAME_MAX: usize = 64;
/// What `created_by` holds for a task a schedule made: this prefix and the schedule's name (no profile name has a
/// colon, so a person's task never reads as a schedule's).
const MADE_BY: &str = "cron:";

/// When a schedule's slots fall: every N seconds (counted from the epoch, so `--every 5m` is :00, :05, …), or the
/// minutes a five-field cron expression names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recurrence {
    Every { seconds: i64 },
    Cron(CronExpr),
}

impl Recurrence {
    /// Every `seconds` seconds, at least 1.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for less than a second.
    pub fn every(seconds: i64) -> Result<Self> {
        if seconds < 1 {
            return Err(StoreError::Invalid("a schedule repeats every 1 second or more".into()));
        }
        Ok(Self::Every { seconds })
    }

    /// The latest slot at or before `now`.
    pub fn latest_at_or_before(&self, now: Timestamp) -> Option<Timestamp> {
        match self {
            Self::Every { seconds } => {
                let step = seconds.saturating_mul(1000);
                Some(Timestamp::from_millis(now.as_millis().div_euclid(step) * step))
            }
            Self::Cron(c) => c.latest_at_or_before(now),
        }
    }

    /// The first slot after `t`.
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        match self {
            Self::Every { seconds } => {
                let step = seconds.saturating_mul(1000);
                Some(Timestamp::from_millis((t.as_millis().div_euclid(step) + 1).saturating_mul(step)))
            }
            Self::Cron(c) => c.next_after(t),
        }
    }
}

/// The slot due at `now` for a schedule added at `added` whose last made slot is `last`: the latest slot at or before
/// `now`, when it is later than both (so the slots missed while no gateway ran make one task, not one each).
pub fn due_slot(rec: &Recurrence, added: Timestamp, last: Option<Timestamp>, now: Timestamp) -> Option<Timestamp> {
    let slot = rec.latest_at_or_before(now)?;
    (slot > added && last.is_none_or(|l| slot > l)).then_some(slot)
}

/// The idempotency key of a schedule's slot: `cron:NAME:<slot, RFC 3339>`.
pub fn slot_key(name: &str, slot: Timestamp) -> String {
    format!("{MADE_BY}{name}:{}", slot.to_rfc3339())
}

/// What a schedule's task records as its creator: `cron:NAME`.
pub fn made_by(name: &str) -> String {
    format!("{MADE_BY}{name}")
}

/// The schedule that made a task, from its creator (`None` for a task a person or an agent made).
pub fn schedule_of(created_by: Option<&str>) -> Option<&str> {
    created_by?.strip_prefix(MADE_BY)
}

/// A schedule's name: 1 to [`NAME_MAX`] letters, digits, `.`, `_` or `-`, starting with a letter or digit.
///
/// # Errors
/// [`StoreError::Invalid`] saying what a name may hold.
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "a schedule name is 1 to {NAME_MAX} letters, digits, '.', '_' or '-', starting with a letter or digit \
             (got {name:?})"
        )))
    }
}

/// A five-field cron expression (`minute hour day-of-month month day-of-week`, UTC): each field `*`, a number, a
/// range `a-b`, a step `*/n` or `a-b/n`, or a comma list of those; months and weekdays also by their English
/// three-letter names; weekday 0 or 7 is Sunday; `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly` too. When both
/// day fields are restricted a day matching either counts (as cron has it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronExpr {
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    days_any: bool,
    weekdays_any: bool,
}

const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl CronExpr {
    /// Parses an expression; one that names no minute in nine years (`0 0 31 2 *`) is refused too.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] naming the field and what it expects.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: String| StoreError::Invalid(format!("bad cron expression {text:?}: {why}"));
        let expanded = match text.trim() {
            "@hourly" => "0 * * * *",
            "@daily" | "@midnight" => "0 0 * * *",
            "@weekly" => "0 0 * * 0",
            "@monthly" => "0 0 1 * *",
            "@yearly" | "@annually" => "0 0 1 1 *",
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(bad(format!(
                "expected five fields (minute hour day-of-month month day-of-week), got {}",
                fields.len()
            )));
        }
        let field = |i: usize, name: &str, lo: u32, hi: u32, names: &[&str]| {
            parse_field(fields[i], lo, hi, names).map_err(|why| bad(format!("{name} field {:?}: {why}", fields[i])))
        };
        let minutes = field(0, "minute", 0, 59, &[])?;
        let hours = field(1, "hour", 0, 23, &[])?;
        let days = field(2, "day-of-month", 1, 31, &[])?;
        let months = field(3, "month", 1, 12, &MONTHS)?;
        let mut weekdays = field(4, "day-of-week", 0, 7, &WEEKDAYS)?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays | 1) & 0x7f;
        }
        let expr = Self {
            minutes,
            hours: u32::try_from(hours).unwrap_or(0),
            days: u32::try_from(days).unwrap_or(0),
            months: u16::try_from(months).unwrap_or(0),
            weekdays: u8::try_from(weekdays).unwrap_or(0),
            days_any: fields[2].starts_with('*'),
            weekdays_any: fields[4].starts_with('*'),
        };
        if expr.next_after(Timestamp::from_millis(0)).is_none() {
            return Err(bad("it names no day that exists".into()));
        }
        Ok(expr)
    }

    fn day_matches(&self, day: i64) -> bool {
        let (_, month, dom) = civil(day);
        if self.months & (1 << month) == 0 {
            return false;
        }
        let weekday = (day + 4).rem_euclid(7);
        let by_dom = self.days & (1 << dom) != 0;
        let by_weekday = self.weekdays & (1 << weekday) != 0;
        match (self.days_any, self.weekdays_any) {
            (false, false) => by_dom || by_weekday,
            _ => by_dom && by_weekday,
        }
    }

    /// The latest minute of the day at or before `limit` (minutes into the day) the expression names.
    fn last_minute_of_day(&self, limit: i64) -> Option<i64> {
        (0..=limit).rev().find(|m| self.hours & (1 << (m / 60)) != 0 && self.minutes & (1 << (m % 60)) != 0)
    }

    /// The first minute of the day at or after `from` the expression names.
    fn first_minute_of_day(&self, from: i64) -> Option<i64> {
        (from..1440).find(|m| self.hours & (1 << (m / 60)) != 0 && self.minutes & (1 << (m % 60)) != 0)
    }

    fn latest_at_or_before(&self, now: Timestamp) -> Option<Timestamp> {
        let minute = now.as_millis().div_euclid(MINUTE_MS);
        let (mut day, mut limit) = (minute.div_euclid(1440), minute.rem_euclid(1440));
        for _ in 0..SEARCH_DAYS {
            if self.day_matches(day)
                && let Some(m) = self.last_minute_of_day(limit)
            {
                return Some(Timestamp::from_millis(day * DAY_MS + m * MINUTE_MS));
            }
            day -= 1;
            limit = 1439;
        }
        None
    }

    fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        let minute = t.as_millis().div_euclid(MINUTE_MS) + 1;
        let (mut day, mut from) = (minute.div_euclid(1440), minute.rem_euclid(1440));
        for _ in 0..SEARCH_DAYS {
            if self.day_matches(day)
                && let Some(m) = self.first_minute_of_day(from)
            {
                return Some(Timestamp::from_millis(day * DAY_MS + m * MINUTE_MS));
            }
            day += 1;
            from = 0;
        }
        None
    }
}

/// One field as a bit set over `lo..=hi`.
fn parse_field(text: &str, lo: u32, hi: u32, names: &[&str]) -> std::result::Result<u64, String> {
    let value = |s: &str| -> std::result::Result<u32, String> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            let first = if lo == 0 { 0 } else { 1 };
            return Ok(u32::try_from(i).unwrap_or(0) + first);
        }
        let n: u32 = s.parse().map_err(|_| format!("{s:?} is not a number from {lo} to {hi}"))?;
        if (lo..=hi).contains(&n) { Ok(n) } else { Err(format!("{n} is outside {lo}-{hi}")) }
    };
    let mut set = 0u64;
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s.parse().ok().filter(|s| *s >= 1).ok_or_else(|| format!("bad step {s:?}"))?;
                (r, step)
            }
            None => (item, 1),
        };
        let (from, to) = match range {
            "*" => (lo, hi),
            r => match r.split_once('-') {
                Some((a, b)) => (value(a)?, value(b)?),
                None if item.contains('/') => (value(r)?, hi),
                None => {
                    let v = value(r)?;
                    (v, v)
                }
            },
        };
        if from > to {
            return Err(format!("range {from}-{to} runs backwards"));
        }
        set |= (from..=to).step_by(step as usize).fold(0, |s, v| s | 1 << v);
    }
    Ok(set)
}

/// The civil date (year, month 1–12, day 1–31) of a day counted from 1970-01-01 (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, u32::try_from(month).unwrap_or(1), u32::try_from(day).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        Timestamp::parse_docker(text).unwrap()
    }

    fn cron(text: &str) -> Recurrence {
        Recurrence::Cron(CronExpr::parse(text).unwrap())
    }

    #[test]
    fn civil_dates_match_the_calendar() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(at("2024-02-29T12:00:00Z").as_millis() / DAY_MS), (2024, 2, 29));
        assert_eq!(civil(at("2026-11-28T00:00:00Z").as_millis() / DAY_MS), (2026, 11, 28));
    }

    #[test]
    fn intervals_are_counted_from_the_epoch() {
        let every = Recurrence::every(300).unwrap();
        assert_eq!(every.latest_at_or_before(at("2026-11-28T10:07:12Z")), Some(at("2026-11-28T10:05:00Z")));
        assert_eq!(every.next_after(at("2026-11-28T10:05:00Z")), Some(at("2026-11-28T10:10:00Z")));
        assert!(Recurrence::every(0).is_err());
    }

    #[test]
    fn cron_slots_before_and_after() {
        let c = cron("*/15 9-17 * * mon-fri");
        // 2026-11-28 is a Saturday: the latest slot is Friday 17:45.
        assert_eq!(c.latest_at_or_before(at("2026-11-28T10:00:00Z")), Some(at("2026-11-27T17:45:00Z")));
        assert_eq!(c.next_after(at("2026-11-28T10:00:00Z")), Some(at("2026-11-30T09:00:00Z")));
        assert_eq!(c.latest_at_or_before(at("2026-11-30T09:15:00Z")), Some(at("2026-11-30T09:15:00Z")));
        let leap = cron("0 0 29 feb *");
        assert_eq!(leap.next_after(at("2026-11-28T10:00:00Z")), Some(at("2028-02-29T00:00:00Z")));
        assert_eq!(cron("@daily").next_after(at("2026-11-28T10:00:00Z")), Some(at("2026-11-29T00:00:00Z")));
        // Both day fields restricted: either matches (the 1st, or any Sunday).
        let either = cron("0 12 1 * 0");
        assert_eq!(either.next_after(at("2026-11-28T13:00:00Z")), Some(at("2026-11-29T12:00:00Z")));
        assert_eq!(cron("0 0 * * 7"), cron("0 0 * * 0"));
    }

    #[test]
    fn bad_expressions_are_refused_saying_why() {
        for bad in ["", "* * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *", "*/0 * * * *", "5-1 * * * *"]
        {
            let e = CronExpr::parse(bad).unwrap_err().to_string();
            assert!(e.contains("bad cron expression"), "{bad}: {e}");
        }
        assert!(CronExpr::parse("0 0 31 feb *").unwrap_err().to_string().contains("no day"));
    }

    #[test]
    fn only_the_latest_missed_slot_is_due_and_never_one_before_the_schedule() {
        let every = Recurrence::every(2).unwrap();
        let added = at("2026-11-28T10:00:01Z");
        assert_eq!(due_slot(&every, added, None, at("2026-11-28T10:00:01.500Z")), None);
        assert_eq!(due_slot(&every, added, None, at("2026-11-28T10:00:02.100Z")), Some(at("2026-11-28T10:00:02Z")));
        let last = Some(at("2026-11-28T10:00:02Z"));
        assert_eq!(due_slot(&every, added, last, at("2026-11-28T10:00:03Z")), None);
        // An hour without a gateway: one slot, the latest.
        assert_eq!(due_slot(&every, added, last, at("2026-11-28T11:00:01Z")), Some(at("2026-11-28T11:00:00Z")));
    }

    #[test]
    fn names_and_keys() {
        assert!(check_name("nightly-build.v2").is_ok());
        for bad in ["", "-x", "a b", "a:b", &"x".repeat(NAME_MAX + 1)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert_eq!(slot_key("n", at("2026-11-28T10:00:02Z")), "cron:n:2026-11-28T10:00:02Z");
        assert_eq!(schedule_of(Some(&made_by("n"))), Some("n"));
        assert_eq!(schedule_of(Some("alpha")), None);
    }
}
