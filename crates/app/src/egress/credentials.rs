//! `terminal.docker_credentials` on the home's side: the egress CA and the placeholder key (made once, under
//! `<home>/egress/ca/`), the trust bundle copied into a sandbox with credentials, and handing a sandbox's real values to its
//! egress proxy (on the stdin of an exec in the proxy's container: never an argument, a variable or a file).

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use domain::egress::credentials::{CA_BUNDLE_DIR, CA_BUNDLE_NAME, Credentials};
use domain::ports::{CapturedOutput, Engine, ExecIo, ExecOutcome, ExecSpec};
use domain::sandbox::CredentialFacts;
use domain::service::{AcquireRequest, Acquired};
use futures_util::StreamExt as _;

use super::tls::{CA_CERT, CA_DIR, CA_KEY, UPSTREAM_ROOTS, new_ca, pem_certificate};
use crate::edge::context::Ctx;
use crate::edge::error::Failure;

/// The secret the placeholders derive from (mode 0600).
const PLACEHOLDER_KEY: &str = "placeholder.key";
/// What a sandbox with credentials trusts: the upstream roots and the CA (copied to
/// `domain::egress::credentials::CA_BUNDLE_PATH`).
const BUNDLE: &str = "bundle.pem";

/// How long handing credentials to the proxy may take.
const HAND_OVER_TIMEOUT: Duration = Duration::from_secs(20);

/// Makes sure the home's CA, placeholder key, upstream roots and trust bundle exist (the roots and bundle rewritten
/// when the host's roots or `terminal.docker_egress_ca_file` changed); returns what the spec needs.
///
/// # Errors
/// One line when `docker_egress_ca_file` holds no certificate or a file cannot be written.
pub async fn prepare(ctx: &Ctx) -> Result<CredentialFacts, Failure> {
    let dir = super::log_dir(ctx).join(CA_DIR);
    let io = |what: &Path, e: std::io::Error| Failure::other(format!("cannot write {}: {e}", what.display()));
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    // One process makes the CA; the others wait and read it.
    let _lock = super::setup_lock(&super::log_dir(ctx)).await?;
    let key_path = dir.join(PLACEHOLDER_KEY);
    if !key_path.exists() {
        let key = crate::edge::random::hex128().map_err(|e| io(&key_path, e))?;
        write_file(&key_path, key.as_bytes(), 0o600)?;
    }
    let key = std::fs::read_to_string(&key_path).map_err(|e| io(&key_path, e))?.trim().to_owned();
    let (cert_path, ca_key_path) = (dir.join(CA_CERT), dir.join(CA_KEY));
    if !cert_path.exists() || !ca_key_path.exists() {
        let (cert, ca_key) = new_ca().map_err(|e| Failure::other(format!("cannot make the egress CA: {e}")))?;
        write_file(&ca_key_path, ca_key.as_bytes(), 0o600)?;
        write_file(&cert_path, cert.as_bytes(), 0o644)?;
    }
    let ca = std::fs::read_to_string(&cert_path).map_err(|e| io(&cert_path, e))?;
    let roots = upstream_roots(ctx)?;
    write_if_changed(&dir.join(UPSTREAM_ROOTS), roots.as_bytes())?;
    write_if_changed(&dir.join(BUNDLE), format!("{roots}{ca}").as_bytes())?;
    Ok(CredentialFacts { key })
}

/// The host's roots (as rustls-native-certs finds them: `SSL_CERT_FILE`, else the system's bundle) and
/// `terminal.docker_egress_ca_file`, PEM.
fn upstream_roots(ctx: &Ctx) -> Result<String, Failure> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let mut out = String::new();
    for cert in rustls_native_certs::load_native_certs().certs {
        out.push_str(&pem_certificate(&cert));
    }
    let file = ctx.settings.terminal.docker_egress_ca_file.trim();
    if !file.is_empty() {
        let text = std::fs::read(file)
            .map_err(|e| Failure::usage(format!("terminal.docker_egress_ca_file {file}: cannot read it: {e}")))?;
        let certs: Vec<CertificateDer<'_>> = CertificateDer::pem_slice_iter(&text).flatten().collect();
        if certs.is_empty() {
            return Err(Failure::usage(format!("terminal.docker_egress_ca_file {file}: no PEM certificate in it")));
        }
        for cert in certs {
            out.push_str(&pem_certificate(&cert));
        }
    }
    Ok(out)
}

