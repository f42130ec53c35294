//! Request head parsing (RFC 9112 §2–§3, §6, §9) on top of httparse.

use crate::body::BodyFraming;
use crate::error::ErrorKind;
use crate::limits::Limits;
use crate::method::Method;

/// Most header fields accepted in one request; more is 431 (nginx and Apache allow ~100).
pub const MAX_HEADERS: usize = 100;

/// HTTP versions this codec speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
    /// A request that came as an HTTP/2 stream (never parsed from a request line: the
    /// connection layer sets it on the head it builds from the stream's fields).
    Http2,
}

impl Version {
    /// As written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
            Version::Http2 => "HTTP/2.0",
        }
    }
}

/// A parsed request head. Every slice borrows the read buffer; nothing is allocated.
///
/// Only the fields the server acts on are kept; [`RequestHead::raw`] holds the whole head
/// for anything that needs to walk every field again (a proxy, a module).
#[derive(Debug, Clone)]
pub struct RequestHead<'b> {
    pub method: Method,
    /// The method token as sent (differs from `method.as_str()` for `Method::Other`).
    pub method_token: &'b str,
    /// The request target as sent (origin-, absolute-, authority- or asterisk-form).
    pub target: &'b str,
    /// Path and query: the target with any absolute-form scheme and authority removed.
    pub path: &'b str,
    pub version: Version,
    /// Host from the absolute-form target, else the Host field (RFC 9112 §3.2.2).
    pub host: Option<&'b [u8]>,
    /// Whether the client lets the connection persist after this request (RFC 9112 §9.3).
    pub keep_alive: bool,
    pub framing: BodyFraming,
    pub expect_continue: bool,
    pub range: Option<&'b [u8]>,
    pub if_range: Option<&'b [u8]>,
    pub if_match: Option<&'b [u8]>,
    pub if_none_match: Option<&'b [u8]>,
    pub if_modified_since: Option<&'b [u8]>,
    pub if_unmodified_since: Option<&'b [u8]>,
    pub accept: Option<&'b [u8]>,
    pub accept_encoding: Option<&'b [u8]>,
    pub referer: Option<&'b [u8]>,
    pub user_agent: Option<&'b [u8]>,
    /// The whole head, request line to the empty line inclusive.
    pub raw: &'b [u8],
}

impl RequestHead<'_> {
    /// Length of the head in bytes; the body (if any) starts here.
    pub fn head_len(&self) -> usize {
        self.raw.len()
    }

    /// The request line without CRLF, for logs.
    pub fn request_line(&self) -> &[u8] {
        let raw = skip_empty_lines(self.raw);
        let end = memchr::memchr(b'\n', raw).unwrap_or(raw.len());
        let line = &raw[..end];
        line.strip_suffix(b"\r").unwrap_or(line)
    }

    /// Every header field, `(name, value)` with the value trimmed, in order. The head was
    /// validated by the parser; this walks it again (a line at a time, by `memchr`), for
    /// what the parser does not pick out: a handler's own fields, the head the proxy
    /// forwards.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        // Past the empty lines before the request line, and the request line.
        let mut rest = self.raw;
        while !rest.is_empty() {
            let (line, after) = split_line(rest);
            rest = after;
            if !(line.is_empty() || line == b"\r") {
                break;
            }
        }
        Fields { rest }
    }

    /// The first field named `name` (case-insensitive).
    pub fn field(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }
}

/// Result of one parse attempt.
// Returned by value once per request and consumed at once; boxing the head would add an
// allocation per request on the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Parse<'b> {
    Complete(RequestHead<'b>),
    /// More bytes are needed; nothing is wrong yet.
    Partial,
    Invalid(ErrorKind),
}

/// Parse one request head from the start of `buf`.
///
/// Leading empty lines are skipped (RFC 9112 §2.2). Over-long lines and heads are reported
/// as soon as the limit is passed, without waiting for the rest.
pub fn parse_request_head<'b>(buf: &'b [u8], limits: &Limits) -> Parse<'b> {
    // Uninitialised slots: initialising 100 fields (3.2 KB) per parse costs more than parsing.
    let mut fields =
        [const { std::mem::MaybeUninit::<httparse::Header<'b>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, &mut fields) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return partial_verdict(buf, limits),
        Err(httparse::Error::TooManyHeaders) => return Parse::Invalid(ErrorKind::HeadersTooLarge),
        Err(httparse::Error::Version) => return Parse::Invalid(version_verdict(buf)),
        Err(_) => return Parse::Invalid(ErrorKind::BadRequest),
    };
    let (Some(method_token), Some(target), Some(minor)) = (req.method, req.path, req.version)
    else {
        return Parse::Invalid(ErrorKind::BadRequest);
    };
    if target.len() > limits.max_target {
        return Parse::Invalid(ErrorKind::UriTooLong);
    }
    if len > limits.max_head {
        return Parse::Invalid(ErrorKind::HeadersTooLarge);
    }
    let version = if minor == 1 {
        Version::Http11
    } else {
        Version::Http10
    };
    let mut head = RequestHead {
        method: Method::from_token(method_token),
        method_token,
        target,
        path: target,
        version,
        host: None,
        keep_alive: false,
        framing: BodyFraming::None,
        expect_continue: false,
        range: None,
        if_range: None,
        if_match: None,
        if_none_match: None,
        if_modified_since: None,
        if_unmodified_since: None,
        accept: None,
        accept_encoding: None,
        referer: None,
        user_agent: None,
        raw: &buf[..len],
    };
    match read_fields(&mut head, req.headers) {
        Ok(()) => Parse::Complete(head),
        Err(kind) => Parse::Invalid(kind),
    }
}

