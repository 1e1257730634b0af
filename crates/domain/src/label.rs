//! The upstream label sanitizer and the label keys berth and hermes-agent share.

use std::fmt;

/// Label marking every container berth (or hermes-agent) manages.
pub const LABEL_AGENT: &str = "hermes-agent";
/// Label carrying the sanitized task id.
pub const LABEL_TASK: &str = "hermes-task-id";
/// Label carrying the sanitized profile name.
pub const LABEL_PROFILE: &str = "hermes-profile";
/// Label hermes-agent 0.21+ writes and filters reuse on: `off`, or a digest of its egress-proxy settings. Berth has
/// no egress proxy, so it writes `off` and reuses only containers whose value is `off` or absent (older hermes).
pub const LABEL_EGRESS: &str = "hermes-egress";
/// The `hermes-egress` value of a container with no egress proxy.
pub const EGRESS_OFF: &str = "off";
/// Berth's own label: a digest of the raw (profile, task) pair, which disambiguates sanitizer collisions.
pub const LABEL_IDENTITY: &str = "berth.identity";
/// Berth's own label: a digest of the canonical path of the berth home that made the container, so two homes on one
/// engine never reuse, recreate, reap, list or idle-stop each other's sandboxes. Absent on containers hermes-agent
/// made and on those an older berth made (both belong to every home, as before).
pub const LABEL_HOME: &str = "berth.home";
/// Berth's own label: a digest of the effective create spec, used to detect config drift.
pub const LABEL_FINGERPRINT: &str = "berth.fingerprint";
/// Berth's own label: a short digest of each create-spec field (`image:1a2b3c4d,env:…`), so a drift message can name
/// what changed instead of only saying that something did.
pub const LABEL_FIELDS: &str = "berth.fields";
/// Berth's own label: the lifecycle mode the container was made for (`persist` or `ephemeral`).
pub const LABEL_MODE: &str = "berth.mode";

/// Berth's own label: the sanitized profile whose command made the container. It is `hermes-profile` unless a shared
/// container key (`terminal.docker_shared_container_key`) replaced the profile there; per-profile settings of a
/// running sandbox (the idle-stop overrides) are looked up by it.
pub const LABEL_MADE_BY: &str = "berth.profile";

/// Berth's own label on ephemeral (opt-out) containers: `<host>:<pid>:<start>` of the process that owns it, so
/// the reaper can remove a running one whose owner died.
pub const LABEL_OWNER: &str = "berth.owner";

/// Berth's own label on a snapshot image (`berth sandbox snapshot|suspend`): the snapshot's name (its tag). Images
/// carrying it are a sandbox's snapshots; the sandbox's own labels are on the image beside it.
pub const LABEL_SNAPSHOT: &str = "berth.snapshot";
/// Berth's own label on a snapshot image: the container name of the sandbox it was taken of.
pub const LABEL_SNAPSHOT_OF: &str = "berth.snapshot.of";
/// Berth's own label on a snapshot image: when it was taken, in milliseconds since the epoch (the engine's own
/// creation time counts whole seconds only).
pub const LABEL_SNAPSHOT_AT: &str = "berth.snapshot.at";
/// Berth's own label on a snapshot image: the size of the sandbox's writable layer when it was taken, in bytes
/// (what the snapshot adds to its base image).
pub const LABEL_SNAPSHOT_BYTES: &str = "berth.snapshot.bytes";

/// Maximum length of a sanitized label value, as upstream.
pub const LABEL_MAX_LEN: usize = 63;

/// A label value that went through the upstream sanitizer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LabelValue(String);

impl LabelValue {
    /// Sanitizes `raw` exactly as hermes-agent's `_sanitize_label_value` does.
    ///
    /// Every Unicode scalar outside ASCII `[A-Za-z0-9_.-]` becomes one `_`, the result is cut to 63 characters,
    /// and an empty input becomes `unknown`. All-invalid input is kept as underscores (`///` → `___`), as upstream.
    pub fn sanitize(raw: &str) -> Self {
        let mut out: String = raw
            .chars()
            .take(LABEL_MAX_LEN)
            .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '_' })
            .collect();
        if out.is_empty() {
            out.push_str("unknown");
        }
        Self(out)
    }

    /// Returns the sanitized value.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LabelValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::LabelValue;

    fn check(input: &str, expect: &str) {
        assert_eq!(LabelValue::sanitize(input).as_str(), expect, "input {input:?}");
    }

    #[test]
    fn upstream_examples() {
        check("plain-name_1.0", "plain-name_1.0");
        check("with/slash", "with_slash");
        check("with:colon", "with_colon");
        check("emoji-😀-here", "emoji-_-here");
        check("", "unknown");
        check(&"x".repeat(100), &"x".repeat(63));
        check("task/with:weird*chars", "task_with_weird_chars");
        check("///", "___");
        check("a=b,c\nd", "a_b_c_d");
        check("é", "_");
    }

    proptest::proptest! {
        #[test]
        fn sanitized_values_are_docker_and_k8s_safe(raw in ".*") {
            let v = LabelValue::sanitize(&raw);
            let s = v.as_str();
            proptest::prop_assert!(!s.is_empty());
            proptest::prop_assert!(s.chars().count() <= 63);
            proptest::prop_assert!(s.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)));
            // Idempotent: a sanitized value sanitizes to itself.
            let again = LabelValue::sanitize(s);
            proptest::prop_assert_eq!(again.as_str(), s);
        }
    }
}
