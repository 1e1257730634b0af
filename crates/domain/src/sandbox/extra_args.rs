//! `terminal.docker_extra_args` as a typed model: what the flags set ([`ExtraArgs`]), the create-call fields only
//! they set ([`ExtraCreate`]: devices, GPU requests, ulimits, mounts, sysctls, …) and every source a spec mounts
//! ([`mount_sources`]).
//!
//! The flags themselves are the runtime's to read: the Docker adapter parses `docker run` flags into an
//! [`ExtraArgs`] through the [`ExtraArgsParser`](crate::ports::ExtraArgsParser) port, the domain applies it to the
//! spec, and the one mount and host-access check reads the spec that results, so no spelling of a flag reaches the
//! engine unchecked and a runtime that is not Docker translates this model, not Docker's flags.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Bind, CreateSpec, SpecError};
use crate::ports::ExtraArgsParser;

/// A host device made visible in the container (`--device /dev/x[:/dev/y[:rwm]]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceMapping {
    pub host: String,
    pub container: String,
    pub permissions: String,
}

/// A device request (`--gpus …`): `count` -1 means all.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceRequest {
    pub driver: String,
    pub count: i64,
    pub device_ids: Vec<String>,
    pub capabilities: Vec<Vec<String>>,
}

/// A resource limit (`--ulimit name=soft[:hard]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Ulimit {
    pub name: String,
    pub soft: i64,
    pub hard: i64,
}

/// A published port (`-p [ip:][host:]container[/proto]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PortPublish {
    pub host_ip: String,
    pub host_port: String,
    /// `port/proto`, e.g. `80/tcp`.
    pub container: String,
}

/// A `--mount` entry: `type` (`bind`, `volume`, `tmpfs`), source, target, read-only, and the remaining options
/// (`bind-propagation`, `tmpfs-size`, `tmpfs-mode`, `volume-nocopy`, …) as given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MountSpec {
    pub kind: String,
    pub source: Option<String>,
    pub target: String,
    pub read_only: bool,
    pub options: BTreeMap<String, String>,
}

/// Create-call fields only `docker_extra_args` sets. Kept apart from [`CreateSpec`]'s core fields so a spec that
/// uses none of them fingerprints exactly as before (existing sandboxes are not recreated by an upgrade).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ExtraCreate {
    pub devices: Vec<DeviceMapping>,
    pub device_requests: Vec<DeviceRequest>,
    pub device_cgroup_rules: Vec<String>,
    pub ulimits: Vec<Ulimit>,
    pub mounts: Vec<MountSpec>,
    pub sysctls: BTreeMap<String, String>,
    pub read_only: bool,
    pub hostname: Option<String>,
    pub domainname: Option<String>,
    pub ipc_mode: Option<String>,
    pub pid_mode: Option<String>,
    pub uts_mode: Option<String>,
    pub userns_mode: Option<String>,
    pub cgroupns_mode: Option<String>,
    pub cgroup_parent: Option<String>,
    pub runtime: Option<String>,
    pub oom_score_adj: Option<i64>,
    pub oom_kill_disable: Option<bool>,
    pub memory_swap: Option<i64>,
    pub memory_reservation: Option<i64>,
    pub memory_swappiness: Option<i64>,
    pub cpu_shares: Option<i64>,
    pub cpu_period: Option<i64>,
    pub cpu_quota: Option<i64>,
    pub cpuset_cpus: Option<String>,
    pub cpuset_mems: Option<String>,
    pub blkio_weight: Option<u16>,
    pub group_add: Vec<String>,
    pub dns_search: Vec<String>,
    pub dns_options: Vec<String>,
    pub stop_signal: Option<String>,
    pub stop_timeout: Option<i64>,
    /// `no`, `always`, `unless-stopped` or `on-failure[:max]`.
    pub restart: Option<String>,
    pub log_driver: Option<String>,
    pub log_opts: BTreeMap<String, String>,
    pub publish: Vec<PortPublish>,
    pub expose: Vec<String>,
}

/// What a runtime's extra arguments set, as data: applied on top of the spec the settings made, last, as upstream
/// appends its `docker_extra_args` last. A list is appended to the spec's, a map's keys replace the spec's, and a
/// value that is set replaces the spec's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExtraArgs {
    /// `KEY=VALUE` pairs.
    pub env: Vec<String>,
    pub binds: Vec<Bind>,
    pub tmpfs: BTreeMap<String, String>,
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    pub security_opt: Vec<String>,
    pub network_mode: Option<String>,
    pub user: Option<String>,
    pub workdir: Option<String>,
    pub extra_hosts: Vec<String>,
    pub dns: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub privileged: Option<bool>,
    pub init: Option<bool>,
    pub pids_limit: Option<i64>,
    /// `Some(None)`: the CPU count is cleared (an explicit CFS period or quota, which the engine refuses beside it).
    pub nano_cpus: Option<Option<i64>>,
    pub memory_bytes: Option<i64>,
    pub shm_size: Option<i64>,
    pub storage_size: Option<String>,
    /// The fields no setting shapes, whole.
    pub extra: ExtraCreate,
}

