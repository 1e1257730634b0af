//! `terminal.docker_extra_args`: `docker run` flags mapped onto the Engine API's create call.
//!
//! hermes appends these flags to its `docker run` command line; berth speaks the Engine API, so every flag is
//! parsed into the create spec here. A flag the create call can carry is mapped (devices, GPU requests, ulimits,
//! mounts, sysctls, …); a flag that has no API form, or that would break the sandbox contract, is one
//! [`SpecError`], never a silent drop, so a sandbox cannot quietly start without the GPUs or limits it was asked
//! for. Mounts are parsed into [`MountSpec`] so safety checks on host paths can read them as data.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{CreateSpec, SpecError, parse_bytes};

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

/// A published port (`-p [ip:][host:]container[/proto]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PortPublish {
    pub host_ip: String,
    pub host_port: String,
    /// `port/proto`, e.g. `80/tcp`.
    pub container: String,
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

/// Every flag berth maps, for `docs/settings.md` and the tests (long form; short aliases in parentheses).
pub const MAPPED_FLAGS: &[&str] = &[
    "--add-host",
    "--blkio-weight",
    "--cap-add",
    "--cap-drop",
    "--cgroup-parent",
    "--cgroupns",
    "--cpu-period",
    "--cpu-quota",
    "--cpu-shares (-c)",
    "--cpus",
    "--cpuset-cpus",
    "--cpuset-mems",
    "--device",
    "--device-cgroup-rule",
    "--dns",
    "--dns-option",
    "--dns-search",
    "--domainname",
    "--env (-e)",
    "--expose",
    "--gpus",
    "--group-add",
    "--hostname (-h)",
    "--init",
    "--ipc",
    "--label (-l)",
    "--log-driver",
    "--log-opt",
    "--memory (-m)",
    "--memory-reservation",
    "--memory-swap",
    "--memory-swappiness",
    "--mount",
    "--network (--net)",
    "--oom-kill-disable",
    "--oom-score-adj",
    "--pid",
    "--pids-limit",
    "--privileged",
    "--publish (-p)",
    "--read-only",
    "--restart",
    "--runtime",
    "--security-opt",
    "--shm-size",
    "--stop-signal",
    "--stop-timeout",
    "--storage-opt",
    "--sysctl",
    "--tmpfs",
    "--ulimit",
    "--user (-u)",
    "--userns",
    "--uts",
    "--volume (-v)",
    "--workdir (-w)",
];

/// Flags `docker run` has that the create call cannot carry, or that would break the sandbox, with the reason.
const REFUSED: &[(&str, &str)] = &[
    ("--detach", "berth always runs sandboxes detached"),
    ("--interactive", "sandboxes have no attached stdin; commands run through exec"),
    ("--tty", "sandboxes have no terminal; commands run through exec"),
    ("--rm", "a persistent sandbox must survive its process; use docker_persist_across_processes: false"),
    ("--name", "berth names sandboxes itself (the name arbitrates concurrent creators)"),
    ("--entrypoint", "the sandbox's long-running command must stay `sleep infinity`"),
    ("--pull", "berth never pulls images"),
    ("--quiet", "client-side output option"),
    ("--cidfile", "client-side option"),
    ("--sig-proxy", "client-side option"),
    ("--detach-keys", "client-side option"),
    ("--env-file", "read by the docker client, not the engine; put the variables in terminal.docker_env"),
    ("--label-file", "read by the docker client, not the engine; use --label"),
    ("--platform", "an image-pull option; berth never pulls"),
    ("--disable-content-trust", "client-side option"),
    ("--isolation", "Windows containers only"),
];

fn canonical(flag: &str) -> &str {
    match flag {
        "-e" => "--env",
        "-v" => "--volume",
        "-u" => "--user",
        "-w" => "--workdir",
        "-l" => "--label",
        "-m" => "--memory",
        "-c" => "--cpu-shares",
        "-h" => "--hostname",
        "-p" => "--publish",
        "--net" => "--network",
        "-d" => "--detach",
        "-i" => "--interactive",
        "-t" => "--tty",
        "-q" => "--quiet",
        other => other,
    }
}

