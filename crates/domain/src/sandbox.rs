//! Sandbox identity, the effective create spec, its fingerprint, and how settings become a spec.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::ids::{ProfileName, TaskId};
use crate::label::{
    EGRESS_OFF, LABEL_AGENT, LABEL_EGRESS, LABEL_FIELDS, LABEL_FINGERPRINT, LABEL_IDENTITY, LABEL_MODE, LABEL_OWNER,
    LABEL_PROFILE, LABEL_TASK, LabelValue,
};
use crate::sha256;

mod extra_args;
pub use extra_args::{
    DeviceMapping, DeviceRequest, ExtraCreate, MAPPED_FLAGS, MountSource, MountSpec, PortPublish, Ulimit,
    apply_extra_args, blank_spec, check_extra_args, mount_sources, parse_device, parse_gpus, parse_mount,
    parse_publish, parse_ulimit,
};

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

/// Parses `--flag=<bool>` values as the docker CLI accepts them.
pub fn parse_flag_bool(raw: &str) -> Option<bool> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "t" => Some(true),
        "false" | "0" | "f" => Some(false),
        _ => None,
    }
}

/// What a sandbox is keyed by: the raw task id and the profile, or instead of the profile a shared container key
/// (`terminal.docker_shared_container_key`, hermes 0.21) that lets trusted profiles share one sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SandboxIdentity {
    pub task: TaskId,
    pub profile: ProfileName,
    /// The raw shared key, when set (never empty).
    pub shared_key: Option<String>,
}

/// hermes 0.21's profile label for a shared container key: the sanitized key cut to 50 characters, `-`, and the
/// first 12 hex digits of the raw key's sha256 (sanitizing is lossy, the digest keeps colliding keys apart).
pub fn shared_profile_label(key: &str) -> LabelValue {
    let head: String = LabelValue::sanitize(key).as_str().chars().take(50).collect();
    LabelValue::sanitize(&format!("{head}-{}", &sha256::hex_digest(key.as_bytes())[..12]))
}