impl ExtraArgs {
    /// Applies these arguments on top of `spec`.
    pub fn apply_to(self, spec: &mut CreateSpec) {
        spec.env.extend(self.env);
        spec.binds.extend(self.binds);
        spec.tmpfs.extend(self.tmpfs);
        spec.cap_add.extend(self.cap_add);
        spec.cap_drop.extend(self.cap_drop);
        spec.security_opt.extend(self.security_opt);
        spec.extra_hosts.extend(self.extra_hosts);
        spec.dns.extend(self.dns);
        spec.labels.extend(self.labels);
        let set = |field: &mut Option<String>, v: Option<String>| {
            if v.is_some() {
                *field = v;
            }
        };
        set(&mut spec.network_mode, self.network_mode);
        set(&mut spec.user, self.user);
        set(&mut spec.storage_size, self.storage_size);
        if let Some(w) = self.workdir {
            spec.workdir = w;
        }
        spec.privileged = self.privileged.unwrap_or(spec.privileged);
        spec.init = self.init.unwrap_or(spec.init);
        spec.pids_limit = self.pids_limit.or(spec.pids_limit);
        spec.nano_cpus = self.nano_cpus.unwrap_or(spec.nano_cpus);
        spec.memory_bytes = self.memory_bytes.or(spec.memory_bytes);
        spec.shm_size = self.shm_size.or(spec.shm_size);
        spec.extra = self.extra;
    }
}

/// The parser of a runtime that takes no extra arguments: none is the empty model, any is refused.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoExtraArgs;

impl ExtraArgsParser for NoExtraArgs {
    fn parse(&self, args: &[String]) -> Result<ExtraArgs, SpecError> {
        match args.first() {
            None => Ok(ExtraArgs::default()),
            Some(flag) => Err(SpecError::UnsupportedExtraArg {
                flag: flag.clone(),
                why: "this container runtime takes no extra arguments".into(),
            }),
        }
    }
}

/// A spec that holds nothing but what the settings under check put in it: `config set` builds one from the one
/// value it is about to write, so the mount check reads it exactly as it reads a sandbox's spec at create.
pub fn blank_spec() -> CreateSpec {
    CreateSpec {
        name: String::new(),
        image: String::new(),
        labels: BTreeMap::new(),
        cmd: Vec::new(),
        workdir: String::new(),
        env: Vec::new(),
        binds: Vec::new(),
        tmpfs: BTreeMap::new(),
        cap_drop: Vec::new(),
        cap_add: Vec::new(),
        security_opt: Vec::new(),
        pids_limit: None,
        init: true,
        nano_cpus: None,
        memory_bytes: None,
        storage_size: None,
        network_mode: None,
        user: None,
        extra_hosts: Vec::new(),
        dns: Vec::new(),
        privileged: false,
        shm_size: None,
        extra: ExtraCreate::default(),
    }
}

/// Checks `docker_extra_args` on their own (for `config set`) with the runtime's parser, and returns the
/// [`blank_spec`] they make, whose mounts and host access the caller checks.
///
/// # Errors
/// The parser's [`SpecError`] for a flag the create call cannot carry or a value that does not parse.
pub fn check_extra_args(parser: &dyn ExtraArgsParser, args: &[String]) -> Result<CreateSpec, SpecError> {
    let mut spec = blank_spec();
    parser.parse(args)?.apply_to(&mut spec);
    Ok(spec)
}

/// One source a create spec hands the engine to mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MountSource<'a> {
    /// The source as the engine gets it: a host path, or a volume's name.
    pub source: &'a str,
    /// Whether the engine reads it as a host path whatever it looks like (a `--mount type=bind`); a bind's host
    /// part (`-v`) that is not absolute is a volume's name to the engine.
    pub bind: bool,
}

/// Every source `spec` mounts, however it was spelled: the host part of each bind (`terminal.docker_volumes`,
/// `-v`/`--volume` in any spelling, the sandbox's own folders, the working directory) and the source of each
/// `--mount` of any type. The mount check reads this one list, so no spelling of a mount can pass it by.
pub fn mount_sources(spec: &CreateSpec) -> Vec<MountSource<'_>> {
    let binds = spec.binds.iter().map(|b| MountSource { source: b.checked_source(), bind: false });
    let mounts = spec
        .extra
        .mounts
        .iter()
        .filter_map(|m| Some(MountSource { source: m.source.as_deref()?, bind: m.kind == "bind" }));
    binds.chain(mounts).collect()
}
