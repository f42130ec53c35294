//! The PROXY protocol header (HAProxy's spec, versions 1 and 2) that a load balancer in
//! front of ramjet (HAProxy, LVS, a cloud balancer) sends before the first request, so the
//! real client address reaches the logs and `X-Forwarded-For`. Sans-I/O like the rest of
//! the codec: feed it the first bytes of a connection.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A v1 header is at most this long, CRLF included (the spec's 107).
const V1_MAX: usize = 107;
/// The v2 signature.
const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// Largest v2 address block accepted (addresses plus TLVs).
const V2_MAX_BODY: usize = 4096;

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyHeader {
    /// The original client and the address it connected to; `None` for `UNKNOWN` (v1),
    /// `LOCAL` (v2, a health check by the balancer itself) or a family other than TCP over
    /// IPv4/IPv6: the connection's own addresses stand.
    pub addresses: Option<(SocketAddr, SocketAddr)>,
    /// Bytes the header took; the HTTP request starts after them.
    pub len: usize,
}

/// Result of one parse attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyParse {
    Complete(ProxyHeader),
    Partial,
    Invalid,
}

/// Parse a PROXY header (v1 or v2) at the start of `buf`.
pub fn parse_proxy_header(buf: &[u8]) -> ProxyParse {
    if buf.is_empty() {
        return ProxyParse::Partial;
    }
    let sig = &V2_SIGNATURE[..buf.len().min(V2_SIGNATURE.len())];
    if buf.starts_with(sig) {
        return if buf.len() < V2_SIGNATURE.len() {
            ProxyParse::Partial
        } else {
            v2(buf)
        };
    }
    let v1_sig = &b"PROXY "[..buf.len().min(6)];
    if buf.starts_with(v1_sig) {
        return v1(buf);
    }
    ProxyParse::Invalid
}

fn v1(buf: &[u8]) -> ProxyParse {
    let Some(end) = buf[..buf.len().min(V1_MAX)]
        .windows(2)
        .position(|w| w == b"\r\n")
    else {
        return if buf.len() >= V1_MAX {
            ProxyParse::Invalid
        } else {
            ProxyParse::Partial
        };
    };
    let len = end + 2;
    let Ok(line) = std::str::from_utf8(&buf[6..end]) else {
        return ProxyParse::Invalid;
    };
    let parts: Vec<&str> = line.split(' ').collect();
    let addresses = match parts.as_slice() {
        ["UNKNOWN", ..] => None,
        [family @ ("TCP4" | "TCP6"), src, dst, sport, dport] => {
            let (Ok(src), Ok(dst)) = (src.parse::<IpAddr>(), dst.parse::<IpAddr>()) else {
                return ProxyParse::Invalid;
            };
            let v4 = *family == "TCP4";
            if src.is_ipv4() != v4 || dst.is_ipv4() != v4 {
                return ProxyParse::Invalid;
            }
            let (Some(sport), Some(dport)) = (port(sport), port(dport)) else {
                return ProxyParse::Invalid;
            };
            Some((SocketAddr::new(src, sport), SocketAddr::new(dst, dport)))
        }
        _ => return ProxyParse::Invalid,
    };
    ProxyParse::Complete(ProxyHeader { addresses, len })
}

