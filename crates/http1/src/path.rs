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
    let (raw_path, query, work) = split(target);
    if !raw_path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    let bytes = raw_path.as_bytes();
    if !work {
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

/// Split a target into its path, up to the first `?` or `#` (an empty one is `/`), and its
/// query, after the first `?` (a fragment after it stays in it: the query is passed on as
/// received). Also tell whether the path must be decoded or cleaned: it holds `%` or NUL, a
/// `.` or `..` segment, or an empty segment before the last (`//`). One pass over the path,
/// plain compares rather than memchr (a path is short, and memchr's setup cost more than
/// the scan): every request's target comes through here.
fn split(target: &str) -> (&str, Option<&str>, bool) {
    let bytes = target.as_bytes();
    let mut end = bytes.len();
    let mut work = false;
    // Where the segment being read starts (after the first `/`).
    let mut segment = 1;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'?' | b'#' => {
                end = i;
                break;
            }
            b'%' | 0 => work = true,
            b'/' if i > 0 => {
                work |= matches!(&bytes[segment..i], b"" | b"." | b"..");
                segment = i + 1;
            }
            _ => {}
        }
    }
    if end == 0 {
        // Nothing before the query or fragment: the root, with nothing to clean.
        return ("/", query_after(target, 0), false);
    }
    work |= matches!(&bytes[segment.min(end)..end], b"." | b"..");
    (&target[..end], query_after(target, end), work)
}

/// The query of a target whose path ends at `end`: after the first `?` from there (a path
/// ended by a fragment may still have one after it).
fn query_after(target: &str, end: usize) -> Option<&str> {
    match target.as_bytes().get(end) {
        None => None,
        Some(b'?') => Some(&target[end + 1..]),
        Some(_) => target[end..].find('?').map(|q| &target[end + q + 1..]),
    }
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

    /// The split and check as they were written before the one-pass [`split`]: the
    /// reference. Three passes: the query, the fragment, then the path's segments.
    fn split_in_three_passes(target: &str) -> (&str, Option<&str>, bool) {
        let (raw_path, query) = match target.find('?') {
            Some(q) => (&target[..q], Some(&target[q + 1..])),
            None => (target, None),
        };
        let raw_path = match raw_path.find('#') {
            Some(h) => &raw_path[..h],
            None => raw_path,
        };
        let raw_path = if raw_path.is_empty() { "/" } else { raw_path };
        let bytes = raw_path.as_bytes();
        let segments = bytes[1..].split(|&b| b == b'/').count();
        let work = bytes.iter().any(|&b| b == b'%' || b == 0)
            || bytes[1..]
                .split(|&b| b == b'/')
                .enumerate()
                .any(|(i, seg)| {
                    seg == b"." || seg == b".." || (seg.is_empty() && i + 1 < segments)
                });
        (raw_path, query, work)
    }

    #[test]
    fn the_one_pass_split_agrees_with_three_passes_on_every_short_target() {
        // Every target of up to 6 bytes after a `/`, and of up to 5 from nothing, from an
        // alphabet of the bytes that matter, and some longer ones.
        let alphabet = [b'a', b'.', b'/', b'%', 0, b'?', b'#'];
        let mut targets: Vec<Vec<u8>> = Vec::new();
        for (first, depth) in [(b"/".to_vec(), 6), (Vec::new(), 5)] {
            let mut frontier = vec![first];
            targets.extend(frontier.iter().cloned());
            for _ in 0..depth {
                let mut next = Vec::new();
                for p in &frontier {
                    for &c in &alphabet {
                        let mut q = p.clone();
                        q.push(c);
                        next.push(q);
                    }
                }
                targets.extend(next.iter().cloned());
                frontier = next;
            }
        }
        for long in [
            "/a/b/c/d.txt",
            "/a/b/../c",
            "/dir/",
            "/x/.",
            "/x/..",
            "/x/...",
            "/.a/..b/",
            "/x/..?q=/..",
            "/x/.#f?q",
            "/a?b#c?d",
        ] {
            targets.push(long.as_bytes().to_vec());
        }
        for t in &targets {
            let t = std::str::from_utf8(t).unwrap();
            let (path, query, work) = split(t);
            if !path.starts_with('/') {
                // Refused as not absolute whatever the rest says.
                assert_eq!(path, split_in_three_passes(t).0, "{t:?}");
                continue;
            }
            assert_eq!((path, query, work), split_in_three_passes(t), "{t:?}");
        }
    }

    #[test]
    fn a_fragment_ends_the_path_and_the_query_is_after_the_first_question_mark() {
        let c = normalize("/a#frag?q=1").unwrap();
        assert_eq!(&*c.path, b"/a");
        assert_eq!(c.query, Some("q=1"));
        let c = normalize("/a?q=1#frag").unwrap();
        assert_eq!(&*c.path, b"/a");
        assert_eq!(c.query, Some("q=1#frag"));
        assert_eq!(n("#x").unwrap(), b"/");
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
