//! `--mount` read into the domain's [`MountSpec`], which the mount check reads beside every bind.

use std::collections::BTreeMap;

use domain::sandbox::{MountSpec, SpecError, parse_bytes};

use super::parse_flag_bool;
use super::values::bad;

/// Parses `--mount type=…,source=…,target=…[,readonly][,opt=…]`.
pub(super) fn parse_mount(v: &str) -> Result<MountSpec, SpecError> {
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
