//! The first bytes on a TLS port: a TLS record, or a plaintext HTTP request sent to the
//! wrong port (nginx answers that one "400 The plain HTTP request was sent to HTTPS port").

/// What a connection's first bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum First {
    /// Too few bytes to tell.
    NeedMore,
    /// A TLS handshake record (content type 22, version 3.x).
    Tls,
    /// An HTTP request line: a method token followed by a space.
    PlainHttp,
    /// Neither: handed to TLS, which refuses it with an alert.
    Other,
}

/// Longest method token looked at (`OPTIONS`, `CONNECT`, WebDAV's `PROPFIND`).
const LONGEST_METHOD: usize = 16;

/// Classify `bytes`, the start of what the client sent.
pub fn sniff(bytes: &[u8]) -> First {
    let Some(&first) = bytes.first() else {
        return First::NeedMore;
    };
    if first == 0x16 {
        return match bytes.get(1) {
            None => First::NeedMore,
            Some(3) => First::Tls,
            Some(_) => First::Other,
        };
    }
    if !first.is_ascii_uppercase() {
        return First::Other;
    }
    for (i, &b) in bytes.iter().enumerate().take(LONGEST_METHOD + 1) {
        if b == b' ' && i > 0 {
            return First::PlainHttp;
        }
        if !(b.is_ascii_uppercase() || b == b'-' || b == b'_') {
            return First::Other;
        }
    }
    if bytes.len() > LONGEST_METHOD {
        First::Other
    } else {
        First::NeedMore
    }
}

/// Where the first TLS record of `bytes` ends (its 5-byte header read), once the header is
/// there: the first flight of a client (its ClientHello) is complete when that many bytes
/// have arrived.
pub fn first_record_end(bytes: &[u8]) -> Option<usize> {
    let h = bytes.get(..5)?;
    Some(5 + usize::from(u16::from_be_bytes([h[3], h[4]])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_tls_from_plain_http() {
        assert_eq!(sniff(b""), First::NeedMore);
        assert_eq!(sniff(&[0x16]), First::NeedMore);
        assert_eq!(sniff(&[0x16, 3, 1, 0, 200]), First::Tls);
        assert_eq!(sniff(&[0x16, 2]), First::Other);
        assert_eq!(sniff(b"GET / HTTP/1.1\r\n"), First::PlainHttp);
        assert_eq!(sniff(b"PROPFIND /x"), First::PlainHttp);
        assert_eq!(sniff(b"GE"), First::NeedMore);
        assert_eq!(sniff(b" GET"), First::Other);
        assert_eq!(sniff(b"get / HTTP/1.1"), First::Other);
        assert_eq!(sniff(b"\x00\x01"), First::Other);
        assert_eq!(sniff(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"), First::Other);
        assert_eq!(sniff(b"ABCDEFGHIJKLMNOP"), First::NeedMore);
    }

    #[test]
    fn finds_where_the_first_record_ends() {
        assert_eq!(first_record_end(&[0x16, 3, 1, 0]), None);
        assert_eq!(first_record_end(&[0x16, 3, 1, 0, 0]), Some(5));
        assert_eq!(first_record_end(&[0x16, 3, 1, 1, 2, 9]), Some(5 + 258));
        assert_eq!(
            first_record_end(&[0x16, 3, 1, 0xff, 0xff]),
            Some(5 + 65_535)
        );
    }
}
