//! Timestamps: milliseconds since the Unix epoch, with the Docker timestamp parser the reaper relies on (parsing
//! and formatting through `jiff`; the newtype and the zero-time rule are berth's).

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

    /// Parses a Docker/RFC 3339 timestamp such as `2026-05-28T13:45:00.123456789Z` (through `jiff`).
    ///
    /// Returns `None` for Docker's zero time (`0001-01-01…`, a container that never stopped), for an empty string and
    /// for anything unparseable: the reaper leaves such containers alone, as upstream does. A timestamp without a
    /// zone is also `None` (upstream aborted the whole sweep on it; we skip just that container).
    pub fn parse_docker(raw: &str) -> Option<Self> {
        let s = raw.trim();
        // The zero time is a valid instant to a parser; to berth it means "never", so it is refused first.
        if s.is_empty() || s.starts_with("0001-01-01") {
            return None;
        }
        let t: jiff::Timestamp = s.parse().ok()?;
        Some(Self(t.as_millisecond()))
    }

    /// Formats as RFC 3339 in UTC with second precision, e.g. `2026-05-28T13:45:00Z`.
    pub fn to_rfc3339(self) -> String {
        // Out of jiff's range (years -9999..=9999) only for nonsense values; clamp rather than fail a listing.
        let t = jiff::Timestamp::from_second(self.as_secs()).unwrap_or(if self.0 < 0 {
            jiff::Timestamp::MIN
        } else {
            jiff::Timestamp::MAX
        });
        t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
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
