//! `[cache.NAME]` tables (a cache's tiers and budgets) and a location's `cache` options
//! (which cache, and the operator's overrides of what the origin says).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::access::Cidr;
use crate::error::ConfigError;
use crate::raw::RawLocation;
use crate::resolve::Resolver;
use crate::units::{Seconds, Size};

/// Memory tier of a cache that names no size.
pub const DEFAULT_CACHE_MEMORY: u64 = 64 << 20;
/// Objects up to this size go to the memory tier (a larger one goes to disk).
pub const DEFAULT_MEMORY_OBJECT_MAX: u64 = 1 << 20;

/// `[cache.NAME]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    /// Bytes of object bodies and heads kept in memory (`"256m"`).
    pub memory: Option<Size>,
    /// The directory of the disk tier (created if missing); none: memory only.
    pub disk: Option<Spanned<String>>,
    /// Bytes the disk tier may hold (needed with `disk`).
    pub disk_size: Option<Size>,
    /// Largest object kept in memory; larger ones go to disk (default 1m).
    pub memory_object_max: Option<Size>,
    /// Largest object stored at all (default: an eighth of the largest tier).
    pub max_object: Option<Size>,
    /// The cache's name in `Cache-Status` (default `ramjet`): each node of a fleet its own.
    pub identity: Option<Spanned<String>>,
}

/// A resolved `[cache.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheZone {
    pub name: String,
    pub memory: u64,
    pub disk: Option<PathBuf>,
    pub disk_size: u64,
    pub memory_object_max: u64,
    pub max_object: u64,
    /// Its name in `Cache-Status` (an RFC 8941 token).
    pub identity: String,
}

/// What a cache key is made of (`cache_key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    /// `http` or `https`.
    Scheme,
    /// The Host (lower-cased, port kept).
    Host,
    /// The path as received (still percent-encoded).
    Path,
    /// The query, `?` included when there is one.
    Query,
    /// A request field's value (`"header:Accept-Language"`).
    Header(String),
    /// One cookie's value (`"cookie:lang"`).
    Cookie(String),
}

/// The identifier `Cache-Status` names a cache by when its table gives none.
pub const DEFAULT_CACHE_IDENTITY: &str = "ramjet";

/// A location's cache options, resolved.
#[derive(Debug, Clone)]
pub struct CacheRule {
    /// Index into `Resolved::caches`.
    pub zone: usize,
    /// The zone's `identity`, as `Cache-Status` names it.
    pub identity: Arc<str>,
    /// `cache_ttl`: every storable answer is fresh this long, whatever the origin said
    /// about freshness (`no-store`, `private` and `Authorization` still hold).
    pub ttl: Option<Duration>,
    /// `cache_ignore_set_cookie`: answers with `Set-Cookie` are stored (without it).
    pub ignore_set_cookie: bool,
    pub key: Vec<KeyPart>,
    /// Addresses allowed to send `PURGE` (none: PURGE is forwarded like any method).
    pub purge: Vec<Cidr>,
}

impl CacheRule {
    /// Whether `ip` may purge.
    pub fn may_purge(&self, ip: std::net::IpAddr) -> bool {
        let ip = match ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
            v4 => v4,
        };
        self.purge.iter().any(|c| c.contains(ip))
    }
}

/// An RFC 8941 token (what RFC 9211 names a cache by), at most 64 bytes.
fn is_token(s: &str) -> bool {
    let b = s.as_bytes();
    matches!(b.first(), Some(c) if c.is_ascii_alphabetic() || *c == b'*')
        && b.len() <= 64
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&c))
}

fn parse_key(part: &str) -> Result<KeyPart, String> {
    let field_name = |n: &str| {
        if n.is_empty()
            || !n
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_!#$%&'*+.^`|~".contains(&b))
        {
            Err(format!("`{part}`: `{n}` is not a field or cookie name"))
        } else {
            Ok(n.to_string())
        }
    };
    Ok(match part {
        "scheme" => KeyPart::Scheme,
        "host" => KeyPart::Host,
        "path" => KeyPart::Path,
        "query" => KeyPart::Query,
        _ => {
            if let Some(n) = part.strip_prefix("header:") {
                KeyPart::Header(field_name(n)?.to_ascii_lowercase())
            } else if let Some(n) = part.strip_prefix("cookie:") {
                KeyPart::Cookie(field_name(n)?)
            } else {
                return Err(format!(
                    "`{part}` is not a key part (\"scheme\", \"host\", \"path\", \"query\", \"header:NAME\", \"cookie:NAME\")"
                ));
            }
        }
    })
}

