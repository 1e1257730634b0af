//! Egress by allowlist (`terminal.docker_egress`): the policy's text form, what it allows, and the names of the
//! network and proxy that enforce it. Pure: the proxy (in `app`) resolves names and asks [`EgressPolicy::check`].

use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

use crate::sha256;

pub mod credentials;

/// A sandbox's egress: everything (today's network on), nothing (`--network none`), or only the listed destinations,
/// through berth's egress proxy on an internal network.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "egress", content = "allow")]
pub enum EgressPolicy {
    All,
    None,
    Allow(Vec<Destination>),
}

/// One allowed destination: a host name (`pypi.org`, `*.pythonhosted.org`) or a network (`10.0.0.0/8`, `192.0.2.7`),
/// with an optional port (any port when absent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Destination {
    Host { name: String, wildcard: bool, port: Option<u16> },
    Net { addr: IpAddr, prefix: u8, port: Option<u16> },
}

/// What the proxy may do with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Connect to one of these addresses (the vetted ones only, never a fresh lookup).
    Allow(Vec<IpAddr>),
    /// Refuse; the reason goes to the denial log.
    Deny(String),
}

impl EgressPolicy {
    /// Parses the setting's text: `all`, `none`, or destinations separated by commas or white space.
    ///
    /// # Errors
    /// One line naming the first destination that does not parse.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let t = raw.trim();
        match t.to_ascii_lowercase().as_str() {
            "all" | "" => return Ok(Self::All),
            "none" => return Ok(Self::None),
            _ => {}
        }
        let items: Vec<&str> = t.split([',', ' ', '\n', '\t']).filter(|s| !s.is_empty()).collect();
        let mut out = Vec::new();
        for item in items {
            if item.eq_ignore_ascii_case("all") || item.eq_ignore_ascii_case("none") {
                return Err(format!("{item:?} cannot be mixed with destinations; use it alone"));
            }
            out.push(Destination::parse(item)?);
        }
        Ok(Self::Allow(out))
    }

    /// A short digest of the canonical text, naming the network and proxy that enforce a list.
    pub fn digest(&self) -> String {
        sha256::hex_digest(self.to_string().as_bytes())[..12].to_owned()
    }

    /// The `hermes-egress` label: `off` without a proxy (hermes's own word), `berth-<digest>` behind berth's.
    pub fn label(&self) -> String {
        match self {
            Self::All | Self::None => crate::label::EGRESS_OFF.to_owned(),
            Self::Allow(_) => format!("{BERTH_EGRESS_PREFIX}{}", self.digest()),
        }
    }

    /// Decides a request for `host:port` that resolved to `resolved` (ignored when `host` is an address).
    ///
    /// A host name must match a listed name; each address it resolves to must be public or inside a listed network
    /// (so a listed name pointed at an internal address by its DNS is refused). An address given directly must be
    /// inside a listed network. Ports must match when an entry names one.
    pub fn check(&self, host: &str, port: u16, resolved: &[IpAddr]) -> Verdict {
        let dests = match self {
            Self::All => return Verdict::Allow(resolved.to_vec()),
            Self::None => return Verdict::Deny("egress is none".to_owned()),
            Self::Allow(d) => d,
        };
        let host = host.trim_end_matches('.').trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        let net_allows = |ip: &IpAddr| dests.iter().any(|d| d.covers_addr(*ip, port));
        if let Ok(ip) = host.parse::<IpAddr>() {
            return if net_allows(&ip) {
                Verdict::Allow(vec![ip])
            } else {
                Verdict::Deny(format!("address {ip} is not listed"))
            };
        }
        if !dests.iter().any(|d| d.covers_name(&host, Some(port))) {
            return Verdict::Deny(format!("host {host}:{port} is not listed"));
        }
        let ok: Vec<IpAddr> = resolved.iter().copied().filter(|ip| is_public(ip) || net_allows(ip)).collect();
        if ok.is_empty() {
            let shown: Vec<String> = resolved.iter().map(ToString::to_string).collect();
            return Verdict::Deny(if shown.is_empty() {
                format!("host {host} does not resolve")
            } else {
                format!("host {host} resolves to unlisted address {}", shown.join(", "))
            });
        }
        Verdict::Allow(ok)
    }

    /// Whether `name` is listed (on `port`, or on any port when `None`): the proxy looks up nothing else.
    pub fn allows_name(&self, name: &str, port: Option<u16>) -> bool {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        match self {
            Self::All => true,
            Self::None => false,
            Self::Allow(d) => d.iter().any(|d| d.covers_name(&name, port)),
        }
    }

    /// The addresses a DNS answer for `name` may carry: `None` when the name is not listed (refused), else those of
    /// `resolved` that are public or inside a listed network.
    pub fn dns_answer(&self, name: &str, resolved: &[IpAddr]) -> Option<Vec<IpAddr>> {
        let Self::Allow(dests) = self else { return self.allows_name(name, None).then(|| resolved.to_vec()) };
        if !self.allows_name(name, None) {
            return None;
        }
        let listed = |ip: &IpAddr| dests.iter().any(|d| matches!(d, Destination::Net { .. }) && d.covers_any_port(*ip));
        Some(resolved.iter().copied().filter(|ip| is_public(ip) || listed(ip)).collect())
    }
}

