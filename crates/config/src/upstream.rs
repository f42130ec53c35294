//! `[upstream.NAME]` tables and a location's `proxy` options: raw (as written) and
//! resolved (what the proxy handler reads per request).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::error::ConfigError;
use crate::raw::RawLocation;
use crate::resolve::Resolver;
use crate::units::{Seconds, Size};

/// Idle upstream connections kept per worker and server (nginx `keepalive 32`).
pub const DEFAULT_KEEPALIVE: usize = 32;
/// An idle pooled connection is closed after this. Shorter than Apache's default
/// KeepAliveTimeout (5 s), so the pool gives up a connection before the backend does and
/// the stale keep-alive race stays rare (it is retried when it happens anyway).
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(4);
/// nginx proxy_connect_timeout is 60 s; a backend that takes 5 s to accept is down.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The response head must arrive within this after the request was sent (nginx
/// proxy_read_timeout 60 s).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait between two reads (or writes) of a body, either direction.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// Passive health: this many failures within `fail_timeout` mark a server down (nginx
/// max_fails 1, fail_timeout 10 s).
pub const DEFAULT_MAX_FAILS: u32 = 1;
pub const DEFAULT_FAIL_TIMEOUT: Duration = Duration::from_secs(10);
/// Active health checks run this often when `health_check` is set.
pub const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(5);
/// Servers per upstream (the proxy tracks the ones a request tried in a 128-bit set).
pub const MAX_SERVERS: usize = 128;
/// A request over `max_conns` waits this long for its turn (nginx's `queue` timeout).
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest upstream response head (nginx proxy_buffer_size is 4k/8k; apps set big cookies).
pub const DEFAULT_MAX_RESPONSE_HEAD: usize = 64 << 10;

/// `[upstream.NAME]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// `"127.0.0.1:8000"`, `"[::1]:8000"`, `"unix:/run/app.sock"`, or a table with a weight.
    pub servers: Spanned<Vec<RawServer>>,
    pub balance: Option<Balance>,
    pub keepalive: Option<usize>,
    pub keepalive_timeout: Option<Seconds>,
    pub connect_timeout: Option<Seconds>,
    pub header_timeout: Option<Seconds>,
    pub body_timeout: Option<Seconds>,
    pub max_fails: Option<u32>,
    pub fail_timeout: Option<Seconds>,
    /// Path requested (GET) from every server every `health_interval`; a 2xx/3xx is up.
    pub health_check: Option<String>,
    pub health_interval: Option<Seconds>,
    /// Servers tried for one request (first try included); default: all of them.
    pub tries: Option<u32>,
    /// Retry POST, PATCH and extension methods too (off: their effects may have happened).
    pub retry_non_idempotent: Option<bool>,
    pub max_response_head: Option<Size>,
    /// Connections in use to each server, all workers together; more requests wait.
    pub max_conns: Option<u32>,
    /// How long a request waits for one of `max_conns` before its client gets 504.
    pub queue_timeout: Option<Seconds>,
}

/// An upstream server: an address, or a table with a weight (unknown keys refused by
/// name, as for `listen` entries).
#[derive(Debug)]
pub enum RawServer {
    Address(String),
    Weighted {
        address: String,
        weight: Option<u32>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WeightedServer {
    address: String,
    weight: Option<u32>,
}

impl<'de> Deserialize<'de> for RawServer {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::either_form::string_or_table(
            d,
            "an address (\"127.0.0.1:8000\", \"unix:/path\") or a table { address = ..., weight = ... }",
            |a| RawServer::Address(a.to_string()),
            |w: WeightedServer| RawServer::Weighted {
                address: w.address,
                weight: w.weight,
            },
        )
    }
}

/// How a server is picked for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Balance {
    /// Smooth weighted round-robin (nginx's).
    RoundRobin,
    /// Fewest requests in flight from this worker, weighted; ties go round-robin.
    LeastConnections,
    /// Consistent hash of the request target (a cache cluster keeps its objects).
    HashUri,
    /// Consistent hash of the client address (sessions stick to a server).
    HashClient,
}

