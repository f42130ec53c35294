//! The `Authorization: Basic <base64(user:password)>` field, decoded into a stack buffer.

use base64::Engine;

/// Longest decoded `user:password` accepted (longer is refused, never truncated).
pub const MAX_DECODED: usize = 512;

/// A user name and password borrowed from a decoding buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct Credentials<'a> {
    pub user: &'a [u8],
    pub password: &'a [u8],
}

impl<'a> Credentials<'a> {
    /// Decode a field value into `buf`; `None` when it is not Basic credentials (another
    /// scheme, bad base64, no colon, or longer than the buffer).
    pub fn parse(value: &[u8], buf: &'a mut [u8; MAX_DECODED]) -> Option<Credentials<'a>> {
        let value = value.trim_ascii();
        let (scheme, rest) = value.split_at(value.iter().position(|&b| b == b' ')?);
        if !scheme.eq_ignore_ascii_case(b"basic") {
            return None;
        }
        let token = rest.trim_ascii();
        if token.len() > MAX_DECODED / 3 * 4 + 4 {
            return None;
        }
        let n = base64::engine::general_purpose::STANDARD
            .decode_slice(token, buf)
            .ok()?;
        let decoded = &buf[..n];
        let colon = decoded.iter().position(|&b| b == b':')?;
        Some(Credentials {
            user: &decoded[..colon],
            password: &decoded[colon + 1..],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_basic_credentials() {
        let mut buf = [0u8; MAX_DECODED];
        // RFC 7617 §2's example.
        let c = Credentials::parse(b"Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==", &mut buf).unwrap();
        assert_eq!(c.user, b"Aladdin");
        assert_eq!(c.password, b"open sesame");
        let mut buf = [0u8; MAX_DECODED];
        let c = Credentials::parse(b"  bAsIc   dTpwOnc6  ", &mut buf).unwrap();
        assert_eq!((c.user, c.password), (&b"u"[..], &b"p:w:"[..]));
    }

    #[test]
    fn refuses_what_is_not_basic() {
        for bad in [
            &b"Bearer abc"[..],
            b"Basic",
            b"Basic !!!!",
            b"Basic dXNlcg==", // "user": no colon
            b"",
        ] {
            let mut buf = [0u8; MAX_DECODED];
            assert!(Credentials::parse(bad, &mut buf).is_none(), "{bad:?}");
        }
        // Longer than the buffer holds: refused, not truncated.
        let long = format!("Basic {}", "QUFB".repeat(200));
        let mut buf = [0u8; MAX_DECODED];
        assert!(Credentials::parse(long.as_bytes(), &mut buf).is_none());
    }
}