/// Header facts gathered while walking the fields, checked together at the end.
#[derive(Default)]
struct Framing {
    content_length: Option<u64>,
    transfer_encoding: bool,
    chunked_last: bool,
    other_coding: bool,
    chunked_count: u32,
    close: bool,
    keep_alive: bool,
    host_seen: bool,
}

fn read_fields<'b>(
    head: &mut RequestHead<'b>,
    fields: &[httparse::Header<'b>],
) -> Result<(), ErrorKind> {
    let mut f = Framing::default();
    for field in fields {
        let name = field.name.as_bytes();
        let value = trim(field.value);
        match name.len() {
            4 if name.eq_ignore_ascii_case(b"host") => {
                if f.host_seen || !valid_host(value) {
                    return Err(ErrorKind::BadRequest);
                }
                f.host_seen = true;
                head.host = Some(value);
            }
            5 if name.eq_ignore_ascii_case(b"range") => head.range = Some(value),
            6 if name.eq_ignore_ascii_case(b"accept") => head.accept = Some(value),
            6 if name.eq_ignore_ascii_case(b"expect") => {
                head.expect_continue = value.eq_ignore_ascii_case(b"100-continue")
            }
            7 if name.eq_ignore_ascii_case(b"referer") => head.referer = Some(value),
            8 if name.eq_ignore_ascii_case(b"if-range") => head.if_range = Some(value),
            8 if name.eq_ignore_ascii_case(b"if-match") => head.if_match = Some(value),
            10 if name.eq_ignore_ascii_case(b"connection") => {
                for token in value.split(|&b| b == b',').map(trim) {
                    if token.eq_ignore_ascii_case(b"close") {
                        f.close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        f.keep_alive = true;
                    }
                }
            }
            10 if name.eq_ignore_ascii_case(b"user-agent") => head.user_agent = Some(value),
            13 if name.eq_ignore_ascii_case(b"if-none-match") => head.if_none_match = Some(value),
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                let n = parse_content_length(value)?;
                if f.content_length.is_some_and(|seen| seen != n) {
                    return Err(ErrorKind::BadRequest);
                }
                f.content_length = Some(n);
            }
            15 if name.eq_ignore_ascii_case(b"accept-encoding") => {
                head.accept_encoding = Some(value)
            }
            17 if name.eq_ignore_ascii_case(b"if-modified-since") => {
                head.if_modified_since = Some(value)
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                f.transfer_encoding = true;
                for coding in value.split(|&b| b == b',').map(trim) {
                    if coding.is_empty() {
                        continue;
                    }
                    let chunked = coding.eq_ignore_ascii_case(b"chunked");
                    f.chunked_count += u32::from(chunked);
                    f.other_coding |= !chunked;
                    f.chunked_last = chunked;
                }
            }
            19 if name.eq_ignore_ascii_case(b"if-unmodified-since") => {
                head.if_unmodified_since = Some(value)
            }
            _ => {}
        }
    }
    resolve_target(head)?;
    if head.version == Version::Http11 && head.host.is_none() {
        // RFC 9112 §3.2: a server MUST respond 400 to an HTTP/1.1 request without Host.
        return Err(ErrorKind::BadRequest);
    }
    head.keep_alive = match head.version {
        Version::Http11 | Version::Http2 => !f.close,
        Version::Http10 => f.keep_alive && !f.close,
    };
    head.framing = if f.transfer_encoding {
        // RFC 9112 §6.1: Content-Length with Transfer-Encoding is a smuggling signal; chunked
        // not last (or not at all) means the length cannot be known; both are 400. A 1.0
        // request with Transfer-Encoding is treated as faulty framing too.
        if f.content_length.is_some()
            || head.version == Version::Http10
            || !f.chunked_last
            || f.chunked_count != 1
        {
            return Err(ErrorKind::BadRequest);
        }
        if f.other_coding {
            return Err(ErrorKind::NotImplementedCoding);
        }
        BodyFraming::Chunked
    } else {
        match f.content_length {
            None | Some(0) => BodyFraming::None,
            Some(n) => BodyFraming::Length(n),
        }
    };
    Ok(())
}

