//! `sandbox reap` in words: one reason per row a person reads, instead of enum names and raw JSON.

use domain::policy::reaper::{ReapReason, SpareReason};

/// Why a container goes (or would go), with its age.
pub fn removed(reason: ReapReason, age_secs: i64) -> String {
    let age = duration(age_secs);
    match reason {
        ReapReason::ExitedTooLong => format!("exited {age} ago, past the threshold"),
        ReapReason::CreatedLeftover => format!("created {age} ago and never started"),
        ReapReason::DeadLeftover => format!("dead for {age}"),
        ReapReason::OwnerGone => format!("its owning process is gone (running ephemeral sandbox, {age} old)"),
        ReapReason::LeaseExpired => {
            format!("its owner on another host stopped renewing its lease (running ephemeral sandbox, {age} old)")
        }
    }
}

/// Why a container stays.
pub fn kept(reason: &SpareReason) -> String {
    match reason {
        SpareReason::NotManaged => "not a managed sandbox (no hermes-agent=1 label)".to_owned(),
        SpareReason::OtherProfile { profile } => format!("belongs to profile {profile}"),
        SpareReason::Live => "running: a live process may be using it".to_owned(),
        SpareReason::TooYoung { age_secs, max_age_secs } => {
            format!("stopped {} ago, younger than the {} threshold", duration(*age_secs), duration(*max_age_secs))
        }
        SpareReason::NoTimestamp => "the engine gives no finish time".to_owned(),
        SpareReason::OtherState { state } => format!("in state {state}, which is never reaped"),
    }
}

/// Why a sandbox folder goes (or would go).
pub fn folder_gone(age_secs: i64) -> String {
    format!("host folder whose sandbox and task are both gone, untouched for {}", duration(age_secs))
}

/// `90061` → `1d 1h`, `3700` → `1h 1m`, `75` → `1m 15s`, `5` → `5s`.
fn duration(secs: i64) -> String {
    let s = secs.max(0);
    let (d, h, m, sec) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60, s % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{sec}s"),
        (0, 0, _) => format!("{m}m {sec}s"),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_read_as_words() {
        assert_eq!(removed(ReapReason::ExitedTooLong, 3700), "exited 1h 1m ago, past the threshold");
        assert_eq!(
            kept(&SpareReason::TooYoung { age_secs: 5, max_age_secs: 120 }),
            "stopped 5s ago, younger than the 2m 0s threshold"
        );
        assert_eq!(duration(90_061), "1d 1h");
        assert_eq!(folder_gone(75), "host folder whose sandbox and task are both gone, untouched for 1m 15s");
    }
}
