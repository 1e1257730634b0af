//! The lease of an ephemeral (opt-out) sandbox: how a reaper on any host sharing the engine tells that the process
//! owning the sandbox died, where a pid check only works on the owner's own host.
//!
//! While it uses the sandbox, the owner rewrites a small file inside it (through the engine's archive call) every
//! third of the lease's time-to-live; the reaper reads it the same way. A lease not renewed for its time-to-live has
//! lapsed: its owner died (or lost the engine). Times are the owner's and the reaper's wall clocks, so hosts sharing
//! an engine need clocks in step to well within a time-to-live (NTP gives milliseconds).

use crate::time::Timestamp;

/// The folder the lease file lives in, inside the sandbox (the root of its filesystem: no tmpfs hides it from the
/// archive call, and no image program is needed to write or read it).
pub const LEASE_DIR: &str = "/";
/// The lease file's name.
pub const LEASE_NAME: &str = ".berth-lease";
/// Its full path.
pub const LEASE_PATH: &str = "/.berth-lease";

/// A lease as written by its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The owner label (`<host>:<pid>:<start>`), as on the container's `berth.owner` label.
    pub owner: String,
    /// When the owner last renewed it, by its clock.
    pub renewed: Timestamp,
    /// How long it holds after a renewal.
    pub ttl_secs: i64,
}

impl Lease {
    /// The file's text: a tag line, then `key=value` lines.
    pub fn encode(&self) -> String {
        format!(
            "berth-lease v1\nowner={}\nrenewed_ms={}\nttl_secs={}\n",
            self.owner,
            self.renewed.as_millis(),
            self.ttl_secs
        )
    }

    /// Parses [`Lease::encode`]'s text; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let mut lines = text.lines();
        if lines.next()? != "berth-lease v1" {
            return None;
        }
        let (mut owner, mut renewed, mut ttl) = (None, None, None);
        for line in lines {
            match line.split_once('=')? {
                ("owner", v) => owner = Some(v.to_owned()),
                ("renewed_ms", v) => renewed = Some(Timestamp::from_millis(v.parse().ok()?)),
                ("ttl_secs", v) => ttl = Some(v.parse::<i64>().ok().filter(|t| *t > 0)?),
                _ => {}
            }
        }
        Some(Self { owner: owner?, renewed: renewed?, ttl_secs: ttl? })
    }

    /// Seconds since the last renewal once the lease has lapsed (not renewed for longer than its time-to-live);
    /// `None` while it holds.
    pub fn lapsed(&self, now: Timestamp) -> Option<i64> {
        let since = now.secs_since(self.renewed).floor() as i64;
        (since > self.ttl_secs).then_some(since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_round_trips_and_lapses_after_its_ttl() {
        let lease = Lease { owner: "other:42:7".into(), renewed: Timestamp::from_millis(100_000), ttl_secs: 30 };
        assert_eq!(Lease::parse(&lease.encode()), Some(lease.clone()));
        assert_eq!(lease.lapsed(Timestamp::from_millis(130_000)), None);
        assert_eq!(lease.lapsed(Timestamp::from_millis(131_000)), Some(31));
        // A clock behind the owner's never lapses it early.
        assert_eq!(lease.lapsed(Timestamp::from_millis(0)), None);
        for bad in [
            "",
            "berth-lease v2\nowner=a\nrenewed_ms=1\nttl_secs=1",
            "berth-lease v1\nowner=a\nrenewed_ms=x\nttl_secs=1",
            "berth-lease v1\nowner=a\nrenewed_ms=1\nttl_secs=0",
            "berth-lease v1\nowner=a\nrenewed_ms=1",
        ] {
            assert_eq!(Lease::parse(bad), None, "{bad:?}");
        }
    }
}
