//! Send rates on the way out (`limit_rate`, `limit_rate_after`, `limit_rate_client`,
//! `limit_rate_location`, `limits.send_rate`): a [`Sink`] in front of the socket that
//! writes only what every bucket grants and, when one is empty, sleeps once until it holds
//! a useful amount. Connections without a rate never see it (the flush is not wrapped).

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ramjet_config::{Location, Resolved};
use ramjet_shaping::{SharedBucket, TokenBucket};

use crate::outbox::{Sink, WriteError};

/// Most iovecs a throttled write passes on (the callers use at most this many).
const MAX_IOV: usize = 64;

/// A connection's send rates, for the location its last response came from.
pub(crate) struct Throttle {
    /// What the rates were made for: the location (by address) in configuration generation
    /// `.1` (a reload may put a new location where an old one was).
    key: (usize, u64),
    own: Option<TokenBucket>,
    /// `limit_rate_after`, and what is left of it in this flush.
    after: u64,
    after_left: u64,
    shared: [Option<Arc<SharedBucket>>; 3],
    /// Of the last grant: how many bytes, and how many of those were free of `own`.
    granted: u64,
    granted_free: u64,
}

impl Throttle {
    /// The rates that apply to a response of `location` to `peer` (`None`: none).
    pub(crate) fn of(
        (location, generation): (Option<&Location>, u64),
        config: &Resolved,
        peer: SocketAddr,
        current: Option<Box<RefCell<Throttle>>>,
    ) -> Option<Box<RefCell<Throttle>>> {
        let shaping = location.and_then(|l| l.shaping.as_deref());
        let sends = shaping
            .is_some_and(|s| s.rate.is_some() || s.client_rate.is_some() || s.location.is_some());
        if !sends && config.send_rate.is_none() {
            return None;
        }
        let key = (
            location.map_or(0, |l| l as *const Location as usize),
            generation,
        );
        if let Some(t) = current {
            if t.borrow().key == key {
                return Some(t);
            }
        }
        let now = Instant::now();
        Some(Box::new(RefCell::new(Throttle {
            key,
            own: shaping
                .and_then(|s| s.rate)
                .map(|r| TokenBucket::new(r, now)),
            after: shaping.map_or(0, |s| s.rate_after),
            after_left: 0,
            shared: [
                shaping.and_then(|s| s.client_bucket(peer.ip())),
                shaping.and_then(|s| s.location.clone()),
                config.send_rate.clone(),
            ],
            granted: 0,
            granted_free: 0,
        })))
    }

    /// A new batch of responses: `limit_rate_after` starts over.
    pub(crate) fn begin_flush(&mut self) {
        self.after_left = self.after;
    }

    /// Wait until some of `want` bytes may go, and take them from every bucket: how many
    /// (at least one). For an HTTP/2 stream, whose bytes leave through h2, not a `Sink`.
    pub(crate) async fn admit(&mut self, want: u64) -> u64 {
        loop {
            let n = self.grant(want, Instant::now());
            if n > 0 {
                self.used(n);
                return n;
            }
            tokio::time::sleep(self.ready_in(Instant::now())).await;
        }
    }

    /// How many of `want` bytes may be written now (taken from every bucket).
    fn grant(&mut self, want: u64, now: Instant) -> u64 {
        let free = self.after_left.min(want);
        let mut n = want;
        let mut own_taken = 0;
        if let Some(b) = &mut self.own {
            if n > free {
                own_taken = b.take(n - free, now);
                n = free + own_taken;
            }
        }
        let mut taken = [0u64; 3];
        for (i, s) in self.shared.iter().enumerate() {
            if let Some(s) = s {
                taken[i] = s.take(n, now);
                n = n.min(taken[i]);
            }
        }
        for (i, s) in self.shared.iter().enumerate() {
            if let Some(s) = s {
                s.give_back(taken[i] - n);
            }
        }
        if let Some(b) = &mut self.own {
            b.give_back(own_taken - n.saturating_sub(free).min(own_taken));
        }
        self.granted = n;
        self.granted_free = free.min(n);
        n
    }

    /// `used` of the last grant went out; the rest goes back.
    fn used(&mut self, used: u64) {
        let unused = self.granted - used.min(self.granted);
        for s in self.shared.iter().flatten() {
            s.give_back(unused);
        }
        let own_granted = self.granted - self.granted_free;
        let own_used = used.saturating_sub(self.granted_free).min(own_granted);
        if let Some(b) = &mut self.own {
            b.give_back(own_granted - own_used);
        }
        self.after_left -= used.min(self.granted_free);
        self.granted = 0;
        self.granted_free = 0;
    }

