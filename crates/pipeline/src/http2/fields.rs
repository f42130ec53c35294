//! A request's decoded fields, checked as RFC 9113 §8.2 and §8.3 ask, and turned into an
//! HTTP/1.1 head (`:authority` as Host, cookie crumbs joined into one field) for the same
//! parser and the same handlers as an HTTP/1 request. Pure.

use std::ops::Range;

/// Why a field section was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Malformed (§8.1.1): the stream is reset with PROTOCOL_ERROR.
    Malformed,
    /// Over the header-list limit: answered 431.
    TooLarge,
}

/// The fields of one header block as they are decoded. One per connection, its buffers
/// reused from block to block.
#[derive(Debug, Default)]
pub(crate) struct Fields {
    /// A trailer section: no pseudo-fields allowed, nothing kept.
    trailers: bool,
    max: usize,
    size: usize,
    /// The pseudo-fields' values, one after another; where each is.
    pseudo: Vec<u8>,
    method: Option<Range<usize>>,
    scheme: Option<Range<usize>>,
    path: Option<Range<usize>>,
    authority: Option<Range<usize>>,
    regular_seen: bool,
    has_host: bool,
    /// `name: value\r\n` lines of the regular fields, Cookie left out.
    lines: Vec<u8>,
    cookie: Vec<u8>,
    content_length: Option<u64>,
    refused: Option<Refused>,
}

/// A request's fields, accepted.
#[derive(Debug)]
pub(crate) struct Request {
    /// The HTTP/1.1 head (request line, fields, the empty line).
    pub head: Vec<u8>,
    pub content_length: Option<u64>,
}

/// Byte classes, one table lookup each: a token character (RFC 9110 §5.6.2), and among
/// those the upper-case letters a field name in HTTP/2 must not have.
const TOKEN: u8 = 1;
const UPPER: u8 = 2;
/// NUL, CR and LF, which no value may hold.
const FORBIDDEN: u8 = 4;

static CLASS: [u8; 256] = {
    let tokens = ramjet_http1::byte_set::alphanumeric_and(b"!#$%&'*+-.^_`|~");
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        if tokens[b] {
            t[b] = TOKEN;
        }
        if (b as u8).is_ascii_uppercase() {
            t[b] |= UPPER;
        }
        b += 1;
    }
    t[0] |= FORBIDDEN;
    t[b'\r' as usize] |= FORBIDDEN;
    t[b'\n' as usize] |= FORBIDDEN;
    t
};

fn token(b: u8) -> bool {
    CLASS[b as usize] & TOKEN != 0
}

/// A lower-case token: a field name HTTP/2 allows.
fn lower_token(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&b| CLASS[b as usize] & (TOKEN | UPPER) == TOKEN)
}

impl Fields {
    /// Begin a header block: a request's head (`trailers` false) or a trailer section;
    /// the decoded size (RFC 9113 §6.5.2: name, value and 32 per field) held to `max`.
    pub(crate) fn begin(&mut self, trailers: bool, max: usize) {
        self.trailers = trailers;
        self.max = max;
        self.size = 0;
        self.pseudo.clear();
        self.method = None;
        self.scheme = None;
        self.path = None;
        self.authority = None;
        self.regular_seen = false;
        self.has_host = false;
        self.lines.clear();
        self.cookie.clear();
        self.content_length = None;
        self.refused = None;
    }

    fn refuse(&mut self, why: Refused) {
        // Malformed wins: the stream is broken whatever its size.
        if self.refused != Some(Refused::Malformed) {
            self.refused = Some(why);
        }
    }

