//! Credentials that never enter the sandbox (`terminal.docker_credentials`): which host variable may be sent where,
//! and the placeholder a sandbox holds in its place. The egress proxy (in `app`) swaps a placeholder for the real
//! value in the headers of requests to that variable's destinations, and nowhere else.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::{EgressPolicy, Verdict};
use crate::sha256;

/// What every placeholder starts with, so a placeholder is recognisable in a request, a log or a transcript.
pub const PLACEHOLDER_PREFIX: &str = "berth-cred-";

/// The folder and name of the trust bundle in a sandbox with credentials (copied in before each command): the
/// host's roots, `terminal.docker_egress_ca_file` and the home's egress CA, which signs what the proxy presents for a
/// credential's destinations.
pub const CA_BUNDLE_DIR: &str = "/etc";
pub const CA_BUNDLE_NAME: &str = "berth-egress-ca.pem";
/// [`CA_BUNDLE_DIR`]/[`CA_BUNDLE_NAME`].
pub const CA_BUNDLE_PATH: &str = "/etc/berth-egress-ca.pem";

/// The variables naming [`CA_BUNDLE_PATH`] for the usual TLS clients (OpenSSL and curl, Python's requests, curl's
/// own, Node, git).
pub const CA_BUNDLE_VARS: [&str; 5] =
    ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO"];

/// The credentials of a profile: each variable's destinations, in the egress syntax (a list, never `all`/`none`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials(pub BTreeMap<String, EgressPolicy>);

impl Credentials {
    /// Parses a map from variable names to destination lists.
    ///
    /// # Errors
    /// One line naming the first variable that is not a name or whose destinations do not parse or are empty.
    pub fn parse(map: &BTreeMap<String, Vec<String>>) -> Result<Self, String> {
        let mut out = BTreeMap::new();
        for (var, dests) in map {
            if !crate::sandbox::is_valid_env_name(var) {
                return Err(format!("{var:?} is not a variable name"));
            }
            match EgressPolicy::parse(&dests.join(",")) {
                Ok(p @ EgressPolicy::Allow(_)) => {
                    out.insert(var.clone(), p);
                }
                Ok(_) => return Err(format!("{var}: list the destinations it may be sent to (not all or none)")),
                Err(e) => return Err(format!("{var}: {e}")),
            }
        }
        Ok(Self(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether these credentials can be kept out of a sandbox with `egress` whose commands get `forward_env`: only
    /// behind an allowlist (the proxy is the only way out, so the only place to swap), and no variable forwarded too.
    ///
    /// # Errors
    /// One line saying what to change.
    pub fn check(&self, egress: &EgressPolicy, forward_env: &[String]) -> Result<(), String> {
        if self.is_empty() {
            return Ok(());
        }
        if !matches!(egress, EgressPolicy::Allow(_)) {
            return Err(format!(
                "terminal.docker_credentials needs terminal.docker_egress to list destinations (it is {egress}): credentials are swapped in by berth's egress proxy, which is a sandbox's only way out only under an allowlist"
            ));
        }
        if let Some(var) = self.0.keys().find(|v| forward_env.iter().any(|f| f.trim() == v.as_str())) {
            return Err(format!(
                "{var} is in both terminal.docker_credentials and terminal.docker_forward_env, which would put its real value in the sandbox; keep it in docker_credentials only"
            ));
        }
        Ok(())
    }

    /// The placeholder of `var` in the sandbox whose name digest is `sandbox`, under the home's secret `key`: random
    /// to anyone without the key, the same for the same sandbox and destinations (so it is stable across commands and
    /// a change of destinations changes the sandbox's environment, which recreates it).
    pub fn placeholder(&self, key: &str, sandbox: &str, var: &str) -> String {
        let dests = self.0.get(var).map(ToString::to_string).unwrap_or_default();
        let digest = sha256::hex_digest(format!("{key}\n{sandbox}\n{var}\n{dests}").as_bytes());
        format!("{PLACEHOLDER_PREFIX}{}", &digest[..32])
    }
}

/// Whether `host:port` (a name, or an address `resolved` is empty for) is one of `destinations`.
pub fn covers(destinations: &EgressPolicy, host: &str, port: u16) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<IpAddr>().is_ok() {
        return matches!(destinations.check(bare, port, &[]), Verdict::Allow(_));
    }
    destinations.allows_name(host, Some(port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(pairs: &[(&str, &[&str])]) -> Result<Credentials, String> {
        let map = pairs.iter().map(|(k, v)| ((*k).to_owned(), v.iter().map(|s| (*s).to_owned()).collect())).collect();
        Credentials::parse(&map)
    }

    #[test]
    fn credentials_parse_check_and_name_their_destinations() {
        let c = creds(&[("GITHUB_TOKEN", &["api.github.com", "*.githubusercontent.com:443"])]).unwrap();
        let dests = &c.0["GITHUB_TOKEN"];
        assert!(covers(dests, "api.github.com", 443));
        assert!(covers(dests, "raw.githubusercontent.com", 443));
        assert!(!covers(dests, "raw.githubusercontent.com", 80));
        assert!(!covers(dests, "evil.example", 443));
        let ip = creds(&[("K", &["10.0.0.0/8:8443"])]).unwrap();
        assert!(covers(&ip.0["K"], "10.1.2.3", 8443) && !covers(&ip.0["K"], "10.1.2.3", 9443));
        assert!(creds(&[("1BAD", &["a.test"])]).unwrap_err().contains("not a variable name"));
        assert!(creds(&[("K", &["all"])]).unwrap_err().contains("not all or none"));
        assert!(creds(&[("K", &[])]).unwrap_err().contains("not all or none"));
        assert!(creds(&[("K", &["bad host!"])]).unwrap_err().starts_with("K: egress destination"));
        let allow = EgressPolicy::parse("api.github.com").unwrap();
        assert!(c.check(&EgressPolicy::All, &[]).unwrap_err().contains("it is all"));
        assert!(c.check(&EgressPolicy::None, &[]).unwrap_err().contains("it is none"));
        assert!(c.check(&allow, &["GITHUB_TOKEN".to_owned()]).unwrap_err().contains("docker_forward_env"));
        assert_eq!(c.check(&allow, &["OTHER".to_owned()]), Ok(()));
        assert_eq!(Credentials::default().check(&EgressPolicy::All, &[]), Ok(()));
    }

    #[test]
    fn a_placeholder_is_per_key_sandbox_variable_and_destinations() {
        let c = creds(&[("A", &["a.test"]), ("B", &["a.test"])]).unwrap();
        let p = c.placeholder("k", "s", "A");
        assert!(p.starts_with(PLACEHOLDER_PREFIX) && p.len() == PLACEHOLDER_PREFIX.len() + 32);
        assert_eq!(p, c.placeholder("k", "s", "A"));
        assert_ne!(p, c.placeholder("k2", "s", "A"));
        assert_ne!(p, c.placeholder("k", "s2", "A"));
        assert_ne!(p, c.placeholder("k", "s", "B"));
        let moved = creds(&[("A", &["b.test"])]).unwrap();
        assert_ne!(p, moved.placeholder("k", "s", "A"));
    }
}
