//! What RFC 9111 (with RFC 5861's stale extensions) says about one response and one
//! request, as pure functions: whether an answer may be stored (§3), how long it is fresh
//! (§4.2.1, heuristics §4.2.2), how old it is (§4.2.3), and whether a stored answer may be
//! used for a request as it is, must be revalidated, or may be served stale (§4.2.4, §5.2.1).
//! Times are Unix milliseconds.

use crate::directives::Directives;
use ramjet_config::CacheRule;

/// Statuses a cache may store with no explicit freshness (RFC 9110 §15.1).
pub const HEURISTIC_STATUSES: [u16; 11] = [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501];

/// Statuses this cache understands (for `must-understand`, RFC 9111 §5.2.2.3).
pub fn understood(status: u16) -> bool {
    matches!(status, 200..=206 | 300..=308 | 400..=417 | 421 | 422 | 426 | 428 | 429 | 431 | 451 | 500..=505 | 511)
}

/// The `Age` of an answer in seconds: 0 when absent; one non-negative integer, else (a
/// list, a second line, anything else) the answer is taken as stale (`u64::MAX`).
fn age_value(fields: &[u8]) -> u64 {
    let mut all = values(fields, b"age");
    let Some(v) = all.next() else {
        return 0;
    };
    if all.next().is_some() || v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return u64::MAX;
    }
    std::str::from_utf8(v)
        .ok()
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(u64::MAX)
}

/// `Surrogate-Control` values with their targets (`;name`) removed: every directive is
/// taken as meant for this cache.
fn untargeted(fields: &[u8]) -> Vec<Vec<u8>> {
    values(fields, b"surrogate-control")
        .map(|v| {
            v.split(|&b| b == b',')
                .map(|d| d.split(|&b| b == b';').next().unwrap_or(b""))
                .collect::<Vec<_>>()
                .join(&b',')
        })
        .collect()
}

/// A heuristic lifetime (10% of the time since Last-Modified) is capped at this.
pub const HEURISTIC_MAX_MS: u64 = 24 * 3600 * 1000;

/// How a stored answer ages and may be used, decided when it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Freshness {
    /// The freshness lifetime.
    pub lifetime_ms: u64,
    /// Its age when it was received (corrected initial age, §4.2.3).
    pub initial_age_ms: u64,
    /// When it was received (the origin's answer, or the last 304 that refreshed it).
    pub response_time_ms: u64,
    /// Revalidate before every use (`no-cache`).
    pub no_cache: bool,
    /// Never served stale (`must-revalidate`, `proxy-revalidate`, `s-maxage`).
    pub must_revalidate: bool,
    /// RFC 5861 windows, seconds past stale.
    pub stale_while_revalidate: u32,
    pub stale_if_error: u32,
}

impl Freshness {
    /// How old the answer is at `now` (§4.2.3 `current_age`).
    pub fn age_ms(&self, now_ms: u64) -> u64 {
        self.initial_age_ms + now_ms.saturating_sub(self.response_time_ms)
    }

    /// How far past its lifetime the answer is at `now` (0 while fresh).
    pub fn staleness_ms(&self, now_ms: u64) -> u64 {
        self.age_ms(now_ms).saturating_sub(self.lifetime_ms)
    }

    pub fn is_fresh(&self, now_ms: u64) -> bool {
        self.age_ms(now_ms) < self.lifetime_ms
    }

    /// May be served after a failed revalidation (stale-if-error).
    pub fn usable_on_error(&self, now_ms: u64) -> bool {
        !self.no_cache && self.staleness_ms(now_ms) <= u64::from(self.stale_if_error) * 1000
    }
}

/// The response as the policy reads it.
pub struct Answer<'a> {
    pub status: u16,
    /// Its field lines (`Name: value\r\n`), as received.
    pub fields: &'a [u8],
}

/// The request as the policy reads it.
#[derive(Default, Clone)]
pub struct Asked {
    pub directives: Directives,
    /// `Pragma: no-cache` with no `Cache-Control` (§5.4).
    pub pragma_no_cache: bool,
    pub authorization: bool,
}

/// Every value of the field `name` in `fields` (`Name: value\r\n` lines).
pub fn values<'a>(fields: &'a [u8], name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    fields.split(|&b| b == b'\n').filter_map(move |line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon]
            .eq_ignore_ascii_case(name)
            .then(|| line[colon + 1..].trim_ascii())
    })
}

/// The first value of `name`.
pub fn value<'a>(fields: &'a [u8], name: &'a [u8]) -> Option<&'a [u8]> {
    values(fields, name).next()
}

/// An HTTP date as Unix seconds.
pub fn http_date(v: &[u8]) -> Option<u64> {
    let t = httpdate::parse_http_date(std::str::from_utf8(v).ok()?.trim()).ok()?;
    t.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
}

