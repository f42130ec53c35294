//! `[acme]`: certificates obtained and renewed from an ACME CA (RFC 8555) for the sites
//! with `tls = "acme"`. What is stored where: `state_dir/account.json` (the account's key,
//! 0600), `state_dir/sites/NAME/{cert,key}.pem` (NAME: the site's first name), and the
//! HTTP-01 answers under `state_dir/http-01/`, which every host serves at
//! `/.well-known/acme-challenge/`.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::raw::{RawLocation, RawVHost};
use crate::resolve::Resolver;

/// Let's Encrypt's production directory.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// The path every host answers HTTP-01 challenges under.
pub const CHALLENGE_PATH: &str = "/.well-known/acme-challenge/";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAcme {
    /// The CA's directory URL (default: Let's Encrypt's production).
    pub directory: Option<String>,
    /// Contact addresses for the account (`mailto:...`; a bare address gets `mailto:`).
    #[serde(default)]
    pub contact: Vec<String>,
    /// Where the account, the certificates and the challenge answers are kept.
    pub state_dir: String,
    /// A CA certificate (PEM) to trust for the directory's HTTPS: a private or test CA's.
    pub ca_certificate: Option<String>,
    /// Renew this long before expiry (default 30 days).
    pub renew_before: Option<crate::units::Seconds>,
    /// First wait after a failure (default 60 s), doubled after each one up to an hour.
    pub retry: Option<crate::units::Seconds>,
    /// How names are proven: "http-01" (default: the CA fetches a file over port 80) or
    /// "tls-alpn-01" (the CA makes a TLS handshake on port 443).
    pub challenge: Option<String>,
}

/// What the ACME client works from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeOptions {
    pub directory: String,
    pub contact: Vec<String>,
    pub state_dir: PathBuf,
    pub ca_certificate: Option<PathBuf>,
    pub renew_before: std::time::Duration,
    pub retry: std::time::Duration,
    /// TLS-ALPN-01 (RFC 8737) rather than HTTP-01.
    pub tls_alpn: bool,
    /// The sites to obtain certificates for.
    pub sites: Vec<AcmeSite>,
}

/// One site's certificate: its names, where it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeSite {
    /// DNS names to put in the certificate (wildcards cannot be proven over HTTP-01 and
    /// are left out).
    pub names: Vec<String>,
    pub certificate: PathBuf,
    pub key: PathBuf,
}

impl AcmeOptions {
    /// Where HTTP-01 answers are written (the challenge location's root).
    pub fn webroot(&self) -> PathBuf {
        webroot(&self.state_dir)
    }

    /// Where TLS-ALPN-01 answers are written (`NAME.pem`, certificate and key).
    pub fn alpn_answers(&self) -> PathBuf {
        alpn_answers(&self.state_dir)
    }
}

fn alpn_answers(state_dir: &Path) -> PathBuf {
    state_dir.join("tls-alpn-01")
}

fn webroot(state_dir: &Path) -> PathBuf {
    state_dir.join("http-01")
}

/// The location every host gets with `[acme]`: the challenge answers, as static files,
/// open to everyone whatever `[defaults]` restricts (the CA must reach them).
pub(crate) fn challenge_location(webroot: &Path) -> RawLocation {
    let span = |v| Spanned::new(0..0, v);
    RawLocation {
        path: Some(span(CHALLENGE_PATH.to_string())),
        root: Some(span(webroot.display().to_string())),
        handlers: Some(vec![Spanned::new(0..0, crate::handler::Handler::Static)]),
        autoindex: Some(false),
        auth_basic: Some(span("off".to_string())),
        allow: Some(vec![span("all".to_string())]),
        deny: Some(Vec::new()),
        ..RawLocation::default()
    }
}