/// Where an upstream server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for UpstreamAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamAddr::Tcp(a) => write!(f, "{a}"),
            UpstreamAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// One server of an upstream.
#[derive(Debug, Clone)]
pub struct UpstreamServer {
    pub addr: UpstreamAddr,
    /// Relative share of requests (1..=1000).
    pub weight: u32,
    /// Its counters' slot (`observe::stats::upstream_slot`).
    pub metrics: u16,
}

/// A resolved `[upstream.NAME]`.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub name: String,
    pub servers: Vec<UpstreamServer>,
    pub balance: Balance,
    pub keepalive: usize,
    pub keepalive_timeout: Duration,
    pub connect_timeout: Duration,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub max_fails: u32,
    pub fail_timeout: Duration,
    pub health_check: Option<String>,
    pub health_interval: Duration,
    pub tries: u32,
    pub retry_non_idempotent: bool,
    pub max_response_head: usize,
    /// Requests in progress to each server, all of the process's workers together (nginx
    /// `max_conns`, HAProxy `maxconn`); `None`: no limit.
    pub max_conns: Option<u32>,
    /// How long a request over `max_conns` waits (HAProxy `timeout queue`).
    pub queue_timeout: Duration,
}

/// A location's proxy options, resolved.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    /// Index into `Resolved::upstreams`.
    pub upstream: usize,
    /// Replaces the location's prefix in the forwarded target (nginx `proxy_pass
    /// http://app/new/;`); `None` forwards the target unchanged.
    pub path: Option<String>,
    /// The Host sent upstream; `None` passes the client's.
    pub host: Option<String>,
    /// Fields with `_` in their names are forwarded (`underscores_in_headers`).
    pub underscores: bool,
    /// The cache answers are stored in (`cache`).
    pub cache: Option<std::sync::Arc<crate::CacheRule>>,
}

/// Parse one server address; `Err` is the message.
pub(crate) fn server(raw: &RawServer) -> Result<UpstreamServer, String> {
    let (address, weight) = match raw {
        RawServer::Address(a) => (a.as_str(), 1),
        RawServer::Weighted { address, weight } => (address.as_str(), weight.unwrap_or(1)),
    };
    if !(1..=1000).contains(&weight) {
        return Err(format!("weight {weight} of `{address}` must be 1..=1000"));
    }
    let addr = if let Some(path) = address.strip_prefix("unix:") {
        if path.is_empty() {
            return Err("`unix:` needs a socket path".into());
        }
        UpstreamAddr::Unix(PathBuf::from(path))
    } else {
        UpstreamAddr::Tcp(address.parse().map_err(|_| {
            format!("`{address}` is not address:port (e.g. \"127.0.0.1:8000\") or unix:/path")
        })?)
    };
    Ok(UpstreamServer {
        addr,
        weight,
        metrics: 0,
    })
}

