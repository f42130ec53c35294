//! The validated, compiled configuration. Immutable: reload builds a new one and swaps the
//! `Arc`, so a request sees one consistent configuration from start to end.

use std::net::SocketAddr;
use std::time::Duration;

use crate::cgi::CgiOptions;
use crate::handler::Handler;
use crate::redirect::RedirectOptions;
use crate::statics::StaticOptions;
use crate::upstream::{ProxyOptions, Upstream};
use ramjet_observe::AccessLogOptions;

/// Everything the server needs, resolved and checked.
#[derive(Debug)]
pub struct Resolved {
    /// The file this came from, or "<default>".
    pub source: String,
    pub listen: Vec<SocketAddr>,
    /// By listener index: whether its connections start with a PROXY protocol header
    /// (shorter than `listen` or empty: the rest do not).
    pub proxy_protocol: Vec<bool>,
    /// By listener index: whether it serves HTTP/2 (shorter than `listen`: the rest do).
    pub http2: Vec<bool>,
    /// By listener index: whether it serves FTP (shorter than `listen`: the rest do not).
    pub ftp_listeners: Vec<bool>,
    /// `[ftp]`, present when some listener serves FTP.
    pub ftp: Option<crate::FtpOptions>,
    pub workers: usize,
    pub pin_workers: bool,
    pub limits: Limits,
    pub timeouts: Timeouts,
    pub access_log: AccessLogOptions,
    /// Diagnostics level filter (tracing syntax), e.g. "info".
    pub log_level: String,
    pub file_cache: FileCacheOptions,
    pub vhosts: Vec<VHost>,
    /// Index into `vhosts` used when no name matches.
    pub default_vhost: usize,
    /// `[upstream.NAME]` tables, sorted by name; locations refer to them by index.
    pub upstreams: Vec<Upstream>,
    /// `[cache.NAME]` tables, sorted by name; proxy locations refer to them by index.
    pub caches: Vec<crate::CacheZone>,
    /// `[defaults]`' error pages, for errors before a location is known (bad requests,
    /// no location).
    pub error_pages: Option<std::sync::Arc<crate::ErrorPages>>,
    /// `limits.send_rate`: one bucket for every client connection.
    pub send_rate: Option<std::sync::Arc<ramjet_shaping::SharedBucket>>,
    /// By `listen` entry: the TLS acceptor of a TLS listener (shorter than `listen`, or
    /// empty: the rest are cleartext).
    pub tls: Vec<Option<ramjet_tls::Acceptor>>,
    /// By `listen` entry: the files of its certificate (as `tls`).
    pub tls_files: Vec<Option<crate::TlsFiles>>,
    /// `[acme]`: certificates obtained and renewed from an ACME CA.
    pub acme: Option<crate::AcmeOptions>,
    /// What is allowed but probably wrong (a certificate that does not name its site).
    pub warnings: Vec<String>,
}

/// Request limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub http1: ramjet_http1::Limits,
    /// Largest request body accepted where a location does not set its own; more is 413.
    pub max_body: u64,
    /// The largest of `max_body` and every location's: what is read before a request is
    /// routed (its location then holds it to its own limit).
    pub max_body_any: u64,
    /// Open client connections per worker; past it new connections are closed at once.
    pub max_connections: usize,
    /// SO_SNDBUF for client connections; `None`: kernel autotuning.
    pub send_buffer: Option<usize>,
    /// Open connections per client address (all workers); past it, requests get 429.
    pub max_connections_per_client: Option<u32>,
    /// Most connections per hand-off message (1 to 64; 64 by default).
    pub handoff_batch: usize,
    /// CGI programs running at once (all workers).
    pub cgi_processes: usize,
}

/// Connection timeouts.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub header: Duration,
    pub keepalive: Duration,
    pub send: Duration,
    pub shutdown: Duration,
    /// On TERM/INT, how long the server goes on serving (and accepting) with the `health`
    /// handler answering 503, so a balancer moves traffic off first; 0 stops at once.
    pub drain: Duration,
    /// How long a handed-off connection waits for a backend whose queue is full.
    pub handoff: Duration,
    /// How long a CGI program may stay silent.
    pub cgi: Duration,
}

/// Per-worker open-file cache sizing.
#[derive(Debug, Clone, Copy)]
pub struct FileCacheOptions {
    pub entries: usize,
    pub memory: u64,
    pub small_file_max: u64,
    /// The longest a changed file can be served from the cache: entries are re-checked
    /// when older than this (requests wait for the re-check).
    pub valid: Duration,
    /// Changes reported by inotify make their entries re-checked at once (lighttpd's
    /// stat-cache-engine "inotify"); `valid` stays the backstop for what it cannot see.
    pub watch: bool,
}

/// A virtual host: names and its locations, longest prefix first.
#[derive(Debug)]
pub struct VHost {
    /// Lower-case names; "*.x" matches subdomains of x, "*" matches any host.
    pub names: Vec<String>,
    pub locations: Vec<Location>,
    /// This site's certificate on TLS listeners.
    pub tls: Option<crate::TlsFiles>,
    /// Its certificate comes from the `[acme]` CA (`tls = "acme"`).
    pub acme: bool,
}

