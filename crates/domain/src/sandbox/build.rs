//! How the settings become a sandbox's create spec: upstream's hardening, mounts, environment, limits and labels,
//! each built by its own step, then `docker_extra_args` on top and the fingerprint over the result.

use std::collections::BTreeMap;

use super::{Bind, CreateSpec, ExtraCreate, SandboxIdentity, SandboxMode, SpecError, container_cwd, parse_bytes};
use crate::egress::credentials::{CA_BUNDLE_PATH, CA_BUNDLE_VARS, Credentials};
use crate::egress::{EgressPolicy, EgressRoute, proxy_env};
use crate::label::{
    LABEL_EGRESS, LABEL_FIELDS, LABEL_FINGERPRINT, LABEL_HOME, LABEL_IDENTITY, LABEL_MADE_BY, LABEL_MODE, LABEL_OWNER,
    LabelValue,
};
use crate::ports::ExtraArgsParser;

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
    /// The profile's egress (`terminal.docker_egress` or its override; `none` when `network` is false).
    pub egress: EgressPolicy,
    /// The profile's credentials (`terminal.docker_credentials` or its override): placeholders in the sandbox.
    pub credentials: Credentials,
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
    /// The internal network and proxy enforcing an allowlist (`egress` lists destinations), once the edge made them.
    pub egress_route: Option<EgressRoute>,
    /// What a sandbox with credentials needs, once the edge made it: the home's placeholder key.
    pub credential_facts: Option<CredentialFacts>,
}

/// The home's secret the placeholders derive from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CredentialFacts {
    pub key: String,
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
/// The steps run in this order so the warnings read in the order of the settings they concern, and so the first
/// error a caller sees is the same whatever else is wrong: the working directory, then the shm size, then the extra
/// arguments, then the network conflict.
///
/// `extra_args` is the runtime's reader of `terminal.docker_extra_args` (the Docker adapter's `docker run` flags);
/// the model it returns is applied last.
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
    extra_args: &dyn ExtraArgsParser,
) -> Result<BuiltSpec, SpecError> {
    settings.credentials.check(&settings.egress, &settings.forward_env).map_err(SpecError::Credentials)?;
    let mut warnings = Vec::new();
    let user = host_user(settings, host, &mut warnings);
    let Mounts { binds, tmpfs, host_dirs } = mounts(identity, settings, host, &mut warnings);
    let mut env = container_env(settings, &mut warnings);
    let (network_mode, dns) = egress_network(identity, settings, host, &mut env)?;
    credentials(identity, settings, host, &mut env)?;
    let workdir = container_cwd(&settings.cwd)?;
    let limits = limits(settings, host, &mut warnings)?;
    let mut spec = CreateSpec {
        name,
        image: settings.image.clone(),
        labels: labels(identity, mode, host, &settings.egress),
        // The keep-alive: commands run through exec, and idle stop recognises a sandbox running only this.
        cmd: vec!["sleep".to_owned(), "infinity".to_owned()],
        workdir,
        env,
        binds,
        tmpfs,
        // Upstream's hardening: every capability dropped and a few added back, no privilege gained through a
        // set-uid file, and an init that reaps what the commands leave behind.
        cap_drop: vec!["ALL".to_owned()],
        cap_add: added_capabilities(user.is_some()),
        security_opt: vec!["no-new-privileges".to_owned()],
        pids_limit: limits.pids_limit,
        init: true,
        nano_cpus: limits.nano_cpus,
        memory_bytes: limits.memory_bytes,
        storage_size: limits.storage_size,
        network_mode,
        user,
        extra_hosts: Vec::new(),
        dns,
        privileged: false,
        shm_size: limits.shm_size,
        extra: ExtraCreate::default(),
    };
    extra_args.parse(&settings.extra_args)?.apply_to(&mut spec);
    check_network(settings, host, &spec)?;
    stamp_fingerprint(&mut spec);
    Ok(BuiltSpec { spec, host_dirs, warnings })
}

/// The `uid:gid` the sandbox runs as under `terminal.docker_run_as_host_user`, when the platform has one; `None`
/// runs as the image's user.
fn host_user(settings: &SandboxSettings, host: &HostFacts, warnings: &mut Vec<String>) -> Option<String> {
    if !settings.run_as_host_user {
        return None;
    }
    if host.user.is_none() {
        warnings.push(
            "docker_run_as_host_user is set but this platform does not expose POSIX uid/gid; running as the image user"
                .to_owned(),
        );
    }
    host.user.clone()
}

/// The capabilities added back after dropping all, as upstream grants them: the file ones always, and changing
/// ids only for the image's user (a sandbox running as the host user stays that user).
fn added_capabilities(runs_as_host_user: bool) -> Vec<String> {
    let mut cap_add: Vec<String> = ["DAC_OVERRIDE", "CHOWN", "FOWNER"].map(String::from).to_vec();
    if !runs_as_host_user {
        cap_add.extend(["SETUID", "SETGID"].map(String::from));
    }
    cap_add
}

/// What the sandbox mounts, and the host folders that must exist before it is created.
struct Mounts {
    binds: Vec<Bind>,
    tmpfs: BTreeMap<String, String>,
    host_dirs: Vec<String>,
}

