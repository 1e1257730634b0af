//! The flag table of `docker_extra_args`: which `docker run` flags berth maps and which it refuses, their short
//! aliases, and what each mapped flag sets in the typed [`ExtraArgs`].

use domain::sandbox::{Bind, ExtraArgs, ExtraCreate, SpecError};

use super::mounts::parse_mount;
use super::values::{bad, bytes, int, key_value, parse_device, parse_gpus, parse_publish, parse_ulimit};

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

/// Why `flag` is refused, when it is one of the flags the create call cannot carry.
pub(super) fn refusal(flag: &str) -> Option<&'static str> {
    REFUSED.iter().find(|(f, _)| *f == flag).map(|(_, why)| *why)
}

/// The long form of a flag given by its short alias (`-e` is `--env`).
pub(super) fn canonical(flag: &str) -> &str {
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
pub(super) fn is_bool_flag(flag: &str) -> bool {
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

/// Sets what a flag without a value sets; the refused ones never reach here.
pub(super) fn apply_bool(spec: &mut ExtraArgs, flag: &str, on: bool) {
    match flag {
        "--privileged" => spec.privileged = Some(on),
        "--init" => spec.init = Some(on),
        "--no-init" => spec.init = Some(!on),
        "--read-only" => spec.extra.read_only = on,
        "--oom-kill-disable" => spec.extra.oom_kill_disable = Some(on),
        _ => unreachable!("every bool flag is mapped or refused"),
    }
}

/// Sets what the flag `flag` (long form) with the value `v` sets in the model. The flags are grouped by what they
/// shape: the container's own fields the settings also set, its resource limits, and the fields only extra
/// arguments set.
///
/// # Errors
/// [`SpecError::BadExtraArg`] for a value that does not parse, [`SpecError::UnsupportedExtraArg`] for a flag no
/// group maps.
pub(super) fn apply_one(spec: &mut ExtraArgs, flag: &str, v: &str) -> Result<(), SpecError> {
    if apply_container_flag(spec, flag, v)?
        || apply_limit_flag(spec, flag, v)?
        || apply_extra_flag(&mut spec.extra, flag, v)?
    {
        return Ok(());
    }
    Err(SpecError::UnsupportedExtraArg {
        flag: flag.to_owned(),
        why: "not a docker run flag berth can pass to the Engine API".into(),
    })
}

/// The flags for fields the settings also set (environment, mounts, capabilities, network, user, labels);
/// `false` when `flag` is not one of them.
fn apply_container_flag(spec: &mut ExtraArgs, flag: &str, v: &str) -> Result<bool, SpecError> {
    let v = v.to_owned();
    match flag {
        "--env" => spec.env.push(v),
        "--volume" => spec.binds.push(Bind::parse(&v)),
        "--tmpfs" => {
            let (path, opts) = v.split_once(':').unwrap_or((&v, ""));
            spec.tmpfs.insert(path.to_owned(), opts.to_owned());
        }
        "--cap-add" => spec.cap_add.push(v),
        "--cap-drop" => spec.cap_drop.push(v),
        "--security-opt" => spec.security_opt.push(v),
        "--network" => spec.network_mode = Some(v),
        "--user" => spec.user = Some(v),
        "--workdir" => spec.workdir = Some(v),
        "--add-host" => spec.extra_hosts.push(v),
        "--dns" => spec.dns.push(v),
        "--label" => {
            let (k, val) = v.split_once('=').unwrap_or((&v, ""));
            spec.labels.insert(k.to_owned(), val.to_owned());
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// The resource-limit flags (cpu, memory, pids, disk, shm, ulimits, OOM, block IO); `false` when `flag` is not
/// one of them.
fn apply_limit_flag(spec: &mut ExtraArgs, flag: &str, v: &str) -> Result<bool, SpecError> {
    let x = &mut spec.extra;
    match flag {
        "--pids-limit" => spec.pids_limit = Some(int(flag, v)?),
        "--cpus" => match v.parse::<f64>() {
            Ok(c) if c >= 0.0 => spec.nano_cpus = Some(Some((c * 1e9).round() as i64)),
            _ => return Err(bad(flag, v, "not a number")),
        },
        "--memory" => spec.memory_bytes = Some(bytes(flag, v)?),
        "--shm-size" => spec.shm_size = Some(bytes(flag, v)?),
        "--storage-opt" => match key_value(flag, v)? {
            (k, size) if k == "size" => spec.storage_size = Some(size),
            (k, _) => return Err(bad(flag, v, format!("only size= is supported, not {k}="))),
        },
        "--ulimit" => {
            let u = parse_ulimit(v)?;
            x.ulimits.retain(|o| o.name != u.name);
            x.ulimits.push(u);
        }
        "--oom-score-adj" => x.oom_score_adj = Some(int(flag, v)?),
        "--memory-swap" => x.memory_swap = Some(if v.trim() == "-1" { -1 } else { bytes(flag, v)? }),
        "--memory-reservation" => x.memory_reservation = Some(bytes(flag, v)?),
        "--memory-swappiness" => x.memory_swappiness = Some(int(flag, v)?),
        "--cpu-shares" => x.cpu_shares = Some(int(flag, v)?),
        // The engine refuses NanoCpus together with a CFS period or quota; extra args override what came before
        // (terminal.container_cpu), so the explicit CFS setting wins.
        "--cpu-period" => {
            x.cpu_period = Some(int(flag, v)?);
            spec.nano_cpus = Some(None);
        }
        "--cpu-quota" => {
            x.cpu_quota = Some(int(flag, v)?);
            spec.nano_cpus = Some(None);
        }
        "--cpuset-cpus" => x.cpuset_cpus = Some(v.to_owned()),
        "--cpuset-mems" => x.cpuset_mems = Some(v.to_owned()),
        "--blkio-weight" => {
            x.blkio_weight = Some(v.trim().parse().map_err(|_| bad(flag, v, "a number from 10 to 1000"))?)
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// The flags for fields only extra arguments set (devices, mounts, namespaces, runtime, restart, logging,
/// ports); `false` when `flag` is not one of them.
fn apply_extra_flag(x: &mut ExtraCreate, flag: &str, v: &str) -> Result<bool, SpecError> {
    let owned = || Some(v.to_owned());
    match flag {
        "--gpus" => x.device_requests.push(parse_gpus(v)?),
        "--device" => x.devices.push(parse_device(v)?),
        "--device-cgroup-rule" => x.device_cgroup_rules.push(v.to_owned()),
        "--mount" => x.mounts.push(parse_mount(v)?),
        "--sysctl" => {
            let (k, val) = key_value(flag, v)?;
            x.sysctls.insert(k, val);
        }
        "--hostname" => x.hostname = owned(),
        "--domainname" => x.domainname = owned(),
        "--ipc" => x.ipc_mode = owned(),
        "--pid" => x.pid_mode = owned(),
        "--uts" => x.uts_mode = owned(),
        "--userns" => x.userns_mode = owned(),
        "--cgroupns" => x.cgroupns_mode = owned(),
        "--cgroup-parent" => x.cgroup_parent = owned(),
        "--runtime" => x.runtime = owned(),
        "--group-add" => x.group_add.push(v.to_owned()),
        "--dns-search" => x.dns_search.push(v.to_owned()),
        "--dns-option" | "--dns-opt" => x.dns_options.push(v.to_owned()),
        "--stop-signal" => x.stop_signal = owned(),
        "--stop-timeout" => x.stop_timeout = Some(int(flag, v)?),
        "--restart" => {
            let name = v.split(':').next().unwrap_or_default();
            if !matches!(name, "no" | "always" | "unless-stopped" | "on-failure") {
                return Err(bad(flag, v, "no, always, unless-stopped or on-failure[:max]"));
            }
            x.restart = owned();
        }
        "--log-driver" => x.log_driver = owned(),
        "--log-opt" => {
            let (k, val) = key_value(flag, v)?;
            x.log_opts.insert(k, val);
        }
        "--publish" => x.publish.push(parse_publish(v)?),
        "--expose" => x.expose.push(if v.contains('/') { v.to_owned() } else { format!("{v}/tcp") }),
        _ => return Ok(false),
    }
    Ok(true)
}
