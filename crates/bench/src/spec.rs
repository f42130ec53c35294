//! What a load run sends.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// One URL to request: where to connect and what to put in the request line and Host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
}

impl Target {
    /// Parse `http://host:port/path` (the host must be an IP address or resolve via the system).
    pub fn parse(url: &str) -> Result<Target, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{url}: only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let with_port = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.chars().all(|c| c.is_ascii_digit()))
            && !authority.ends_with(']')
        {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let addr = std::net::ToSocketAddrs::to_socket_addrs(&with_port)
            .map_err(|e| format!("{url}: {e}"))?
            .next()
            .ok_or_else(|| format!("{url}: no address"))?;
        Ok(Target {
            addr,
            host: authority.to_string(),
            path: path.to_string(),
        })
    }
}

/// A load run. Closed loop (the default): every connection sends its next request(s) when the
/// previous answers arrive. Open loop (`rate` set): requests are due on a fixed schedule
/// whatever the server does.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Requested round-robin per connection.
    pub targets: Vec<Target>,
    pub connections: usize,
    /// Stop after this long...
    pub duration: Option<Duration>,
    /// ...or after this many requests in total (whichever comes first).
    pub requests: Option<u64>,
    pub keep_alive: bool,
    /// HTTP/1.0 instead of HTTP/1.1.
    pub http10: bool,
    /// Requests in flight per connection (1 = no pipelining).
    pub pipeline: usize,
    /// Extra header lines, e.g. `("Accept-Encoding", "gzip")`.
    pub headers: Vec<(String, String)>,
    /// OS threads, each with its own runtime.
    pub threads: usize,
    /// A response that makes no progress for this long counts as a timeout.
    pub timeout: Duration,
    /// Expected body length of every response (a mismatch counts as a bad body).
    pub expect_length: Option<u64>,
    /// Open loop: requests per second offered, independent of response times. With keep-alive
    /// the schedule is shared by the `connections` (each sends when its turn is due, wrk2
    /// style); without, every request is a new connection (httperf style) and at most
    /// `connections` are open at once.
    pub rate: Option<f64>,
    /// Pin load thread t to `cpus[t % len]` (none: not pinned).
    pub cpus: Vec<usize>,
    /// Drop the bytes of a length-framed body in the kernel instead of reading them
    /// (counted, never looked at), so a large-file run measures the server, not the
    /// client's copying.
    pub discard_body: bool,
    /// Keep-alive connections that each make this many requests, all for one URL, the last
    /// with `Connection: close`; the next connection takes the next URL of the rotation
    /// (httperf's `--num-calls`, a browser's visit). None: a connection goes on until the
    /// run ends, taking the URLs in turn.
    pub per_connection: Option<u64>,
    /// HTTP/2 by prior knowledge (cleartext), `pipeline` streams in flight per connection
    /// (closed loop).
    pub http2: bool,
    /// With `http2`: over TLS (`https://` URLs), ALPN `h2`, the server's certificate not
    /// checked (a load generator, as h2load does not check it either).
    pub tls: bool,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            targets: Vec::new(),
            connections: 50,
            duration: Some(Duration::from_secs(10)),
            requests: None,
            keep_alive: true,
            http10: false,
            pipeline: 1,
            headers: Vec::new(),
            threads: 1,
            timeout: Duration::from_secs(10),
            expect_length: None,
            rate: None,
            cpus: Vec::new(),
            discard_body: false,
            per_connection: None,
            http2: false,
            tls: false,
        }
    }
}

impl Spec {
    /// The request bytes for target `t`.
    pub(crate) fn request(&self, t: &Target) -> Vec<u8> {
        self.request_keeping(t, self.keep_alive)
    }

    /// The request bytes for target `t`, asking to keep the connection or not.
    pub(crate) fn request_keeping(&self, t: &Target, keep_alive: bool) -> Vec<u8> {
        let version = if self.http10 { "HTTP/1.0" } else { "HTTP/1.1" };
        let mut r = format!("GET {} {version}\r\nHost: {}\r\n", t.path, t.host);
        match (self.http10, keep_alive) {
            (true, true) => r.push_str("Connection: keep-alive\r\n"),
            (false, false) => r.push_str("Connection: close\r\n"),
            _ => {}
        }
        for (k, v) in &self.headers {
            r.push_str(&format!("{k}: {v}\r\n"));
        }
        r.push_str("\r\n");
        r.into_bytes()
    }
}

/// Parse a URL list: one `URL [weight]` per line (weight a positive integer, default 1);
/// blank lines and `#` comments are skipped. Returns the rotation each connection follows,
/// with every URL appearing `weight` times, spread out (smooth weighted round robin).
pub fn parse_url_list(text: &str) -> Result<Vec<Target>, String> {
    let mut entries = Vec::new();
    for (line, url, weight) in url_list_lines(text)? {
        let target = Target::parse(url).map_err(|e| format!("line {line}: {e}"))?;
        entries.push((target, weight as i64));
    }
    if entries.is_empty() {
        return Err("the URL list is empty".into());
    }
    let total: i64 = entries.iter().map(|e| e.1).sum();
    let mut current = vec![0i64; entries.len()];
    let mut order = Vec::with_capacity(total as usize);
    for _ in 0..total {
        for (c, e) in current.iter_mut().zip(&entries) {
            *c += e.1;
        }
        let best = (0..entries.len())
            .max_by_key(|&i| (current[i], std::cmp::Reverse(i)))
            .unwrap_or(0);
        current[best] -= total;
        order.push(entries[best].0.clone());
    }
    Ok(order)
}

