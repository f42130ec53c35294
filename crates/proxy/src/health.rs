//! Whether a server gets traffic. Passive: `max_fails` failures (connect errors, timeouts,
//! invalid responses) within `fail_timeout` mark it down for `fail_timeout` (nginx's
//! rule). Active: with `health_check`, a GET of that path every `health_interval`; a 2xx or
//! 3xx answer within the header timeout is up, anything else is down until a check passes.
//! State is per worker, like the pools (nginx without a shared zone does the same).

use std::time::Duration;

use bytes::BytesMut;
use ramjet_config::UpstreamAddr;
use tokio::time::Instant;

use crate::upstream_io::Io;

/// Largest health-check response head read.
const MAX_CHECK_HEAD: usize = 16 << 10;

#[derive(Debug, Default)]
pub(crate) struct Health {
    fails: u32,
    window_start: Option<Instant>,
    down_until: Option<Instant>,
    /// The last active check failed.
    pub(crate) check_failed: bool,
    /// An active check is running.
    pub(crate) checking: bool,
}

impl Health {
    pub(crate) fn is_up(&self, now: Instant) -> bool {
        !self.check_failed && self.down_until.is_none_or(|t| now >= t)
    }

    /// Count a failure; true when it marks the server down.
    pub(crate) fn failed(&mut self, now: Instant, max_fails: u32, window: Duration) -> bool {
        if max_fails == 0 {
            return false;
        }
        if self
            .window_start
            .is_none_or(|s| now.saturating_duration_since(s) >= window)
        {
            self.window_start = Some(now);
            self.fails = 0;
        }
        self.fails += 1;
        if self.fails >= max_fails {
            self.down_until = Some(now + window);
            self.fails = 0;
            self.window_start = None;
            return true;
        }
        false
    }

    pub(crate) fn succeeded(&mut self) {
        self.fails = 0;
        self.window_start = None;
        self.down_until = None;
    }
}

/// One active check: `GET path` on a new connection; `Ok(status)` for a 2xx/3xx.
pub(crate) async fn check(
    addr: &UpstreamAddr,
    path: &str,
    connect_timeout: Duration,
    timeout: Duration,
) -> Result<u16, String> {
    let io = Io::connect(addr, connect_timeout)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let host = match addr {
        UpstreamAddr::Tcp(a) => a.to_string(),
        UpstreamAddr::Unix(_) => "localhost".to_string(),
    };
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: ramjet-health-check\r\nConnection: close\r\n\r\n"
    );
    io.write_all(&[req.as_bytes()], timeout)
        .await
        .map_err(|e| format!("send: {e}"))?;
    let read = async {
        let mut buf = BytesMut::with_capacity(4096);
        loop {
            io.readable().await.map_err(|e| format!("read: {e}"))?;
            match io.try_read_buf(&mut buf) {
                Ok(0) => return Err("closed before a response".to_string()),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(format!("read: {e}")),
            }
            let mut fields = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut fields);
            match resp.parse(&buf) {
                Ok(httparse::Status::Complete(_)) => {
                    let status = resp.code.unwrap_or(0);
                    return if (200..400).contains(&status) {
                        Ok(status)
                    } else {
                        Err(format!("status {status}"))
                    };
                }
                Ok(httparse::Status::Partial) if buf.len() < MAX_CHECK_HEAD => {
                    buf.reserve(4096);
                }
                _ => return Err("invalid response".to_string()),
            }
        }
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(r) => r,
        Err(_) => Err(format!("no response within {timeout:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passive_marks_down_after_max_fails_within_window() {
        let now = Instant::now();
        let w = Duration::from_secs(10);
        let mut h = Health::default();
        assert!(!h.failed(now, 2, w));
        assert!(h.is_up(now));
        assert!(h.failed(now + Duration::from_secs(1), 2, w));
        assert!(!h.is_up(now + Duration::from_secs(2)));
        assert!(
            h.is_up(now + Duration::from_secs(12)),
            "up again after the window"
        );
        // Failures further apart than the window do not add up.
        let mut h = Health::default();
        assert!(!h.failed(now, 2, w));
        assert!(!h.failed(now + Duration::from_secs(11), 2, w));
        // max_fails = 0 never marks down.
        assert!(!Health::default().failed(now, 0, w));
        let mut h = Health::default();
        h.failed(now, 1, w);
        h.succeeded();
        assert!(h.is_up(now));
    }
}
