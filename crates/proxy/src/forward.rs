//! The head sent upstream: the client's request line and fields minus hop-by-hop ones
//! (RFC 9110 §7.6.1, including every field `Connection` names), with the target rewritten
//! when the location says so, the Host passed or replaced, and the forwarding fields
//! (`X-Forwarded-For/-Proto/-Host`, `Forwarded` (RFC 7239), `Via`) added. The body framing
//! is the proxy's: `Content-Length` when the client's body had one, else chunked.

use std::net::{IpAddr, SocketAddr};

use ramjet_config::ProxyOptions;
use ramjet_http1::{BodyFraming, RequestHead, Version};

/// What the head says about the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Forwarded {
    /// The client asked to switch protocols (`Connection: upgrade` + `Upgrade`).
    pub(crate) upgrade: bool,
    /// The request body is sent chunked.
    pub(crate) chunked: bool,
}

/// Fields never forwarded as they are: hop-by-hop ones, and the ones this proxy writes
/// itself. Matched by length first: every field of every request is asked.
fn dropped(name: &[u8]) -> bool {
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    match name.len() {
        2 => is(b"te"),
        4 => is(b"host"),
        6 => is(b"expect"),
        7 => is(b"trailer") || is(b"upgrade"),
        10 => is(b"connection") || is(b"keep-alive"),
        14 => is(b"content-length") || is(b"http2-settings"),
        16 => is(b"proxy-connection") || is(b"x-forwarded-host"),
        17 => is(b"transfer-encoding") || is(b"x-forwarded-proto"),
        19 => is(b"proxy-authorization"),
        _ => false,
    }
}

fn tokens(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&b| b == b',')
        .map(|t| t.trim_ascii())
        .filter(|t| !t.is_empty())
}

