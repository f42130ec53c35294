//! Named upstreams a mount grants its module (`upstreams = { api = "http://127.0.0.1:9000" }`,
//! or `api = "app"` for the configuration's `[upstream.app]` group, as nginx's `proxy_pass
//! http://app` names an upstream block when there is one): the module sends an HTTP/1.1
//! request to one by name and gets its whole answer back. The host writes the request
//! line, `Host`, the framing and `Connection: close` itself, checks what the module gives
//! it (a method token, an origin-form path, fields without CR, LF or NUL), and reads the
//! answer as the reverse proxy does (`proxy::response_head::parse`: one unambiguous
//! framing, no control bytes in fields), within the mount's timeout and the module's size
//! limit. The module never holds a socket or sees an address.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ramjet_config::{MountContext, UpstreamAddr};
use ramjet_http1::{BodyDecoder, BodyFraming};
use ramjet_proxy::response_head::{self, Framing, Parsed};
use ramjet_proxy::UpstreamIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The longest response head read.
const HEAD_MAX: usize = 64 << 10;

/// One granted upstream.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// `Host` as sent: the authority written in the configuration, or the group's name.
    pub authority: String,
    /// Its servers, each with its weight. An address's are tried in order; a group's in
    /// turn from the one [`Upstream::order`] starts at.
    pub addrs: Vec<(UpstreamAddr, u32)>,
    /// The whole exchange (connect, send, answer) must end within this.
    pub timeout: Duration,
    /// Each connect attempt must succeed within this: a group's `connect_timeout`, else
    /// `timeout`.
    pub connect_timeout: Duration,
    /// Requests sent to a group so far, by every worker of the mount: where the next one
    /// starts (weighted round-robin). `None` for an address.
    turn: Option<Arc<AtomicU64>>,
}

impl Upstream {
    /// The configuration's `[upstream.NAME]` group: its servers by weight, in turn from one
    /// request to the next, the next one when a server cannot be reached.
    pub fn group(u: &ramjet_config::Upstream, timeout: Duration) -> Upstream {
        let addrs = u
            .servers
            .iter()
            .map(|s| (s.addr.clone(), s.weight.max(1)))
            .collect();
        Upstream {
            authority: u.name.clone(),
            addrs,
            timeout,
            connect_timeout: u.connect_timeout,
            turn: Some(Arc::new(AtomicU64::new(0))),
        }
    }

    /// The servers in the order this request tries them: an address's in order; a group's
    /// from the server whose share of the weights the request's turn falls in, then the
    /// ones after it, wrapping round.
    pub fn order(&self) -> impl Iterator<Item = &UpstreamAddr> {
        let n = self.addrs.len();
        let start = match &self.turn {
            Some(turn) if n > 1 => {
                let total: u64 = self.addrs.iter().map(|(_, w)| u64::from(*w)).sum();
                let mut at = turn.fetch_add(1, Ordering::Relaxed) % total.max(1);
                self.addrs
                    .iter()
                    .position(|(_, w)| {
                        let inside = at < u64::from(*w);
                        at = at.saturating_sub(u64::from(*w));
                        inside
                    })
                    .unwrap_or(0)
            }
            _ => 0,
        };
        (0..n).map(move |i| &self.addrs[(start + i) % n].0)
    }
}

/// What a mount's `upstreams.NAME` says: the name of the configuration's `[upstream.NAME]`
/// group (with or without `http://`) when there is one, else an address ([`parse`]).
pub fn grant(
    value: &str,
    timeout: Duration,
    context: &MountContext<'_>,
) -> Result<Upstream, String> {
    let name = value
        .strip_prefix("http://")
        .unwrap_or(value)
        .trim_end_matches('/');
    match context.upstream(name) {
        Some(group) if group.servers.is_empty() => Err(format!("[upstream.{name}] has no server")),
        Some(group) => Ok(Upstream::group(group, timeout)),
        None => parse(value, timeout),
    }
}

