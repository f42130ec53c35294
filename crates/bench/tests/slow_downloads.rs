//! Slow downloads against a small server written here: every connection is throttled to
//! within 5% of its rate, source addresses rotate, and failures are counted.

mod support;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ramjet_bench::{run_slow, Counter, SlowSpec, Target};
use support::server;

const BODY: usize = 1 << 20;

fn big(_: u64) -> Option<Vec<u8>> {
    let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\n\r\n").into_bytes();
    r.resize(r.len() + BODY, b'x');
    Some(r)
}

fn spec(addr: SocketAddr, connections: usize) -> SlowSpec {
    SlowSpec {
        target: Target {
            addr,
            host: "t".into(),
            path: "/big".into(),
        },
        connections,
        bytes_per_sec: 20_000,
        duration: Duration::from_secs(3),
        sources: vec!["127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()],
        threads: 2,
        cpus: vec![],
        connect_concurrency: 8,
        timeout: Duration::from_secs(5),
        recv_buffer: 4096,
        read_every: Duration::from_millis(500),
    }
}

#[test]
fn every_connection_is_held_at_its_rate() {
    let (addr, seen) = server(1, big);
    let done = Counter::default();
    let r = run_slow(&spec(addr, 12), &done);
    assert_eq!(
        (r.wanted, r.established, r.alive_at_end),
        (12, 12, 12),
        "{r:?}"
    );
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    assert_eq!(done.get(), 12);
    // Each within 5%: every connection in the 95%..105% buckets.
    assert_eq!(
        r.kept_rate,
        12,
        "min {:?} p50 {:?} bytes {}",
        r.rate_percentile(0.0),
        r.rate_percentile(0.5),
        r.bytes
    );
    let outside: u64 = r
        .rate_percent
        .iter()
        .enumerate()
        .filter(|(k, _)| !(95..=105).contains(k))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(outside, 0, "{:?}", r.rate_percentile(0.0));
    // In total: 12 connections x 20 kB/s x 3 s, less at most the last half-second read
    // interval (the client reads twice a second).
    let most = 12.0 * 20_000.0 * 3.0;
    let bytes = r.bytes as f64;
    assert!(
        bytes > most * 2.5 / 3.0 * 0.95 && bytes < most * 1.02,
        "{bytes} bytes"
    );
    let peers = seen.peers.lock().unwrap();
    let ips: std::collections::BTreeSet<IpAddr> = peers.iter().map(|p| p.ip()).collect();
    assert_eq!(ips.len(), 2, "both source addresses used: {ips:?}");
}

#[test]
fn a_file_that_ends_is_requested_again() {
    // 4 KB files at 20 kB/s: each connection asks ~15 times in 3 s on the same connection.
    let (addr, seen) = server(1, |_| {
        let mut r = b"HTTP/1.1 200 OK\r\nContent-Length: 4000\r\n\r\n".to_vec();
        r.resize(r.len() + 4000, b'y');
        Some(r)
    });
    let r = run_slow(&spec(addr, 2), &Counter::default());
    assert_eq!((r.alive_at_end, r.kept_rate, r.errors.total()), (2, 2, 0));
    assert_eq!(
        seen.connections.load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    assert!(seen.requests.load(std::sync::atomic::Ordering::Relaxed) >= 28);
}

#[test]
fn failures_are_counted_and_the_connection_retried() {
    // The body stops 1000 bytes in and the server closes.
    let (addr, _) = server(1, |_| {
        let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\n\r\n").into_bytes();
        r.resize(r.len() + 1000, b'x');
        r.extend_from_slice(support::CLOSE);
        Some(r)
    });
    let mut s = spec(addr, 2);
    s.duration = Duration::from_secs(2);
    let r = run_slow(&s, &Counter::default());
    // Each connection fails, waits 200 ms, and tries again; none keeps the rate.
    assert_eq!(r.kept_rate, 0, "{r:?}");
    assert!(r.errors.short_body >= 2, "{:?}", r.errors);
    assert!(r.errors.short_body < 30, "{:?}", r.errors);

    // A 404 is a status error.
    let (addr, _) = server(1, |_| {
        Some(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec())
    });
    let mut s = spec(addr, 1);
    s.duration = Duration::from_millis(500);
    let r = run_slow(&s, &Counter::default());
    assert!(r.errors.status >= 1 && r.alive_at_end == 0, "{r:?}");
}