/// The binds and tmpfs mounts: explicit volumes first; the host cwd on `/workspace` when asked for and
/// `/workspace` is free; then either the sandbox's own folders on the host (`terminal.container_persistent`) or
/// tmpfs in their place.
fn mounts(
    identity: &SandboxIdentity,
    settings: &SandboxSettings,
    host: &HostFacts,
    warnings: &mut Vec<String>,
) -> Mounts {
    // Upstream's scratch mounts: nothing set-uid, and nothing executable where only temporary files belong.
    let mut tmpfs = BTreeMap::from([
        ("/tmp".to_owned(), "rw,nosuid,size=512m".to_owned()),
        ("/var/tmp".to_owned(), "rw,noexec,nosuid,size=256m".to_owned()),
        ("/run".to_owned(), "rw,noexec,nosuid,size=64m".to_owned()),
    ]);
    let mut host_dirs = Vec::new();
    let mut binds = Vec::new();
    for v in &settings.volumes {
        if v.contains(':') {
            binds.push(Bind::parse(v));
        } else {
            warnings.push(format!("skipping docker volume {v:?}: expected host:container[:options]"));
        }
    }
    let workspace_explicit = binds.iter().any(|b| b.to_string().contains(":/workspace"));
    let mut cwd_mounted = false;
    if settings.mount_cwd_to_workspace
        && !workspace_explicit
        && let Some(cwd) = &host.cwd
    {
        binds.insert(0, Bind::new(cwd, "/workspace"));
        cwd_mounted = true;
    }
    if settings.container_persistent {
        let dir = identity.host_dir(&settings.sandbox_dir);
        host_dirs.push(format!("{dir}/home"));
        binds.push(Bind::new(format!("{dir}/home"), "/root"));
        if !workspace_explicit && !cwd_mounted {
            host_dirs.push(format!("{dir}/workspace"));
            binds.push(Bind::new(format!("{dir}/workspace"), "/workspace"));
        }
    } else {
        if !workspace_explicit && !cwd_mounted {
            tmpfs.insert("/workspace".to_owned(), "rw,exec,size=10g".to_owned());
        }
        tmpfs.insert("/home".to_owned(), "rw,exec,size=1g".to_owned());
        tmpfs.insert("/root".to_owned(), "rw,exec,size=1g".to_owned());
    }
    Mounts { binds, tmpfs, host_dirs }
}

/// `terminal.docker_env` as `KEY=VALUE` pairs; a key that is not a variable name is skipped with a warning.
fn container_env(settings: &SandboxSettings, warnings: &mut Vec<String>) -> Vec<String> {
    let mut env = Vec::new();
    for (k, v) in &settings.env {
        if is_valid_env_name(k.trim()) {
            env.push(format!("{}={v}", k.trim()));
        } else {
            warnings.push(format!("skipping docker_env key {k:?}: not a valid variable name"));
        }
    }
    env
}

/// The resource limits of a spec before `docker_extra_args`.
struct Limits {
    nano_cpus: Option<i64>,
    memory_bytes: Option<i64>,
    pids_limit: Option<i64>,
    storage_size: Option<String>,
    shm_size: Option<i64>,
}

/// Cpu, memory and pids (upstream's cap of 256) unless the engine cannot apply cgroup limits; disk only where the
/// storage driver can limit it; `/dev/shm` as `terminal.docker_shm_size` says. A limit the host cannot apply is
/// dropped with a warning, as hermes does, rather than failing every create.
fn limits(settings: &SandboxSettings, host: &HostFacts, warnings: &mut Vec<String>) -> Result<Limits, SpecError> {
    let shm_size = match settings.shm_size.trim() {
        "" | "0" => None,
        raw => Some(parse_bytes(raw).ok_or_else(|| SpecError::BadShmSize(raw.to_owned()))?),
    };
    let mut limits = Limits {
        nano_cpus: (settings.cpu > 0.0).then(|| (settings.cpu * 1e9).round() as i64),
        memory_bytes: (settings.memory_mb > 0).then(|| settings.memory_mb.saturating_mul(1024 * 1024)),
        pids_limit: Some(256),
        storage_size: None,
        shm_size,
    };
    if host.cgroup_limits_unavailable {
        if limits.nano_cpus.is_some() || limits.memory_bytes.is_some() {
            warnings.push(
                "the engine cannot apply cgroup limits here; sandboxes run without cpu, memory and pids limits"
                    .to_owned(),
            );
        }
        limits.nano_cpus = None;
        limits.memory_bytes = None;
        limits.pids_limit = None;
    }
    if settings.disk_mb > 0 {
        if host.storage_opt_supported {
            limits.storage_size = Some(format!("{}m", settings.disk_mb));
        } else {
            warnings.push(format!(
                "container_disk={} ignored: disk limits require overlay2 on XFS with pquota",
                settings.disk_mb
            ));
        }
    }
    Ok(limits)
}

