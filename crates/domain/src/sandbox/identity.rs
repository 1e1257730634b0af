//! The sandbox identity: what a sandbox is keyed by (task, profile or shared key, home), and the labels, names and
//! folder derived from it.

use std::collections::BTreeMap;

use crate::ids::{ProfileName, TaskId};
use crate::label::{LABEL_AGENT, LABEL_PROFILE, LABEL_TASK, LabelValue};
use crate::sha256;

/// What a sandbox is keyed by: the raw task id and the profile, or instead of the profile a shared container key
/// (`terminal.docker_shared_container_key`, hermes 0.21) that lets trusted profiles share one sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SandboxIdentity {
    pub task: TaskId,
    pub profile: ProfileName,
    /// The raw shared key, when set (never empty).
    pub shared_key: Option<String>,
    /// The digest of the berth home that manages it ([`home_digest`]); part of [`SandboxIdentity::digest`], so the
    /// same task and profile in two homes are two sandboxes with two names.
    pub home: Option<String>,
}

/// The `berth.home` value of a home: 16 hex digits of the SHA-256 of its canonical path.
pub fn home_digest(canonical_home: &str) -> String {
    sha256::hex_digest(canonical_home.as_bytes())[..16].to_owned()
}

/// hermes 0.21's profile label for a shared container key: the sanitized key cut to 50 characters, `-`, and the
/// first 12 hex digits of the raw key's sha256 (sanitizing is lossy, the digest keeps colliding keys apart).
pub fn shared_profile_label(key: &str) -> LabelValue {
    let head: String = LabelValue::sanitize(key).as_str().chars().take(50).collect();
    LabelValue::sanitize(&format!("{head}-{}", &sha256::hex_digest(key.as_bytes())[..12]))
}

impl SandboxIdentity {
    pub fn new(task: TaskId, profile: ProfileName) -> Self {
        Self { task, profile, shared_key: None, home: None }
    }

    /// Puts the identity in the home whose [`home_digest`] is `home`.
    #[must_use]
    pub fn in_home(mut self, home: &str) -> Self {
        self.home = Some(home.to_owned());
        self
    }

    /// Keys the sandbox by `key` instead of the profile, as hermes 0.21 does; an empty key changes nothing.
    #[must_use]
    pub fn shared(mut self, key: &str) -> Self {
        self.shared_key = (!key.is_empty()).then(|| key.to_owned());
        self
    }

    /// The sanitized `hermes-task-id` label value.
    pub fn task_label(&self) -> LabelValue {
        LabelValue::sanitize(self.task.as_str())
    }

    /// The `hermes-profile` label value: the sanitized profile, or the shared key's form.
    pub fn profile_label(&self) -> LabelValue {
        match &self.shared_key {
            Some(key) => shared_profile_label(key),
            None => LabelValue::sanitize(self.profile.as_str()),
        }
    }

    /// The digest of the deterministic container name: the pair's [`SandboxIdentity::digest`], and the home when
    /// there is one, so the same task and profile in two homes are two sandboxes with two names.
    pub fn name_digest(&self) -> String {
        match &self.home {
            None => self.digest(),
            Some(home) => {
                let mut input = b"berth-identity-home-v1\0".to_vec();
                input.extend_from_slice(home.as_bytes());
                input.push(0);
                input.extend_from_slice(self.digest().as_bytes());
                sha256::hex_digest(&input)[..32].to_owned()
            }
        }
    }

    /// A digest of the raw pair (the `berth.identity` label): distinct raw ids get distinct digests even when their
    /// labels collide. It leaves the home out on purpose: it also names the sandbox's host folder, which an upgrade
    /// must find again and the folder sweep matches against the labels (the default `sandbox_dir` is inside the home
    /// anyway); the home is told by the `berth.home` label and the name.
    pub fn digest(&self) -> String {
        let (tag, owner): (&[u8], &str) = match &self.shared_key {
            Some(key) => (b"berth-identity-shared-v1\0", key),
            None => (b"berth-identity-v1\0", self.profile.as_str()),
        };
        let mut input = tag.to_vec();
        input.extend_from_slice(owner.as_bytes());
        input.push(0);
        input.extend_from_slice(self.task.as_str().as_bytes());
        sha256::hex_digest(&input)[..32].to_owned()
    }

    /// Whether `c` is this identity's own berth container: its identity label is this pair's digest and it is this
    /// home's, or was made before homes were labelled (no `berth.home`).
    pub fn owns(&self, c: &crate::container::ContainerSummary) -> bool {
        c.identity() == Some(self.digest().as_str()) && c.in_home(self.home.as_deref())
    }

    /// The three upstream labels (the lookup filter shared with hermes-agent).
    pub fn upstream_labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (LABEL_AGENT.to_owned(), "1".to_owned()),
            (LABEL_TASK.to_owned(), self.task_label().as_str().to_owned()),
            (LABEL_PROFILE.to_owned(), self.profile_label().as_str().to_owned()),
        ])
    }

    /// The deterministic container name of the persistent sandbox; Docker's name conflict arbitrates races.
    pub fn persistent_name(&self) -> String {
        let task: String = self.task_label().as_str().chars().take(24).collect();
        let profile: String = self.profile_label().as_str().chars().take(20).collect();
        format!("berth-{profile}-{task}-{}", &self.name_digest()[..12])
    }

    /// The sandbox's own folder under `sandbox_dir` (its `/root` and `/workspace` live in `home/` and
    /// `workspace/`). Names are the sanitized task label plus the identity digest, so hostile ids stay one path
    /// component.
    pub fn host_dir(&self, sandbox_dir: &str) -> String {
        format!(
            "{}/docker/{}/{}-{}",
            sandbox_dir.trim_end_matches('/'),
            self.profile_label(),
            self.task_label(),
            &self.digest()[..12]
        )
    }

    /// The name of a throw-away (opt-out mode) sandbox; `nonce` makes it unique.
    pub fn ephemeral_name(&self, nonce: &str) -> String {
        format!("{}-x{nonce}", self.persistent_name())
    }
}
