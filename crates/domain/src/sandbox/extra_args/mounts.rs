//! `--mount` as data ([`MountSpec`]), and every source a create spec mounts however it was spelled
//! ([`mount_sources`]), so the safety check on host paths reads one list.

use std::collections::BTreeMap;

use serde::Serialize;

use super::values::bad;
use crate::sandbox::{CreateSpec, SpecError, parse_bytes, parse_flag_bool};

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
                read_only = parse_flag_bool(b).ok_or_else(|| bad("--mount", v, "readonly=true|false"))?
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
