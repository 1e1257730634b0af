//! The parsers of `docker_extra_args` values that have a structure of their own (`--gpus`, `--device`,
//! `--ulimit`, `--publish`) into the domain's types, and the small parsers every flag's value goes through, each
//! failing with the flag and value it could not read.

use domain::sandbox::{DeviceMapping, DeviceRequest, PortPublish, SpecError, Ulimit, parse_bytes};

/// The error for a value `flag` cannot take, and why.
pub(super) fn bad(flag: &str, value: &str, why: impl Into<String>) -> SpecError {
    SpecError::BadExtraArg { flag: flag.to_owned(), value: value.to_owned(), why: why.into() }
}

/// A whole number, such as `--pids-limit 100`.
pub(super) fn int(flag: &str, v: &str) -> Result<i64, SpecError> {
    v.trim().parse().map_err(|_| bad(flag, v, "not a whole number"))
}

/// A Docker size, such as `--memory 512m`.
pub(super) fn bytes(flag: &str, v: &str) -> Result<i64, SpecError> {
    parse_bytes(v).ok_or_else(|| bad(flag, v, "not a size such as 512m or 1g"))
}

/// A `key=value` pair with a non-empty key, such as `--sysctl net.ipv4.ip_forward=1`.
pub(super) fn key_value(flag: &str, v: &str) -> Result<(String, String), SpecError> {
    match v.split_once('=') {
        Some((k, val)) if !k.is_empty() => Ok((k.to_owned(), val.to_owned())),
        _ => Err(bad(flag, v, "expected key=value")),
    }
}

/// The value without surrounding blanks and quotes, which the docker CLI tolerates around `--gpus` values.
fn strip_quotes(v: &str) -> &str {
    v.trim().trim_matches(|c| c == '"' || c == '\'')
}

/// Parses `--gpus`: `all`, a count, or `key=value` pairs (`count=`, `device=`, `driver=`, `capabilities=`) as the
/// docker CLI does; the capability set always includes `gpu`.
pub(super) fn parse_gpus(v: &str) -> Result<DeviceRequest, SpecError> {
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
pub(super) fn parse_device(v: &str) -> Result<DeviceMapping, SpecError> {
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
pub(super) fn parse_ulimit(v: &str) -> Result<Ulimit, SpecError> {
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

/// Parses `-p [ip:][hostPort:]containerPort[/proto]`.
pub(super) fn parse_publish(v: &str) -> Result<PortPublish, SpecError> {
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
