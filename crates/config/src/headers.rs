//! Response headers a location adds (`headers`, nginx `add_header`) and its cache lifetime
//! (`expires`, `expires_by_type`: nginx `expires`, Apache mod_expires), checked at load and
//! pre-rendered, so the pipeline writes them into the head without allocating.

use std::collections::BTreeMap;
use std::time::Duration;

/// Header fields a location may not set: the pipeline's own (framing, connection, date).
const RESERVED: [&str; 7] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "date",
    "server",
    "upgrade",
];

/// What a location adds to its successful responses.
#[derive(Debug, Clone, Default)]
pub struct ResponseHeaders {
    /// `Name: value\r\n` lines, in name order.
    pub block: Vec<u8>,
    /// Cache lifetime for any response without its own `Cache-Control`.
    pub expires: Option<Duration>,
    /// Cache lifetime by media type: an exact type (`text/html`) or a prefix ending in `/`
    /// (`image/`); checked before `expires`.
    pub by_type: Vec<(String, Duration)>,
}

impl ResponseHeaders {
    /// The lifetime for a response of media type `content_type` (parameters ignored).
    pub fn lifetime(&self, content_type: Option<&[u8]>) -> Option<Duration> {
        if let Some(ct) = content_type {
            let ct = ct.split(|&b| b == b';').next().unwrap_or(ct).trim_ascii();
            for (t, d) in &self.by_type {
                let hit = if t.ends_with('/') {
                    ct.len() > t.len() && ct[..t.len()].eq_ignore_ascii_case(t.as_bytes())
                } else {
                    ct.eq_ignore_ascii_case(t.as_bytes())
                };
                if hit {
                    return Some(*d);
                }
            }
        }
        self.expires
    }
}

/// Check and render; `Err` is (key suffix, message).
pub(crate) fn resolve(
    headers: Option<&BTreeMap<String, String>>,
    expires: Option<Duration>,
    by_type: Option<&BTreeMap<String, Duration>>,
) -> Result<Option<ResponseHeaders>, (String, String)> {
    let mut block = Vec::new();
    for (name, value) in headers.into_iter().flatten() {
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            return Err((
                format!("headers.{name}"),
                format!("`{name}` is not a header name"),
            ));
        }
        if RESERVED.iter().any(|r| name.eq_ignore_ascii_case(r)) {
            return Err((
                format!("headers.{name}"),
                format!("`{name}` is set by the server itself"),
            ));
        }
        if value.bytes().any(|b| (b < b' ' && b != b'\t') || b == 0x7f) {
            return Err((
                format!("headers.{name}"),
                "the value holds a control character".into(),
            ));
        }
        block.extend_from_slice(name.as_bytes());
        block.extend_from_slice(b": ");
        block.extend_from_slice(value.as_bytes());
        block.extend_from_slice(b"\r\n");
    }
    let mut types = Vec::new();
    for (t, d) in by_type.into_iter().flatten() {
        if !t.contains('/') || t.bytes().any(|b| b <= b' ') {
            return Err((
                format!("expires_by_type.{t}"),
                format!("`{t}` is not a media type (`text/html`) or a prefix (`image/`)"),
            ));
        }
        types.push((t.to_ascii_lowercase(), *d));
    }
    // Exact types before prefixes, longer prefixes first.
    types.sort_by_key(|(t, _)| (t.ends_with('/'), std::cmp::Reverse(t.len())));
    if block.is_empty() && expires.is_none() && types.is_empty() {
        return Ok(None);
    }
    Ok(Some(ResponseHeaders {
        block,
        expires,
        by_type: types,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_by_type_then_default() {
        let mut by = BTreeMap::new();
        by.insert("image/".to_string(), Duration::from_secs(30 * 86400));
        by.insert("text/html".to_string(), Duration::ZERO);
        let h = resolve(None, Some(Duration::from_secs(3600)), Some(&by))
            .unwrap()
            .unwrap();
        assert_eq!(
            h.lifetime(Some(b"image/png")),
            Some(Duration::from_secs(30 * 86400))
        );
        assert_eq!(
            h.lifetime(Some(b"text/html; charset=utf-8")),
            Some(Duration::ZERO)
        );
        assert_eq!(
            h.lifetime(Some(b"text/css")),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(h.lifetime(None), Some(Duration::from_secs(3600)));
        assert_eq!(h.lifetime(Some(b"image/")), Some(Duration::from_secs(3600)));
    }

    #[test]
    fn bad_headers_are_refused() {
        let one = |k: &str, v: &str| {
            let mut m = BTreeMap::new();
            m.insert(k.to_string(), v.to_string());
            resolve(Some(&m), None, None)
        };
        assert!(one("X-Frame-Options", "DENY").unwrap().is_some());
        assert!(one("Content-Length", "5").is_err());
        assert!(one("Bad Name", "x").is_err());
        assert!(one("X-A", "a\r\nSet-Cookie: x").is_err());
        assert!(resolve(None, None, None).unwrap().is_none());
    }
}