impl Resolver<'_> {
    /// `[acme]` resolved, the sites that use it listed; sets the challenge location's root
    /// for every host.
    pub(crate) fn acme(
        &self,
        raw: Option<&Spanned<RawAcme>>,
        vhosts: &[RawVHost],
    ) -> Option<AcmeOptions> {
        let wants = |v: &RawVHost| {
            v.tls
                .as_ref()
                .is_some_and(|t| matches!(t.get_ref(), crate::tls::RawSiteTls::Acme))
        };
        let Some(raw) = raw else {
            if let Some((i, _)) = vhosts.iter().enumerate().find(|(_, v)| wants(v)) {
                self.keep::<()>(Err(self.err(
                    vhosts[i].tls.as_ref().map(|t| t.span()),
                    &format!("vhost[{i}].tls"),
                    "`tls = \"acme\"` needs an [acme] section (at least state_dir)".into(),
                )));
            }
            return None;
        };
        let r = raw.get_ref();
        let state_dir = self.base.join(&r.state_dir);
        let renew_before = r
            .renew_before
            .map_or(std::time::Duration::from_secs(30 * 86_400), |s| s.0);
        let retry = r.retry.map_or(std::time::Duration::from_secs(60), |s| s.0);
        // The state directory is private (the account key and the certificates' keys are
        // in it); the answers' directory must exist before the challenge location's root
        // is opened.
        let answers = webroot(&state_dir).join(CHALLENGE_PATH.trim_matches('/'));
        let tls_alpn = match r.challenge.as_deref() {
            None | Some("http-01") => false,
            Some("tls-alpn-01") => true,
            Some(other) => {
                self.keep::<()>(Err(self.err(
                    Some(raw.span()),
                    "acme.challenge",
                    format!("`{other}` is not \"http-01\" or \"tls-alpn-01\""),
                )));
                return None;
            }
        };
        if let Err(e) = std::fs::create_dir_all(&answers)
            .and_then(|()| std::fs::create_dir_all(alpn_answers(&state_dir)))
        {
            self.keep::<()>(Err(self.err(
                Some(raw.span()),
                "acme.state_dir",
                format!("cannot create {}: {e}", answers.display()),
            )));
            return None;
        }
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&state_dir, std::fs::Permissions::from_mode(0o700));
        }
        *self.acme_state.borrow_mut() = Some(state_dir.clone());
        let sites = vhosts
            .iter()
            .filter(|v| wants(v))
            .map(|v| {
                let files = site_files(&state_dir, &v.names);
                AcmeSite {
                    names: v
                        .names
                        .iter()
                        .filter(|n| !n.contains('*'))
                        .map(|n| n.to_ascii_lowercase())
                        .collect(),
                    certificate: files.certificate,
                    key: files.key,
                }
            })
            .filter(|s| !s.names.is_empty())
            .collect();
        Some(AcmeOptions {
            directory: r
                .directory
                .clone()
                .unwrap_or_else(|| LETS_ENCRYPT.to_string()),
            contact: r
                .contact
                .iter()
                .map(|c| {
                    if c.contains(':') {
                        c.clone()
                    } else {
                        format!("mailto:{c}")
                    }
                })
                .collect(),
            state_dir,
            ca_certificate: r.ca_certificate.as_deref().map(|p| self.base.join(p)),
            renew_before,
            retry,
            tls_alpn,
            sites,
        })
    }

    /// Where TLS listeners find TLS-ALPN-01 answers, with `[acme]`.
    pub(crate) fn acme_alpn_answers(&self) -> Option<PathBuf> {
        self.acme_state.borrow().as_deref().map(alpn_answers)
    }

    /// Where the challenge location's root is, with `[acme]`.
    pub(crate) fn acme_webroot(&self) -> Option<PathBuf> {
        self.acme_state.borrow().as_deref().map(webroot)
    }

    /// The stored certificate of an ACME site with these names.
    pub(crate) fn acme_files(&self, names: &[String]) -> Option<crate::TlsFiles> {
        let state_dir = self.acme_state.borrow();
        Some(site_files(state_dir.as_deref()?, names))
    }
}

/// `state_dir/sites/FIRST-NAME/{cert,key}.pem`.
fn site_files(state_dir: &Path, names: &[String]) -> crate::TlsFiles {
    let first = names
        .iter()
        .find(|n| !n.contains('*'))
        .or(names.first())
        .map_or("site".to_string(), |n| {
            n.to_ascii_lowercase().replace(['/', '*'], "_")
        });
    let dir = state_dir.join("sites").join(first);
    crate::TlsFiles {
        certificate: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    }
}
