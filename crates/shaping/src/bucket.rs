//! Token buckets over byte counts.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Least useful grant to wait for: a full segment's worth of bytes.
const QUANTUM: u64 = 16 * 1024;

/// A send rate: `rate` bytes per second, with at most `capacity` saved up.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: u64,
    capacity: u64,
    tokens: u64,
    last: Instant,
}

impl TokenBucket {
    /// A bucket that starts full; the capacity is an eighth of a second at the rate (at
    /// least 4 KiB), so a throttled writer wakes about eight times a second.
    pub fn new(rate: u64, now: Instant) -> TokenBucket {
        let capacity = (rate / 8).max(4096);
        TokenBucket {
            rate: rate.max(1),
            capacity,
            tokens: capacity,
            last: now,
        }
    }

    pub fn rate(&self) -> u64 {
        self.rate
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last);
        let add = (dt.as_nanos() * u128::from(self.rate) / 1_000_000_000) as u64;
        if add > 0 {
            self.tokens = (self.tokens + add).min(self.capacity);
            // Advance by the time the added tokens took, keeping the remainder.
            self.last += Duration::from_nanos(
                (u128::from(add) * 1_000_000_000 / u128::from(self.rate)) as u64,
            );
            if self.tokens == self.capacity {
                self.last = now;
            }
        }
    }

    /// How many of `want` bytes may go now (taken from the bucket).
    pub fn take(&mut self, want: u64, now: Instant) -> u64 {
        self.refill(now);
        let n = want.min(self.tokens);
        self.tokens -= n;
        n
    }

    /// Return bytes taken but not sent.
    pub fn give_back(&mut self, n: u64) {
        self.tokens = (self.tokens + n).min(self.capacity);
    }

    /// How long until a useful amount may go (zero: now).
    pub fn ready_in(&mut self, now: Instant) -> Duration {
        self.refill(now);
        let useful = QUANTUM.min(self.capacity);
        if self.tokens >= useful {
            return Duration::ZERO;
        }
        let missing = useful - self.tokens;
        Duration::from_nanos(
            (u128::from(missing) * 1_000_000_000 / u128::from(self.rate)) as u64 + 1,
        )
    }
}

/// A bucket shared by many connections on any worker (a location's or a client's rate).
/// Locked once per write attempt of a throttled connection, never per packet.
#[derive(Debug)]
pub struct SharedBucket(Mutex<TokenBucket>);

impl SharedBucket {
    pub fn new(rate: u64) -> SharedBucket {
        SharedBucket(Mutex::new(TokenBucket::new(rate, Instant::now())))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TokenBucket> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn take(&self, want: u64, now: Instant) -> u64 {
        self.lock().take(want, now)
    }

    pub fn give_back(&self, n: u64) {
        self.lock().give_back(n)
    }

    pub fn ready_in(&self, now: Instant) -> Duration {
        self.lock().ready_in(now)
    }

    pub fn rate(&self) -> u64 {
        self.lock().rate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_grants_its_rate_over_time() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(80_000, t0);
        // Starts with its capacity (10,000 bytes).
        assert_eq!(b.take(1_000_000, t0), 10_000);
        assert_eq!(b.take(1, t0), 0);
        assert!(b.ready_in(t0) > Duration::ZERO);
        // Over 10 s, 800,000 bytes (give or take the capacity), taken in small steps.
        let mut sent = 0;
        for ms in 1..=10_000u64 {
            sent += b.take(1_000_000, t0 + Duration::from_millis(ms));
        }
        assert!((799_000..=801_000).contains(&sent), "{sent}");
        // Unsent bytes come back, up to the capacity.
        b.give_back(500);
        assert_eq!(b.take(1_000_000, t0 + Duration::from_millis(10_000)), 500);
    }

    #[test]
    fn ready_in_waits_for_a_useful_amount() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1_000_000, t0);
        b.take(u64::MAX, t0);
        // 16 KiB at 1 MB/s: about 16 ms.
        let wait = b.ready_in(t0);
        assert!(
            wait >= Duration::from_millis(16) && wait <= Duration::from_millis(17),
            "{wait:?}"
        );
        assert_eq!(b.ready_in(t0 + wait), Duration::ZERO);
        // A tiny rate waits for its capacity (4 KiB), not 16 KiB.
        let mut slow = TokenBucket::new(1024, t0);
        slow.take(u64::MAX, t0);
        let wait = slow.ready_in(t0);
        assert!(
            wait >= Duration::from_secs(4) && wait < Duration::from_millis(4010),
            "{wait:?}"
        );
    }
}