/// The lines of a URL list as (line number, URL, weight), before any URL is resolved.
pub fn url_list_lines(text: &str) -> Result<Vec<(usize, &str, u32)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let url = words.next().unwrap_or_default();
        let weight: u32 = match words.next() {
            None => 1,
            Some(w) => w
                .parse()
                .ok()
                .filter(|&w| w > 0 && w <= MAX_WEIGHT)
                .ok_or_else(|| {
                    format!(
                        "line {}: weight `{w}` is not an integer from 1 to {MAX_WEIGHT}",
                        n + 1
                    )
                })?,
        };
        if let Some(extra) = words.next() {
            return Err(format!(
                "line {}: unexpected `{extra}` after the weight",
                n + 1
            ));
        }
        out.push((n + 1, url, weight));
    }
    Ok(out)
}

/// Largest weight in a URL list (the rotation holds every URL `weight` times).
const MAX_WEIGHT: u32 = 1000;

/// "10s", "500ms", "2m" or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: u64 = s[..split]
        .parse()
        .map_err(|_| format!("`{s}` is not a duration"))?;
    let bad = || format!("`{s}` is not a duration (use e.g. 10s, 500ms, 2m)");
    match &s[split..] {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs).ok_or_else(bad),
        _ => Err(bad()),
    }
}

/// "16kbit", "2KB", "1Mbit", "500" (bytes) — per second; returns bytes per second.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let n: f64 = t[..split]
        .parse()
        .map_err(|_| format!("rate `{s}`: expected e.g. 16kbit, 2KB, 1Mbit"))?;
    let unit = t[split..].trim_end_matches("/s");
    let bytes = match unit {
        "" | "B" => n,
        "KB" | "kB" | "K" | "k" => n * 1000.0,
        "MB" | "M" => n * 1e6,
        "kbit" | "Kbit" => n * 1000.0 / 8.0,
        "Mbit" => n * 1e6 / 8.0,
        "Gbit" => n * 1e9 / 8.0,
        _ => return Err(format!("rate `{s}`: unknown unit `{unit}`")),
    };
    if bytes < 1.0 {
        return Err(format!("rate `{s}` is below 1 byte per second"));
    }
    Ok(bytes as u64)
}

/// `a,b,c` or `first-last` (IPv4, last octet counting up).
pub fn parse_sources(s: &str) -> Result<Vec<IpAddr>, String> {
    if let Some((a, b)) = s.split_once('-') {
        let (a, b): (std::net::Ipv4Addr, std::net::Ipv4Addr) = (
            a.trim()
                .parse()
                .map_err(|_| format!("source `{a}` is not an IPv4 address"))?,
            b.trim()
                .parse()
                .map_err(|_| format!("source `{b}` is not an IPv4 address"))?,
        );
        let (lo, hi) = (u32::from(a), u32::from(b));
        if hi < lo || hi - lo > 65_535 {
            return Err(format!("source range `{s}` is empty or too large"));
        }
        return Ok((lo..=hi)
            .map(|n| IpAddr::from(std::net::Ipv4Addr::from(n)))
            .collect());
    }
    s.split(',')
        .map(|a| {
            a.trim()
                .parse()
                .map_err(|_| format!("source `{a}` is not an IP address"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = Target::parse("http://127.0.0.1:8080/a/b?c").unwrap();
        assert_eq!(
            (t.addr.port(), t.host.as_str(), t.path.as_str()),
            (8080, "127.0.0.1:8080", "/a/b?c")
        );
        let t = Target::parse("http://[::1]:9/").unwrap();
        assert_eq!(t.addr, "[::1]:9".parse().unwrap());
        assert_eq!(Target::parse("http://127.0.0.1").unwrap().path, "/");
        assert!(Target::parse("https://x/").is_err());
    }

    #[test]
    fn weighted_lists_interleave() {
        let list = "# pages\nhttp://127.0.0.1:1/a 3\n\nhttp://127.0.0.1:1/b\n";
        let order: Vec<String> = parse_url_list(list)
            .unwrap()
            .into_iter()
            .map(|t| t.path)
            .collect();
        assert_eq!(order, ["/a", "/a", "/b", "/a"]);
        assert!(parse_url_list("http://127.0.0.1:1/a 0")
            .unwrap_err()
            .contains("line 1"));
        assert!(parse_url_list("\n#x\n").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("16kbit"), Ok(2000));
        assert_eq!(parse_rate("2KB"), Ok(2000));
        assert_eq!(parse_rate("1Mbit/s"), Ok(125_000));
        assert_eq!(parse_rate("300"), Ok(300));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("3 parsecs").is_err());
        assert!(parse_rate("0.1").is_err());
    }

    #[test]
    fn sources() {
        assert_eq!(parse_sources("127.0.0.1-127.0.0.3").unwrap().len(), 3);
        assert_eq!(
            parse_sources("127.0.0.2,::1").unwrap()[1],
            "::1".parse::<IpAddr>().unwrap()
        );
        assert!(parse_sources("127.0.0.9-127.0.0.1").is_err());
        assert!(parse_sources("host").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
    }
}
