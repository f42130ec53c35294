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

/// The fields the proxy never passes to the client as they are, and the ones it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dropped {
    ContentLength,
    TransferEncoding,
    Connection,
    Date,
    /// Hop-by-hop, or written by the pipeline itself.
    Other,
}

/// Which dropped field `name` is (`None`: passed on), matched by length first: a response
/// asks this of every field.
fn dropped(name: &[u8]) -> Option<Dropped> {
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    let d = match name.len() {
        2 if is(b"te") => Dropped::Other,
        4 if is(b"date") => Dropped::Date,
        6 if is(b"server") => Dropped::Other,
        7 if is(b"trailer") || is(b"upgrade") => Dropped::Other,
        10 if is(b"connection") => Dropped::Connection,
        10 if is(b"keep-alive") => Dropped::Other,
        14 if is(b"content-length") => Dropped::ContentLength,
        16 if is(b"proxy-connection") => Dropped::Other,
        17 if is(b"transfer-encoding") => Dropped::TransferEncoding,
        _ => return None,
    };
    Some(d)
}

fn push_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
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
    // Tokens `Connection` names that are not dropped anyway (rare: most name only
    // `close` or `keep-alive`).
    let mut listed: Vec<&[u8]> = Vec::new();
    let mut out = Vec::with_capacity(head_len);
    let mut date = None;
    // One pass: framing and the fields passed on (httparse refuses control bytes other than
    // HTAB in a value, obs-text allowed, so nothing can end a line early on the client's
    // side: no header injection; a test keeps that promise). A field named by `Connection`
    // may come after the field it names: then the fields are chosen again below.
    for f in resp.headers.iter() {
        let name = f.name.as_bytes();
        match dropped(name) {
            Some(Dropped::ContentLength) => {
                let v = f.value.trim_ascii();
                if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
                    return Parsed::Invalid("malformed Content-Length");
                }
                let n = v.iter().fold(0u64, |a, &d| a * 10 + u64::from(d - b'0'));
                if length.is_some_and(|l| l != n) {
                    return Parsed::Invalid("conflicting Content-Length values");
                }
                length = Some(n);
            }
            Some(Dropped::TransferEncoding) => {
                if te.is_some() {
                    return Parsed::Invalid("Transfer-Encoding sent twice");
                }
                te = Some(f.value);
            }
            Some(Dropped::Connection) => {
                for t in f.value.split(|&b| b == b',').map(|t| t.trim_ascii()) {
                    close |= t.eq_ignore_ascii_case(b"close");
                    keep_alive_token |= t.eq_ignore_ascii_case(b"keep-alive");
                    if !t.is_empty() && dropped(t).is_none() {
                        listed.push(t);
                    }
                }
            }
            // Date is not passed on; a cache reads it.
            Some(Dropped::Date) if f.value.len() <= 40 => {
                let mut d = [0u8; 40];
                d[..f.value.len()].copy_from_slice(f.value);
                date = Some((d, f.value.len() as u8));
            }
            Some(_) => {}
            None => push_field(&mut out, name, f.value),
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
    if !listed.is_empty() || status == 101 {
        // Without the fields `Connection` names; a 101 keeps `Upgrade`.
        out.clear();
        for f in resp.headers.iter() {
            let name = f.name.as_bytes();
            let pass_upgrade = status == 101 && name.eq_ignore_ascii_case(b"upgrade");
            if pass_upgrade
                || (dropped(name).is_none() && !listed.iter().any(|t| name.eq_ignore_ascii_case(t)))
            {
                push_field(&mut out, name, f.value);
            }
        }
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

    /// No check of ours looks for control bytes in values: httparse's refusal is what keeps
    /// a backend from ending a line early on the client's side. Short and long values (its
    /// vector paths take 8, 16 and 32 bytes at a time), at each place in them.
    #[test]
    fn every_control_byte_in_a_value_is_refused() {
        let controls = (0u8..0x20)
            .filter(|&b| b != b'\t' && b != b'\n')
            .chain([0x7f]);
        for c in controls {
            for len in [1, 9, 17, 33, 70] {
                for at in [0, len / 2, len - 1] {
                    let mut value = vec![b'v'; len];
                    value[at] = c;
                    let mut head = b"HTTP/1.1 200 OK\r\nX-A: ".to_vec();
                    head.extend_from_slice(&value);
                    head.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
                    assert!(
                        matches!(parse(&head, false, false), Parsed::Invalid(_)),
                        "byte {c:#x} at {at} of {len} was accepted"
                    );
                }
            }
        }
        // Tabs and obs-text pass, as sent.
        let h = ok(b"HTTP/1.1 200 OK\r\nX-A: a\tb\xe9\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(h.fields, b"X-A: a\tb\xe9\r\n");
    }

    /// A field `Connection` names is not passed on, wherever it stands; `Date` is kept for
    /// the cache, not passed on; the fields keep their order.
    #[test]
    fn named_and_own_fields_are_dropped_and_the_rest_kept_in_order() {
        for head in [
            &b"HTTP/1.1 200 OK\r\nX-Hop: 1\r\nA: 1\r\nConnection: x-hop, keep-alive\r\nDate: Tue, 01 Dec 2026 00:00:00 GMT\r\nB: 2\r\nContent-Length: 0\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nA: 1\r\nConnection: keep-alive, X-HOP\r\nDate: Tue, 01 Dec 2026 00:00:00 GMT\r\nB: 2\r\nx-hop: 1\r\nContent-Length: 0\r\n\r\n",
        ] {
            let h = ok(head);
            assert_eq!(h.fields, b"A: 1\r\nB: 2\r\n", "{}", String::from_utf8_lossy(&h.fields));
            let (d, n) = h.date.expect("the date");
            assert_eq!(&d[..usize::from(n)], b"Tue, 01 Dec 2026 00:00:00 GMT");
            assert!(h.keep_alive);
        }
        let h = ok(b"HTTP/1.1 200 OK\r\nServer: s\r\nKeep-Alive: timeout=5\r\nTrailer: x\r\nTE: t\r\nProxy-Connection: k\r\nContent-Length: 0\r\nC: 3\r\n\r\n");
        assert_eq!(h.fields, b"C: 3\r\n");
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
