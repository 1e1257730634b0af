//! Sandbox identity, the effective create spec and its fingerprint; how settings become a spec is `build.rs`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::sha256;

mod bind;
mod build;
mod extra_args;
mod host_access;
mod identity;
pub use bind::Bind;
pub use build::{BuiltSpec, CredentialFacts, HostFacts, SandboxSettings, build_create_spec, is_valid_env_name};
pub use extra_args::{
    DeviceMapping, DeviceRequest, ExtraArgs, ExtraCreate, MountSource, MountSpec, NoExtraArgs, PortPublish, Ulimit,
    blank_spec, check_extra_args, mount_sources,
};
pub use host_access::{ENGINE_DEFAULT_CAPABILITIES, NAMESPACED_CAPABILITIES, host_access};
pub use identity::{SandboxIdentity, home_digest, shared_profile_label};

/// Why the settings cannot become a create spec; the app reports it as a usage error and creates nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A `docker_extra_args` flag the create call cannot carry (or that would break the sandbox).
    #[error("docker_extra_args: {flag} is not supported: {why}")]
    UnsupportedExtraArg { flag: String, why: String },
    /// A `docker_extra_args` value that does not parse.
    #[error("docker_extra_args: {flag} {value:?}: {why}")]
    BadExtraArg { flag: String, value: String, why: String },
    /// `docker_network: false` met a `--network` other than `none` in `docker_extra_args`: refused rather than
    /// letting either one silently win (hermes 0.21 fails closed the same way).
    #[error("terminal.docker_network is false but docker_extra_args asks for --network {mode}; remove one of them")]
    NetworkConflict { mode: String },
    /// `terminal.docker_egress` lists destinations but the edge could not set up the proxy route.
    #[error("terminal.docker_egress lists destinations but no egress proxy route was set up")]
    EgressUnavailable,
    /// `docker_extra_args` asks for a network or DNS servers that would bypass `terminal.docker_egress`.
    #[error(
        "docker_extra_args sets --network or --dns, which would bypass terminal.docker_egress; remove them or set docker_egress to all"
    )]
    EgressConflict,
    /// `terminal.docker_credentials` cannot be kept out of this sandbox (no allowlist, a variable forwarded too).
    #[error("{0}")]
    Credentials(String),
    /// `terminal.cwd` is relative and not one of hermes's placeholders.
    #[error(
        "terminal.cwd {0:?} is a relative path; use an absolute path inside the sandbox or one of `.`, `auto`, `cwd`, `~` (the container default, /root)"
    )]
    RelativeCwd(String),
    /// `terminal.docker_shm_size` is not a size.
    #[error("terminal.docker_shm_size {0:?} is not a size such as 1g or 512m (empty or 0 keeps Docker's 64m)")]
    BadShmSize(String),
}

/// The container default working directory hermes uses for its placeholders.
pub const CONTAINER_HOME: &str = "/root";

/// Maps `terminal.cwd` the way hermes does: `.`, `auto`, `cwd`, `~` and empty mean the container default
/// (`/root`); `~/x` is under it; an absolute path is kept.
///
/// # Errors
/// [`SpecError::RelativeCwd`] for any other relative path (Docker would refuse it with an opaque 400).
pub fn container_cwd(raw: &str) -> Result<String, SpecError> {
    let t = raw.trim();
    match t {
        "" | "." | "auto" | "cwd" | "~" => Ok(CONTAINER_HOME.to_owned()),
        _ if t.starts_with('/') => Ok(t.to_owned()),
        _ => match t.strip_prefix("~/") {
            Some(rest) => Ok(format!("{CONTAINER_HOME}/{rest}")),
            None => Err(SpecError::RelativeCwd(raw.to_owned())),
        },
    }
}

/// The lifecycle mode a container was created for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Kept running across processes and reused (`terminal.docker_persist_across_processes: true`).
    Persist,
    /// Made for one process and removed at release.
    Ephemeral,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Persist => "persist",
            Self::Ephemeral => "ephemeral",
        }
    }
}

/// Everything the runtime needs to create a sandbox container.
///
/// The fingerprint covers every field except the name and labels, so any change to image, env, mounts, resources,
/// extra arguments or hardening is detected as drift.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CreateSpec {
    pub name: String,
    pub image: String,
    pub labels: BTreeMap<String, String>,
    pub cmd: Vec<String>,
    pub workdir: String,
    /// `KEY=VALUE` pairs stored in the container config (never forwarded secrets).
    pub env: Vec<String>,
    /// Bind mounts and named volumes (`host:container[:opts]` to the engine).
    pub binds: Vec<Bind>,
    pub tmpfs: BTreeMap<String, String>,
    pub cap_drop: Vec<String>,
    pub cap_add: Vec<String>,
    pub security_opt: Vec<String>,
    pub pids_limit: Option<i64>,
    pub init: bool,
    pub nano_cpus: Option<i64>,
    pub memory_bytes: Option<i64>,
    pub storage_size: Option<String>,
    pub network_mode: Option<String>,
    pub user: Option<String>,
    pub extra_hosts: Vec<String>,
    pub dns: Vec<String>,
    pub privileged: bool,
    pub shm_size: Option<i64>,
    /// The create-call fields only `docker_extra_args` sets (devices, GPUs, ulimits, mounts, sysctls, …).
    pub extra: ExtraCreate,
}

