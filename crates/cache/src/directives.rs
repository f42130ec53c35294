//! `Cache-Control` directives (RFC 9111 §5.2) as a cache reads them: every field line of
//! the name joined, directive names case-insensitive, arguments as tokens or quoted
//! strings. A directive whose argument is not a valid delta-seconds is taken as the
//! safest reading (RFC 9111 §4.2.1: an invalid max-age is stale).

/// The directives a cache acts on, from a request or a response.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Directives {
    pub no_store: bool,
    pub no_cache: bool,
    pub private: bool,
    pub public: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    pub immutable: bool,
    pub only_if_cached: bool,
    pub must_understand: bool,
    /// `Some(None)`: present with an invalid argument.
    pub max_age: Option<Option<u64>>,
    pub s_maxage: Option<Option<u64>>,
    /// Request: `Some(None)` is "any staleness".
    pub max_stale: Option<Option<u64>>,
    pub min_fresh: Option<u64>,
    pub stale_while_revalidate: Option<u64>,
    pub stale_if_error: Option<u64>,
}

/// Delta-seconds (RFC 9111 §1.2.2): digits, capped at 2^31 as the RFC allows.
fn delta(v: &[u8]) -> Option<u64> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: u64 = 0;
    for &d in v {
        n = n.saturating_mul(10).saturating_add(u64::from(d - b'0'));
    }
    Some(n.min(1 << 31))
}

/// A lifetime given again: the same value stands, a different one makes it invalid (RFC
/// 9111 §4.2.1 allows taking the response as stale then, the safe reading).
fn once(before: Option<Option<u64>>, now: Option<u64>) -> Option<u64> {
    match before {
        None => now,
        Some(b) if b == now => b,
        Some(_) => None,
    }
}

/// Split a field value at commas outside quoted strings.
fn items(v: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, &b) in v.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            quoted = !quoted;
        } else if b == b',' && !quoted {
            out.push(v[start..i].trim_ascii());
            start = i + 1;
        }
    }
    out.push(v[start..].trim_ascii());
    out.retain(|s| !s.is_empty());
    out
}

impl Directives {
    /// Parse every value given (the field's lines, in order).
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Directives {
        // For a directive given twice, lifetimes that differ are invalid; flags are set by any.
        let mut d = Directives::default();
        for value in values {
            for item in items(value) {
                let (name, arg) = match item.iter().position(|&b| b == b'=') {
                    Some(i) => (item[..i].trim_ascii(), Some(item[i + 1..].trim_ascii())),
                    None => (item, None),
                };
                let arg_delta = || {
                    let a = arg?;
                    let a = a
                        .strip_prefix(b"\"")
                        .and_then(|a| a.strip_suffix(b"\""))
                        .unwrap_or(a);
                    delta(a)
                };
                let lower = name.to_ascii_lowercase();
                match lower.as_slice() {
                    b"no-store" => d.no_store = true,
                    // `no-cache="field"` (qualified): a shared cache may keep the rest;
                    // taken whole, which is the safe side.
                    b"no-cache" => d.no_cache = true,
                    b"private" => d.private = true,
                    b"public" => d.public = true,
                    b"must-revalidate" => d.must_revalidate = true,
                    b"proxy-revalidate" => d.proxy_revalidate = true,
                    b"immutable" => d.immutable = true,
                    b"only-if-cached" => d.only_if_cached = true,
                    b"must-understand" => d.must_understand = true,
                    b"max-age" => d.max_age = Some(once(d.max_age, arg_delta())),
                    b"s-maxage" => d.s_maxage = Some(once(d.s_maxage, arg_delta())),
                    b"max-stale" if d.max_stale.is_none() => {
                        d.max_stale = Some(arg.and_then(|_| arg_delta()))
                    }
                    b"min-fresh" if d.min_fresh.is_none() => d.min_fresh = arg_delta(),
                    b"stale-while-revalidate" if d.stale_while_revalidate.is_none() => {
                        d.stale_while_revalidate = arg_delta()
                    }
                    b"stale-if-error" if d.stale_if_error.is_none() => {
                        d.stale_if_error = arg_delta()
                    }
                    _ => {}
                }
            }
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &str) -> Directives {
        Directives::parse([v.as_bytes()])
    }

    #[test]
    fn lifetimes_and_flags() {
        let d = p("public, Max-Age=60, s-maxage=\"30\"");
        assert!(d.public);
        assert_eq!(d.max_age, Some(Some(60)));
        assert_eq!(d.s_maxage, Some(Some(30)));
        assert_eq!(p("max-age=abc").max_age, Some(None));
        assert_eq!(p("max-age").max_age, Some(None));
        assert_eq!(p("max-age=1, max-age=2").max_age, Some(None));
        assert_eq!(p("max-age=1, max-age=1").max_age, Some(Some(1)));
        assert_eq!(p("max-age=99999999999").max_age, Some(Some(1 << 31)));
        assert_eq!(p("max-stale").max_stale, Some(None));
        assert_eq!(p("max-stale=5").max_stale, Some(Some(5)));
        assert!(p("no-cache=\"set-cookie, x\"").no_cache);
        // A comma inside a quoted argument does not split the directive.
        let d = p("private=\"a,b\", max-age=5");
        assert!(d.private);
        assert_eq!(d.max_age, Some(Some(5)));
        assert_eq!(p("").max_age, None);
        assert_eq!(p(",,,").max_age, None);
    }

    #[test]
    fn several_lines() {
        let d = Directives::parse([&b"max-age=5"[..], b"no-cache"]);
        assert!(d.no_cache);
        assert_eq!(d.max_age, Some(Some(5)));
    }
}