/// Flags that take no value (an inline `=true|false` is accepted).
fn is_bool_flag(flag: &str) -> bool {
    matches!(
        flag,
        "--privileged"
            | "--init"
            | "--no-init"
            | "--read-only"
            | "--oom-kill-disable"
            | "--detach"
            | "--interactive"
            | "--tty"
            | "--rm"
            | "--quiet"
            | "--sig-proxy"
            | "--disable-content-trust"
    )
}

fn bad(flag: &str, value: &str, why: impl Into<String>) -> SpecError {
    SpecError::BadExtraArg { flag: flag.to_owned(), value: value.to_owned(), why: why.into() }
}

fn int(flag: &str, v: &str) -> Result<i64, SpecError> {
    v.trim().parse().map_err(|_| bad(flag, v, "not a whole number"))
}

fn bytes(flag: &str, v: &str) -> Result<i64, SpecError> {
    parse_bytes(v).ok_or_else(|| bad(flag, v, "not a size such as 512m or 1g"))
}

fn key_value(flag: &str, v: &str) -> Result<(String, String), SpecError> {
    match v.split_once('=') {
        Some((k, val)) if !k.is_empty() => Ok((k.to_owned(), val.to_owned())),
        _ => Err(bad(flag, v, "expected key=value")),
    }
}

fn strip_quotes(v: &str) -> &str {
    v.trim().trim_matches(|c| c == '"' || c == '\'')
}

/// Parses `--gpus`: `all`, a count, or `key=value` pairs (`count=`, `device=`, `driver=`, `capabilities=`) as the
/// docker CLI does; the capability set always includes `gpu`.
pub fn parse_gpus(v: &str) -> Result<DeviceRequest, SpecError> {
    let raw = strip_quotes(v);
    let mut req = DeviceRequest {
        driver: String::new(),
        count: 0,
        device_ids: Vec::new(),
        capabilities: vec![vec!["gpu".into()]],
    };
    if raw == "all" {
        req.count = -1;
        return Ok(req);
    }
    if let Ok(n) = raw.parse::<i64>() {
        req.count = n;
        return Ok(req);
    }
    // `device=0,1` lists ids after the `=`; other keys are comma-separated pairs.
    if let Some(ids) = raw.strip_prefix("device=") {
        req.device_ids = ids.split(',').map(|s| strip_quotes(s).to_owned()).filter(|s| !s.is_empty()).collect();
        return Ok(req);
    }
    for part in raw.split(',').map(strip_quotes).filter(|p| !p.is_empty()) {
        let (k, val) = part.split_once('=').ok_or_else(|| bad("--gpus", v, "expected all, a count or key=value"))?;
        match k {
            "count" if val == "all" => req.count = -1,
            "count" => req.count = int("--gpus", val)?,
            "device" => req.device_ids.push(val.to_owned()),
            "driver" => req.driver = val.to_owned(),
            "capabilities" => req.capabilities[0].push(val.to_owned()),
            _ => return Err(bad("--gpus", v, format!("unknown key {k:?}"))),
        }
    }
    Ok(req)
}

/// Parses `--device host[:container[:permissions]]`.
pub fn parse_device(v: &str) -> Result<DeviceMapping, SpecError> {
    let parts: Vec<&str> = v.split(':').collect();
    let perms_ok = |p: &str| !p.is_empty() && p.chars().all(|c| matches!(c, 'r' | 'w' | 'm'));
    let (host, container, permissions) = match parts.as_slice() {
        [h] => (*h, *h, "rwm"),
        [h, p] if perms_ok(p) => (*h, *h, *p),
        [h, c] => (*h, *c, "rwm"),
        [h, c, p] if perms_ok(p) => (*h, *c, *p),
        _ => return Err(bad("--device", v, "expected host[:container[:rwm]]")),
    };
    if !host.starts_with('/') {
        return Err(bad("--device", v, "the host device must be an absolute path"));
    }
    Ok(DeviceMapping { host: host.into(), container: container.into(), permissions: permissions.into() })
}

