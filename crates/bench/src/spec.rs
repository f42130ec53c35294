//! What a load run sends.

use std::net::SocketAddr;
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

/// A closed-loop run: every connection sends its next request(s) when the previous answers
/// arrive.
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
}

impl Spec {
    /// The request bytes for target `t`.
    pub(crate) fn request(&self, t: &Target) -> Vec<u8> {
        let version = if self.http10 { "HTTP/1.0" } else { "HTTP/1.1" };
        let mut r = format!("GET {} {version}\r\nHost: {}\r\n", t.path, t.host);
        match (self.http10, self.keep_alive) {
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

/// "10s", "500ms", "2m" or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: u64 = s[..split]
        .parse()
        .map_err(|_| format!("`{s}` is not a duration"))?;
    match &s[split..] {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("`{s}` is not a duration (use e.g. 10s, 500ms, 2m)")),
    }
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
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
    }
}
