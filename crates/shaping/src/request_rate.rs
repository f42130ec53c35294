//! Request-rate limits per client address (nginx `limit_req ... burst=N nodelay`): the
//! generic cell rate algorithm, one "theoretical arrival time" per client. A request
//! within the rate, or within `burst` requests ahead of it, is admitted at once; the rest
//! are refused with how long to wait.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::clients::{canonical, ClientTable};

/// Past this many clients in a shard, expired entries are swept on insert.
const SWEEP_AT: usize = 4096;

/// Whether a request may go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Admit,
    /// Over the limit: retry after this long.
    Refuse(Duration),
}

/// A request rate with a burst, per client address.
#[derive(Debug)]
pub struct RequestRate {
    /// Time between requests at the rate.
    interval: Duration,
    /// How far ahead of the rate a client may get (`burst` intervals).
    tolerance: Duration,
    clients: ClientTable<Instant>,
}

impl RequestRate {
    /// `per_second` requests a second (may be fractional: 0.5 is one every two seconds),
    /// and `burst` more at once.
    pub fn new(per_second: f64, burst: u32) -> RequestRate {
        let interval = Duration::from_secs_f64(1.0 / per_second.max(1e-6));
        RequestRate {
            interval,
            tolerance: interval * burst,
            clients: ClientTable::new(),
        }
    }

    pub fn check(&self, ip: IpAddr, now: Instant) -> Verdict {
        let ip = canonical(ip);
        let mut shard = self.clients.shard(ip);
        let tat = shard.get(&ip).copied().unwrap_or(now).max(now);
        // Admit when the new arrival time stays within the tolerance of now.
        let allowed_at = tat.checked_sub(self.tolerance).unwrap_or(now);
        if allowed_at > now {
            return Verdict::Refuse(allowed_at - now);
        }
        if shard.len() >= SWEEP_AT && !shard.contains_key(&ip) {
            shard.retain(|_, t| *t > now);
        }
        shard.insert(ip, tat + self.interval);
        Verdict::Admit
    }

    /// Clients with state (for tests).
    pub fn clients(&self) -> usize {
        self.clients.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let r = RequestRate::new(2.0, 3);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let t0 = Instant::now();
        // One at the rate plus a burst of 3 go at once; the fifth waits.
        for i in 0..4 {
            assert_eq!(r.check(ip, t0), Verdict::Admit, "{i}");
        }
        let Verdict::Refuse(wait) = r.check(ip, t0) else {
            panic!("the fifth is over the burst");
        };
        assert_eq!(wait, Duration::from_millis(500));
        // Another client is not affected.
        assert_eq!(r.check(other, t0), Verdict::Admit);
        // After the wait, one more.
        assert_eq!(r.check(ip, t0 + wait), Verdict::Admit);
        assert!(matches!(r.check(ip, t0 + wait), Verdict::Refuse(_)));
        // Long after, the whole burst again.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..4 {
            assert_eq!(r.check(ip, later), Verdict::Admit);
        }
    }

    #[test]
    fn mapped_ipv4_counts_as_ipv4() {
        let r = RequestRate::new(1.0, 0);
        let t0 = Instant::now();
        assert_eq!(r.check("10.1.1.1".parse().unwrap(), t0), Verdict::Admit);
        assert!(matches!(
            r.check("::ffff:10.1.1.1".parse().unwrap(), t0),
            Verdict::Refuse(_)
        ));
    }
}