/// Parses `--ulimit name=soft[:hard]`.
pub fn parse_ulimit(v: &str) -> Result<Ulimit, SpecError> {
    let (name, limits) = key_value("--ulimit", v)?;
    let (soft, hard) = match limits.split_once(':') {
        Some((s, h)) => (int("--ulimit", s)?, int("--ulimit", h)?),
        None => {
            let n = int("--ulimit", &limits)?;
            (n, n)
        }
    };
    Ok(Ulimit { name, soft, hard })
}

/// Parses `--mount type=…,source=…,target=…[,readonly][,opt=…]`.
pub fn parse_mount(v: &str) -> Result<MountSpec, SpecError> {
    let mut kind = "volume".to_owned();
    let (mut source, mut target, mut read_only) = (None, None, false);
    let mut options = BTreeMap::new();
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, val) = part.split_once('=').map_or((part, None), |(k, v)| (k, Some(v)));
        match (k, val) {
            ("type", Some(t)) => kind = t.to_owned(),
            ("source" | "src", Some(s)) => source = Some(s.to_owned()),
            ("target" | "destination" | "dst", Some(t)) => target = Some(t.to_owned()),
            ("readonly" | "ro", None) => read_only = true,
            ("readonly" | "ro", Some(b)) => {
                read_only =
                    crate::sandbox::parse_flag_bool(b).ok_or_else(|| bad("--mount", v, "readonly=true|false"))?
            }
            (
                k @ ("bind-propagation" | "bind-nonrecursive" | "consistency" | "tmpfs-size" | "tmpfs-mode"
                | "volume-nocopy" | "volume-driver" | "volume-subpath"),
                Some(val),
            ) => {
                options.insert(k.to_owned(), val.to_owned());
            }
            (k, Some(_)) => return Err(bad("--mount", v, format!("option {k:?} is not supported"))),
            ("volume-nocopy" | "bind-nonrecursive", None) => {
                options.insert(k.to_owned(), "true".to_owned());
            }
            (k, None) => return Err(bad("--mount", v, format!("option {k:?} needs a value"))),
        }
    }
    if let Some(size) = options.get("tmpfs-size")
        && parse_bytes(size).is_none()
    {
        return Err(bad("--mount", v, "tmpfs-size is not a size"));
    }
    if let Some(mode) = options.get("tmpfs-mode")
        && i64::from_str_radix(mode, 8).is_err()
    {
        return Err(bad("--mount", v, "tmpfs-mode is not an octal mode"));
    }
    if !matches!(kind.as_str(), "bind" | "volume" | "tmpfs") {
        return Err(bad("--mount", v, format!("type {kind:?} is not bind, volume or tmpfs")));
    }
    let target = target.ok_or_else(|| bad("--mount", v, "no target"))?;
    if kind == "bind" && source.is_none() {
        return Err(bad("--mount", v, "a bind mount needs a source"));
    }
    Ok(MountSpec { kind, source, target, read_only, options })
}

