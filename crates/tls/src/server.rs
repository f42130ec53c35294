//! The server side of a TLS listener: one rustls configuration per listener, whose
//! certificate is chosen by the name the client asks for (SNI) among the sites' own, else
//! the listener's. Mozilla's "intermediate" profile: TLS 1.2 and 1.3, AEAD suites with
//! forward secrecy only, X25519/P-256/P-384. Session tickets are encrypted with keys that
//! every worker of the process shares and that rotate (every 6 hours, the previous key
//! still accepted), kept across reloads so a HUP does not end resumption.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ProducesTickets, ResolvesServerCert, StoresServerSessions};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, ServerConnection};

/// Sessions remembered for TLS 1.2 clients resuming by session id (tickets need none).
const SESSION_CACHE: usize = 20_000;

/// The crypto provider of every listener: aws-lc-rs, restricted to Mozilla intermediate's
/// key exchange groups.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| {
            use rustls::crypto::aws_lc_rs::cipher_suite as cs;
            use rustls::crypto::aws_lc_rs::{default_provider, kx_group};
            let mut p = default_provider();
            p.kx_groups = vec![kx_group::X25519, kx_group::SECP256R1, kx_group::SECP384R1];
            p.cipher_suites = vec![
                cs::TLS13_AES_128_GCM_SHA256,
                cs::TLS13_CHACHA20_POLY1305_SHA256,
                cs::TLS13_AES_256_GCM_SHA384,
                cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
                cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
                cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
                cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
                cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
                cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            ];
            Arc::new(p)
        })
        .clone()
}

/// Ticket keys and the session-id cache, one of each per process.
fn shared() -> &'static (Arc<dyn ProducesTickets>, Arc<dyn StoresServerSessions>) {
    static SHARED: OnceLock<(Arc<dyn ProducesTickets>, Arc<dyn StoresServerSessions>)> =
        OnceLock::new();
    SHARED.get_or_init(|| {
        let tickets = rustls::crypto::aws_lc_rs::Ticketer::new()
            .unwrap_or_else(|_| Arc::new(NoTickets) as Arc<dyn ProducesTickets>);
        let cache = rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE);
        (tickets, cache)
    })
}

/// Where tickets cannot be made (the system's random source failed at start): resumption
/// by session id only.
#[derive(Debug)]
struct NoTickets;

impl ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }
    fn lifetime(&self) -> u32 {
        0
    }
    fn encrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn decrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// The ALPN protocol of the ACME TLS-ALPN-01 challenge (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The certificates of a listener: by host name, by `*.parent`, and the default.
#[derive(Debug, Default)]
pub struct Sites {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// Keyed by the parent name (`example.com` for `*.example.com`).
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    default: Option<Arc<CertifiedKey>>,
    /// Where the ACME client leaves TLS-ALPN-01 answers (`NAME.pem`: certificate and key).
    acme_answers: Option<std::path::PathBuf>,
}

impl Sites {
    pub fn new(default: Option<Arc<CertifiedKey>>) -> Sites {
        Sites {
            default,
            ..Sites::default()
        }
    }

    /// Serve `key` for `name` (`*.x` for any one label under x; `*`: the default when the
    /// listener has none). The first site to claim a name keeps it.
    pub fn add(&mut self, name: &str, key: Arc<CertifiedKey>) {
        let name = name.to_ascii_lowercase();
        if name == "*" {
            self.default.get_or_insert(key);
        } else if let Some(parent) = name.strip_prefix("*.") {
            self.wildcard.entry(parent.to_string()).or_insert(key);
        } else {
            self.exact.entry(name).or_insert(key);
        }
    }

    /// Answer TLS-ALPN-01 challenges from this directory (see [`challenge_file`]).
    pub fn with_acme_answers(mut self, dir: std::path::PathBuf) -> Sites {
        self.acme_answers = Some(dir);
        self
    }

    /// The challenge certificate for `name`, for a client that asked only for
    /// `acme-tls/1`: read from disk, as rare as a certificate order (and on disk, so that
    /// every process of `--processes` finds what the one asking the CA wrote).
    fn acme_answer(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let file = challenge_file(self.acme_answers.as_ref()?, name)?;
        let text = std::fs::read(file).ok()?;
        use rustls::pki_types::pem::PemObject;
        let chain: Vec<_> = rustls::pki_types::CertificateDer::pem_slice_iter(&text)
            .collect::<Result<_, _>>()
            .ok()?;
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&text).ok()?;
        let key = provider().key_provider.load_private_key(key).ok()?;
        Some(Arc::new(CertifiedKey::new(chain, key)))
    }

    pub fn is_empty(&self) -> bool {
        self.default.is_none() && self.exact.is_empty() && self.wildcard.is_empty()
    }

    /// The certificate for a client that asked for `name` (`None`: no SNI).
    pub fn choose(&self, name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        if let Some(name) = name {
            let name = name.to_ascii_lowercase();
            if let Some(k) = self.exact.get(&name) {
                return Some(k.clone());
            }
            if let Some((_, parent)) = name.split_once('.') {
                if let Some(k) = self.wildcard.get(parent) {
                    return Some(k.clone());
                }
            }
        }
        self.default.clone()
    }
}

impl ResolvesServerCert for Sites {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let only_acme = hello.alpn().is_some_and(|mut protocols| {
            protocols.next() == Some(ACME_TLS_ALPN) && protocols.next().is_none()
        });
        if only_acme {
            return self.acme_answer(hello.server_name()?);
        }
        self.choose(hello.server_name())
    }
}

/// Where the TLS-ALPN-01 answer for `name` lives under `dir` (`None` for a name that could
/// not be a file name).
pub fn challenge_file(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    let name = name.to_ascii_lowercase();
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    plain.then(|| dir.join(format!("{name}.pem")))
}

/// A TLS listener's configuration: makes one server session per connection.
#[derive(Debug, Clone)]
pub struct Acceptor {
    config: Arc<ServerConfig>,
}

impl Acceptor {
    /// `alpn`: the protocols offered, preferred first (`http/1.1`).
    pub fn new(sites: Sites, alpn: &[&[u8]]) -> Result<Acceptor, rustls::Error> {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(sites));
        let (tickets, cache) = shared();
        config.ticketer = tickets.clone();
        config.session_storage = cache.clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        config.ignore_client_order = true;
        Ok(Acceptor {
            config: Arc::new(config),
        })
    }

    /// A server session for a new connection.
    pub fn accept(&self) -> Result<ServerConnection, rustls::Error> {
        ServerConnection::new(self.config.clone())
    }

    pub fn config(&self) -> &Arc<ServerConfig> {
        &self.config
    }
}
