//! `listen`: the addresses to accept on, each an address or a table with options.

use std::net::SocketAddr;

use serde::Deserialize;
use toml::Spanned;

use crate::resolve::Resolver;

/// Default listen port when no address is configured.
pub const DEFAULT_PORT: u16 = 8080;

/// A `listen` entry: an address, or a table with options. Written by hand rather than as
/// an untagged enum, so that a key the table does not know is refused by name (an untagged
/// enum only says that nothing matched, and before, unknown keys were silently dropped:
/// `tls = {...}` on a listener served cleartext).
#[derive(Debug, Clone)]
pub enum RawListen {
    Address(String),
    Table(ListenTable),
}

/// A `listen` entry written as a table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenTable {
    pub address: String,
    /// Connections start with a PROXY protocol header (v1 or v2) from a balancer;
    /// without one they are closed.
    #[serde(default)]
    pub proxy_protocol: bool,
    /// A TLS listener with this certificate (the default when no site's matches SNI), or
    /// `"acme"`: a TLS listener with only the sites' certificates.
    pub tls: Option<crate::tls::RawSiteTls>,
    /// HTTP/2 on this listener (ALPN `h2` over TLS, prior knowledge in cleartext); on
    /// unless `false`.
    pub http2: Option<bool>,
    /// What the listener speaks: `"http"` (the default) or `"ftp"` (the `[ftp]` table).
    pub protocol: Option<Protocol>,
}

/// What a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Http,
    Ftp,
}

impl<'de> Deserialize<'de> for RawListen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::either_form::string_or_table(
            d,
            "an address (\"0.0.0.0:8080\") or a table { address = ..., ... }",
            |a| RawListen::Address(a.to_string()),
            RawListen::Table,
        )
    }
}

impl RawListen {
    pub fn address(&self) -> &str {
        match self {
            RawListen::Address(a) => a,
            RawListen::Table(t) => &t.address,
        }
    }

    pub fn tls(&self) -> Option<&crate::tls::RawSiteTls> {
        match self {
            RawListen::Table(t) => t.tls.as_ref(),
            RawListen::Address(_) => None,
        }
    }

    pub fn proxy_protocol(&self) -> bool {
        matches!(self, RawListen::Table(t) if t.proxy_protocol)
    }

    /// FTP is served here instead of HTTP.
    pub fn ftp(&self) -> bool {
        matches!(self, RawListen::Table(t) if t.protocol == Some(Protocol::Ftp))
    }

    /// HTTP/2 is served here (the default).
    pub fn http2(&self) -> bool {
        !matches!(self, RawListen::Table(t) if t.http2 == Some(false))
    }
}

/// The `listen` entries, resolved: by entry index.
pub(crate) struct Listen {
    pub(crate) addrs: Vec<SocketAddr>,
    pub(crate) proxy_protocol: Vec<bool>,
    pub(crate) http2: Vec<bool>,
    pub(crate) ftp: Vec<bool>,
}

impl Resolver<'_> {
    /// The addresses, whether each expects a PROXY protocol header, whether each serves
    /// HTTP/2, and whether each serves FTP (bad entries are noted and left out).
    pub(crate) fn listen(&self, raw: Option<&[Spanned<RawListen>]>) -> Listen {
        let Some(list) = raw else {
            let any = vec![
                SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)),
                SocketAddr::from(([0u16; 8], DEFAULT_PORT)),
            ];
            return Listen {
                addrs: any,
                proxy_protocol: vec![false, false],
                http2: vec![true, true],
                ftp: Vec::new(),
            };
        };
        let mut out = Vec::new();
        let mut proxy_protocol = Vec::new();
        let mut http2 = Vec::new();
        let mut ftp = Vec::new();
        for (i, a) in list.iter().enumerate() {
            let text = a.get_ref().address();
            let Some(addr) = self.keep(text.parse::<SocketAddr>().map_err(|_| {
                self.err(
                    Some(a.span()),
                    &format!("listen[{i}]"),
                    format!(
                        "`{text}` is not an address:port (e.g. \"0.0.0.0:8080\" or \"[::]:8080\")"
                    ),
                )
            })) else {
                continue;
            };
            let entry = a.get_ref();
            if let (true, RawListen::Table(t)) = (entry.ftp(), entry) {
                let clash = [
                    (t.tls.is_some(), "tls"),
                    (t.http2.is_some(), "http2"),
                    (t.proxy_protocol, "proxy_protocol"),
                ];
                for (_, key) in clash.iter().filter(|c| c.0) {
                    self.keep::<()>(Err(self.err(
                        Some(a.span()),
                        &format!("listen[{i}].{key}"),
                        format!("an FTP listener takes no `{key}` (FTP is served in the clear)"),
                    )));
                }
            }
            out.push(addr);
            proxy_protocol.push(entry.proxy_protocol());
            http2.push(entry.http2());
            ftp.push(entry.ftp());
        }
        if list.is_empty() {
            self.keep::<()>(Err(self.err(
                None,
                "listen",
                "needs at least one address".into(),
            )));
        }
        Listen {
            addrs: out,
            proxy_protocol,
            http2,
            ftp,
        }
    }
}