    /// One decoded field.
    pub(crate) fn field(&mut self, name: &[u8], value: &[u8]) {
        self.size += name.len() + value.len() + 32;
        if self.size > self.max {
            self.refuse(Refused::TooLarge);
        }
        if self.refused.is_some() {
            return;
        }
        // A value never holds NUL, CR or LF, nor begins or ends with white space (§8.2.1).
        if value.iter().any(|&b| CLASS[b as usize] & FORBIDDEN != 0)
            || value
                .first()
                .zip(value.last())
                .is_some_and(|(&a, &z)| matches!(a, b' ' | b'\t') || matches!(z, b' ' | b'\t'))
        {
            return self.refuse(Refused::Malformed);
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.trailers || self.regular_seen {
                return self.refuse(Refused::Malformed);
            }
            let slot = match pseudo {
                b"method" => &mut self.method,
                b"scheme" => &mut self.scheme,
                b"path" => &mut self.path,
                b"authority" => &mut self.authority,
                _ => return self.refuse(Refused::Malformed),
            };
            // Visible ASCII only: these go into an HTTP/1 request line and Host field; a
            // method is a token.
            if slot.is_some()
                || value.iter().any(|&b| b <= b' ' || b >= 0x7f)
                || (pseudo == b"method" && (value.is_empty() || !value.iter().all(|&b| token(b))))
            {
                return self.refuse(Refused::Malformed);
            }
            let at = self.pseudo.len();
            self.pseudo.extend_from_slice(value);
            *slot = Some(at..self.pseudo.len());
            return;
        }
        self.regular_seen = true;
        if !lower_token(name) {
            return self.refuse(Refused::Malformed);
        }
        match name {
            b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding"
            | b"upgrade" => return self.refuse(Refused::Malformed),
            b"te" if value != b"trailers" => return self.refuse(Refused::Malformed),
            _ => {}
        }
        if self.trailers {
            return;
        }
        match name {
            b"cookie" => {
                if !self.cookie.is_empty() {
                    self.cookie.extend_from_slice(b"; ");
                }
                self.cookie.extend_from_slice(value);
                return;
            }
            b"content-length" => {
                let n = std::str::from_utf8(value)
                    .ok()
                    .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse::<u64>().ok());
                match (n, self.content_length) {
                    (None, _) => return self.refuse(Refused::Malformed),
                    (Some(n), Some(before)) if n != before => {
                        return self.refuse(Refused::Malformed)
                    }
                    (Some(n), _) => self.content_length = Some(n),
                }
            }
            b"host" => {
                self.has_host = true;
                if self.authority.is_some() {
                    return;
                }
            }
            _ => {}
        }
        self.lines.extend_from_slice(name);
        self.lines.extend_from_slice(b": ");
        self.lines.extend_from_slice(value);
        self.lines.extend_from_slice(b"\r\n");
    }

    /// The trailer section's verdict.
    pub(crate) fn trailers_ok(&self) -> Result<(), Refused> {
        match self.refused {
            Some(r) => Err(r),
            None => Ok(()),
        }
    }

    /// The request, or why it is refused (§8.3.1: `:method`, `:scheme` and a non-empty
    /// `:path`, or for CONNECT `:authority` alone).
    pub(crate) fn finish(&mut self) -> Result<Request, Refused> {
        if let Some(r) = self.refused {
            return Err(r);
        }
        let Some(method) = self.method.clone() else {
            return Err(Refused::Malformed);
        };
        let p = &self.pseudo;
        let method = &p[method];
        let target = if method == b"CONNECT" {
            if self.scheme.is_some() || self.path.is_some() {
                return Err(Refused::Malformed);
            }
            match &self.authority {
                Some(a) => &p[a.clone()],
                None => return Err(Refused::Malformed),
            }
        } else {
            match (&self.scheme, &self.path) {
                (Some(_), Some(path)) if !path.is_empty() => &p[path.clone()],
                _ => return Err(Refused::Malformed),
            }
        };
        let authority = self.authority.clone().map(|a| &p[a]);
        let mut head = Vec::with_capacity(p.len() + self.lines.len() + self.cookie.len() + 48);
        head.extend_from_slice(method);
        head.push(b' ');
        head.extend_from_slice(target);
        // Without any host, HTTP/1.0 semantics (the parser requires Host of HTTP/1.1): the
        // default virtual host answers, as it would for an HTTP/1.0 client.
        head.extend_from_slice(if authority.is_some() || self.has_host {
            b" HTTP/1.1\r\n"
        } else {
            b" HTTP/1.0\r\n"
        });
        if let Some(a) = authority {
            head.extend_from_slice(b"Host: ");
            head.extend_from_slice(a);
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(&self.lines);
        if !self.cookie.is_empty() {
            head.extend_from_slice(b"Cookie: ");
            head.extend_from_slice(&self.cookie);
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        Ok(Request {
            head,
            content_length: self.content_length,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(fields: &[(&str, &str)]) -> Result<String, Refused> {
        let mut f = Fields::default();
        f.begin(false, 8192);
        for (n, v) in fields {
            f.field(n.as_bytes(), v.as_bytes());
        }
        f.finish().map(|r| String::from_utf8(r.head).unwrap())
    }

    const BASE: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/a?b"),
        (":authority", "example.com"),
    ];

    #[test]
    fn a_request_becomes_an_http1_head() {
        let mut f = BASE.to_vec();
        f.extend([
            ("cookie", "a=1"),
            ("accept", "*/*"),
            ("cookie", "b=2"),
            ("host", "ignored.example"),
            ("te", "trailers"),
        ]);
        assert_eq!(
            request(&f).unwrap(),
            "GET /a?b HTTP/1.1\r\nHost: example.com\r\naccept: */*\r\nte: trailers\r\nCookie: a=1; b=2\r\n\r\n"
        );
        // No authority: Host is kept; neither: HTTP/1.0.
        assert_eq!(
            request(&[BASE[0], BASE[1], BASE[2], ("host", "h")]).unwrap(),
            "GET /a?b HTTP/1.1\r\nhost: h\r\n\r\n"
        );
        assert_eq!(request(&BASE[..3]).unwrap(), "GET /a?b HTTP/1.0\r\n\r\n");
        assert_eq!(
            request(&[(":method", "CONNECT"), (":authority", "h:443")]).unwrap(),
            "CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n"
        );
    }

    #[test]
    fn malformed_sections_are_refused() {
        let bad: &[&[(&str, &str)]] = &[
            &[(":method", "GET"), (":path", "/")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "")],
            &[(":scheme", "http"), (":path", "/")],
            &[
                (":method", "GET"),
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":path", "/"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":status", "200"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "http"),
                ("a", "b"),
                (":path", "/"),
            ],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/ x")],
            &[(":method", "G T"), (":scheme", "http"), (":path", "/")],
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                ("Accept", "x"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                ("connection", "x"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                ("te", "gzip"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                ("a", "x\r\nb: y"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                ("a", " x"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                ("a b", "x"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                ("content-length", "1"),
                ("content-length", "2"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                ("content-length", "-1"),
            ],
            &[
                (":method", "CONNECT"),
                (":authority", "h:1"),
                (":path", "/"),
            ],
        ];
        for f in bad {
            assert_eq!(request(f), Err(Refused::Malformed), "{f:?}");
        }
    }

    #[test]
    fn the_size_limit_is_exact_and_a_trailer_takes_no_pseudo_field() {
        // Each field counts name + value + 32.
        let fits = |max| {
            let mut f = Fields::default();
            f.begin(false, max);
            for (n, v) in BASE {
                f.field(n.as_bytes(), v.as_bytes());
            }
            f.finish().map(|_| ())
        };
        let size: usize = BASE.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
        assert_eq!(fits(size), Ok(()));
        assert_eq!(fits(size - 1), Err(Refused::TooLarge));
        let mut t = Fields::default();
        t.begin(true, 100);
        t.field(b"x-sum", b"1");
        assert_eq!(t.trailers_ok(), Ok(()));
        t.field(b":path", b"/");
        assert_eq!(t.trailers_ok(), Err(Refused::Malformed));
        let mut f = Fields::default();
        f.begin(false, 8192);
        f.field(b"content-length", b"12");
        f.field(b"content-length", b"12");
        for (n, v) in BASE {
            f.field(n.as_bytes(), v.as_bytes());
        }
        // Pseudo-fields after a regular one are malformed.
        assert_eq!(f.finish().map(|_| ()), Err(Refused::Malformed));
    }
}
