//! Picking a server: smooth weighted round-robin (nginx's), least connections (weighted,
//! per worker), and consistent hashing (ketama-style ring, 160 points per unit of weight)
//! by request target or client address. A server that is down or was already tried for
//! this request is skipped; a hash then walks the ring to the next one, so only the keys of
//! the missing server move.

use ramjet_config::{Balance, Upstream};

/// Ring points per unit of weight (ketama uses 160).
const POINTS_PER_WEIGHT: u32 = 160;

/// Per-worker balancing state of one upstream.
pub(crate) struct Balancer {
    /// Smooth WRR current weights.
    current: Vec<i64>,
    /// Where least-connections ties start, rotated per pick.
    next: usize,
    /// Sorted (point, server) pairs, built once for hash balancing.
    ring: Vec<(u64, usize)>,
}

/// FNV-1a, 64 bit: tiny, stable across runs and processes (a hash ring must be).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // Finalise (murmur3 fmix64) so close keys spread over the ring.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

impl Balancer {
    pub(crate) fn new(u: &Upstream) -> Balancer {
        let mut ring = Vec::new();
        if matches!(u.balance, Balance::HashUri | Balance::HashClient) {
            for (i, s) in u.servers.iter().enumerate() {
                let name = s.addr.to_string();
                for p in 0..POINTS_PER_WEIGHT * s.weight {
                    ring.push((fnv1a(format!("{name}-{p}").as_bytes()), i));
                }
            }
            ring.sort_unstable();
        }
        Balancer {
            current: vec![0; u.servers.len()],
            next: 0,
            ring,
        }
    }

    /// The server for a request: `eligible(i)` says whether server i may be used,
    /// `in_flight(i)` how many requests it has from this worker, `key` the hash of the
    /// target or client for hash balancing.
    pub(crate) fn pick(
        &mut self,
        u: &Upstream,
        key: u64,
        eligible: impl Fn(usize) -> bool,
        in_flight: impl Fn(usize) -> u32,
    ) -> Option<usize> {
        let n = u.servers.len();
        match u.balance {
            Balance::RoundRobin => {
                let mut total = 0i64;
                let mut best: Option<usize> = None;
                for i in 0..n {
                    if !eligible(i) {
                        continue;
                    }
                    let w = i64::from(u.servers[i].weight);
                    self.current[i] += w;
                    total += w;
                    if best.is_none_or(|b| self.current[i] > self.current[b]) {
                        best = Some(i);
                    }
                }
                let b = best?;
                self.current[b] -= total;
                Some(b)
            }
            Balance::LeastConnections => {
                let start = self.next;
                let mut best: Option<usize> = None;
                for k in 0..n {
                    let i = (start + k) % n;
                    if !eligible(i) {
                        continue;
                    }
                    // in_flight/weight smallest, compared without division.
                    let better = best.is_none_or(|b| {
                        u64::from(in_flight(i)) * u64::from(u.servers[b].weight)
                            < u64::from(in_flight(b)) * u64::from(u.servers[i].weight)
                    });
                    if better {
                        best = Some(i);
                    }
                }
                // The next tie starts after this pick.
                if let Some(b) = best {
                    self.next = (b + 1) % n;
                }
                best
            }
            Balance::HashUri | Balance::HashClient => {
                if self.ring.is_empty() {
                    return None;
                }
                let at = self.ring.partition_point(|&(p, _)| p < key);
                (0..self.ring.len())
                    .map(|k| self.ring[(at + k) % self.ring.len()].1)
                    .find(|&i| eligible(i))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramjet_config::{UpstreamAddr, UpstreamServer};

    fn upstream(balance: Balance, weights: &[u32]) -> Upstream {
        let src = "[upstream.u]\nservers = [\"127.0.0.1:1\"]\n[[location]]\nproxy = \"u\"\n";
        let mut u = ramjet_config::load_str(src, "t", std::path::Path::new("."))
            .unwrap()
            .upstreams[0]
            .clone();
        u.balance = balance;
        u.servers = weights
            .iter()
            .enumerate()
            .map(|(i, &weight)| UpstreamServer {
                addr: UpstreamAddr::Tcp(([127, 0, 0, 1], 8000 + i as u16).into()),
                weight,
                metrics: 0,
            })
            .collect();
        u
    }

    #[test]
    fn round_robin_follows_weights_smoothly() {
        let u = upstream(Balance::RoundRobin, &[5, 1, 1]);
        let mut b = Balancer::new(&u);
        let picks: Vec<usize> = (0..7)
            .map(|_| b.pick(&u, 0, |_| true, |_| 0).unwrap())
            .collect();
        // nginx's documented sequence for weights 5,1,1: a a b a c a a.
        assert_eq!(picks, vec![0, 0, 1, 0, 2, 0, 0]);
        // A down server is skipped, the others share its traffic.
        let picks: Vec<usize> = (0..4)
            .map(|_| b.pick(&u, 0, |i| i != 0, |_| 0).unwrap())
            .collect();
        assert!(picks.iter().all(|&i| i != 0) && picks.contains(&1) && picks.contains(&2));
        assert_eq!(b.pick(&u, 0, |_| false, |_| 0), None);
    }

    #[test]
    fn least_connections_prefers_the_idle_server() {
        let u = upstream(Balance::LeastConnections, &[1, 1, 2]);
        let mut b = Balancer::new(&u);
        let flights = [3u32, 1, 3];
        // 1/1 < 3/2 < 3/1.
        assert_eq!(b.pick(&u, 0, |_| true, |i| flights[i]), Some(1));
        assert_eq!(b.pick(&u, 0, |i| i != 1, |i| flights[i]), Some(2));
        // Ties rotate.
        let a = b.pick(&u, 0, |i| i != 2, |_| 0).unwrap();
        let c = b.pick(&u, 0, |i| i != 2, |_| 0).unwrap();
        assert_ne!(a, c);
    }

    #[test]
    fn hash_is_stable_and_moves_only_the_missing_servers_keys() {
        let u = upstream(Balance::HashUri, &[1, 1, 1, 1]);
        let mut b = Balancer::new(&u);
        let keys: Vec<u64> = (0..2000)
            .map(|k| fnv1a(format!("/obj/{k}").as_bytes()))
            .collect();
        let all: Vec<usize> = keys
            .iter()
            .map(|&k| b.pick(&u, k, |_| true, |_| 0).unwrap())
            .collect();
        for s in 0..4 {
            let share = all.iter().filter(|&&x| x == s).count();
            assert!(
                (300..=700).contains(&share),
                "server {s} got {share} of 2000 keys"
            );
        }
        let again: Vec<usize> = keys
            .iter()
            .map(|&k| b.pick(&u, k, |_| true, |_| 0).unwrap())
            .collect();
        assert_eq!(all, again);
        let without: Vec<usize> = keys
            .iter()
            .map(|&k| b.pick(&u, k, |i| i != 2, |_| 0).unwrap())
            .collect();
        for (a, w) in all.iter().zip(&without) {
            if *a != 2 {
                assert_eq!(a, w, "a key of a live server moved");
            } else {
                assert_ne!(*w, 2);
            }
        }
    }
}