impl SandboxIdentity {
    pub fn new(task: TaskId, profile: ProfileName) -> Self {
        Self { task, profile, shared_key: None }
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

    /// A digest of the raw pair: distinct raw ids get distinct digests even when their labels collide.
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
        format!("berth-{profile}-{task}-{}", &self.digest()[..12])
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
    /// `host:container[:opts]` bind mounts and named volumes.
    pub binds: Vec<String>,
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
    binds: &'a [String],
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
const FIELD_SETTINGS: &[(&str, &str)] = &[
    ("image", "terminal.docker_image"),
    ("cmd", "the keep-alive command"),
    ("workdir", "terminal.cwd"),
    ("env", "terminal.docker_env"),
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
    ("network_mode", "terminal.docker_network"),
    ("user", "terminal.docker_run_as_host_user"),
    ("privileged", "terminal.docker_extra_args"),
    ("extra_hosts", "terminal.docker_extra_args"),
    ("dns", "terminal.docker_extra_args"),
    ("extra", "terminal.docker_extra_args"),
];

/// Eight hex digits of the SHA-256 of `v`'s postcard encoding.
fn short_digest<T: Serialize + ?Sized>(v: &T) -> String {
    sha256::hex_digest(&postcard::to_allocvec(v).unwrap_or_default())[..8].to_owned()
}

/// The settings behind the fields whose digests differ between two [`LABEL_FIELDS`] values, e.g.
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
    /// The [`LABEL_FIELDS`] value: `field:digest` for each field the fingerprint covers, comma-separated.
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
        let _ = writeln!(s, "binds={:?}", self.binds);
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

/// The sandbox-related settings, already parsed and typed by the config bridge.
#[derive(Clone, Debug, PartialEq)]
pub struct SandboxSettings {
    pub image: String,
    pub cwd: String,
    pub persist_across_processes: bool,
    pub recreate_on_config_change: bool,
    pub orphan_reaper: bool,
    pub lifetime_seconds: i64,
    pub timeout_seconds: u64,
    pub cpu: f64,
    pub memory_mb: i64,
    pub disk_mb: i64,
    pub container_persistent: bool,
    pub sandbox_dir: String,
    pub volumes: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub forward_env: Vec<String>,
    pub extra_args: Vec<String>,
    pub network: bool,
    pub run_as_host_user: bool,
    pub mount_cwd_to_workspace: bool,
    /// `terminal.docker_shm_size`: `/dev/shm` size (`1g` by default, as hermes 0.21); empty or `0` keeps Docker's.
    pub shm_size: String,
}

/// Facts about the host the spec depends on, gathered at the edge.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostFacts {
    /// `uid:gid` of the calling user, when the platform has POSIX ids.
    pub user: Option<String>,
    /// The caller's working directory, when it exists.
    pub cwd: Option<String>,
    /// Whether the storage driver supports `--storage-opt size=` (overlay2 on XFS with pquota).
    pub storage_opt_supported: bool,
    /// `<host>:<pid>:<start>` of this process; labels ephemeral containers so the reaper can tell when they are
    /// orphaned.
    pub owner: Option<String>,
    /// The engine reported it cannot apply cgroup limits (cpu, memory, pids): they are dropped with a warning,
    /// as hermes does after its once-per-process probe, instead of failing every create.
    pub cgroup_limits_unavailable: bool,
}

/// A spec plus the warnings met while building it (skipped volumes, dropped extra args, …).
#[derive(Clone, Debug, PartialEq)]
pub struct BuiltSpec {
    pub spec: CreateSpec,
    /// Host directories the caller must create before creating the container.
    pub host_dirs: Vec<String>,
    pub warnings: Vec<String>,
}

/// Checks an environment variable name the way upstream's normalizer does: `^[A-Za-z_][A-Za-z0-9_]*$`.
pub fn is_valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Builds the effective create spec for `identity` from the settings, with upstream's hardening.
///
/// # Errors
/// A [`SpecError`] for settings no container can honour (an unmappable extra flag, a network conflict, a
/// relative working directory).
pub fn build_create_spec(
    identity: &SandboxIdentity,
    mode: SandboxMode,
    name: String,
    settings: &SandboxSettings,
    host: &HostFacts,
) -> Result<BuiltSpec, SpecError> {
    let mut warnings = Vec::new();
    let mut host_dirs = Vec::new();
    let host_user = if settings.run_as_host_user {
        if host.user.is_none() {
            warnings.push("docker_run_as_host_user is set but this platform does not expose POSIX uid/gid; running as the image user".to_owned());
        }
        host.user.clone()
    } else {
        None
    };

    let mut cap_add: Vec<String> = ["DAC_OVERRIDE", "CHOWN", "FOWNER"].map(String::from).to_vec();
    if host_user.is_none() {
        cap_add.extend(["SETUID", "SETGID"].map(String::from));
    }
    let mut tmpfs = BTreeMap::from([
        ("/tmp".to_owned(), "rw,nosuid,size=512m".to_owned()),
        ("/var/tmp".to_owned(), "rw,noexec,nosuid,size=256m".to_owned()),
        ("/run".to_owned(), "rw,noexec,nosuid,size=64m".to_owned()),
    ]);

    // Volumes: explicit entries first; the host cwd is prepended when asked for and /workspace is free.
    let mut binds = Vec::new();
    for v in &settings.volumes {
        if v.contains(':') {
            binds.push(v.clone());
        } else {
            warnings.push(format!("skipping docker volume {v:?}: expected host:container[:options]"));
        }
    }
    let workspace_explicit = binds.iter().any(|b| b.contains(":/workspace"));
    let mut cwd_mounted = false;
    if settings.mount_cwd_to_workspace
        && !workspace_explicit
        && let Some(cwd) = &host.cwd
    {
        binds.insert(0, format!("{cwd}:/workspace"));
        cwd_mounted = true;
    }
    if settings.container_persistent {
        let dir = identity.host_dir(&settings.sandbox_dir);
        host_dirs.push(format!("{dir}/home"));
        binds.push(format!("{dir}/home:/root"));
        if !workspace_explicit && !cwd_mounted {
            host_dirs.push(format!("{dir}/workspace"));
            binds.push(format!("{dir}/workspace:/workspace"));
        }
    } else {
        if !workspace_explicit && !cwd_mounted {
            tmpfs.insert("/workspace".to_owned(), "rw,exec,size=10g".to_owned());
        }
        tmpfs.insert("/home".to_owned(), "rw,exec,size=1g".to_owned());
        tmpfs.insert("/root".to_owned(), "rw,exec,size=1g".to_owned());
    }

    let mut env: Vec<String> = Vec::new();
    for (k, v) in &settings.env {
        if is_valid_env_name(k.trim()) {
            env.push(format!("{}={v}", k.trim()));
        } else {
            warnings.push(format!("skipping docker_env key {k:?}: not a valid variable name"));
        }
    }

    let mut labels = identity.upstream_labels();
    labels.insert(LABEL_IDENTITY.to_owned(), identity.digest());
    labels.insert(LABEL_MODE.to_owned(), mode.as_str().to_owned());
    // hermes 0.21 filters reuse on this label; berth never routes through an egress proxy.
    labels.insert(LABEL_EGRESS.to_owned(), EGRESS_OFF.to_owned());
    if let (SandboxMode::Ephemeral, Some(owner)) = (mode, &host.owner) {
        labels.insert(LABEL_OWNER.to_owned(), owner.clone());
    }

    let mut spec = CreateSpec {
        name,
        image: settings.image.clone(),
        labels,
        cmd: vec!["sleep".to_owned(), "infinity".to_owned()],
        workdir: container_cwd(&settings.cwd)?,
        env,
        binds,
        tmpfs,
        cap_drop: vec!["ALL".to_owned()],
        cap_add,
        security_opt: vec!["no-new-privileges".to_owned()],
        pids_limit: Some(256),
        init: true,
        nano_cpus: (settings.cpu > 0.0).then(|| (settings.cpu * 1e9).round() as i64),
        memory_bytes: (settings.memory_mb > 0).then(|| settings.memory_mb.saturating_mul(1024 * 1024)),
        storage_size: None,
        network_mode: (!settings.network).then(|| "none".to_owned()),
        user: host_user,
        extra_hosts: Vec::new(),
        dns: Vec::new(),
        privileged: false,
        shm_size: match settings.shm_size.trim() {
            "" | "0" => None,
            raw => Some(parse_bytes(raw).ok_or_else(|| SpecError::BadShmSize(raw.to_owned()))?),
        },
        extra: ExtraCreate::default(),
    };
    if host.cgroup_limits_unavailable && (spec.nano_cpus.is_some() || spec.memory_bytes.is_some()) {
        warnings.push(
            "the engine cannot apply cgroup limits here; sandboxes run without cpu, memory and pids limits".to_owned(),
        );
    }
    if host.cgroup_limits_unavailable {
        spec.nano_cpus = None;
        spec.memory_bytes = None;
        spec.pids_limit = None;
    }
    if settings.disk_mb > 0 {
        if host.storage_opt_supported {
            spec.storage_size = Some(format!("{}m", settings.disk_mb));
        } else {
            warnings.push(format!(
                "container_disk={} ignored: disk limits require overlay2 on XFS with pquota",
                settings.disk_mb
            ));
        }
    }
    apply_extra_args(&mut spec, &settings.extra_args)?;
    if !settings.network
        && let Some(mode) = spec.network_mode.as_deref().filter(|m| *m != "none")
    {
        return Err(SpecError::NetworkConflict { mode: mode.to_owned() });
    }
    let fingerprint = spec.fingerprint();
    spec.labels.insert(LABEL_FINGERPRINT.to_owned(), fingerprint);
    spec.labels.insert(LABEL_FIELDS.to_owned(), spec.field_digests());
    Ok(BuiltSpec { spec, host_dirs, warnings })
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
