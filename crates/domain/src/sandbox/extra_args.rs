//! `terminal.docker_extra_args`: `docker run` flags mapped onto the Engine API's create call.
//!
//! hermes appends these flags to its `docker run` command line; berth speaks the Engine API, so every flag is
//! parsed into the create spec here. A flag the create call can carry is mapped (devices, GPU requests, ulimits,
//! mounts, sysctls, …); a flag that has no API form, or that would break the sandbox contract, is one
//! [`SpecError`], never a silent drop, so a sandbox cannot quietly start without the GPUs or limits it was asked
//! for. Mounts are parsed into [`MountSpec`] so safety checks on host paths can read them as data.
//!
//! This file walks the arguments (a flag, its value inline or next, the refused and the value-less ones);
//! `flags.rs` is the flag table and what each flag sets, `values.rs` the parsers of structured values, and
//! `mounts.rs` the `--mount` form and the list of every source a spec mounts.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{CreateSpec, SpecError, parse_flag_bool};

mod flags;
mod mounts;
mod values;

pub use flags::MAPPED_FLAGS;
pub use mounts::{MountSource, MountSpec, mount_sources, parse_mount};
use values::bad;
pub use values::{
    DeviceMapping, DeviceRequest, PortPublish, Ulimit, parse_device, parse_gpus, parse_publish, parse_ulimit,
};

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
        let (flag, inline) = split_flag(arg);
        if !flag.starts_with('-') {
            return Err(SpecError::UnsupportedExtraArg {
                flag: arg.to_owned(),
                why: "not a flag (an image or command cannot be given here)".into(),
            });
        }
        let flag = flags::canonical(flag);
        if let Some(why) = flags::refusal(flag) {
            return Err(SpecError::UnsupportedExtraArg { flag: flag.to_owned(), why: why.to_owned() });
        }
        if flags::is_bool_flag(flag) {
            let on = match inline.as_deref() {
                None => true,
                Some(b) => parse_flag_bool(b).ok_or_else(|| bad(flag, b, "expected true or false"))?,
            };
            flags::apply_bool(spec, flag, on);
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
        flags::apply_one(spec, flag, &v)?;
    }
    Ok(())
}

/// An argument's flag and the value given with it, if any: `--flag=value`, or a short flag with its value
/// attached (`-eA=1`, `-m512m`).
fn split_flag(arg: &str) -> (&str, Option<String>) {
    match arg.split_once('=') {
        Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
        _ if arg.len() > 2 && arg.starts_with('-') && !arg.starts_with("--") => {
            let (f, v) = arg.split_at(2);
            (f, Some(v.strip_prefix('=').unwrap_or(v).to_owned()))
        }
        _ => (arg, None),
    }
}