/// Parses `-p [ip:][hostPort:]containerPort[/proto]`.
pub fn parse_publish(v: &str) -> Result<PortPublish, SpecError> {
    let (addr, proto) = v.rsplit_once('/').unwrap_or((v, "tcp"));
    let parts: Vec<&str> = addr.split(':').collect();
    let (host_ip, host_port, port) = match parts.as_slice() {
        [c] => ("", "", *c),
        [h, c] => ("", *h, *c),
        [ip, h, c] => (*ip, *h, *c),
        _ => return Err(bad("--publish", v, "expected [ip:][hostPort:]containerPort[/proto]")),
    };
    if port.parse::<u16>().is_err() || !(host_port.is_empty() || host_port.parse::<u16>().is_ok()) {
        return Err(bad("--publish", v, "ports must be numbers (ranges are not supported)"));
    }
    Ok(PortPublish { host_ip: host_ip.into(), host_port: host_port.into(), container: format!("{port}/{proto}") })
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

/// Checks `docker_extra_args` on their own (for `config set`), with the same rules the spec builder applies, and
/// returns the [`blank_spec`] they make, whose mounts the caller checks.
///
/// # Errors
/// As [`apply_extra_args`].
pub fn check_extra_args(args: &[String]) -> Result<CreateSpec, SpecError> {
    let mut spec = blank_spec();
    apply_extra_args(&mut spec, args)?;
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
    let binds = spec
        .binds
        .iter()
        .map(|b| MountSource { source: b.split_once(':').map_or(b.as_str(), |(h, _)| h), bind: false });
    let mounts = spec
        .extra
        .mounts
        .iter()
        .filter_map(|m| Some(MountSource { source: m.source.as_deref()?, bind: m.kind == "bind" }));
    binds.chain(mounts).collect()
}

/// Applies `docker run`-style extra arguments to the spec, last one winning, as upstream appends them last.
///
/// # Errors
/// [`SpecError::UnsupportedExtraArg`] for a flag the create call cannot carry, [`SpecError::BadExtraArg`] for a
/// value that does not parse.
pub fn apply_extra_args(spec: &mut CreateSpec, args: &[String]) -> Result<(), SpecError> {
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ if arg.len() > 2 && arg.starts_with('-') && !arg.starts_with("--") => {
                // `-eA=1`, `-m512m`: a short flag with its value attached.
                let (f, v) = arg.split_at(2);
                (f, Some(v.strip_prefix('=').unwrap_or(v).to_owned()))
            }
            _ => (arg, None),
        };
        if !flag.starts_with('-') {
            return Err(SpecError::UnsupportedExtraArg {
                flag: arg.to_owned(),
                why: "not a flag (an image or command cannot be given here)".into(),
            });
        }
        let flag = canonical(flag);
        if let Some((_, why)) = REFUSED.iter().find(|(f, _)| *f == flag) {
            return Err(SpecError::UnsupportedExtraArg { flag: flag.to_owned(), why: (*why).to_owned() });
        }
        if is_bool_flag(flag) {
            let on = match inline.as_deref() {
                None => true,
                Some(b) => crate::sandbox::parse_flag_bool(b).ok_or_else(|| bad(flag, b, "expected true or false"))?,
            };
            match flag {
                "--privileged" => spec.privileged = on,
                "--init" => spec.init = on,
                "--no-init" => spec.init = !on,
                "--read-only" => spec.extra.read_only = on,
                "--oom-kill-disable" => spec.extra.oom_kill_disable = Some(on),
                _ => unreachable!("every bool flag is mapped or refused"),
            }
            continue;
        }
        let v = match inline {
            Some(v) => v,
            None => {
                let Some(v) = args.get(i) else {
                    return Err(bad(flag, "", "needs a value"));
                };
                i += 1;
                v.clone()
            }
        };
        apply_one(spec, flag, v)?;
    }
    Ok(())
}