/// The prefix of berth's own `hermes-egress` values; a container carrying one is berth's to reuse or recreate.
pub const BERTH_EGRESS_PREFIX: &str = "berth-";

/// Label on a sandbox berth creates: its egress policy in canonical text (`all`, `none`, or the list).
pub const LABEL_EGRESS_POLICY: &str = "berth.egress";
/// Label on the egress networks and proxies berth creates: the digest of what they enforce.
pub const LABEL_EGRESS_PROXY: &str = "berth.egress-proxy";

/// The egress a container has, as `sandbox ls` shows it: its label, else what its network says (`none` without
/// one, `all` otherwise: a hermes-made or older sandbox).
pub fn shown_egress(c: &crate::container::ContainerSummary) -> String {
    match c.label(LABEL_EGRESS_POLICY) {
        Some(p) => p.to_owned(),
        None if c.network_mode.as_deref() == Some("none") => "none".to_owned(),
        None => "all".to_owned(),
    }
}

/// Where a sandbox under an allowlist is attached: berth's internal network and the proxy's fixed address on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressRoute {
    pub network: String,
    pub proxy_ip: String,
}

/// The egress network's layout version, in its name's digest: empty for the first (a gateway address of the host's on
/// the bridge), `|v2` since the bridge has none and the proxy serves its inside leg only.
const EGRESS_LAYOUT: &str = "|v2";

/// The port the proxy serves HTTP and CONNECT on.
pub const PROXY_PORT: u16 = 3128;

/// The internal network enforcing `policy` for the home `home` through a proxy that reaches out on the network
/// `outside` (its proxy container is `<name>-proxy`): one per home, policy and outside network.
///
/// The digest covers the network's layout version ([`EGRESS_LAYOUT`]), so a sandbox on a network made before the
/// layout changed (a bridge with a host address; a proxy serving both legs) moves to a new one: the network is part
/// of its fingerprint, and a changed fingerprint recreates it.
pub fn egress_name(home: &str, policy: &EgressPolicy, outside: &str) -> String {
    let digest = sha256::hex_digest(format!("{policy}|{outside}{EGRESS_LAYOUT}").as_bytes());
    format!("berth-egress-{}-{}", &home[..home.len().min(12)], &digest[..12])
}

/// The environment a sandbox behind the proxy carries, for tools that honour it; the user part names the task in
/// the denial log.
pub fn proxy_env(proxy_ip: &str, task_label: &str) -> Vec<String> {
    let url = format!("http://{task_label}@{proxy_ip}:{PROXY_PORT}");
    let mut env = Vec::new();
    for key in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        env.push(format!("{key}={url}"));
    }
    for key in ["NO_PROXY", "no_proxy"] {
        env.push(format!("{key}=localhost,127.0.0.1,::1"));
    }
    env
}