/// Why a request to an upstream failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A method, path or field the host does not send.
    BadRequest,
    /// Not reached, or it closed before its answer ended.
    Unreachable,
    /// No whole answer within the timeout.
    Timeout,
    /// Its answer was malformed (the reverse proxy would answer 502).
    BadResponse,
    /// Its body was longer than the module allowed.
    TooLarge,
}

/// An upstream's whole answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub fields: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// Parse `http://host:port` (or `host:port`; port 80 by default) into an upstream.
pub fn parse(url: &str, timeout: Duration) -> Result<Upstream, String> {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    if rest.contains("://") {
        return Err(format!("{url}: only http:// upstreams"));
    }
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') {
        return Err(format!("{url}: give http://host:port, without a path"));
    }
    // `[v6]` has colons but no port; `[v6]:port` and `host:port` have one.
    let has_port = authority.rsplit_once(':').is_some_and(|(h, p)| {
        !h.is_empty() && !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())
    });
    let with_port = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(&with_port)
        .map_err(|e| format!("{url}: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("{url}: no address"));
    }
    Ok(Upstream {
        authority: authority.to_string(),
        addrs: addrs
            .into_iter()
            .map(|a| (UpstreamAddr::Tcp(a), 1))
            .collect(),
        timeout,
        connect_timeout: timeout,
        turn: None,
    })
}