fn apply_one(spec: &mut CreateSpec, flag: &str, v: String) -> Result<(), SpecError> {
    let x = &mut spec.extra;
    match flag {
        "--env" => spec.env.push(v),
        "--volume" => spec.binds.push(v),
        "--tmpfs" => {
            let (path, opts) = v.split_once(':').unwrap_or((&v, ""));
            spec.tmpfs.insert(path.to_owned(), opts.to_owned());
        }
        "--cap-add" => spec.cap_add.push(v),
        "--cap-drop" => spec.cap_drop.push(v),
        "--security-opt" => spec.security_opt.push(v),
        "--network" => spec.network_mode = Some(v),
        "--user" => spec.user = Some(v),
        "--workdir" => spec.workdir = v,
        "--add-host" => spec.extra_hosts.push(v),
        "--dns" => spec.dns.push(v),
        "--pids-limit" => spec.pids_limit = Some(int(flag, &v)?),
        "--cpus" => match v.parse::<f64>() {
            Ok(c) if c >= 0.0 => spec.nano_cpus = Some((c * 1e9).round() as i64),
            _ => return Err(bad(flag, &v, "not a number")),
        },
        "--memory" => spec.memory_bytes = Some(bytes(flag, &v)?),
        "--shm-size" => spec.shm_size = Some(bytes(flag, &v)?),
        "--storage-opt" => match key_value(flag, &v)? {
            (k, size) if k == "size" => spec.storage_size = Some(size),
            (k, _) => return Err(bad(flag, &v, format!("only size= is supported, not {k}="))),
        },
        "--label" => {
            let (k, val) = v.split_once('=').unwrap_or((&v, ""));
            spec.labels.insert(k.to_owned(), val.to_owned());
        }
        "--gpus" => x.device_requests.push(parse_gpus(&v)?),
        "--device" => x.devices.push(parse_device(&v)?),
        "--device-cgroup-rule" => x.device_cgroup_rules.push(v),
        "--ulimit" => {
            let u = parse_ulimit(&v)?;
            x.ulimits.retain(|o| o.name != u.name);
            x.ulimits.push(u);
        }
        "--mount" => x.mounts.push(parse_mount(&v)?),
        "--sysctl" => {
            let (k, val) = key_value(flag, &v)?;
            x.sysctls.insert(k, val);
        }
        "--hostname" => x.hostname = Some(v),
        "--domainname" => x.domainname = Some(v),
        "--ipc" => x.ipc_mode = Some(v),
        "--pid" => x.pid_mode = Some(v),
        "--uts" => x.uts_mode = Some(v),
        "--userns" => x.userns_mode = Some(v),
        "--cgroupns" => x.cgroupns_mode = Some(v),
        "--cgroup-parent" => x.cgroup_parent = Some(v),
        "--runtime" => x.runtime = Some(v),
        "--oom-score-adj" => x.oom_score_adj = Some(int(flag, &v)?),
        "--memory-swap" => x.memory_swap = Some(if v.trim() == "-1" { -1 } else { bytes(flag, &v)? }),
        "--memory-reservation" => x.memory_reservation = Some(bytes(flag, &v)?),
        "--memory-swappiness" => x.memory_swappiness = Some(int(flag, &v)?),
        "--cpu-shares" => x.cpu_shares = Some(int(flag, &v)?),
        // The engine refuses NanoCpus together with a CFS period or quota; extra args override what came before
        // (terminal.container_cpu), so the explicit CFS setting wins.
        "--cpu-period" => {
            x.cpu_period = Some(int(flag, &v)?);
            spec.nano_cpus = None;
        }
        "--cpu-quota" => {
            x.cpu_quota = Some(int(flag, &v)?);
            spec.nano_cpus = None;
        }
        "--cpuset-cpus" => x.cpuset_cpus = Some(v),
        "--cpuset-mems" => x.cpuset_mems = Some(v),
        "--blkio-weight" => {
            x.blkio_weight = Some(v.trim().parse().map_err(|_| bad(flag, &v, "a number from 10 to 1000"))?)
        }
        "--group-add" => x.group_add.push(v),
        "--dns-search" => x.dns_search.push(v),
        "--dns-option" | "--dns-opt" => x.dns_options.push(v),
        "--stop-signal" => x.stop_signal = Some(v),
        "--stop-timeout" => x.stop_timeout = Some(int(flag, &v)?),
        "--restart" => {
            let name = v.split(':').next().unwrap_or_default();
            if !matches!(name, "no" | "always" | "unless-stopped" | "on-failure") {
                return Err(bad(flag, &v, "no, always, unless-stopped or on-failure[:max]"));
            }
            x.restart = Some(v);
        }
        "--log-driver" => x.log_driver = Some(v),
        "--log-opt" => {
            let (k, val) = key_value(flag, &v)?;
            x.log_opts.insert(k, val);
        }
        "--publish" => x.publish.push(parse_publish(&v)?),
        "--expose" => x.expose.push(if v.contains('/') { v } else { format!("{v}/tcp") }),
        other => {
            return Err(SpecError::UnsupportedExtraArg {
                flag: other.to_owned(),
                why: "not a docker run flag berth can pass to the Engine API".into(),
            });
        }
    }
    Ok(())
}