/// Writes `path` whole with `mode`, through a new file renamed over it.
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), Failure> {
    crate::edge::state_file::replace(path, bytes, mode)
        .map_err(|e| Failure::other(format!("cannot write {}: {e}", path.display())))
}

/// Writes `path` (0644: certificates only) when its content differs.
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let fail = |e: std::io::Error| Failure::other(format!("cannot write {}: {e}", path.display()));
    let mut f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(path).map_err(fail)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o644)).map_err(fail)?;
    f.write_all(bytes).map_err(fail)
}

/// Copies the trust bundle into the sandbox `acquired` (made from `req`) and hands the real values of `credentials`
/// to its egress proxy: its address on the internal network, each variable's placeholder (from the spec's environment), value (from the
/// host's environment) and destinations. A variable the host does not set is left out, with a warning: its
/// placeholder then reaches its destinations as it is.
///
/// # Errors
/// One line when the sandbox is not on its egress network or the proxy does not take them.
pub async fn admit(
    ctx: &Ctx,
    rt: &dyn Engine,
    credentials: &Credentials,
    req: &AcquireRequest,
    acquired: &Acquired,
) -> Result<(), Failure> {
    if credentials.is_empty() {
        return Ok(());
    }
    let Some(network) = req.spec.network_mode.clone() else { return Ok(()) };
    let bundle_path = super::log_dir(ctx).join(CA_DIR).join(BUNDLE);
    let bundle = std::fs::read(&bundle_path)
        .map_err(|e| Failure::other(format!("cannot read {}: {e}", bundle_path.display())))?;
    rt.write_file(&acquired.id, CA_BUNDLE_DIR, CA_BUNDLE_NAME, &bundle).await?;
    let source = rt
        .address_on(&acquired.id, &network)
        .await?
        .ok_or_else(|| Failure::other(format!("sandbox {} is not on its egress network {network}", acquired.name)))?;
    let placeholder = |var: &str| {
        let prefix = format!("{var}=");
        req.spec.env.iter().find_map(|e| e.strip_prefix(&prefix).map(str::to_owned))
    };
    let mut entries = Vec::new();
    for (var, dests) in &credentials.0 {
        let (Some(p), Some(value)) = (placeholder(var), ctx.env.get(var)) else {
            tracing::warn!("{var} is not set in berth's environment: the sandbox's placeholder is sent as it is");
            continue;
        };
        entries
            .push(serde_json::json!({"var": var, "placeholder": p, "value": value, "destinations": dests.to_string()}));
    }
    let payload = serde_json::to_vec(&serde_json::json!({"source": source, "credentials": entries}))
        .map_err(|e| Failure::other(e.to_string()))?;
    let proxy = format!("{network}-proxy");
    let exec = ExecSpec {
        argv: vec![docker_adapter::PROXY_EXE.to_owned(), "egress-credentials".to_owned()],
        env: Vec::new(),
        workdir: None,
        user: None,
        timeout: Some(HAND_OVER_TIMEOUT),
    };
    let io =
        ExecIo { tty: false, stdin: Some(futures_util::stream::once(async move { payload }).boxed()), resize: None };
    let mut out = CapturedOutput::default();
    let outcome = rt.exec_io(&proxy, &exec, &mut out, io).await?;
    if outcome == ExecOutcome::Exited(0) {
        return Ok(());
    }
    let words = String::from_utf8_lossy(&out.stderr).split_whitespace().collect::<Vec<_>>().join(" ");
    Err(Failure::other(format!(
        "the egress proxy {proxy} did not take the credentials: {words} (a proxy an older berth started takes none: \
         `docker rm -f {proxy}` and run again)"
    )))
}
