//! Response head parsing, for the load generator and (later) the proxy's upstream side.

use crate::body::BodyFraming;
use crate::request::Version;

/// Most header fields read from a response.
const MAX_RESPONSE_HEADERS: usize = 64;

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub version: Version,
    pub status: u16,
    /// How the body is delimited; `None` with `until_close` for read-to-EOF bodies.
    pub framing: BodyFraming,
    /// No length and not chunked: the body runs to connection close (RFC 9112 §6.3 item 8).
    pub until_close: bool,
    pub keep_alive: bool,
    pub head_len: usize,
}

/// Result of one response parse attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseParse {
    Complete(ResponseHead),
    Partial,
    Invalid,
}

/// Parse a response head; `to_head` says the request was HEAD (no body follows).
pub fn parse_response_head(buf: &[u8], to_head: bool) -> ResponseParse {
    let mut fields = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let mut resp = httparse::Response::new(&mut fields);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return ResponseParse::Partial,
        Err(_) => return ResponseParse::Invalid,
    };
    let (Some(status), Some(minor)) = (resp.code, resp.version) else {
        return ResponseParse::Invalid;
    };
    let version = if minor == 1 {
        Version::Http11
    } else {
        Version::Http10
    };
    let mut length = None;
    let mut chunked = false;
    let mut close = false;
    let mut keep_alive = false;
    for f in resp.headers.iter() {
        if f.name.eq_ignore_ascii_case("content-length") {
            let v = f.value.trim_ascii();
            if v.is_empty() || !v.iter().all(u8::is_ascii_digit) || v.len() > 19 {
                return ResponseParse::Invalid;
            }
            let n = v.iter().fold(0u64, |a, &d| a * 10 + u64::from(d - b'0'));
            if length.is_some_and(|l| l != n) {
                return ResponseParse::Invalid;
            }
            length = Some(n);
        } else if f.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = f
                .value
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if f.name.eq_ignore_ascii_case("connection") {
            for t in f.value.split(|&b| b == b',') {
                close |= t.trim_ascii().eq_ignore_ascii_case(b"close");
                keep_alive |= t.trim_ascii().eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    let bodiless = to_head || status == 204 || status == 304 || (100..200).contains(&status);
    let (framing, until_close) = if bodiless {
        (BodyFraming::None, false)
    } else if chunked {
        (BodyFraming::Chunked, false)
    } else if let Some(n) = length {
        (
            if n == 0 {
                BodyFraming::None
            } else {
                BodyFraming::Length(n)
            },
            false,
        )
    } else {
        (BodyFraming::None, true)
    };
    let keep_alive = !until_close
        && match version {
            Version::Http11 | Version::Http2 => !close,
            Version::Http10 => keep_alive && !close,
        };
    ResponseParse::Complete(ResponseHead {
        version,
        status,
        framing,
        until_close,
        keep_alive,
        head_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_of_responses() {
        let ResponseParse::Complete(h) =
            parse_response_head(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody", false)
        else {
            panic!()
        };
        assert_eq!(
            (h.status, h.framing, h.keep_alive, h.head_len),
            (200, BodyFraming::Length(4), true, 38)
        );
        let ResponseParse::Complete(h) =
            parse_response_head(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n", true)
        else {
            panic!()
        };
        assert_eq!(h.framing, BodyFraming::None);
        let ResponseParse::Complete(h) = parse_response_head(b"HTTP/1.0 200 OK\r\n\r\n", false)
        else {
            panic!()
        };
        assert!(h.until_close && !h.keep_alive);
        assert_eq!(
            parse_response_head(b"HTTP/1.1 200", false),
            ResponseParse::Partial
        );
        assert_eq!(
            parse_response_head(b"HTTX/1.1 200 OK\r\n\r\n", false),
            ResponseParse::Invalid
        );
    }
}