fn token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Fields the host writes itself; a module's are dropped.
fn host_owned(name: &str) -> bool {
    [
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "upgrade",
        "proxy-connection",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

/// The request's bytes, or `BadRequest` for what the host does not send.
pub fn request_bytes(
    up: &Upstream,
    method: &str,
    path: &str,
    fields: &[(String, Vec<u8>)],
    body: &[u8],
) -> Result<Vec<u8>, Failure> {
    let path_ok = path.starts_with('/') && path.bytes().all(|b| b > b' ' && b != 0x7f);
    if !token(method) || !path_ok {
        return Err(Failure::BadRequest);
    }
    let mut out = Vec::with_capacity(128 + path.len() + body.len());
    out.extend_from_slice(
        format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", up.authority).as_bytes(),
    );
    for (name, value) in fields {
        if !token(name) || value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(Failure::BadRequest);
        }
        if host_owned(name) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    if !body.is_empty() || !matches!(method, "GET" | "HEAD" | "DELETE" | "OPTIONS") {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out.extend_from_slice(body);
    Ok(out)
}

/// Send the request and read the whole answer (body up to `max` bytes).
pub async fn exchange(
    up: &Upstream,
    method: &str,
    request: Vec<u8>,
    max: u64,
) -> Result<Answer, Failure> {
    let head_only = method == "HEAD";
    match tokio::time::timeout(up.timeout, run(up, head_only, request, max)).await {
        Ok(answer) => answer,
        Err(_) => Err(Failure::Timeout),
    }
}

async fn run(
    up: &Upstream,
    head_only: bool,
    request: Vec<u8>,
    max: u64,
) -> Result<Answer, Failure> {
    let mut conn = None;
    for addr in up.order() {
        if let Ok(c) = UpstreamIo::connect(addr, up.connect_timeout).await {
            conn = Some(c);
            break;
        }
    }
    let mut conn = conn.ok_or(Failure::Unreachable)?;
    conn.write_all(&request)
        .await
        .map_err(|_| Failure::Unreachable)?;
    let mut buf = Vec::with_capacity(4096);
    let head = loop {
        match response_head::parse(&buf, head_only, false) {
            Parsed::Complete(h) if (100..200).contains(&h.status) => {
                // An interim answer: the final one follows.
                buf.drain(..h.head_len);
                continue;
            }
            Parsed::Complete(h) => break h,
            Parsed::Invalid(_) => return Err(Failure::BadResponse),
            Parsed::Partial if buf.len() >= HEAD_MAX => return Err(Failure::BadResponse),
            Parsed::Partial => {
                if read_more(&mut conn, &mut buf).await? == 0 {
                    return Err(if buf.is_empty() {
                        Failure::Unreachable
                    } else {
                        Failure::BadResponse
                    });
                }
            }
        }
    };
    let fields = split_fields(&head.fields);
    buf.drain(..head.head_len);
    let body = match head.framing {
        Framing::None => Vec::new(),
        Framing::Close => {
            while read_more(&mut conn, &mut buf).await? > 0 {
                if buf.len() as u64 > max {
                    return Err(Failure::TooLarge);
                }
            }
            buf
        }
        framing => decode(&mut conn, buf, framing.decoder(), max).await?,
    };
    Ok(Answer {
        status: head.status,
        fields,
        body,
    })
}

async fn read_more(conn: &mut UpstreamIo, buf: &mut Vec<u8>) -> Result<usize, Failure> {
    buf.reserve(16 << 10);
    conn.read_buf(buf).await.map_err(|_| Failure::Unreachable)
}

/// A body by its length or chunked, from what was read after the head and the rest.
async fn decode(
    conn: &mut UpstreamIo,
    mut input: Vec<u8>,
    framing: BodyFraming,
    max: u64,
) -> Result<Vec<u8>, Failure> {
    let mut decoder = BodyDecoder::new(framing, max).map_err(|_| Failure::TooLarge)?;
    let mut body = Vec::new();
    loop {
        let mut at = 0;
        while at < input.len() && !decoder.is_done() {
            let d = decoder.decode(&input[at..]).map_err(|e| match e {
                ramjet_http1::ErrorKind::PayloadTooLarge => Failure::TooLarge,
                _ => Failure::BadResponse,
            })?;
            body.extend_from_slice(&input[at..][d.data]);
            at += d.consumed;
            if d.consumed == 0 {
                break;
            }
        }
        if decoder.is_done() {
            return Ok(body);
        }
        input.clear();
        if read_more(conn, &mut input).await? == 0 {
            // Closed before the body's end.
            return Err(Failure::Unreachable);
        }
    }
}

/// `Name: value\r\n` lines into fields.
fn split_fields(lines: &[u8]) -> Vec<(String, Vec<u8>)> {
    lines
        .split(|&b| b == b'\n')
        .filter_map(|l| {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            let colon = l.iter().position(|&b| b == b':')?;
            let name = String::from_utf8_lossy(&l[..colon]).into_owned();
            Some((name, l[colon + 1..].trim_ascii().to_vec()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up() -> Upstream {
        parse("http://127.0.0.1:9", Duration::from_secs(1)).unwrap()
    }

    #[test]
    fn upstreams_are_http_authorities() {
        let u = up();
        assert_eq!(u.authority, "127.0.0.1:9");
        assert_eq!(
            u.addrs,
            [(UpstreamAddr::Tcp("127.0.0.1:9".parse().unwrap()), 1)]
        );
        let port = |url: &str| match &parse(url, Duration::ZERO).unwrap().addrs[0].0 {
            UpstreamAddr::Tcp(a) => a.port(),
            UpstreamAddr::Unix(_) => 0,
        };
        assert_eq!(port("127.0.0.1"), 80);
        assert_eq!(port("http://[::1]:81/"), 81);
        for bad in ["https://a:1", "http://a:1/path", "", "http://"] {
            assert!(parse(bad, Duration::ZERO).is_err(), "{bad}");
        }
    }

    #[test]
    fn requests_carry_only_what_is_safe_to_send() {
        let u = up();
        let fields = vec![
            ("Accept".to_string(), b"text/plain".to_vec()),
            ("Host".to_string(), b"evil".to_vec()),
            ("Connection".to_string(), b"keep-alive".to_vec()),
        ];
        let r = request_bytes(&u, "POST", "/a?b=c", &fields, b"xy").unwrap();
        assert_eq!(
            String::from_utf8(r).unwrap(),
            "POST /a?b=c HTTP/1.1\r\nHost: 127.0.0.1:9\r\nAccept: text/plain\r\n\
             Content-Length: 2\r\nConnection: close\r\n\r\nxy"
        );
        let r = request_bytes(&u, "GET", "/", &[], b"").unwrap();
        assert!(!String::from_utf8(r).unwrap().contains("Content-Length"));
        let bad = |m: &str, p: &str, f: &[(String, Vec<u8>)]| {
            request_bytes(&u, m, p, f, b"") == Err(Failure::BadRequest)
        };
        assert!(bad("GE T", "/", &[]));
        assert!(bad("", "/", &[]));
        assert!(bad("GET", "http://x/", &[]));
        assert!(bad("GET", "/a b", &[]));
        assert!(bad("GET", "/a\r\nX: y", &[]));
        assert!(bad("GET", "/", &[("X".into(), b"a\r\nY: z".to_vec())]));
        assert!(bad("GET", "/", &[("X Y".into(), b"a".to_vec())]));
    }

    fn group(name: &str, servers: &[(&str, u32)]) -> ramjet_config::Upstream {
        let text = format!(
            "[upstream.{name}]\nservers = [{}]\n\
             [[location]]\nhandlers = [\"proxy\"]\nproxy = \"{name}\"\n",
            servers
                .iter()
                .map(|(a, w)| format!("{{ address = {a:?}, weight = {w} }}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let config = ramjet_config::load_str(&text, "t.toml", std::path::Path::new("/")).unwrap();
        config.upstreams[0].clone()
    }

    #[test]
    fn a_group_is_granted_by_name_and_an_unknown_name_is_an_address() {
        let g = group("app", &[("127.0.0.1:1", 1), ("unix:/run/app.sock", 1)]);
        let context = MountContext {
            upstreams: std::slice::from_ref(&g),
        };
        for value in ["app", "http://app", "http://app/"] {
            let u = grant(value, Duration::from_secs(2), &context).unwrap();
            assert_eq!(u.authority, "app");
            assert_eq!(u.addrs[1].0, UpstreamAddr::Unix("/run/app.sock".into()));
            assert_eq!(u.timeout, Duration::from_secs(2));
        }
        let u = grant("127.0.0.1:9", Duration::ZERO, &context).unwrap();
        assert_eq!(u.authority, "127.0.0.1:9");
        assert!(grant("apps", Duration::ZERO, &context).is_err());
    }

    #[test]
    fn a_group_is_asked_in_turn_by_weight_then_the_next_server_after_a_failure() {
        let g = group(
            "app",
            &[("127.0.0.1:1", 1), ("127.0.0.1:2", 2), ("127.0.0.1:3", 1)],
        );
        let u = Upstream::group(&g, Duration::ZERO);
        let port = |a: &UpstreamAddr| match a {
            UpstreamAddr::Tcp(a) => a.port(),
            UpstreamAddr::Unix(_) => 0,
        };
        let mut firsts = Vec::new();
        for _ in 0..8 {
            let order: Vec<u16> = u.order().map(port).collect();
            assert_eq!(order.len(), 3, "every server is tried once: {order:?}");
            // After the first, the others in the configuration's order, wrapping round.
            let next = |p: u16| p % 3 + 1;
            assert_eq!(order[1], next(order[0]), "{order:?}");
            assert_eq!(order[2], next(order[1]), "{order:?}");
            firsts.push(order[0]);
        }
        assert_eq!(firsts, [1, 2, 2, 3, 1, 2, 2, 3]);
        // An address is always tried from its first.
        let a = parse("127.0.0.1:9", Duration::ZERO).unwrap();
        assert_eq!(a.order().count(), 1);
    }

    #[test]
    fn fields_are_split() {
        assert_eq!(
            split_fields(b"A: 1\r\nB-c:  two words \r\n"),
            [
                ("A".to_string(), b"1".to_vec()),
                ("B-c".to_string(), b"two words".to_vec())
            ]
        );
    }
}