/// Split an absolute-form target into host and path (RFC 9112 §3.2.2); check the other forms.
fn resolve_target(head: &mut RequestHead<'_>) -> Result<(), ErrorKind> {
    let target = head.target;
    if target.starts_with('/') {
        return Ok(());
    }
    if target == "*" {
        return if head.method == Method::Options {
            Ok(())
        } else {
            Err(ErrorKind::BadRequest)
        };
    }
    if head.method == Method::Connect {
        // authority-form; the pipeline refuses CONNECT anyway.
        return Ok(());
    }
    let lower_scheme = |s: &str| {
        target.len() >= s.len() && target.as_bytes()[..s.len()].eq_ignore_ascii_case(s.as_bytes())
    };
    let rest = if lower_scheme("http://") {
        &target[7..]
    } else if lower_scheme("https://") {
        &target[8..]
    } else {
        return Err(ErrorKind::BadRequest);
    };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..split];
    if authority.is_empty() || authority.contains('@') || !valid_host(authority.as_bytes()) {
        return Err(ErrorKind::BadRequest);
    }
    head.host = Some(authority.as_bytes());
    // "http://h?q" leaves "?q": an empty path, which path resolution reads as "/".
    head.path = if split == rest.len() {
        "/"
    } else {
        &rest[split..]
    };
    Ok(())
}

/// RFC 9110 §8.6: `1*DIGIT`, possibly repeated as a list of equal values.
fn parse_content_length(value: &[u8]) -> Result<u64, ErrorKind> {
    let mut result: Option<u64> = None;
    for part in value.split(|&b| b == b',').map(trim) {
        if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
            return Err(ErrorKind::BadRequest);
        }
        let n = part
            .iter()
            .fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0'));
        if result.is_some_and(|r| r != n) {
            return Err(ErrorKind::BadRequest);
        }
        result = Some(n);
    }
    result.ok_or(ErrorKind::BadRequest)
}

/// uri-host [ ":" port ] with reg-name, IPv4 or IP-literal characters (RFC 3986 §3.2.2).
fn valid_host(value: &[u8]) -> bool {
    !value.is_empty() && value.iter().all(|&b| HOST_BYTE[usize::from(b)])
}

/// The bytes [`valid_host`] allows, by value: one load per byte of every request's `Host`.
const HOST_BYTE: [bool; 256] = crate::byte_set::alphanumeric_and(b"-._~:[]!$&'()*+,;=%");

fn trim(value: &[u8]) -> &[u8] {
    let start = value
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |p| p + 1);
    &value[start..end]
}

/// Decide between "wait for more" and 414/431 for an incomplete head.
fn partial_verdict<'b>(buf: &[u8], limits: &Limits) -> Parse<'b> {
    let body = skip_empty_lines(buf);
    match memchr::memchr(b'\n', body) {
        // Request line still open: method + SP + target + SP + version is what can grow.
        None if body.len() > limits.max_target + 64 => Parse::Invalid(ErrorKind::UriTooLong),
        Some(_) if buf.len() > limits.max_head => Parse::Invalid(ErrorKind::HeadersTooLarge),
        _ => Parse::Partial,
    }
}

/// A well-formed but unsupported `HTTP/x.y` is 505; anything else in that place is 400.
fn version_verdict(buf: &[u8]) -> ErrorKind {
    let body = skip_empty_lines(buf);
    let line_end = memchr::memchr(b'\n', body).unwrap_or(body.len());
    let line = body[..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&body[..line_end]);
    let version = line.rsplit(|&b| b == b' ').next().unwrap_or(b"");
    match version {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            ErrorKind::VersionNotSupported
        }
        [b'H', b'T', b'T', b'P', b'/', major] if major.is_ascii_digit() => {
            ErrorKind::VersionNotSupported
        }
        _ => ErrorKind::BadRequest,
    }
}

/// The field lines after a request line, walked with `memchr` (a proxied request walks its
/// head twice; splitting it byte by byte cost about 700 of its 17,500 instructions).
struct Fields<'b> {
    rest: &'b [u8],
}

impl<'b> Iterator for Fields<'b> {
    type Item = (&'b [u8], &'b [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        while !self.rest.is_empty() {
            let (line, after) = split_line(self.rest);
            self.rest = after;
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            // A line without a colon (the empty line that ends the head) is not a field.
            if let Some(colon) = memchr::memchr(b':', line) {
                return Some((&line[..colon], line[colon + 1..].trim_ascii()));
            }
        }
        None
    }
}

/// The first line of `buf` without its LF, and what follows it.
fn split_line(buf: &[u8]) -> (&[u8], &[u8]) {
    match memchr::memchr(b'\n', buf) {
        Some(i) => (&buf[..i], &buf[i + 1..]),
        None => (buf, &[]),
    }
}

fn skip_empty_lines(buf: &[u8]) -> &[u8] {
    let start = buf
        .iter()
        .position(|b| !matches!(b, b'\r' | b'\n'))
        .unwrap_or(buf.len());
    &buf[start..]
}

#[cfg(test)]
mod tests;