/// Resolve one upstream table (`key` names it in errors).
/// Every error of the table comes back (key, message), not only the first.
pub(crate) fn resolve(name: &str, raw: &RawUpstream) -> Result<Upstream, Vec<(String, String)>> {
    let key = |k: &str| format!("upstream.{name}.{k}");
    let mut servers = Vec::new();
    let mut bad = Vec::new();
    for (i, s) in raw.servers.get_ref().iter().enumerate() {
        match server(s) {
            Ok(mut s) => {
                s.metrics = ramjet_observe::stats::upstream_slot(name, &s.addr.to_string());
                servers.push(s);
            }
            Err(m) => bad.push((key(&format!("servers[{i}]")), m)),
        }
    }
    if !bad.is_empty() {
        // Every bad server named, not only the first.
        return Err(bad);
    }
    if servers.is_empty() {
        return Err(vec![(key("servers"), "needs at least one server".into())]);
    }
    if servers.len() > MAX_SERVERS {
        return Err(vec![(
            key("servers"),
            format!(
                "{} servers; at most {MAX_SERVERS} per upstream",
                servers.len()
            ),
        )]);
    }
    let tries = raw.tries.unwrap_or(servers.len() as u32);
    if tries == 0 {
        return Err(vec![(key("tries"), "must be at least 1".into())]);
    }
    if let Some(path) = &raw.health_check {
        if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(vec![(
                key("health_check"),
                format!("`{path}` must be a path starting with / without spaces"),
            )]);
        }
    }
    let max_response_head = raw
        .max_response_head
        .map_or(DEFAULT_MAX_RESPONSE_HEAD, |s| s.0 as usize);
    if max_response_head < 1024 {
        return Err(vec![(
            key("max_response_head"),
            "must be at least 1k".into(),
        )]);
    }
    if raw.max_conns == Some(0) {
        return Err(vec![(key("max_conns"), "must be at least 1".into())]);
    }
    let secs = |v: Option<Seconds>, d| v.map_or(d, |s| s.0);
    Ok(Upstream {
        name: name.to_string(),
        servers,
        balance: raw.balance.unwrap_or(Balance::RoundRobin),
        keepalive: raw.keepalive.unwrap_or(DEFAULT_KEEPALIVE),
        keepalive_timeout: secs(raw.keepalive_timeout, DEFAULT_KEEPALIVE_TIMEOUT),
        connect_timeout: secs(raw.connect_timeout, DEFAULT_CONNECT_TIMEOUT),
        header_timeout: secs(raw.header_timeout, DEFAULT_HEADER_TIMEOUT),
        body_timeout: secs(raw.body_timeout, DEFAULT_BODY_TIMEOUT),
        max_fails: raw.max_fails.unwrap_or(DEFAULT_MAX_FAILS),
        fail_timeout: secs(raw.fail_timeout, DEFAULT_FAIL_TIMEOUT),
        health_check: raw.health_check.clone(),
        health_interval: secs(raw.health_interval, DEFAULT_HEALTH_INTERVAL),
        tries,
        retry_non_idempotent: raw.retry_non_idempotent.unwrap_or(false),
        max_response_head,
        max_conns: raw.max_conns,
        queue_timeout: secs(raw.queue_timeout, DEFAULT_QUEUE_TIMEOUT),
    })
}

impl Resolver<'_> {
    pub(crate) fn proxy(
        &self,
        d: &RawLocation,
        l: &RawLocation,
        key: &str,
        upstreams: &[Upstream],
        caches: (&[crate::CacheZone], &[String]),
    ) -> Result<ProxyOptions, ConfigError> {
        let Some(name) = l.proxy.as_ref().or(d.proxy.as_ref()) else {
            return Err(self.err(
                l.path.as_ref().map(|p| p.span()),
                &format!("{key}.proxy"),
                "missing: a location with the proxy handler names an [upstream.NAME]".into(),
            ));
        };
        if self.failed_upstreams.borrow().contains(name.get_ref()) {
            // Its own errors are reported; naming it is not another one.
            return Ok(ProxyOptions {
                upstream: 0,
                path: None,
                host: None,
                underscores: false,
                cache: None,
            });
        }
        let Some(upstream) = upstreams.iter().position(|u| u.name == *name.get_ref()) else {
            let known = upstreams.iter().map(|u| u.name.as_str());
            return Err(self.undefined(name, &format!("{key}.proxy"), "upstream", known));
        };
        let path = l.proxy_path.as_ref().or(d.proxy_path.as_ref());
        if let Some(p) = path {
            if !p.get_ref().starts_with('/') {
                return Err(self.err(
                    Some(p.span()),
                    &format!("{key}.proxy_path"),
                    format!("`{}` must start with /", p.get_ref()),
                ));
            }
        }
        let host = l.proxy_host.clone().or_else(|| d.proxy_host.clone());
        if let Some(h) = &host {
            if h.is_empty() || h.bytes().any(|b| b <= b' ' || b == 0x7f) {
                return Err(self.err(
                    None,
                    &format!("{key}.proxy_host"),
                    format!("`{h}` is not a host name"),
                ));
            }
        }
        Ok(ProxyOptions {
            upstream,
            path: path.map(|p| p.get_ref().clone()),
            host,
            underscores: l
                .underscores_in_headers
                .or(d.underscores_in_headers)
                .unwrap_or(false),
            cache: self.cache_rule(d, l, key, caches.0, caches.1)?,
        })
    }
}
