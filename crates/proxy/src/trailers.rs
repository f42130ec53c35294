//! Trailer fields from an upstream's chunked body, checked before they are passed on to
//! the client's chunked response (RFC 9110 §6.5): lines that are not `name: value` with a
//! token name and no control bytes are dropped, and so are the fields a trailer must not
//! carry (framing, routing, connection management, content coding: §6.5.1).

use bytes::Bytes;

fn forbidden(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 17] = [
        b"content-length",
        b"transfer-encoding",
        b"host",
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"upgrade",
        b"content-encoding",
        b"content-type",
        b"content-range",
        b"cache-control",
        b"expect",
        b"range",
        b"set-cookie",
        b"authorization",
    ];
    NAMES.iter().any(|n| name.eq_ignore_ascii_case(n))
}

fn is_token(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The field lines of `raw` that may be passed on; `None` when none is left.
pub(crate) fn filter(raw: &[u8]) -> Option<Bytes> {
    let mut out = Vec::with_capacity(raw.len());
    for line in raw.split_inclusive(|&b| b == b'\n') {
        let Some(line) = line.strip_suffix(b"\r\n") else {
            continue;
        };
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if !is_token(name)
            || forbidden(name)
            || value.iter().any(|&b| (b < b' ' && b != b'\t') || b == 0x7f)
        {
            continue;
        }
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    (!out.is_empty()).then(|| Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_well_formed_fields_pass() {
        let raw = b"X-Checksum: abc\r\nContent-Length: 5\r\nbad line\r\nX-Bad\x01: v\r\nX-Ctl: a\x00b\r\ngrpc-status: 0\r\n";
        assert_eq!(
            filter(raw).unwrap(),
            &b"X-Checksum: abc\r\ngrpc-status: 0\r\n"[..]
        );
        assert_eq!(filter(b"Transfer-Encoding: chunked\r\n"), None);
        assert_eq!(filter(b""), None);
    }
}