/// The version tag of [`CreateSpec::fingerprint`]'s encoding; a label without it was written by the v1 encoding.
pub const FINGERPRINT_VERSION: &str = "v2";

/// The fields a fingerprint covers (all but the name and labels), in a fixed order, serialized with postcard (a
/// documented, stable wire format): an encoding that depends on this declaration, not on how the compiler happens
/// to print `Debug`.
#[derive(Serialize)]
struct Fingerprinted<'a> {
    image: &'a str,
    cmd: &'a [String],
    workdir: &'a str,
    /// Sorted: the order env pairs were given in does not change the container.
    env: Vec<&'a str>,
    /// Each as its `host:container[:opts]` text ([`Bind`] serializes so).
    binds: &'a [Bind],
    tmpfs: &'a BTreeMap<String, String>,
    cap_drop: &'a [String],
    cap_add: &'a [String],
    security_opt: &'a [String],
    pids_limit: Option<i64>,
    init: bool,
    nano_cpus: Option<i64>,
    memory_bytes: Option<i64>,
    storage_size: Option<&'a str>,
    shm_size: Option<i64>,
    network_mode: Option<&'a str>,
    user: Option<&'a str>,
    privileged: bool,
    extra_hosts: &'a [String],
    dns: &'a [String],
    /// Left out when unused, so adding a mapped flag later does not change every other spec's fingerprint.
    #[serde(skip_serializing_if = "is_default_extra")]
    extra: &'a ExtraCreate,
}

fn is_default_extra(e: &&ExtraCreate) -> bool {
    **e == ExtraCreate::default()
}

/// Each create-spec field drift can be named by, and the settings that usually shape it (any field can also come from
/// `terminal.docker_extra_args`).
pub const FIELD_SETTINGS: &[(&str, &str)] = &[
    ("image", "terminal.docker_image"),
    ("cmd", "the keep-alive command"),
    ("workdir", "terminal.cwd"),
    ("env", "terminal.docker_env, terminal.docker_credentials"),
    ("binds", "terminal.docker_volumes, terminal.container_persistent, terminal.docker_mount_cwd_to_workspace"),
    ("tmpfs", "terminal.container_persistent"),
    ("cap_drop", "terminal.docker_extra_args"),
    ("cap_add", "terminal.docker_run_as_host_user"),
    ("security_opt", "terminal.docker_extra_args"),
    ("pids_limit", "terminal.docker_extra_args"),
    ("init", "terminal.docker_extra_args"),
    ("nano_cpus", "terminal.container_cpu"),
    ("memory_bytes", "terminal.container_memory"),
    ("storage_size", "terminal.container_disk"),
    ("shm_size", "terminal.docker_shm_size"),
    ("network_mode", "terminal.docker_network, terminal.docker_egress"),
    ("user", "terminal.docker_run_as_host_user"),
    ("privileged", "terminal.docker_extra_args"),
    ("extra_hosts", "terminal.docker_extra_args"),
    ("dns", "terminal.docker_egress, terminal.docker_extra_args"),
    ("extra", "terminal.docker_extra_args"),
];

/// Eight hex digits of the SHA-256 of `v`'s postcard encoding.
fn short_digest<T: Serialize + ?Sized>(v: &T) -> String {
    sha256::hex_digest(&postcard::to_allocvec(v).unwrap_or_default())[..8].to_owned()
}