/// The labels that identify the sandbox (upstream's three, berth's identity, home, mode and profile) and, for an
/// ephemeral one, its owner, so the reaper can tell when it is orphaned.
fn labels(
    identity: &SandboxIdentity,
    mode: SandboxMode,
    host: &HostFacts,
    egress: &EgressPolicy,
) -> BTreeMap<String, String> {
    let mut labels = identity.upstream_labels();
    labels.insert(LABEL_IDENTITY.to_owned(), identity.digest());
    if let Some(home) = &identity.home {
        labels.insert(LABEL_HOME.to_owned(), home.clone());
    }
    labels.insert(LABEL_MODE.to_owned(), mode.as_str().to_owned());
    // The profile itself, which a shared container key takes out of `hermes-profile`.
    labels.insert(LABEL_MADE_BY.to_owned(), LabelValue::sanitize(identity.profile.as_str()).as_str().to_owned());
    // hermes 0.21 filters reuse on this label: `off` unless berth's egress proxy routes the sandbox.
    labels.insert(LABEL_EGRESS.to_owned(), egress.label());
    labels.insert(crate::egress::LABEL_EGRESS_POLICY.to_owned(), egress.to_string());
    if let (SandboxMode::Ephemeral, Some(owner)) = (mode, &host.owner) {
        labels.insert(LABEL_OWNER.to_owned(), owner.clone());
    }
    labels
}

/// The network and DNS servers the egress policy puts the sandbox on, and the proxy variables it adds to `env`:
/// none for `none`, the engine's default for `all`, the internal network with the proxy as its only DNS server and
/// way out for a list.
fn egress_network(
    identity: &SandboxIdentity,
    settings: &SandboxSettings,
    host: &HostFacts,
    env: &mut Vec<String>,
) -> Result<(Option<String>, Vec<String>), SpecError> {
    match (&settings.egress, &host.egress_route) {
        (EgressPolicy::None, _) => Ok((Some("none".to_owned()), Vec::new())),
        (EgressPolicy::All, _) => Ok(((!settings.network).then(|| "none".to_owned()), Vec::new())),
        (EgressPolicy::Allow(_), None) => Err(SpecError::EgressUnavailable),
        (EgressPolicy::Allow(_), Some(route)) => {
            env.retain(|e| !e.to_ascii_lowercase().contains("_proxy="));
            env.extend(proxy_env(&route.proxy_ip, identity.task_label().as_str()));
            Ok((Some(route.network.clone()), vec![route.proxy_ip.clone()]))
        }
    }
}

/// The placeholders of `terminal.docker_credentials` in place of their values, and the variables naming the trust
/// bundle that lets the sandbox's TLS clients accept the proxy's certificates for their destinations (the edge
/// copies it in before each command: a file of berth's home is never mounted). A variable of `docker_env` with a
/// credential's name is replaced, never kept beside it.
fn credentials(
    identity: &SandboxIdentity,
    settings: &SandboxSettings,
    host: &HostFacts,
    env: &mut Vec<String>,
) -> Result<(), SpecError> {
    if settings.credentials.is_empty() {
        return Ok(());
    }
    let Some(facts) = &host.credential_facts else {
        return Err(SpecError::Credentials(
            "terminal.docker_credentials is set but the egress CA was not set up".into(),
        ));
    };
    let sandbox = identity.name_digest();
    let names: Vec<&str> =
        settings.credentials.0.keys().map(String::as_str).chain(CA_BUNDLE_VARS.iter().copied()).collect();
    env.retain(|e| !names.iter().any(|n| e.split_once('=').is_some_and(|(k, _)| k == *n)));
    for var in settings.credentials.0.keys() {
        env.push(format!("{var}={}", settings.credentials.placeholder(&facts.key, &sandbox, var)));
    }
    env.extend(CA_BUNDLE_VARS.iter().map(|v| format!("{v}={CA_BUNDLE_PATH}")));
    Ok(())
}

/// Refuses a network (or, behind the egress proxy, DNS servers) from `docker_extra_args` that would undo the
/// network the settings asked for, rather than letting either one silently win.
fn check_network(settings: &SandboxSettings, host: &HostFacts, spec: &CreateSpec) -> Result<(), SpecError> {
    let mode = spec.network_mode.as_deref();
    match (&settings.egress, &host.egress_route) {
        (EgressPolicy::Allow(_), Some(route)) => {
            if mode != Some(route.network.as_str()) || spec.dns != [route.proxy_ip.clone()] {
                return Err(SpecError::EgressConflict);
            }
            Ok(())
        }
        _ => match mode.filter(|m| *m != "none") {
            Some(mode) if !settings.network => Err(SpecError::NetworkConflict { mode: mode.to_owned() }),
            Some(_) if settings.egress == EgressPolicy::None => Err(SpecError::EgressConflict),
            _ => Ok(()),
        },
    }
}

/// Labels the finished spec with its fingerprint and field digests; last, since they cover everything above.
fn stamp_fingerprint(spec: &mut CreateSpec) {
    let fingerprint = spec.fingerprint();
    spec.labels.insert(LABEL_FINGERPRINT.to_owned(), fingerprint);
    spec.labels.insert(LABEL_FIELDS.to_owned(), spec.field_digests());
}