/// A port as v1 writes it: decimal, no sign, no leading zero.
fn port(s: &str) -> Option<u16> {
    if s.is_empty() || s.len() > 5 || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn v2(buf: &[u8]) -> ProxyParse {
    if buf.len() < 16 {
        return ProxyParse::Partial;
    }
    let (ver_cmd, family) = (buf[12], buf[13]);
    let body_len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if ver_cmd >> 4 != 2 || body_len > V2_MAX_BODY {
        return ProxyParse::Invalid;
    }
    let local = match ver_cmd & 0x0f {
        0 => true,
        1 => false,
        _ => return ProxyParse::Invalid,
    };
    if buf.len() < 16 + body_len {
        return ProxyParse::Partial;
    }
    let body = &buf[16..16 + body_len];
    let len = 16 + body_len;
    let addresses = match family {
        _ if local => None,
        // TCP over IPv4.
        0x11 => {
            if body.len() < 12 {
                return ProxyParse::Invalid;
            }
            let ip = |at: usize| {
                IpAddr::V4(Ipv4Addr::new(
                    body[at],
                    body[at + 1],
                    body[at + 2],
                    body[at + 3],
                ))
            };
            let p = |at: usize| u16::from_be_bytes([body[at], body[at + 1]]);
            Some((SocketAddr::new(ip(0), p(8)), SocketAddr::new(ip(4), p(10))))
        }
        // TCP over IPv6.
        0x21 => {
            if body.len() < 36 {
                return ProxyParse::Invalid;
            }
            let ip = |at: usize| {
                let mut o = [0u8; 16];
                o.copy_from_slice(&body[at..at + 16]);
                IpAddr::V6(Ipv6Addr::from(o))
            };
            let p = |at: usize| u16::from_be_bytes([body[at], body[at + 1]]);
            Some((
                SocketAddr::new(ip(0), p(32)),
                SocketAddr::new(ip(16), p(34)),
            ))
        }
        // UNSPEC, UDP, UNIX: keep the connection's addresses.
        _ => None,
    };
    ProxyParse::Complete(ProxyHeader { addresses, len })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(buf: &[u8]) -> ProxyHeader {
        match parse_proxy_header(buf) {
            ProxyParse::Complete(h) => h,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn v1_headers() {
        let h = complete(b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET / HTTP/1.1\r\n");
        assert_eq!(h.len, 45);
        assert_eq!(
            h.addresses,
            Some((
                "192.0.2.1:56324".parse().unwrap(),
                "198.51.100.2:443".parse().unwrap()
            ))
        );
        let h = complete(b"PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n");
        assert_eq!(h.addresses.unwrap().0, "[2001:db8::1]:1".parse().unwrap());
        assert_eq!(complete(b"PROXY UNKNOWN\r\n").addresses, None);
        assert_eq!(complete(b"PROXY UNKNOWN ff 1 2 3\r\n").addresses, None);
        for partial in [&b"P"[..], b"PROXY", b"PROXY TCP4 1.2.3.4"] {
            assert_eq!(parse_proxy_header(partial), ProxyParse::Partial);
        }
        for bad in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
            b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 65536\r\n",
            b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",
        ] {
            assert_eq!(
                parse_proxy_header(bad),
                ProxyParse::Invalid,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = [b"PROXY ".as_slice(), &[b'x'; 200]].concat();
        assert_eq!(parse_proxy_header(&long), ProxyParse::Invalid);
    }

    #[test]
    fn v2_headers() {
        let mut b = V2_SIGNATURE.to_vec();
        b.extend_from_slice(&[
            0x21, 0x11, 0, 12, 192, 0, 2, 1, 198, 51, 100, 2, 0xdc, 0x04, 0x01, 0xbb,
        ]);
        b.extend_from_slice(b"GET /");
        let h = complete(&b);
        assert_eq!(h.len, 28);
        assert_eq!(
            h.addresses,
            Some((
                "192.0.2.1:56324".parse().unwrap(),
                "198.51.100.2:443".parse().unwrap()
            ))
        );
        for cut in 1..28 {
            assert_eq!(
                parse_proxy_header(&b[..cut]),
                ProxyParse::Partial,
                "cut at {cut}"
            );
        }
        // LOCAL: the balancer's own health check.
        let mut l = V2_SIGNATURE.to_vec();
        l.extend_from_slice(&[0x20, 0x00, 0, 0]);
        assert_eq!(complete(&l).addresses, None);
        // IPv6 with a TLV after the addresses.
        let mut v6 = V2_SIGNATURE.to_vec();
        v6.extend_from_slice(&[0x21, 0x21, 0, 36 + 4]);
        let mut src = [0u8; 16];
        src[15] = 1;
        v6.extend_from_slice(&src);
        v6.extend_from_slice(&[0u8; 16]);
        v6.extend_from_slice(&[0, 80, 1, 187, 0x04, 0, 1, 0]);
        let h = complete(&v6);
        assert_eq!(h.addresses.unwrap().0, "[::1]:80".parse().unwrap());
        // Version 1 in the v2 format, a bad command, a truncated address block.
        let mut bad = V2_SIGNATURE.to_vec();
        bad.extend_from_slice(&[0x11, 0x11, 0, 0]);
        assert_eq!(parse_proxy_header(&bad), ProxyParse::Invalid);
        let mut bad = V2_SIGNATURE.to_vec();
        bad.extend_from_slice(&[0x22, 0x11, 0, 0]);
        assert_eq!(parse_proxy_header(&bad), ProxyParse::Invalid);
        let mut bad = V2_SIGNATURE.to_vec();
        bad.extend_from_slice(&[0x21, 0x11, 0, 4, 1, 2, 3, 4]);
        assert_eq!(parse_proxy_header(&bad), ProxyParse::Invalid);
    }
}
