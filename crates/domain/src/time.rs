//! Timestamps: milliseconds since the Unix epoch, with the Docker timestamp parser the reaper relies on.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A point in time, in milliseconds since the Unix epoch (UTC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Timestamp(i64);

impl Timestamp {
    /// Builds a timestamp from milliseconds since the epoch.
    pub const fn from_millis(ms: i64) -> Self {
        Self(ms)
    }

    /// Builds a timestamp from whole seconds since the epoch.
    pub const fn from_secs(s: i64) -> Self {
        Self(s.saturating_mul(1000))
    }

    /// Milliseconds since the epoch.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// Whole seconds since the epoch (floored).
    pub const fn as_secs(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// Seconds elapsed from `earlier` to `self` (negative when `earlier` is later).
    pub fn secs_since(self, earlier: Timestamp) -> f64 {
        self.0.saturating_sub(earlier.0) as f64 / 1000.0
    }

    /// This timestamp moved forward by `d`.
    pub fn plus(self, d: Duration) -> Self {
        Self(self.0.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
    }

    /// Parses a Docker/RFC 3339 timestamp such as `2026-05-28T13:45:00.123456789Z`.
    ///
    /// Returns `None` for Docker's zero time (`0001-01-01…`, a container that never stopped), for an empty string and
    /// for anything unparseable: the reaper leaves such containers alone, as upstream does. A timestamp without a
    /// zone is also `None` (upstream aborted the whole sweep on it; we skip just that container).
    pub fn parse_docker(raw: &str) -> Option<Self> {
        let s = raw.trim();
        if s.is_empty() || s.starts_with("0001-01-01") {
            return None;
        }
        let b = s.as_bytes();
        if b.len() < 20
            || b[4] != b'-'
            || b[7] != b'-'
            || !matches!(b[10], b'T' | b't' | b' ')
            || b[13] != b':'
            || b[16] != b':'
        {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<i64> {
            let part = s.get(r)?;
            if part.bytes().all(|c| c.is_ascii_digit()) { part.parse().ok() } else { None }
        };
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
            return None;
        }
        let mut rest = &s[19..];
        let mut millis = 0i64;
        if let Some(frac) = rest.strip_prefix('.') {
            let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return None;
            }
            let mut scaled = frac[..digits.min(3)].to_owned();
            while scaled.len() < 3 {
                scaled.push('0');
            }
            millis = scaled.parse().ok()?;
            rest = &frac[digits..];
        }
        let offset_secs = match rest {
            "Z" | "z" => 0,
            _ => {
                let rb = rest.as_bytes();
                if rb.len() != 6 || !matches!(rb[0], b'+' | b'-') || rb[3] != b':' {
                    return None;
                }
                let oh: i64 = rest[1..3].parse().ok()?;
                let om: i64 = rest[4..6].parse().ok()?;
                let sign = if rb[0] == b'-' { -1 } else { 1 };
                sign * (oh * 3600 + om * 60)
            }
        };
        let days = days_from_civil(year, month, day);
        let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset_secs;
        Some(Self(secs * 1000 + millis))
    }

    /// Formats as RFC 3339 in UTC with second precision, e.g. `2026-05-28T13:45:00Z`.
    pub fn to_rfc3339(self) -> String {
        let secs = self.as_secs();
        let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let (y, m, d) = civil_from_days(days);
        format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

// Howard Hinnant's days-from-civil algorithm (proleptic Gregorian calendar).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { yoe + era * 400 + 1 } else { yoe + era * 400 }, m, d)
}

#[cfg(test)]
mod tests {
    use super::Timestamp;

    #[test]
    fn parses_docker_timestamps() {
        let t = Timestamp::parse_docker("2026-05-28T13:45:00.123456789Z").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-05-28T13:45:00Z");
        assert_eq!(t.as_millis() % 1000, 123);
        assert_eq!(Timestamp::parse_docker("1970-01-01T00:00:00Z"), Some(Timestamp::from_secs(0)));
        assert_eq!(Timestamp::parse_docker("1970-01-01T01:00:00+01:00"), Some(Timestamp::from_secs(0)));
        assert_eq!(Timestamp::parse_docker("2000-03-01T00:00:00Z"), Some(Timestamp::from_secs(951_868_800)));
    }

    #[test]
    fn zero_empty_and_garbage_are_none() {
        for raw in [
            "0001-01-01T00:00:00Z",
            "",
            "not-a-timestamp",
            "2026-05-28T13:45:00",
            "2026-13-01T00:00:00Z",
            "2026-05-28T13:45:00.Z",
        ] {
            assert_eq!(Timestamp::parse_docker(raw), None, "{raw:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn rfc3339_round_trips(secs in -62_000_000_000i64..253_000_000_000i64) {
            let t = Timestamp::from_secs(secs);
            proptest::prop_assert_eq!(Timestamp::parse_docker(&t.to_rfc3339()), Some(t));
        }

        #[test]
        fn parser_never_panics(raw in ".{0,40}") {
            let _ = Timestamp::parse_docker(&raw);
        }
    }
}
