//! The upstream's response head (public for the fuzz target), checked before anything reaches the client: a valid
//! status line, field values without control bytes, and one unambiguous framing (RFC 9112
//! §6.3). Both `Transfer-Encoding` and `Content-Length`, differing lengths, a coding other
//! than chunked, or a malformed length are refused (502), as nginx does: passing them on
//! would let a backend split or join responses on the client's connection. The fields
//! passed on exclude hop-by-hop ones, framing (the pipeline writes its own) and
//! `Server`/`Date` (the pipeline writes its own, as nginx does by default).

use ramjet_http1::BodyFraming;

/// Most fields read from an upstream response.
const MAX_FIELDS: usize = 100;

/// How the upstream delimits this response's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (HEAD, 1xx, 204, 304), or a zero length.
    None,
    Length(u64),
    Chunked,
    /// Until the upstream closes.
    Close,
}

impl Framing {
    pub fn decoder(self) -> BodyFraming {
        match self {
            Framing::None | Framing::Close => BodyFraming::None,
            Framing::Length(n) => BodyFraming::Length(n),
            Framing::Chunked => BodyFraming::Chunked,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamHead {
    pub status: u16,
    pub head_len: usize,
    pub framing: Framing,
    /// The upstream keeps the connection open after this response.
    pub keep_alive: bool,
    /// `Content-Length` as sent (to pass on for HEAD, where there is no body to measure).
    pub declared_length: Option<u64>,
    /// `Transfer-Encoding: chunked` as sent (for HEAD: the body would be chunked).
    pub declared_chunked: bool,
    /// Field lines to pass on (`Name: value\r\n` each).
    pub fields: Vec<u8>,
    /// The `Date` value (not passed on; a cache reads it), up to 40 bytes.
    pub date: Option<([u8; 40], u8)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Complete(UpstreamHead),
    Partial,
    Invalid(&'static str),
}

/// Fields the proxy never passes to the client as they are.
fn dropped(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 10] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"content-length",
        b"trailer",
        b"te",
        b"upgrade",
        b"server",
        b"date",
    ];
    NAMES.iter().any(|n| name.eq_ignore_ascii_case(n))
}

/// Parse one response head from `buf`. `to_head`: the request was HEAD. `upgrade`: the
/// request asked to switch protocols, so a 101 is acceptable (and keeps `Upgrade`).
pub fn parse(buf: &[u8], to_head: bool, upgrade: bool) -> Parsed {
    // Uninitialised slots: initialising them all costs more than parsing a small head.
    let mut fields =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut resp = httparse::Response::new(&mut []);
    let head_len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut resp,
        buf,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => return Parsed::Invalid("too many header fields"),
        Err(_) => return Parsed::Invalid("not an HTTP/1.x response head"),
    };
    let (Some(status), Some(minor)) = (resp.code, resp.version) else {
        return Parsed::Invalid("not an HTTP/1.x response head");
    };
    if !(100..=599).contains(&status) {
        return Parsed::Invalid("status code out of range");
    }
    if status == 101 && !upgrade {
        return Parsed::Invalid("101 Switching Protocols to a request that did not ask");
    }
    let mut length: Option<u64> = None;
    let mut te: Option<&[u8]> = None;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut listed: Vec<&[u8]> = Vec::new();
    for f in resp.headers.iter() {
        // httparse accepts obs-text; control bytes other than HTAB are refused here, so
        // nothing can end a line early on the client's side (header injection).
        if f.value
            .iter()
            .any(|&b| (b < b' ' && b != b'\t') || b == 0x7f)
        {
            return Parsed::Invalid("control character in a header value");
        }
        let name = f.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let v = f.value.trim_ascii();
            if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
                return Parsed::Invalid("malformed Content-Length");
            }
            let n = v.iter().fold(0u64, |a, &d| a * 10 + u64::from(d - b'0'));
            if length.is_some_and(|l| l != n) {
                return Parsed::Invalid("conflicting Content-Length values");
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            if te.is_some() {
                return Parsed::Invalid("Transfer-Encoding sent twice");
            }
            te = Some(f.value);
        } else if name.eq_ignore_ascii_case(b"connection") {
            for t in f.value.split(|&b| b == b',').map(|t| t.trim_ascii()) {
                close |= t.eq_ignore_ascii_case(b"close");
                keep_alive_token |= t.eq_ignore_ascii_case(b"keep-alive");
                if !t.is_empty() {
                    listed.push(t);
                }
            }
        }
    }
    let bodiless = to_head || status == 204 || status == 304 || status < 200;
    if te.is_some() && length.is_some() {
        return Parsed::Invalid("both Transfer-Encoding and Content-Length");
    }
    if let Some(v) = te {
        if !v.trim_ascii().eq_ignore_ascii_case(b"chunked") {
            return Parsed::Invalid("a Transfer-Encoding other than chunked");
        }
    }
    let framing = if bodiless {
        Framing::None
    } else if te.is_some() {
        Framing::Chunked
    } else {
        match length {
            Some(0) => Framing::None,
            Some(n) => Framing::Length(n),
            None => Framing::Close,
        }
    };
    let keep_alive = framing != Framing::Close
        && status != 101
        && if minor == 1 {
            !close
        } else {
            keep_alive_token && !close
        };
    let mut out = Vec::with_capacity(head_len);
    let mut date = None;
    for f in resp.headers.iter() {
        let name = f.name.as_bytes();
        let pass_upgrade = status == 101 && name.eq_ignore_ascii_case(b"upgrade");
        if !pass_upgrade && (dropped(name) || listed.iter().any(|t| name.eq_ignore_ascii_case(t))) {
            // Date is one of the dropped fields: looked for among them only.
            if f.value.len() <= 40 && name.eq_ignore_ascii_case(b"date") {
                let mut d = [0u8; 40];
                d[..f.value.len()].copy_from_slice(f.value);
                date = Some((d, f.value.len() as u8));
            }
            continue;
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(f.value);
        out.extend_from_slice(b"\r\n");
    }
    if status == 101 {
        out.extend_from_slice(b"Connection: upgrade\r\n");
    }
    Parsed::Complete(UpstreamHead {
        status,
        head_len,
        framing,
        keep_alive,
        declared_length: length,
        declared_chunked: te.is_some(),
        fields: out,
        date,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(buf: &[u8]) -> UpstreamHead {
        match parse(buf, false, false) {
            Parsed::Complete(h) => h,
            other => panic!("{other:?} for {}", String::from_utf8_lossy(buf)),
        }
    }

    fn bad(buf: &[u8]) -> &'static str {
        match parse(buf, false, false) {
            Parsed::Invalid(why) => why,
            other => panic!("accepted {other:?}"),
        }
    }

    #[test]
    fn framings() {
        let h = ok(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer: gunicorn\r\nX-A: b\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Length(5), true));
        assert_eq!(h.fields, b"X-A: b\r\n");
        let h = ok(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(h.framing, Framing::Chunked);
        let h = ok(b"HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Close, false));
        let h = ok(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n");
        assert!(!h.keep_alive, "1.0 without keep-alive closes");
        let h = ok(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\n");
        assert!(h.keep_alive);
        let h = ok(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n");
        assert_eq!(h.framing, Framing::None);
        let Parsed::Complete(h) =
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true, false)
        else {
            panic!()
        };
        assert_eq!((h.framing, h.declared_length), (Framing::None, Some(9)));
        let h = ok(
            b"HTTP/1.1 200 OK\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\nContent-Length: 0\r\n\r\n",
        );
        assert!(!h.keep_alive);
        assert!(
            h.fields.is_empty(),
            "{}",
            String::from_utf8_lossy(&h.fields)
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nX", false, false),
            Parsed::Partial
        );
    }

    #[test]
    fn smuggling_and_injection_are_refused() {
        bad(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n");
        bad(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n");
        bad(b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n");
        bad(b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5x\r\n\r\n");
        bad(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n");
        bad(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n");
        bad(b"HTTP/1.1 200 OK\r\nX-A: a\rSet-Cookie: evil\r\n\r\n");
        bad(b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n");
        bad(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n");
        bad(b"HTTP/1.1 700 Odd\r\n\r\n");
        bad(b"HTTP/2 200 OK\r\n\r\n");
        bad(b"garbage\r\n\r\n");
        // The same Content-Length twice is one length (RFC 9110 §8.6).
        assert_eq!(
            ok(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n").framing,
            Framing::Length(5)
        );
    }

    #[test]
    fn upgrades_keep_their_fields() {
        let Parsed::Complete(h) = parse(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n",
            false,
            true,
        ) else {
            panic!()
        };
        let f = String::from_utf8(h.fields).unwrap();
        assert!(
            f.contains("Upgrade: websocket\r\n") && f.contains("Connection: upgrade\r\n"),
            "{f}"
        );
        assert!(f.contains("Sec-WebSocket-Accept: x\r\n"));
        assert!(!h.keep_alive);
    }
}