/// Write the upstream request head for `head` into `out`.
pub(crate) fn head(
    out: &mut Vec<u8>,
    head: &RequestHead<'_>,
    target: &[u8],
    opts: &ProxyOptions,
    client: SocketAddr,
    secure: bool,
    upstream_host: &str,
) -> Forwarded {
    // Fields named by Connection are hop-by-hop too (RFC 9110 §7.6.1).
    let mut listed: Vec<&[u8]> = Vec::new();
    let mut upgrade_value: Option<&[u8]> = None;
    for (name, value) in head.fields() {
        if name.eq_ignore_ascii_case(b"connection") {
            listed.extend(tokens(value));
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            upgrade_value = Some(value);
        }
    }
    let upgrade = head.version == Version::Http11
        && upgrade_value.is_some_and(|v| !v.is_empty())
        && listed.iter().any(|t| t.eq_ignore_ascii_case(b"upgrade"));

    out.extend_from_slice(head.method_token.as_bytes());
    out.push(b' ');
    out.extend_from_slice(target);
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    match (&opts.host, head.host) {
        (Some(h), _) => out.extend_from_slice(h.as_bytes()),
        (None, Some(h)) => out.extend_from_slice(h),
        (None, None) => out.extend_from_slice(upstream_host.as_bytes()),
    }
    out.extend_from_slice(b"\r\n");
    let mut xff: Vec<&[u8]> = Vec::new();
    let mut fwd: Vec<&[u8]> = Vec::new();
    let mut via: Vec<&[u8]> = Vec::new();
    for (name, value) in head.fields() {
        if dropped(name) || listed.iter().any(|t| name.eq_ignore_ascii_case(t)) {
            continue;
        }
        // `X_Forwarded_For` would reach many backends as `X-Forwarded-For` (CGI, WSGI and
        // PHP all map `-` and `_` to one `_`): dropped unless the location keeps them
        // (nginx `underscores_in_headers off`).
        if !opts.underscores && name.contains(&b'_') {
            continue;
        }
        if name.eq_ignore_ascii_case(b"x-forwarded-for") {
            xff.push(value);
        } else if name.eq_ignore_ascii_case(b"forwarded") {
            fwd.push(value);
        } else if name.eq_ignore_ascii_case(b"via") {
            via.push(value);
        } else {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
    }
    let ip = client.ip();
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let mut ip_buf = [0u8; 48];
    let ip_text = ip_text(ip, &mut ip_buf);
    write_list(out, b"X-Forwarded-For", &xff, ip_text);
    out.extend_from_slice(if secure {
        b"X-Forwarded-Proto: https\r\n"
    } else {
        b"X-Forwarded-Proto: http\r\n"
    });
    if let Some(h) = head.host {
        out.extend_from_slice(b"X-Forwarded-Host: ");
        out.extend_from_slice(h);
        out.extend_from_slice(b"\r\n");
    }
    // RFC 7239: IPv6 and any value with ':' are quoted.
    out.extend_from_slice(b"Forwarded: ");
    for v in &fwd {
        out.extend_from_slice(v);
        out.extend_from_slice(b", ");
    }
    match ip {
        IpAddr::V4(_) => {
            out.extend_from_slice(b"for=");
            out.extend_from_slice(ip_text);
        }
        IpAddr::V6(_) => {
            out.extend_from_slice(b"for=\"[");
            out.extend_from_slice(ip_text);
            out.extend_from_slice(b"]\"");
        }
    }
    if let Some(h) = head
        .host
        .filter(|h| h.iter().all(|&b| b > b' ' && b != b'"'))
    {
        out.extend_from_slice(b";host=\"");
        out.extend_from_slice(h);
        out.push(b'"');
    }
    out.extend_from_slice(if secure {
        b";proto=https\r\n"
    } else {
        b";proto=http\r\n"
    });
    let me: &[u8] = match head.version {
        Version::Http10 => b"1.0 ramjet",
        Version::Http11 => b"1.1 ramjet",
        Version::Http2 => b"2 ramjet",
    };
    write_list(out, b"Via", &via, me);
    let chunked = match head.framing {
        BodyFraming::Length(n) => {
            out.extend_from_slice(b"Content-Length: ");
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            out.extend_from_slice(b"\r\n");
            false
        }
        BodyFraming::Chunked => {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
            true
        }
        BodyFraming::None => {
            // A POST or PUT without a body still says so (RFC 9110 §8.6).
            if matches!(
                head.method,
                ramjet_http1::Method::Post
                    | ramjet_http1::Method::Put
                    | ramjet_http1::Method::Patch
            ) {
                out.extend_from_slice(b"Content-Length: 0\r\n");
            }
            false
        }
    };
    if let (true, Some(v)) = (upgrade, upgrade_value) {
        out.extend_from_slice(b"Connection: upgrade\r\nUpgrade: ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Forwarded { upgrade, chunked }
}

/// An address as text; IPv4 (the common case) written without `fmt`.
fn ip_text(ip: IpAddr, buf: &mut [u8; 48]) -> &[u8] {
    match ip {
        IpAddr::V4(v4) => {
            let mut n = 0;
            for (i, o) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    buf[n] = b'.';
                    n += 1;
                }
                let mut digits = itoa::Buffer::new();
                let d = digits.format(o).as_bytes();
                buf[n..n + d.len()].copy_from_slice(d);
                n += d.len();
            }
            &buf[..n]
        }
        IpAddr::V6(v6) => {
            use std::io::Write;
            let mut w = &mut buf[..];
            let _ = write!(w, "{v6}");
            let left = w.len();
            &buf[..48 - left]
        }
    }
}

/// `Name: earlier values, ours`.
fn write_list(out: &mut Vec<u8>, name: &[u8], earlier: &[&[u8]], ours: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    for v in earlier {
        out.extend_from_slice(v);
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(ours);
    out.extend_from_slice(b"\r\n");
}

/// The target sent upstream: as received, or with the location's prefix replaced by
/// `proxy_path` (the rest of the normalised path percent-encoded again, the query as
/// received).
pub(crate) fn target<'a>(
    raw_target: &'a str,
    path: &[u8],
    query: Option<&str>,
    prefix: &str,
    replacement: Option<&str>,
) -> std::borrow::Cow<'a, [u8]> {
    let Some(new) = replacement else {
        return std::borrow::Cow::Borrowed(raw_target.as_bytes());
    };
    let rest = path.strip_prefix(prefix.as_bytes()).unwrap_or(path);
    std::borrow::Cow::Owned(ramjet_http1::path::rebase(new, rest, query))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramjet_http1::{parse_request_head, Limits, Parse};

    #[test]
    fn the_dropped_names_in_any_case_and_no_others() {
        const NAMES: [&str; 14] = [
            "connection",
            "keep-alive",
            "proxy-connection",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "content-length",
            "host",
            "expect",
            "http2-settings",
            "x-forwarded-proto",
            "x-forwarded-host",
            "proxy-authorization",
        ];
        for n in NAMES {
            assert!(dropped(n.as_bytes()), "{n}");
            assert!(dropped(n.to_ascii_uppercase().as_bytes()), "{n}");
            // One byte more, one less, one changed: passed on.
            assert!(!dropped(format!("{n}s").as_bytes()), "{n}s");
            assert!(!dropped(&n.as_bytes()[1..]), "{n} less its first byte");
            let mut changed = n.as_bytes().to_vec();
            changed[0] = b'z';
            assert!(!dropped(&changed), "{n} changed");
        }
        for kept in [
            "",
            "accept",
            "x-forwarded-for",
            "forwarded",
            "via",
            "cookie",
        ] {
            assert!(!dropped(kept.as_bytes()), "{kept}");
        }
    }

    fn forward(req: &[u8], opts: &ProxyOptions) -> (String, Forwarded) {
        forward_over(req, opts, false)
    }

    fn forward_over(req: &[u8], opts: &ProxyOptions, secure: bool) -> (String, Forwarded) {
        let Parse::Complete(h) = parse_request_head(req, &Limits::default()) else {
            panic!("bad test request")
        };
        let mut out = Vec::new();
        let f = head(
            &mut out,
            &h,
            h.path.as_bytes(),
            opts,
            "192.0.2.7:5555".parse().unwrap(),
            secure,
            "127.0.0.1:8000",
        );
        (String::from_utf8(out).unwrap(), f)
    }

    #[test]
    fn a_request_over_tls_is_forwarded_as_https() {
        let req = b"GET /a HTTP/1.1\r\nHost: site\r\nX-Forwarded-Proto: http\r\n\r\n";
        let (h, _) = forward_over(req, &opts(), true);
        assert!(h.contains("X-Forwarded-Proto: https\r\n"), "{h}");
        assert!(!h.contains("X-Forwarded-Proto: http\r\n"), "{h}");
        assert!(h.contains(";proto=https\r\n"), "{h}");
        let (h, _) = forward(req, &opts());
        assert!(h.contains("X-Forwarded-Proto: http\r\n"), "{h}");
    }

    fn opts() -> ProxyOptions {
        ProxyOptions {
            upstream: 0,
            path: None,
            host: None,
            underscores: false,
            cache: None,
        }
    }

    #[test]
    fn fields_with_underscores_are_dropped_unless_kept() {
        let req = b"GET / HTTP/1.1\r\nHost: a\r\nX_Forwarded_For: 6.6.6.6\r\nX-Forwarded-For: 1.1.1.1\r\nX_Other: y\r\n\r\n";
        let (h, _) = forward(req, &opts());
        assert!(!h.contains("6.6.6.6"), "{h}");
        assert!(!h.contains("X_Other"), "{h}");
        assert!(h.contains("X-Forwarded-For: 1.1.1.1, 192.0.2.7\r\n"), "{h}");
        let keep = ProxyOptions {
            underscores: true,
            ..opts()
        };
        let (h, _) = forward(req, &keep);
        assert!(h.contains("X_Other: y\r\n"), "{h}");
        assert!(h.contains("X_Forwarded_For: 6.6.6.6\r\n"), "{h}");
    }

    #[test]
    fn hop_by_hop_fields_are_removed_and_forwarding_fields_added() {
        let (h, f) = forward(
            b"GET /a?b HTTP/1.1\r\nHost: site\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\nTE: trailers\r\nX-Forwarded-For: 10.0.0.1\r\nVia: 1.1 edge\r\nX-Forwarded-Proto: https\r\nAccept: */*\r\n\r\n",
            &opts(),
        );
        assert!(h.starts_with("GET /a?b HTTP/1.1\r\nHost: site\r\n"), "{h}");
        for gone in ["X-Secret", "Keep-Alive", "TE:", "Connection", "https"] {
            assert!(!h.contains(gone), "{gone} forwarded:\n{h}");
        }
        assert!(h.contains("Accept: */*\r\n"));
        assert!(
            h.contains("X-Forwarded-For: 10.0.0.1, 192.0.2.7\r\n"),
            "{h}"
        );
        assert!(h.contains("X-Forwarded-Proto: http\r\n"));
        assert!(h.contains("X-Forwarded-Host: site\r\n"));
        assert!(
            h.contains("Forwarded: for=192.0.2.7;host=\"site\";proto=http\r\n"),
            "{h}"
        );
        assert!(h.contains("Via: 1.1 edge, 1.1 ramjet\r\n"));
        assert!(h.ends_with("\r\n\r\n"));
        assert!(!f.upgrade && !f.chunked);
    }

    #[test]
    fn bodies_and_upgrades_are_framed_by_the_proxy() {
        let (h, f) = forward(
            b"POST /u HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
            &opts(),
        );
        assert!(f.chunked && h.contains("Transfer-Encoding: chunked\r\n"));
        assert!(!h.contains("Expect"));
        let (h, _) = forward(
            b"POST /u HTTP/1.1\r\nHost: s\r\nContent-Length: 5\r\n\r\n",
            &opts(),
        );
        assert!(h.contains("Content-Length: 5\r\n"));
        let (h, _) = forward(b"POST /u HTTP/1.1\r\nHost: s\r\n\r\n", &opts());
        assert!(h.contains("Content-Length: 0\r\n"));
        let (h, f) = forward(
            b"GET /ws HTTP/1.1\r\nHost: s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n",
            &opts(),
        );
        assert!(f.upgrade);
        assert!(
            h.contains("Connection: upgrade\r\nUpgrade: websocket\r\n"),
            "{h}"
        );
        assert!(h.contains("Sec-WebSocket-Key: k\r\n"));
        // Upgrade without Connection: upgrade is not an upgrade.
        let (_, f) = forward(
            b"GET /ws HTTP/1.1\r\nHost: s\r\nUpgrade: websocket\r\n\r\n",
            &opts(),
        );
        assert!(!f.upgrade);
    }

    #[test]
    fn host_is_passed_replaced_or_supplied() {
        let mut o = opts();
        o.host = Some("backend.internal".into());
        let (h, _) = forward(b"GET / HTTP/1.1\r\nHost: site\r\n\r\n", &o);
        assert!(h.contains("\r\nHost: backend.internal\r\n") && !h.contains("\r\nHost: site"));
        let (h, _) = forward(b"GET / HTTP/1.0\r\n\r\n", &opts());
        assert!(h.contains("Host: 127.0.0.1:8000\r\n"));
        assert!(h.contains("Via: 1.0 ramjet"));
    }

    #[test]
    fn targets_are_rewritten_under_the_prefix() {
        assert_eq!(
            &*target("/api/x?y", b"/api/x", Some("y"), "/api/", None),
            b"/api/x?y"
        );
        assert_eq!(
            &*target(
                "/api/a%20b?q=1",
                b"/api/a b",
                Some("q=1"),
                "/api/",
                Some("/v2/")
            ),
            b"/v2/a%20b?q=1"
        );
        assert_eq!(&*target("/api/", b"/api/", None, "/api/", Some("/")), b"/");
        assert_eq!(
            &*target("/app/x", b"/app/x", None, "/app", Some("/")),
            b"/x"
        );
    }
}
