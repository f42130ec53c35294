//! `tls = { certificate, key }` on a `listen` entry (the listener's certificate) and on a
//! `[[vhost]]` (chosen by SNI for its names on every TLS listener): the files are read and
//! checked at load, so a bad certificate is an error of the configuration that names it
//! (and a reload keeps the old one serving).

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use crate::raw::{RawListen, RawVHost};
use crate::resolve::Resolver;

/// A certificate chain and its key, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// PEM: the certificate first, then its intermediates.
    pub certificate: String,
    /// PEM: PKCS#8, PKCS#1 (RSA) or SEC1 (EC).
    pub key: String,
}

/// A site's `tls`: its own files, or `"acme"`.
#[derive(Debug, Clone)]
pub enum RawSiteTls {
    Files(RawTls),
    Acme,
    /// Any other string (an error at resolution).
    Other(String),
}

impl<'de> Deserialize<'de> for RawSiteTls {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::either_form::string_or_table(
            d,
            "\"acme\" or a table { certificate = ..., key = ... }",
            |s| {
                if s == "acme" {
                    RawSiteTls::Acme
                } else {
                    RawSiteTls::Other(s.to_string())
                }
            },
            RawSiteTls::Files,
        )
    }
}

/// Where a certificate and its key were read from (absolute, or as written relative to
/// the configuration file's directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub certificate: PathBuf,
    pub key: PathBuf,
}

/// What ALPN offers, preferred first: HTTP/2, then HTTP/1.1 (the server's order decides).
const ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];
/// On a listener with `http2 = false`.
const ALPN_HTTP1: &[&[u8]] = &[b"http/1.1"];
/// With `[acme]`: also the TLS-ALPN-01 challenge's protocol (only a client that offers
/// nothing else gets it).
const ALPN_WITH_ACME: &[&[u8]] = &[b"h2", b"http/1.1", ramjet_tls::server::ACME_TLS_ALPN];
const ALPN_HTTP1_WITH_ACME: &[&[u8]] = &[b"http/1.1", ramjet_tls::server::ACME_TLS_ALPN];

impl Resolver<'_> {
    /// One acceptor per `listen` entry that has `tls` (by entry index), with every vhost's
    /// certificate for its names; warnings for names a certificate does not cover.
    pub(crate) fn tls(
        &self,
        listen: Option<&[Spanned<RawListen>]>,
        vhosts: &[RawVHost],
        warnings: &mut Vec<String>,
    ) -> Vec<Option<ramjet_tls::Acceptor>> {
        let Some(listen) = listen else {
            return Vec::new();
        };
        if !listen.iter().any(|l| l.get_ref().tls().is_some()) {
            return Vec::new();
        }
        let provider = ramjet_tls::server::provider();
        let load = |t: &RawTls, span: std::ops::Range<usize>, key: &str| {
            let c = self.base.join(&t.certificate);
            let k = self.base.join(&t.key);
            self.keep(
                ramjet_tls::load(&c, &k, &provider)
                    .map_err(|m| self.err(Some(span), &format!("{key}.tls"), m)),
            )
        };
        let mut sites = Vec::new();
        for (i, v) in vhosts.iter().enumerate() {
            let Some(t) = &v.tls else { continue };
            let cert = match t.get_ref() {
                RawSiteTls::Files(f) => load(f, t.span(), &format!("vhost[{i}]")),
                RawSiteTls::Other(text) => self.not_tls(text, t.span(), &format!("vhost[{i}].tls")),
                // What an earlier run obtained, if it is there and still good; else the
                // site has no certificate until the CA issues one.
                RawSiteTls::Acme => {
                    let Some(files) = self.acme_files(&v.names) else {
                        continue;
                    };
                    match ramjet_tls::load(&files.certificate, &files.key, &provider) {
                        Ok(c) => Some(c),
                        Err(e) => {
                            warnings.push(format!(
                                "vhost[{i}]: no certificate from the ACME CA yet ({e})"
                            ));
                            None
                        }
                    }
                }
            };
            let Some(cert) = cert else {
                continue;
            };
            for n in &v.names {
                if n != "*" && !cert.covers(n) {
                    warnings.push(format!(
                        "vhost[{i}]: the certificate {} does not name `{n}` (it names {}): clients will refuse it for that name",
                        match t.get_ref() {
                            RawSiteTls::Files(f) => f.certificate.clone(),
                            _ => "from the ACME CA".to_string(),
                        },
                        if cert.names.is_empty() { "no DNS name".to_string() } else { cert.names.join(", ") }
                    ));
                }
            }
            sites.push((v.names.clone(), cert));
        }
        let mut out = Vec::new();
        for (i, l) in listen.iter().enumerate() {
            let Some(t) = l.get_ref().tls() else {
                out.push(None);
                continue;
            };
            let default = match t {
                RawSiteTls::Files(f) => load(f, l.span(), &format!("listen[{i}]")).map(|c| c.key),
                RawSiteTls::Acme => None,
                RawSiteTls::Other(text) => {
                    self.not_tls(text, l.span(), &format!("listen[{i}].tls"))
                }
            };
            let mut s = ramjet_tls::Sites::new(default);
            if let Some(dir) = self.acme_alpn_answers() {
                s = s.with_acme_answers(dir);
            }
            for (names, cert) in &sites {
                for n in names {
                    s.add(n, cert.key.clone());
                }
            }
            out.push(
                ramjet_tls::Acceptor::new(
                    s,
                    match (self.acme_alpn_answers().is_some(), l.get_ref().http2()) {
                        (true, true) => ALPN_WITH_ACME,
                        (true, false) => ALPN_HTTP1_WITH_ACME,
                        (false, true) => ALPN,
                        (false, false) => ALPN_HTTP1,
                    },
                )
                .map_err(|e| self.err(Some(l.span()), &format!("listen[{i}].tls"), e.to_string()))
                .ok(),
            );
        }
        out
    }

    /// A `tls` string other than "acme": noted as an error.
    fn not_tls<T>(&self, text: &str, span: std::ops::Range<usize>, key: &str) -> Option<T> {
        self.keep::<()>(Err(self.err(
            Some(span),
            key,
            format!("`{text}` is not \"acme\" or a table {{ certificate, key }}"),
        )));
        None
    }

    /// The files of a `tls` table, paths resolved.
    pub(crate) fn tls_files(&self, t: &RawTls) -> TlsFiles {
        TlsFiles {
            certificate: self.base.join(&t.certificate),
            key: self.base.join(&t.key),
        }
    }
}
