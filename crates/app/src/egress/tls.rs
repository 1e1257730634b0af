//! The TLS of the credential swap: the home's egress CA (made once by the home, `<home>/egress/ca/`), the leaf
//! certificates the proxy mints with it for a credential's destinations, and the client side that verifies the real
//! destination against the host's roots plus `terminal.docker_egress_ca_file`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// The CA's files under the denial log's folder (`<home>/egress/ca/`, the proxy's `/egress/ca/`).
pub const CA_DIR: &str = "ca";
/// The CA's certificate (PEM).
pub const CA_CERT: &str = "ca.pem";
/// The CA's private key (PEM, mode 0600): only the home's user and the proxy, which runs as that user, read it.
pub const CA_KEY: &str = "ca.key";
/// What the proxy trusts for a credential's destinations: the host's roots and `docker_egress_ca_file`.
pub const UPSTREAM_ROOTS: &str = "upstream.pem";

/// The CA's parameters, the same from its key alone: the proxy rebuilds the issuer from the key file, the name being
/// a digest of the public key (so two homes' CAs never share a name).
pub fn ca_params(key: &KeyPair) -> CertificateParams {
    let mut params = CertificateParams::default();
    let id = domain::sha256::hex_digest(key.public_key_raw());
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("berth egress credentials CA {}", &id[..16]));
    dn.push(DnType::OrganizationName, "berth");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params
}

/// A new CA: its certificate and key, both PEM.
///
/// # Errors
/// rcgen's, as text.
pub fn new_ca() -> Result<(String, String), String> {
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = ca_params(&key).self_signed(&key).map_err(|e| e.to_string())?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// What an intercepting proxy needs: the CA to mint with, its minted configurations by host, and the upstream side.
pub struct Tls {
    issuer: Issuer<'static, KeyPair>,
    pub client: Arc<ClientConfig>,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl Tls {
    /// From the CA key's PEM and the roots' PEM (certificates that do not parse are skipped).
    ///
    /// # Errors
    /// One line when the key does not parse or no root does.
    pub fn new(ca_key_pem: &str, roots_pem: &[u8]) -> Result<Self, String> {
        let key = KeyPair::from_pem(ca_key_pem).map_err(|e| format!("the egress CA key does not parse: {e}"))?;
        let issuer = Issuer::new(ca_params(&key), key);
        let mut roots = RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(CertificateDer::pem_slice_iter(roots_pem).flatten());
        if added == 0 {
            return Err("no root certificate to verify a credential's destinations with".to_owned());
        }
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self { issuer, client: Arc::new(client), leaves: Mutex::new(HashMap::new()) })
    }

    /// The server side presented to the sandbox for `host` (a name or an address): a certificate for it signed by
    /// the CA, minted once per host and kept.
    ///
    /// # Errors
    /// rcgen's or rustls's, as text.
    pub fn server_for(&self, host: &str) -> Result<Arc<ServerConfig>, String> {
        if let Some(c) = self.leaves.lock().ok().and_then(|l| l.get(host).cloned()) {
            return Ok(c);
        }
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params = CertificateParams::new(vec![host.to_owned()]).map_err(|e| e.to_string())?;
        params.distinguished_name.push(DnType::CommonName, host);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer).map_err(|e| e.to_string())?;
        let der = PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| e.to_string())?;
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], der)
            .map_err(|e| e.to_string())?;
        // One request at a time on HTTP/1.1: the headers are rewritten request by request.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if let Ok(mut l) = self.leaves.lock() {
            l.insert(host.to_owned(), config.clone());
        }
        Ok(config)
    }
}

/// `der` as a PEM certificate.
pub fn pem_certificate(der: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::with_capacity(der.len() * 4 / 3 + 4);
    for chunk in der.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_made_here_mints_leaves_the_proxy_rebuilds_from_its_key_alone() {
        let (cert_pem, key_pem) = new_ca().unwrap();
        let tls = Tls::new(&key_pem, cert_pem.as_bytes()).unwrap();
        assert!(tls.server_for("api.example.test").is_ok());
        assert!(tls.server_for("10.1.2.3").is_ok());
        assert!(Tls::new(&key_pem, b"").err().is_some_and(|e| e.contains("no root")));
        let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap();
        assert_eq!(pem_certificate(&der), cert_pem.replace('\r', ""), "the PEM writer round-trips the CA's own PEM");
    }
}