/// The settings behind the fields whose digests differ between two [`LABEL_FIELDS`](crate::label::LABEL_FIELDS) values, e.g.
/// `["memory_bytes (terminal.container_memory)"]`; empty when either value is missing or nothing differs (a field
/// one side lacks counts as changed).
pub fn changed_fields(old: Option<&str>, new: &str) -> Vec<String> {
    let Some(old) = old.filter(|o| !o.is_empty()) else { return Vec::new() };
    let parse = |s: &str| -> BTreeMap<String, String> {
        s.split(',').filter_map(|p| p.split_once(':')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
    };
    let (old, new) = (parse(old), parse(new));
    FIELD_SETTINGS
        .iter()
        .filter(|(field, _)| old.get(*field) != new.get(*field))
        .map(|(field, settings)| format!("{field} ({settings})"))
        .collect()
}

impl CreateSpec {
    /// The [`LABEL_FIELDS`](crate::label::LABEL_FIELDS) value: `field:digest` for each field the fingerprint covers, comma-separated.
    pub fn field_digests(&self) -> String {
        let mut env: Vec<&str> = self.env.iter().map(String::as_str).collect();
        env.sort_unstable();
        let digests = [
            short_digest(&self.image),
            short_digest(&self.cmd),
            short_digest(&self.workdir),
            short_digest(&env),
            short_digest(&self.binds),
            short_digest(&self.tmpfs),
            short_digest(&self.cap_drop),
            short_digest(&self.cap_add),
            short_digest(&self.security_opt),
            short_digest(&self.pids_limit),
            short_digest(&self.init),
            short_digest(&self.nano_cpus),
            short_digest(&self.memory_bytes),
            short_digest(&self.storage_size),
            short_digest(&self.shm_size),
            short_digest(&self.network_mode),
            short_digest(&self.user),
            short_digest(&self.privileged),
            short_digest(&self.extra_hosts),
            short_digest(&self.dns),
            short_digest(&self.extra),
        ];
        FIELD_SETTINGS.iter().zip(digests).map(|((field, _), d)| format!("{field}:{d}")).collect::<Vec<_>>().join(",")
    }

    /// A stable digest of the effective spec (everything but name and labels): `v2-` and 32 hex digits of the
    /// SHA-256 of its canonical (postcard) encoding.
    pub fn fingerprint(&self) -> String {
        let mut env: Vec<&str> = self.env.iter().map(String::as_str).collect();
        env.sort_unstable();
        let canonical = Fingerprinted {
            image: &self.image,
            cmd: &self.cmd,
            workdir: &self.workdir,
            env,
            binds: &self.binds,
            tmpfs: &self.tmpfs,
            cap_drop: &self.cap_drop,
            cap_add: &self.cap_add,
            security_opt: &self.security_opt,
            pids_limit: self.pids_limit,
            init: self.init,
            nano_cpus: self.nano_cpus,
            memory_bytes: self.memory_bytes,
            storage_size: self.storage_size.as_deref(),
            shm_size: self.shm_size,
            network_mode: self.network_mode.as_deref(),
            user: self.user.as_deref(),
            privileged: self.privileged,
            extra_hosts: &self.extra_hosts,
            dns: &self.dns,
            extra: &self.extra,
        };
        // Serializing borrowed strings, numbers and maps of strings cannot fail; an empty encoding would still
        // give a fixed digest rather than a panic.
        let bytes = postcard::to_allocvec(&canonical).unwrap_or_default();
        format!("{FINGERPRINT_VERSION}-{}", &sha256::hex_digest(&bytes)[..32])
    }

    /// The fingerprint berth wrote before the versioned encoding (from `Debug` text). Containers carrying it are
    /// still reused as they are: an upgrade of berth alone never recreates a sandbox. Frozen: never change it.
    pub fn legacy_fingerprint(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "v1");
        let _ = writeln!(s, "image={}", self.image);
        let _ = writeln!(s, "cmd={:?}", self.cmd);
        let _ = writeln!(s, "workdir={}", self.workdir);
        let mut env = self.env.clone();
        env.sort();
        let _ = writeln!(s, "env={env:?}");
        let binds: Vec<String> = self.binds.iter().map(ToString::to_string).collect();
        let _ = writeln!(s, "binds={binds:?}");
        let _ = writeln!(s, "tmpfs={:?}", self.tmpfs);
        let _ = writeln!(s, "cap_drop={:?} cap_add={:?}", self.cap_drop, self.cap_add);
        let _ = writeln!(s, "security_opt={:?} pids={:?} init={}", self.security_opt, self.pids_limit, self.init);
        let _ = writeln!(
            s,
            "cpu={:?} mem={:?} disk={:?} shm={:?}",
            self.nano_cpus, self.memory_bytes, self.storage_size, self.shm_size
        );
        let _ = writeln!(s, "net={:?} user={:?} privileged={}", self.network_mode, self.user, self.privileged);
        let _ = writeln!(s, "hosts={:?} dns={:?}", self.extra_hosts, self.dns);
        if self.extra != ExtraCreate::default() {
            let _ = writeln!(s, "extra={:?}", self.extra);
        }
        sha256::hex_digest(s.as_bytes())[..32].to_owned()
    }
}

/// Parses a Docker size such as `512m`, `1g`, `1024` (bytes) or `64k`.
pub fn parse_bytes(raw: &str) -> Option<i64> {
    // Docker's form (`units.RAMInBytes`): a decimal number, then an optional unit k, m, g, t or p with an optional
    // `i` and `b`; no exponent, sign, infinity or NaN, and nothing that does not fit in an i64.
    let s = raw.trim().to_ascii_lowercase();
    let s = s.strip_suffix('b').unwrap_or(&s);
    let s = s.strip_suffix('i').unwrap_or(s);
    let (num, shift) = match s.chars().last()? {
        'k' => (&s[..s.len() - 1], 10),
        'm' => (&s[..s.len() - 1], 20),
        'g' => (&s[..s.len() - 1], 30),
        't' => (&s[..s.len() - 1], 40),
        'p' => (&s[..s.len() - 1], 50),
        _ => (s, 0),
    };
    let num = num.trim_end();
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    let digits = |d: &str| !d.is_empty() && d.len() <= 20 && d.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (num.contains('.') && !digits(frac)) {
        return None;
    }
    let unit = 1i128 << shift;
    let whole = whole.parse::<i128>().ok()?.checked_mul(unit)?;
    let frac = if frac.is_empty() {
        0
    } else {
        frac.parse::<i128>().ok()? * unit / 10i128.pow(u32::try_from(frac.len()).ok()?)
    };
    i64::try_from(whole.checked_add(frac)?).ok()
}

#[cfg(test)]
mod tests;
