//! Cache keys (the parts a location's `cache_key` names, each followed by a 0 byte), the
//! request's values of a stored answer's `Vary` fields, and the stable 128-bit hash that
//! names a disk object.

use ramjet_config::KeyPart;
use ramjet_http1::RequestHead;

/// The key of a request, written into `out`.
pub fn build(out: &mut Vec<u8>, parts: &[KeyPart], head: &RequestHead<'_>, secure: bool) {
    out.clear();
    let (path, query) = match head.path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (head.path, None),
    };
    for part in parts {
        match part {
            KeyPart::Scheme => out.extend_from_slice(if secure { b"https" } else { b"http" }),
            KeyPart::Host => {
                if let Some(h) = head.host {
                    out.extend(h.iter().map(u8::to_ascii_lowercase));
                }
            }
            KeyPart::Path => out.extend_from_slice(path.as_bytes()),
            KeyPart::Query => {
                if let Some(q) = query {
                    out.push(b'?');
                    out.extend_from_slice(q.as_bytes());
                }
            }
            KeyPart::Header(name) => {
                if let Some(v) = field_value(head, name.as_bytes()) {
                    out.extend_from_slice(&v);
                }
            }
            KeyPart::Cookie(name) => {
                if let Some(v) = cookie(head, name.as_bytes()) {
                    out.extend_from_slice(v);
                }
            }
        }
        out.push(0);
    }
}

/// The key prefix a prefix purge removes: the parts up to and including the path, the path
/// being `prefix` (the rest of the key is whatever follows).
pub fn prefix(parts: &[KeyPart], head: &RequestHead<'_>, secure: bool, prefix: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for part in parts {
        match part {
            KeyPart::Path => {
                out.extend_from_slice(prefix.as_bytes());
                return out;
            }
            KeyPart::Scheme => out.extend_from_slice(if secure { b"https" } else { b"http" }),
            KeyPart::Host => {
                if let Some(h) = head.host {
                    out.extend(h.iter().map(u8::to_ascii_lowercase));
                }
            }
            // A part before the path other than scheme and host: no prefix purge.
            _ => return Vec::new(),
        }
        out.push(0);
    }
    Vec::new()
}

/// Every line of a request field, joined with `,` after trimming each list member (so
/// `a, b` and `a,b` select the same variant, RFC 9111 §4.1).
pub fn field_value(head: &RequestHead<'_>, name: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    for (n, v) in head.fields() {
        if !n.eq_ignore_ascii_case(name) {
            continue;
        }
        let o = out.get_or_insert_with(Vec::new);
        for member in v.split(|&b| b == b',') {
            let member = member.trim_ascii();
            if member.is_empty() {
                continue;
            }
            if !o.is_empty() {
                o.push(b',');
            }
            o.extend_from_slice(member);
        }
    }
    out
}

fn cookie<'a>(head: &'a RequestHead<'_>, name: &[u8]) -> Option<&'a [u8]> {
    head.fields()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"))
        .flat_map(|(_, v)| v.split(|&b| b == b';'))
        .find_map(|c| {
            let c = c.trim_ascii();
            let eq = c.iter().position(|&b| b == b'=')?;
            (c[..eq].trim_ascii() == name).then(|| c[eq + 1..].trim_ascii())
        })
}

/// The `Vary` field names of an answer's fields, lower case (`*` is never stored).
pub fn vary_names(fields: &[u8]) -> Vec<Box<[u8]>> {
    let mut names: Vec<Box<[u8]>> = Vec::new();
    for v in crate::policy::values(fields, b"vary") {
        for n in v.split(|&b| b == b',') {
            let n = n.trim_ascii().to_ascii_lowercase();
            if !n.is_empty() && !names.iter().any(|m| **m == *n) {
                names.push(n.into());
            }
        }
    }
    names
}

/// Whether a request selects the stored variant (RFC 9111 §4.1).
pub fn vary_matches(vary: &[crate::meta::VaryField], head: &RequestHead<'_>) -> bool {
    vary.iter()
        .all(|(name, stored)| field_value(head, name).as_deref() == stored.as_deref())
}

/// 128-bit FNV-1a of the key and the variant's values: stable across builds and machines,
/// so the disk tier's names survive an upgrade.
pub fn hash(key: &[u8], vary: &[crate::meta::VaryField]) -> u128 {
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u128::from(b);
            h = h.wrapping_mul(PRIME);
        }
    };
    eat(key);
    for (n, v) in vary {
        eat(&[0xff]);
        eat(n);
        match v {
            Some(v) => {
                eat(&[1]);
                eat(v);
            }
            None => eat(&[0]),
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramjet_http1::{parse_request_head, Limits, Parse};

    fn with<R>(raw: &str, f: impl FnOnce(&RequestHead<'_>) -> R) -> R {
        let Parse::Complete(h) = parse_request_head(raw.as_bytes(), &Limits::default()) else {
            panic!("{raw}")
        };
        f(&h)
    }

    #[test]
    fn keys() {
        let parts = [
            KeyPart::Scheme,
            KeyPart::Host,
            KeyPart::Path,
            KeyPart::Query,
        ];
        let k = with("GET /a/b?x=1 HTTP/1.1\r\nHost: Ex.COM\r\n\r\n", |h| {
            let mut k = Vec::new();
            build(&mut k, &parts, h, false);
            k
        });
        assert_eq!(k, b"http\0ex.com\0/a/b\0?x=1\0");
        let p = with("GET /a/b?x=1 HTTP/1.1\r\nHost: Ex.COM\r\n\r\n", |h| {
            prefix(&parts, h, false, "/a/")
        });
        assert!(k.starts_with(&p));
        let parts = [KeyPart::Path, KeyPart::Cookie("lang".into())];
        let k = with(
            "GET /a HTTP/1.1\r\nHost: x\r\nCookie: a=1; lang=de\r\n\r\n",
            |h| {
                let mut k = Vec::new();
                build(&mut k, &parts, h, false);
                k
            },
        );
        assert_eq!(k, b"/a\0de\0");
    }

    #[test]
    fn variants() {
        let names = vary_names(b"Vary: Accept-Encoding, X\r\nVary: x\r\n");
        assert_eq!(names.len(), 2);
        let stored = vec![
            (names[0].clone(), Some(b"gzip,br".to_vec().into())),
            (names[1].clone(), None),
        ];
        assert!(with(
            "GET / HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip,   br\r\n\r\n",
            |h| vary_matches(&stored, h)
        ));
        assert!(!with(
            "GET / HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n",
            |h| vary_matches(&stored, h)
        ));
        assert!(!with(
            "GET / HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip, br\r\nX: 1\r\n\r\n",
            |h| vary_matches(&stored, h)
        ));
        assert_ne!(hash(b"k", &stored), hash(b"k", &[]));
    }
}