/// A location: a path prefix and what serves it.
#[derive(Debug)]
pub struct Location {
    /// Unique within one `Resolved`; keys per-worker caches together with the generation.
    pub id: usize,
    pub prefix: String,
    /// What answers, in order (never empty).
    pub handlers: Vec<Handler>,
    /// Present when `handlers` has `static`.
    pub statics: Option<StaticOptions>,
    /// Present when `handlers` has `proxy`.
    pub proxy: Option<ProxyOptions>,
    /// Largest request body accepted here (`limits.max_body` unless the location says).
    pub max_body: u64,
    /// Client address rules; `None`: everyone (no check on the hot path).
    pub access: Option<Box<crate::access::AccessRules>>,
    /// Headers and cache lifetime added to successful responses; `None`: nothing.
    pub response_headers: Option<Box<crate::headers::ResponseHeaders>>,
    /// Present when `handlers` has `redirect`.
    pub redirect: Option<RedirectOptions>,
    /// The backend's hand-off socket, for the `handoff` handler.
    pub handoff: Option<std::sync::Arc<std::path::PathBuf>>,
    /// The module mounted here, started, for the `module` handler.
    pub module: Option<std::sync::Arc<crate::ModuleMount>>,
    /// The CGI programs' directory and extra environment, for the `cgi` handler.
    pub cgi: Option<std::sync::Arc<CgiOptions>>,
    /// Pages in place of the server's own error pages; `None`: the server's.
    pub error_pages: Option<std::sync::Arc<crate::ErrorPages>>,
    /// Basic authentication; `None`: no check on the hot path.
    pub auth: Option<std::sync::Arc<crate::BasicAuth>>,
    /// Its counters' slot (`observe::stats::location_slot`).
    pub metrics: u16,
    /// Send and request rates; `None`: none (no check on the hot path).
    pub shaping: Option<Box<crate::Shaping>>,
}

impl Location {
    /// Whether a handler after `h` will be asked if `h` declines (so `h` may decline what
    /// it would otherwise refuse, e.g. a method it does not serve).
    pub fn has_after(&self, h: Handler) -> bool {
        self.handlers
            .iter()
            .position(|&x| x == h)
            .is_some_and(|i| i + 1 < self.handlers.len())
    }
}

impl Resolved {
    /// The TLS acceptor of `listen` entry `index` (`None`: cleartext).
    pub fn tls_of(&self, index: usize) -> Option<&ramjet_tls::Acceptor> {
        self.tls.get(index).and_then(Option::as_ref)
    }

    /// Whether connections on the sockets of `listen` entry `index` start with a PROXY
    /// protocol header.
    pub fn expects_proxy_header(&self, index: usize) -> bool {
        self.proxy_protocol.get(index).copied().unwrap_or(false)
    }

    /// Whether the sockets of `listen` entry `index` serve FTP (and the FTP options).
    pub fn ftp_of(&self, index: usize) -> Option<&crate::FtpOptions> {
        self.ftp
            .as_ref()
            .filter(|_| self.ftp_listeners.get(index).copied().unwrap_or(false))
    }

    /// The location FTP serves.
    pub fn ftp_location(&self, ftp: &crate::FtpOptions) -> &Location {
        &self.vhosts[ftp.vhost].locations[ftp.location]
    }

    /// Whether the sockets of `listen` entry `index` serve HTTP/2 (ALPN `h2` over TLS,
    /// the connection preface in cleartext).
    pub fn http2_of(&self, index: usize) -> bool {
        self.http2.get(index).copied().unwrap_or(true)
    }

    /// The virtual host for a Host value (port ignored, case-insensitive).
    pub fn vhost(&self, host: Option<&[u8]>) -> &VHost {
        // One virtual host answers every name: no Host to look at (the common case; the
        // walk below cost about 100 instructions a request).
        if let [only] = &self.vhosts[..] {
            return only;
        }
        let Some(host) = host else {
            return &self.vhosts[self.default_vhost];
        };
        let host = strip_port(host);
        let host = host.strip_suffix(b".").unwrap_or(host);
        // nginx order: exact name, then the longest "*.suffix" wildcard, then the default.
        let exact = self.vhosts.iter().find(|v| {
            v.names
                .iter()
                .any(|n| host.eq_ignore_ascii_case(n.as_bytes()))
        });
        let wildcard = || {
            self.vhosts
                .iter()
                .flat_map(|v| v.names.iter().map(move |n| (v, n)))
                .filter(|(_, n)| n.starts_with("*.") && name_matches(n, host))
                .max_by_key(|(_, n)| n.len())
                .map(|(v, _)| v)
        };
        exact
            .or_else(wildcard)
            .unwrap_or(&self.vhosts[self.default_vhost])
    }

    /// The location for a normalised path within the chosen virtual host.
    pub fn route(&self, host: Option<&[u8]>, path: &[u8]) -> Option<&Location> {
        self.vhost(host)
            .locations
            .iter()
            .find(|l| path.starts_with(l.prefix.as_bytes()))
    }
}

/// A Host value without its port (`[::1]:80` -> `[::1]`, `a.com:80` -> `a.com`).
pub fn strip_port(host: &[u8]) -> &[u8] {
    if host.first() == Some(&b'[') {
        let end = host
            .iter()
            .position(|&b| b == b']')
            .map_or(host.len(), |p| p + 1);
        return &host[..end];
    }
    match host.iter().rposition(|&b| b == b':') {
        Some(p) => &host[..p],
        None => host,
    }
}

fn name_matches(name: &str, host: &[u8]) -> bool {
    if name == "*" {
        return true;
    }
    if let Some(suffix) = name.strip_prefix("*.") {
        let suffix = suffix.as_bytes();
        return host.len() > suffix.len() + 1
            && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
            && host[host.len() - suffix.len() - 1] == b'.';
    }
    host.eq_ignore_ascii_case(name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_matching() {
        assert_eq!(strip_port(b"a.com:80"), b"a.com");
        assert_eq!(strip_port(b"[::1]:80"), b"[::1]");
        assert!(name_matches("a.com", b"A.COM"));
        assert!(name_matches("*.a.com", b"www.a.com"));
        assert!(!name_matches("*.a.com", b"a.com"));
        assert!(!name_matches("*.a.com", b"wwwa.com"));
        assert!(name_matches("*", b"x"));
    }
}
