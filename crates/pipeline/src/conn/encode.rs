//! HTTP/1 response encoding: framing, the status line and fixed fields, a location's own
//! fields.

use super::*;

/// The tunnel of a 101 response (the body is left empty in its place).
pub(super) fn upgrade_of(response: &mut Response) -> Option<Box<dyn Tunnel>> {
    if response.status != 101 {
        return None;
    }
    match std::mem::replace(&mut response.body, Body::Empty) {
        Body::Upgrade(t) => Some(t),
        other => {
            response.body = other;
            None
        }
    }
}

/// How a response body is delimited on the wire (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// 1xx, 204, 304: no body, no length.
    None,
    Length(u64),
    /// A stream to an HTTP/1.1 client.
    Chunked,
    /// A stream to an HTTP/1.0 client: the body ends when the connection closes.
    Close,
}

#[inline]
pub(crate) fn framing(r: &Response, version: Version) -> Framing {
    if matches!(r.status, 204 | 304) || r.status < 200 {
        return Framing::None;
    }
    match r.body.length() {
        Some(n) => Framing::Length(n),
        None if version == Version::Http11 => Framing::Chunked,
        None => Framing::Close,
    }
}

/// 429 for a client over `limits.max_connections_per_client` (the connection closes).
pub(crate) fn too_many(config: &ramjet_config::Resolved) -> Response {
    let mut r = error_response(429).header("Retry-After", b"1");
    customise(&mut r, config.error_pages.as_deref());
    r
}

/// Encode a response into the outbox (head, then body unless HEAD/304/204); returns the
/// Unix time of its Date header and whether the connection stays open after it (not after
/// a close-delimited body).
pub(super) fn queue<C: Content>(
    w: &HttpWorker<C>,
    out: &mut Outbox,
    response: Response,
    head: &RequestHead<'_>,
    keep: bool,
    extra: Option<&ResponseHeaders>,
) -> (u64, bool) {
    let resp = out.begin();
    let framing = framing(&response, head.version);
    let keep = keep && framing != Framing::Close;
    let mut date = w.date.borrow_mut();
    let (date, unix_secs) = date.now();
    out.head(resp, |o| {
        encode_head(o, &response, date, head.version);
        if let Some(h) = extra {
            location_headers(o, &response, h, unix_secs);
        }
        end_head(o, head.version, keep, framing);
    });
    if head.method != Method::Head && framing != Framing::None {
        out.body(resp, response.body, framing == Framing::Chunked);
    }
    (unix_secs, keep)
}

/// Status line and fixed headers, then the response's own (RFC 9112 §6); `end_head` ends it.
pub(super) fn encode_head(out: &mut Vec<u8>, r: &Response, date: &[u8], version: Version) {
    if version == Version::Http11 {
        // A 1.0 client does not expect informational responses (RFC 9110 §15.2).
        if let Some(e) = &r.extras {
            out.extend_from_slice(&e.interim);
        }
    }
    if r.own_date {
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(itoa::Buffer::new().format(r.status).as_bytes());
        out.push(b' ');
        out.extend_from_slice(reason(r.status).as_bytes());
        out.extend_from_slice(b"\r\nServer: ramjet\r\n");
        out.extend_from_slice(&r.shared_headers);
        out.extend_from_slice(&r.headers);
        return;
    }
    // The statuses of the static fast path, written whole; the rest from the registry.
    let line: &[u8] = match r.status {
        200 => b"HTTP/1.1 200 OK\r\nServer: ramjet\r\nDate: ",
        206 => b"HTTP/1.1 206 Partial Content\r\nServer: ramjet\r\nDate: ",
        304 => b"HTTP/1.1 304 Not Modified\r\nServer: ramjet\r\nDate: ",
        404 => b"HTTP/1.1 404 Not Found\r\nServer: ramjet\r\nDate: ",
        _ => b"",
    };
    if line.is_empty() {
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(itoa::Buffer::new().format(r.status).as_bytes());
        out.push(b' ');
        out.extend_from_slice(reason(r.status).as_bytes());
        out.extend_from_slice(b"\r\nServer: ramjet\r\nDate: ");
    } else {
        out.extend_from_slice(line);
    }
    out.extend_from_slice(date);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&r.shared_headers);
    out.extend_from_slice(&r.headers);
}

/// Framing and connection fields, then the blank line that ends the head.
pub(super) fn end_head(out: &mut Vec<u8>, version: Version, keep: bool, framing: Framing) {
    match framing {
        Framing::Length(len) => {
            out.extend_from_slice(b"Content-Length: ");
            out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        Framing::None | Framing::Close => {}
    }
    if !keep {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if version == Version::Http10 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// A location's own header fields and cache lifetime (nginx `add_header` and `expires`),
/// for the statuses nginx adds them to; a response with its own `Cache-Control` keeps it.
/// Written straight into the head: no allocation.
pub(crate) fn location_headers(
    out: &mut Vec<u8>,
    r: &Response,
    h: &ResponseHeaders,
    unix_secs: u64,
) {
    if !matches!(
        r.status,
        200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308
    ) {
        return;
    }
    out.extend_from_slice(&h.block);
    let field =
        |name: &[u8]| field_of(&r.shared_headers, name).or_else(|| field_of(&r.headers, name));
    if field(b"cache-control").is_some() {
        return;
    }
    let Some(d) = h.lifetime(field(b"content-type")) else {
        return;
    };
    let secs = d.as_secs();
    if secs == 0 {
        out.extend_from_slice(b"Cache-Control: no-cache\r\n");
    } else {
        out.extend_from_slice(b"Cache-Control: max-age=");
        out.extend_from_slice(itoa::Buffer::new().format(secs).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix_secs + secs);
    use std::io::Write;
    let _ = write!(out, "Expires: {}\r\n", httpdate::HttpDate::from(at));
}

/// The value of field `name` (lower case) in a block of `Name: value\r\n` lines.
pub(super) fn field_of<'a>(block: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    block.split(|&b| b == b'\n').find_map(|line| {
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon]
            .eq_ignore_ascii_case(name)
            .then(|| line[colon + 1..].trim_ascii())
    })
}
