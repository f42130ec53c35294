//! A certificate chain and its private key, read from PEM files and checked before they
//! serve: readable, a chain and a key in them, the key matching the leaf, not expired. The
//! leaf's DNS names are kept so a site's names can be checked against them.

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// A loaded, checked certificate.
#[derive(Debug, Clone)]
pub struct Certificate {
    pub key: Arc<CertifiedKey>,
    /// The leaf's DNS names (subjectAltName), lower case; `*.x` for wildcards.
    pub names: Vec<String>,
    /// When the leaf expires (seconds since the Unix epoch).
    pub not_after: i64,
}

impl Certificate {
    /// Whether the leaf names `host` (a `*.x` name covers one label under x).
    pub fn covers(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        self.names.iter().any(|n| match n.strip_prefix("*.") {
            Some(parent) => host
                .split_once('.')
                .is_some_and(|(label, rest)| !label.is_empty() && rest == parent),
            None => *n == host,
        })
    }
}

/// Read the chain at `certificate` and the key at `key` (PEM; the leaf first, then its
/// intermediates). Every error names the file and what is wrong with it.
pub fn load(
    certificate: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<Certificate, String> {
    let cert_name = certificate.display();
    let key_name = key.display();
    let chain_text = std::fs::read(certificate)
        .map_err(|e| format!("certificate {cert_name}: cannot read: {e}"))?;
    let key_text = std::fs::read(key).map_err(|e| format!("key {key_name}: cannot read: {e}"))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&chain_text)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("certificate {cert_name}: not PEM: {e}"))?;
    let Some(leaf) = chain.first() else {
        return Err(format!(
            "certificate {cert_name}: no certificate in it (expected -----BEGIN CERTIFICATE-----)"
        ));
    };
    let private = PrivateKeyDer::from_pem_slice(&key_text).map_err(|e| {
        format!("key {key_name}: no private key in it (PKCS#8, PKCS#1 or SEC1 PEM): {e}")
    })?;
    let signing = provider
        .key_provider
        .load_private_key(private)
        .map_err(|e| format!("key {key_name}: unusable: {e}"))?;
    let (names, not_after, expiry_date) = leaf_facts(leaf)
        .map_err(|e| format!("certificate {cert_name}: the first certificate: {e}"))?;
    let certified = CertifiedKey::new(chain, signing);
    certified
        .keys_match()
        .map_err(|_| format!("key {key_name} does not match certificate {cert_name}"))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if not_after < now {
        return Err(format!(
            "certificate {cert_name} expired on {}",
            expiry_date
        ));
    }
    Ok(Certificate {
        key: Arc::new(certified),
        names,
        not_after,
    })
}

/// The leaf's DNS names and expiry (seconds since the epoch, and its date for messages).
fn leaf_facts(der: &CertificateDer<'_>) -> Result<(Vec<String>, i64, String), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
        .map_err(|e| format!("not a valid X.509 certificate: {e}"))?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(d) = n {
                names.push(d.to_ascii_lowercase());
            }
        }
    }
    let not_after = &cert.validity().not_after;
    Ok((
        names,
        not_after.timestamp(),
        not_after.to_datetime().date().to_string(),
    ))
}

#[cfg(test)]
mod tests;
