//! Conditional requests (RFC 9110 §13): If-Match, If-Unmodified-Since, If-None-Match,
//! If-Modified-Since, evaluated in the order of §13.2.2; and If-Range for ranges.

use std::time::{SystemTime, UNIX_EPOCH};

use ramjet_http1::{Method, RequestHead};

/// What the preconditions say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Proceed,
    NotModified,
    PreconditionFailed,
}

/// Evaluate preconditions against a representation's strong `etag` and `mtime` (seconds).
pub fn evaluate(head: &RequestHead<'_>, etag: &[u8], mtime: u64) -> Verdict {
    if let Some(im) = head.if_match {
        if !list_matches(im, etag, false) {
            return Verdict::PreconditionFailed;
        }
    } else if let Some(since) = head.if_unmodified_since.and_then(http_date) {
        if mtime > since {
            return Verdict::PreconditionFailed;
        }
    }
    let get_or_head = matches!(head.method, Method::Get | Method::Head);
    if let Some(inm) = head.if_none_match {
        if list_matches(inm, etag, true) {
            return if get_or_head {
                Verdict::NotModified
            } else {
                Verdict::PreconditionFailed
            };
        }
    } else if get_or_head {
        if let Some(since) = head.if_modified_since.and_then(http_date) {
            if mtime <= since {
                return Verdict::NotModified;
            }
        }
    }
    Verdict::Proceed
}

/// If-Range (RFC 9110 §13.1.5): the range applies only if the validator still matches —
/// a strong ETag, or exactly the Last-Modified date.
pub fn if_range_holds(value: &[u8], etag: &[u8], mtime: u64) -> bool {
    let value = value.trim_ascii();
    if value.starts_with(b"\"") {
        return value == etag;
    }
    if value.starts_with(b"W/") {
        return false;
    }
    http_date(value) == Some(mtime)
}

/// `*` or a comma list of entity tags; weak comparison ignores `W/`.
fn list_matches(list: &[u8], etag: &[u8], weak: bool) -> bool {
    let list = list.trim_ascii();
    if list == b"*" {
        return true;
    }
    list.split(|&b| b == b',').any(|tag| {
        let tag = tag.trim_ascii();
        // Weak comparison ignores `W/` on both sides; strong never matches a weak tag.
        let ours = etag.strip_prefix(b"W/").unwrap_or(etag);
        match tag.strip_prefix(b"W/") {
            Some(t) => weak && t == ours,
            None if weak => tag == ours,
            None => tag == etag,
        }
    })
}

fn http_date(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?;
    let t: SystemTime = httpdate::parse_http_date(text.trim()).ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramjet_http1::{parse_request_head, Limits, Parse};

    fn verdict(extra: &str, etag: &[u8], mtime: u64) -> Verdict {
        let raw = format!("GET / HTTP/1.1\r\nHost: x\r\n{extra}\r\n");
        let Parse::Complete(h) = parse_request_head(raw.as_bytes(), &Limits::default()) else {
            panic!()
        };
        evaluate(&h, etag, mtime)
    }

    const DATE: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const SECS: u64 = 784_111_777;

    #[test]
    fn precedence() {
        let e = b"\"a-1\"";
        assert_eq!(
            verdict("If-None-Match: \"a-1\"\r\n", e, SECS),
            Verdict::NotModified
        );
        assert_eq!(
            verdict("If-None-Match: W/\"a-1\"\r\n", e, SECS),
            Verdict::NotModified
        );
        assert_eq!(
            verdict("If-None-Match: \"b\", \"a-1\"\r\n", e, SECS),
            Verdict::NotModified
        );
        assert_eq!(
            verdict("If-None-Match: \"b\"\r\n", e, SECS),
            Verdict::Proceed
        );
        assert_eq!(
            verdict(
                &format!("If-None-Match: \"b\"\r\nIf-Modified-Since: {DATE}\r\n"),
                e,
                SECS
            ),
            Verdict::Proceed
        );
        assert_eq!(
            verdict(&format!("If-Modified-Since: {DATE}\r\n"), e, SECS),
            Verdict::NotModified
        );
        assert_eq!(
            verdict(&format!("If-Modified-Since: {DATE}\r\n"), e, SECS + 1),
            Verdict::Proceed
        );
        assert_eq!(
            verdict("If-Modified-Since: garbage\r\n", e, SECS),
            Verdict::Proceed
        );
        assert_eq!(
            verdict("If-Match: \"zz\"\r\n", e, SECS),
            Verdict::PreconditionFailed
        );
        assert_eq!(
            verdict("If-Match: W/\"a-1\"\r\n", e, SECS),
            Verdict::PreconditionFailed
        );
        assert_eq!(verdict("If-Match: *\r\n", e, SECS), Verdict::Proceed);
        assert_eq!(
            verdict(&format!("If-Unmodified-Since: {DATE}\r\n"), e, SECS + 5),
            Verdict::PreconditionFailed
        );
    }

    #[test]
    fn if_range() {
        assert!(if_range_holds(b"\"a-1\"", b"\"a-1\"", SECS));
        assert!(!if_range_holds(b"W/\"a-1\"", b"\"a-1\"", SECS));
        assert!(if_range_holds(DATE.as_bytes(), b"\"x\"", SECS));
        assert!(!if_range_holds(DATE.as_bytes(), b"\"x\"", SECS + 1));
    }
}