impl Resolver<'_> {
    /// Every `[cache.NAME]` (sorted by name); errors are noted and the table left out.
    pub(crate) fn caches(
        &self,
        raw: Option<&std::collections::BTreeMap<String, Spanned<RawCache>>>,
    ) -> (Vec<CacheZone>, Vec<String>) {
        let mut zones = Vec::new();
        let mut failed = Vec::new();
        for (name, c) in raw.into_iter().flatten() {
            let span = Some(c.span());
            let c = c.get_ref();
            let key = |k: &str| format!("cache.{name}.{k}");
            let mut ok = true;
            let memory = c.memory.map_or(DEFAULT_CACHE_MEMORY, |s| s.0);
            let disk = c.disk.as_ref().map(|d| self.base.join(d.get_ref()));
            let disk_size = c.disk_size.map_or(0, |s| s.0);
            if disk.is_some() && disk_size == 0 {
                ok = false;
                self.keep::<()>(Err(self.err(
                    span.clone(),
                    &key("disk_size"),
                    "missing: a disk tier needs its size (e.g. \"100g\")".into(),
                )));
            }
            if disk.is_none() && c.disk_size.is_some() {
                ok = false;
                self.keep::<()>(Err(self.err(
                    span.clone(),
                    &key("disk"),
                    "missing: disk_size is given but no disk directory".into(),
                )));
            }
            if let Some(d) = &disk {
                if let Err(e) = std::fs::create_dir_all(d) {
                    ok = false;
                    self.keep::<()>(Err(self.err(
                        c.disk.as_ref().map(|d| d.span()),
                        &key("disk"),
                        format!("cannot create {}: {e}", d.display()),
                    )));
                }
            }
            if memory == 0 && disk.is_none() {
                ok = false;
                self.keep::<()>(Err(self.err(
                    span.clone(),
                    &key("memory"),
                    "a cache with no disk tier needs memory".into(),
                )));
            }
            let memory_object_max = c
                .memory_object_max
                .map_or(DEFAULT_MEMORY_OBJECT_MAX, |s| s.0)
                .min(memory);
            let max_object = c
                .max_object
                .map_or(memory.max(disk_size) / 8, |s| s.0)
                .max(1);
            let identity = match &c.identity {
                None => DEFAULT_CACHE_IDENTITY.to_string(),
                Some(i) if is_token(i.get_ref()) => i.get_ref().clone(),
                Some(i) => {
                    ok = false;
                    self.keep::<()>(Err(self.err(
                        Some(i.span()),
                        &key("identity"),
                        format!(
                            "{:?} is not a token: a letter or `*` first, then letters, digits and ! # $ % & ' * + - . ^ _ ` | ~ : / (at most 64)",
                            i.get_ref()
                        ),
                    )));
                    String::new()
                }
            };
            if ok {
                zones.push(CacheZone {
                    name: name.clone(),
                    memory,
                    disk,
                    disk_size,
                    memory_object_max,
                    max_object,
                    identity,
                });
            } else {
                failed.push(name.clone());
            }
        }
        (zones, failed)
    }

    /// A proxy location's cache options (`None`: no `cache`).
    pub(crate) fn cache_rule(
        &self,
        d: &RawLocation,
        l: &RawLocation,
        key: &str,
        zones: &[CacheZone],
        failed: &[String],
    ) -> Result<Option<Arc<CacheRule>>, ConfigError> {
        let Some(name) = l.cache.as_ref().or(d.cache.as_ref()) else {
            return Ok(None);
        };
        if name.get_ref() == "off" || failed.contains(name.get_ref()) {
            return Ok(None);
        }
        let Some(zone) = zones.iter().position(|z| z.name == *name.get_ref()) else {
            let known = zones.iter().map(|z| z.name.as_str());
            return Err(self.undefined(name, &format!("{key}.cache"), "cache", known));
        };
        let mut parts = Vec::new();
        match l.cache_key.as_ref().or(d.cache_key.as_ref()) {
            None => parts.extend([
                KeyPart::Scheme,
                KeyPart::Host,
                KeyPart::Path,
                KeyPart::Query,
            ]),
            Some(list) => {
                for p in list.get_ref() {
                    parts.push(parse_key(p).map_err(|m| {
                        self.err(Some(list.span()), &format!("{key}.cache_key"), m)
                    })?);
                }
                if parts.is_empty() {
                    return Err(self.err(
                        Some(list.span()),
                        &format!("{key}.cache_key"),
                        "needs at least one part".into(),
                    ));
                }
            }
        }
        let mut purge = Vec::new();
        if let Some(list) = l.cache_purge.as_ref().or(d.cache_purge.as_ref()) {
            for p in list.get_ref() {
                purge.push(
                    Cidr::parse(p).map_err(|m| {
                        self.err(Some(list.span()), &format!("{key}.cache_purge"), m)
                    })?,
                );
            }
        }
        Ok(Some(Arc::new(CacheRule {
            zone,
            identity: zones[zone].identity.as_str().into(),
            ttl: l.cache_ttl.or(d.cache_ttl).map(|s: Seconds| s.0),
            ignore_set_cookie: l
                .cache_ignore_set_cookie
                .or(d.cache_ignore_set_cookie)
                .unwrap_or(false),
            key: parts,
            purge,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_parts() {
        assert_eq!(parse_key("host"), Ok(KeyPart::Host));
        assert_eq!(
            parse_key("header:Accept-Language"),
            Ok(KeyPart::Header("accept-language".into()))
        );
        assert_eq!(parse_key("cookie:lang"), Ok(KeyPart::Cookie("lang".into())));
        assert!(parse_key("header:").is_err());
        assert!(parse_key("header:a b").is_err());
        assert!(parse_key("paths").is_err());
    }
}
