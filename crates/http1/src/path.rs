//! Request path normalisation: percent-decode once, resolve dot segments, refuse what would
//! change meaning (RFC 3986 §5.2.4, §6.2.2). The result is what routing and file lookup use.

use std::borrow::Cow;

/// Why a path was refused (all 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// `%00` or a raw NUL.
    Nul,
    /// `%2F`: an encoded slash would create a path separator the client did not write.
    EncodedSlash,
    /// Bad `%` escape.
    BadEscape,
    /// `..` above the root.
    AboveRoot,
    /// Not origin-form (does not start with `/`).
    NotAbsolute,
}

/// A normalised path plus the raw query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanPath<'a> {
    /// Decoded, starts with `/`, no `.`/`..` segments, no `//`. A trailing `/` is kept.
    pub path: Cow<'a, [u8]>,
    /// The query without `?`, undecoded.
    pub query: Option<&'a str>,
    /// The path part as received (still percent-encoded), for redirects.
    pub raw_path: &'a str,
}

/// `base` followed by the decoded path `rest` percent-encoded again and the query: the
/// target of a location whose prefix is replaced (a proxy's `proxy_path`, a redirect).
/// One slash where `base` ends and `rest` starts with one.
pub fn rebase(base: &str, rest: &[u8], query: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(base.len() + rest.len() + 16);
    out.extend_from_slice(base.as_bytes());
    if out.ends_with(b"/") && rest.first() == Some(&b'/') {
        out.pop();
    }
    encode(rest, &mut out);
    if let Some(q) = query {
        out.push(b'?');
        out.extend_from_slice(q.as_bytes());
    }
    out
}

/// Append a decoded path to `out` percent-encoded again for a target or a `Location`:
/// unreserved characters, sub-delimiters, `:`, `@` and `/` stay (RFC 3986 §3.3), every
/// other byte becomes `%XX`.
pub fn encode(path: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in path {
        if b.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// Normalise `target` (origin-form path and query). An empty path (from "http://h?q") is "/".
pub fn normalize(target: &str) -> Result<CleanPath<'_>, PathError> {
    let (raw_path, query) = match target.find('?') {
        Some(q) => (&target[..q], Some(&target[q + 1..])),
        None => (target, None),
    };
    // A fragment never belongs in a request target; drop it like a browser would.
    let raw_path = raw_path.split('#').next().unwrap_or("");
    let raw_path = if raw_path.is_empty() { "/" } else { raw_path };
    if !raw_path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    let bytes = raw_path.as_bytes();
    let segments = bytes[1..].split(|&b| b == b'/').count();
    let needs_work = bytes.iter().any(|&b| b == b'%' || b == 0)
        || bytes[1..]
            .split(|&b| b == b'/')
            .enumerate()
            .any(|(i, seg)| seg == b"." || seg == b".." || (seg.is_empty() && i + 1 < segments));
    if !needs_work {
        return Ok(CleanPath {
            path: Cow::Borrowed(bytes),
            query,
            raw_path,
        });
    }
    let decoded = decode(bytes)?;
    Ok(CleanPath {
        path: Cow::Owned(remove_dots(&decoded)?),
        query,
        raw_path,
    })
}

fn decode(bytes: &[u8]) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == 0 {
            return Err(PathError::Nul);
        }
        if b != b'%' {
            out.push(b);
            i += 1;
            continue;
        }
        let hex = |c: u8| (c as char).to_digit(16);
        let (Some(h), Some(l)) = (
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) else {
            return Err(PathError::BadEscape);
        };
        let v = (h * 16 + l) as u8;
        match v {
            0 => return Err(PathError::Nul),
            b'/' => return Err(PathError::EncodedSlash),
            _ => out.push(v),
        }
        i += 3;
    }
    Ok(out)
}

/// Collapse `//`, drop `.`, resolve `..`; refuse to climb above `/`.
fn remove_dots(path: &[u8]) -> Result<Vec<u8>, PathError> {
    let mut segments: Vec<&[u8]> = Vec::new();
    let trailing = path.ends_with(b"/") || path.ends_with(b"/.") || path.ends_with(b"/..");
    for seg in path.split(|&b| b == b'/') {
        match seg {
            b"" | b"." => {}
            b".." => {
                if segments.pop().is_none() {
                    return Err(PathError::AboveRoot);
                }
            }
            s => segments.push(s),
        }
    }
    let mut out = Vec::with_capacity(path.len());
    for s in &segments {
        out.push(b'/');
        out.extend_from_slice(s);
    }
    if out.is_empty() || trailing {
        out.push(b'/');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(t: &str) -> Result<Vec<u8>, PathError> {
        normalize(t).map(|c| c.path.into_owned())
    }

    #[test]
    fn plain_paths_borrow() {
        let c = normalize("/a/b.txt?x=1").unwrap();
        assert!(matches!(c.path, Cow::Borrowed(b"/a/b.txt")));
        assert_eq!(c.query, Some("x=1"));
        assert_eq!(n("?q").unwrap(), b"/");
        assert!(matches!(
            normalize("/dir/").unwrap().path,
            Cow::Borrowed(b"/dir/")
        ));
        assert_eq!(n("//a").unwrap(), b"/a");
    }

    #[test]
    fn decoding_and_dots() {
        assert_eq!(n("/a%20b").unwrap(), b"/a b");
        assert_eq!(n("/a/./b/../c").unwrap(), b"/a/c");
        assert_eq!(n("/a//b///c/").unwrap(), b"/a/b/c/");
        assert_eq!(n("/a/b/..").unwrap(), b"/a/");
        assert_eq!(n("/a/%2e%2E/b").unwrap(), b"/b");
        assert_eq!(n("/%252e%252e/x").unwrap(), b"/%2e%2e/x");
        assert_eq!(n("/caf%C3%A9").unwrap(), "/café".as_bytes());
    }

    #[test]
    fn refusals() {
        assert_eq!(n("/.."), Err(PathError::AboveRoot));
        assert_eq!(n("/../etc/passwd"), Err(PathError::AboveRoot));
        assert_eq!(n("/a/../../etc"), Err(PathError::AboveRoot));
        assert_eq!(n("/%2e%2e/etc/passwd"), Err(PathError::AboveRoot));
        assert_eq!(n("/..%2fetc"), Err(PathError::EncodedSlash));
        assert_eq!(n("/a%2Fb"), Err(PathError::EncodedSlash));
        assert_eq!(n("/a%00.txt"), Err(PathError::Nul));
        assert_eq!(n("/a%zz"), Err(PathError::BadEscape));
        assert_eq!(n("/a%4"), Err(PathError::BadEscape));
        assert_eq!(n("a/b"), Err(PathError::NotAbsolute));
    }

    proptest::proptest! {
        #[test]
        fn output_is_clean(t in "/[a-z./%0-9A-F]{0,30}") {
            if let Ok(c) = normalize(&t) {
                let p = c.path;
                proptest::prop_assert!(p.starts_with(b"/"));
                proptest::prop_assert!(!p.windows(2).any(|w| w == b"//"));
                for seg in p.split(|&b| b == b'/') {
                    proptest::prop_assert!(seg != b"." && seg != b"..");
                }
                proptest::prop_assert!(!p.contains(&0));
            }
        }
    }
}