impl Destination {
    fn parse(item: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("egress destination {item:?}: {why}");
        // `[v6]:port`, `v4:port`, `name:port`; a bare v6 address has several colons and no port.
        let (base, port) = if let Some(rest) = item.strip_prefix('[') {
            let (addr, tail) = rest.split_once(']').ok_or_else(|| bad("unclosed ["))?;
            let port = match tail.strip_prefix(':') {
                Some(p) => Some(parse_port(p).ok_or_else(|| bad("port is not 1-65535"))?),
                None if tail.is_empty() => None,
                None => return Err(bad("expected :port after ]")),
            };
            (addr, port)
        } else if item.matches(':').count() == 1 {
            let (b, p) = item.split_once(':').unwrap_or((item, ""));
            (b, Some(parse_port(p).ok_or_else(|| bad("port is not 1-65535"))?))
        } else {
            (item, None)
        };
        if let Some((addr, prefix)) = base.split_once('/') {
            let addr: IpAddr = addr.parse().map_err(|_| bad("not a network address"))?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix: u8 = prefix.parse().ok().filter(|p| *p <= max).ok_or_else(|| bad("bad prefix length"))?;
            return Ok(Self::Net { addr: mask(addr, prefix), prefix, port });
        }
        if let Ok(addr) = base.parse::<IpAddr>() {
            return Ok(Self::Net { addr, prefix: if addr.is_ipv4() { 32 } else { 128 }, port });
        }
        let (wildcard, name) = match base.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, base),
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                && !l.starts_with('-')
        };
        if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
            return Err(bad("not a host name, *.wildcard, address or CIDR"));
        }
        Ok(Self::Host { name, wildcard, port })
    }

    fn port_ok(port: Option<u16>, asked: Option<u16>) -> bool {
        match (port, asked) {
            (Some(p), Some(a)) => p == a,
            _ => true,
        }
    }

    fn covers_name(&self, host: &str, port: Option<u16>) -> bool {
        match self {
            Self::Host { name, wildcard, port: p } => {
                let matched = if *wildcard {
                    host.strip_suffix(name.as_str()).is_some_and(|head| head.ends_with('.') && head.len() > 1)
                } else {
                    host == name
                };
                matched && Self::port_ok(*p, port)
            }
            Self::Net { .. } => false,
        }
    }

    fn covers_addr(&self, ip: IpAddr, port: u16) -> bool {
        match self {
            Self::Net { addr, prefix, port: p } => {
                addr.is_ipv4() == ip.is_ipv4() && mask(ip, *prefix) == *addr && Self::port_ok(*p, Some(port))
            }
            Self::Host { .. } => false,
        }
    }
}

impl Destination {
    fn covers_any_port(&self, ip: IpAddr) -> bool {
        match self {
            Self::Net { addr, prefix, .. } => addr.is_ipv4() == ip.is_ipv4() && mask(ip, *prefix) == *addr,
            Self::Host { .. } => false,
        }
    }
}

fn parse_port(p: &str) -> Option<u16> {
    p.parse::<u16>().ok().filter(|p| *p > 0)
}

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let m = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) };
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let m = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix)) };
            IpAddr::V6((bits & m).into())
        }
    }
}

/// Whether an address is reachable on the public internet: not private, loopback, link-local (cloud metadata),
/// shared (CGNAT), documentation, multicast, unspecified or unique-local.
pub fn is_public(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_unspecified()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(&IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80)
        }
    }
}

impl fmt::Display for EgressPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("all"),
            Self::None => f.write_str("none"),
            Self::Allow(d) => {
                let items: Vec<String> = d.iter().map(ToString::to_string).collect();
                f.write_str(&items.join(","))
            }
        }
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (base, port) = match self {
            Self::Host { name, wildcard, port } => (format!("{}{name}", if *wildcard { "*." } else { "" }), port),
            Self::Net { addr, prefix, port } => {
                let full = if addr.is_ipv4() { 32 } else { 128 };
                let a = if addr.is_ipv6() && port.is_some() { format!("[{addr}]") } else { addr.to_string() };
                (if *prefix == full { a } else { format!("{a}/{prefix}") }, port)
            }
        };
        match port {
            Some(p) => write!(f, "{base}:{p}"),
            None => f.write_str(&base),
        }
    }
}

#[cfg(test)]
mod tests;