/// Why an answer is not stored, or how it ages. `request_ms` and `response_ms` are when the
/// request was sent and the answer's head received; `date` its `Date` (seconds).
pub fn storable(
    asked: &Asked,
    answer: &Answer<'_>,
    rule: &CacheRule,
    request_ms: u64,
    response_ms: u64,
) -> Result<Freshness, &'static str> {
    // `Surrogate-Control` speaks to this cache and, when present, wins over
    // `Cache-Control` for storing and freshness.
    let surrogate = value(answer.fields, b"surrogate-control").is_some();
    let cc = if surrogate {
        let sc = untargeted(answer.fields);
        let sc = Directives::parse(sc.iter().map(Vec::as_slice));
        let cc = Directives::parse(values(answer.fields, b"cache-control"));
        Directives {
            private: cc.private,
            public: cc.public,
            ..sc
        }
    } else {
        Directives::parse(values(answer.fields, b"cache-control"))
    };
    if asked.directives.no_store {
        return Err("request no-store");
    }
    if cc.must_understand && !understood(answer.status) {
        return Err("must-understand");
    }
    if cc.no_store && !(cc.must_understand && understood(answer.status)) {
        return Err("no-store");
    }
    if cc.private {
        return Err("private");
    }
    if asked.authorization && !(cc.public || cc.must_revalidate || cc.s_maxage.is_some()) {
        return Err("authorization");
    }
    if matches!(answer.status, 100..=199 | 206 | 304) {
        return Err("status");
    }
    if !rule.ignore_set_cookie && value(answer.fields, b"set-cookie").is_some() {
        return Err("set-cookie");
    }
    if values(answer.fields, b"vary")
        .flat_map(|v| v.split(|&b| b == b','))
        .any(|n| n.trim_ascii() == b"*")
    {
        return Err("vary *");
    }
    let date_ms = value(answer.fields, b"date")
        .and_then(http_date)
        .map(|s| s * 1000);
    let expires = value(answer.fields, b"expires");
    let explicit = cc.public
        || cc.max_age.is_some()
        || cc.s_maxage.is_some()
        || expires.is_some()
        || rule.ttl.is_some();
    if !explicit && !HEURISTIC_STATUSES.contains(&answer.status) {
        return Err("no freshness");
    }
    // §4.2.3.
    let age_value = age_value(answer.fields).min(1 << 31) * 1000;
    let apparent = date_ms.map_or(0, |d| response_ms.saturating_sub(d));
    let corrected = age_value + response_ms.saturating_sub(request_ms);
    let initial_age_ms = apparent.max(corrected);

    let date_or_now = date_ms.unwrap_or(response_ms);
    let lifetime_ms = if let Some(ttl) = rule.ttl {
        ttl.as_millis() as u64
    } else if let Some(s) = cc.s_maxage {
        s.unwrap_or(0) * 1000
    } else if let Some(m) = cc.max_age {
        m.unwrap_or(0) * 1000
    } else if expires.is_some() {
        // An invalid date (such as "0") is in the past (§5.3); so is a second, different one.
        let mut all = values(answer.fields, b"expires").map(http_date);
        match all.next().flatten() {
            Some(at) if all.all(|o| o == Some(at)) => (at * 1000).saturating_sub(date_or_now),
            _ => 0,
        }
    } else if let Some(lm) = value(answer.fields, b"last-modified").and_then(http_date) {
        // §4.2.2: a fraction of the time since the last change.
        ((date_or_now.saturating_sub(lm * 1000)) / 10).min(HEURISTIC_MAX_MS)
    } else {
        0
    };
    let overridden = rule.ttl.is_some();
    Ok(Freshness {
        lifetime_ms,
        initial_age_ms,
        response_time_ms: response_ms,
        no_cache: cc.no_cache && !overridden,
        must_revalidate: !overridden
            && (cc.must_revalidate || cc.proxy_revalidate || cc.s_maxage.is_some()),
        stale_while_revalidate: cc.stale_while_revalidate.unwrap_or(0) as u32,
        stale_if_error: cc.stale_if_error.unwrap_or(0) as u32,
    })
}

/// What a stored answer is good for, for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// Serve it as it is.
    Fresh,
    /// Serve it, and revalidate it in the background (stale-while-revalidate).
    StaleRevalidate,
    /// Ask the origin first (conditionally).
    Revalidate,
}

/// §4: may `f` be used for a request with `asked` at `now`?
pub fn usable(f: &Freshness, asked: &Asked, now_ms: u64) -> Use {
    let d = &asked.directives;
    if d.no_cache || asked.pragma_no_cache || f.no_cache {
        return Use::Revalidate;
    }
    let age = f.age_ms(now_ms);
    if let Some(ma) = d.max_age {
        // An invalid max-age asks for a fresh answer.
        if age > ma.unwrap_or(0) * 1000 {
            return Use::Revalidate;
        }
    }
    if age < f.lifetime_ms {
        return match d.min_fresh {
            Some(mf) if f.lifetime_ms - age < mf * 1000 => Use::Revalidate,
            _ => Use::Fresh,
        };
    }
    if f.must_revalidate {
        return Use::Revalidate;
    }
    let stale = age - f.lifetime_ms;
    if let Some(ms) = d.max_stale {
        if ms.is_none_or(|s| stale <= s * 1000) {
            return Use::Fresh;
        }
    }
    if stale <= u64::from(f.stale_while_revalidate) * 1000 && f.stale_while_revalidate > 0 {
        return Use::StaleRevalidate;
    }
    Use::Revalidate
}

impl Asked {
    /// What a request head says to a cache.
    pub fn from_head(head: &ramjet_http1::RequestHead<'_>) -> Asked {
        let mut cc = Vec::new();
        let (mut pragma, mut authorization) = (false, false);
        for (name, v) in head.fields() {
            if name.eq_ignore_ascii_case(b"cache-control") {
                cc.push(v);
            } else if name.eq_ignore_ascii_case(b"pragma") {
                pragma |= v
                    .split(|&b| b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"no-cache"));
            } else if name.eq_ignore_ascii_case(b"authorization") {
                authorization = true;
            }
        }
        Asked {
            pragma_no_cache: pragma && cc.is_empty(),
            directives: Directives::parse(cc),
            authorization,
        }
    }
}

#[cfg(test)]
mod tests;