    /// How long until every bucket holds a useful amount.
    fn ready_in(&mut self, now: Instant) -> Duration {
        let mut wait = Duration::ZERO;
        if self.after_left == 0 {
            if let Some(b) = &mut self.own {
                wait = wait.max(b.ready_in(now));
            }
        }
        for s in self.shared.iter().flatten() {
            wait = wait.max(s.ready_in(now));
        }
        wait
    }
}

/// The socket behind a connection's send rates.
pub(crate) struct Throttled<'a> {
    pub(crate) stream: &'a crate::transport::Transport,
    pub(crate) throttle: &'a RefCell<Throttle>,
}

impl Throttled<'_> {
    fn attempt(
        &self,
        want: u64,
        write: impl FnOnce(u64) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let mut t = self.throttle.borrow_mut();
        let n = t.grant(want, Instant::now());
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let r = write(n);
        t.used(*r.as_ref().unwrap_or(&0) as u64);
        r
    }
}

impl Sink for Throttled<'_> {
    fn try_writev(&self, iov: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        let want: u64 = iov.iter().map(|s| s.len() as u64).sum();
        self.attempt(want, |n| {
            if n == want {
                return Sink::try_writev(self.stream, iov, more);
            }
            // The first `n` bytes only.
            let mut cut = [IoSlice::new(&[]); MAX_IOV];
            let mut left = n as usize;
            let mut k = 0;
            for s in iov.iter().take(MAX_IOV) {
                if left == 0 {
                    break;
                }
                let take = s.len().min(left);
                cut[k] = IoSlice::new(&s[..take]);
                k += 1;
                left -= take;
            }
            Sink::try_writev(self.stream, &cut[..k], more)
        })
    }

    fn try_sendfile(&self, file: &File, offset: u64, len: usize) -> io::Result<usize> {
        self.attempt(len as u64, |n| {
            Sink::try_sendfile(self.stream, file, offset, n as usize)
        })
    }

    fn max_segment(&self) -> Option<usize> {
        self.stream.max_segment()
    }

    fn paced(&self) -> bool {
        self.stream.paced()
    }

    async fn writable(&self, timeout: Duration) -> Result<(), WriteError> {
        let wait = self.throttle.borrow_mut().ready_in(Instant::now());
        if wait > Duration::ZERO {
            // Waiting for the rate, not for the client: the send timeout does not run.
            tokio::time::sleep(wait).await;
            return Ok(());
        }
        Sink::writable(self.stream, timeout).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn throttle(rate: Option<u64>, after: u64, shared: Option<u64>) -> Throttle {
        Throttle {
            key: (0, 0),
            own: rate.map(|r| TokenBucket::new(r, Instant::now())),
            after,
            after_left: after,
            shared: [shared.map(|r| Arc::new(SharedBucket::new(r))), None, None],
            granted: 0,
            granted_free: 0,
        }
    }

    #[test]
    fn after_bytes_go_free_then_the_rate_applies() {
        let now = Instant::now();
        // 80 kB/s: a 10,000-byte bucket; 50,000 bytes free first.
        let mut t = throttle(Some(80_000), 50_000, None);
        assert_eq!(t.grant(40_000, now), 40_000);
        t.used(40_000);
        // 10,000 free left + the bucket's 10,000.
        assert_eq!(t.grant(100_000, now), 20_000);
        // Only 5,000 went out: the rest comes back, free bytes first used.
        t.used(5_000);
        assert_eq!(t.after_left, 5_000);
        assert_eq!(t.grant(100_000, now), 15_000);
        t.used(15_000);
        assert_eq!(t.grant(1, now), 0);
        assert!(t.ready_in(now) > Duration::ZERO);
    }

    #[test]
    fn the_smallest_bucket_decides_and_the_others_get_their_bytes_back() {
        let now = Instant::now();
        // Own: 80 kB/s (10,000 at once); shared: 8 kB/s (4,096 at once).
        let mut t = throttle(Some(80_000), 0, Some(8_000));
        assert_eq!(t.grant(100_000, now), 4_096);
        t.used(4_096);
        // The own bucket lost only what went out.
        assert_eq!(t.own.as_mut().unwrap().take(u64::MAX, now), 10_000 - 4_096);
    }
}
