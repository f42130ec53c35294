//! The open loop and sweeps against small servers written here: the schedule offers
//! exactly rate x duration requests whatever the server does, never more; overload shows as
//! latency, unfinished requests and errors rather than a slower client. Achieved rates are
//! checked only loosely from below (a slow, shared CI machine may finish fewer in time) and
//! strictly from above (no more than was offered).

mod support;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ramjet_bench::{run, sweep, Spec, Target};
use support::server;

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

fn spec(addr: SocketAddr, rate: f64, seconds: u64) -> Spec {
    Spec {
        targets: vec![Target {
            addr,
            host: "t".into(),
            path: "/".into(),
        }],
        connections: 10,
        duration: Some(Duration::from_secs(seconds)),
        rate: Some(rate),
        expect_length: Some(5),
        timeout: Duration::from_secs(5),
        ..Spec::default()
    }
}

/// At most `target` (plus the 5% the clock's granularity allows) and at least half of it:
/// the loose lower bound a loaded 2-core machine still keeps.
fn kept(actual: f64, target: f64) -> bool {
    actual <= target * 1.05 && actual >= target * 0.5
}

#[test]
fn keep_alive_offers_exactly_the_schedule() {
    let (addr, seen) = server(1, |_| Some(OK.to_vec()));
    let r = run(&spec(addr, 2000.0, 2));
    assert_eq!(r.offered, Some(4000));
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    assert!(
        kept(r.requests_per_sec(), 2000.0),
        "{}",
        r.requests_per_sec()
    );
    assert_eq!(r.responses + r.unfinished(), 4000);
    let served = seen.requests.load(Ordering::Relaxed);
    assert!(
        served <= 4000 && served >= r.responses,
        "server saw {served}"
    );
    // The schedule was shared by the ten connections, each opened once.
    assert_eq!(seen.connections.load(Ordering::Relaxed), 10);
}

#[test]
fn without_keep_alive_every_arrival_is_a_new_connection_at_the_rate() {
    let (addr, seen) = server(1, |_| {
        Some(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello".to_vec())
    });
    let mut s = spec(addr, 500.0, 2);
    s.keep_alive = false;
    // A cap no arrival can reach, so a busy CI machine slowing the test server shows up
    // as latency, not as overflow errors.
    s.connections = 1000;
    let r = run(&s);
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    assert_eq!(r.responses + r.unfinished(), 1000);
    assert!(kept(r.responses as f64, 1000.0), "{}", r.responses);
    // One connection per arrival: as many as were answered, never more than offered.
    let conns = seen.connections.load(Ordering::Relaxed);
    assert!(conns >= r.responses && conns <= 1000, "{conns} connections");
}

#[test]
fn overload_shows_as_latency_and_unfinished_work_not_a_slower_client() {
    // 5 connections to a server that takes 50 ms per answer: at most ~100 answers/s.
    let (addr, _) = server(1, |_| {
        std::thread::sleep(Duration::from_millis(50));
        Some(OK.to_vec())
    });
    let mut s = spec(addr, 400.0, 2);
    s.connections = 5;
    let r = run(&s);
    assert_eq!(r.offered_per_sec(), Some(400.0));
    assert!(r.requests_per_sec() < 120.0, "{}", r.requests_per_sec());
    assert!(r.unfinished() > 500, "{}", r.unfinished());
    // Requests wait behind earlier ones: that wait is counted, so the median is far above
    // the 50 ms service time (a closed loop would report ~50 ms).
    assert!(r.pct_ms(0.5) > 300.0, "p50 {} ms", r.pct_ms(0.5));
}

#[test]
fn arrivals_over_the_connection_cap_are_overflow_errors() {
    // A server that never answers: the first 5 connections stay open to the end.
    let (addr, _) = server(1, |_| {
        std::thread::sleep(Duration::from_secs(30));
        None
    });
    let mut s = spec(addr, 200.0, 1);
    s.keep_alive = false;
    s.connections = 5;
    let r = run(&s);
    assert_eq!(r.responses, 0);
    assert_eq!(r.errors.overflow, 195, "{:?}", r.errors);
    assert_eq!(r.unfinished(), 5);
}

#[test]
fn sweep_steps_hit_their_rates() {
    let (addr, _) = server(1, |_| Some(OK.to_vec()));
    let steps = sweep(
        &spec(addr, 1.0, 1),
        &[500.0, 1500.0],
        Duration::ZERO,
        |_| {},
    );
    assert_eq!(steps.len(), 2);
    for (step, rate) in steps.iter().zip([500.0, 1500.0]) {
        assert_eq!(step.offered, rate);
        assert!(kept(step.achieved, rate), "{step:?}");
        assert_eq!(step.errors, 0);
    }
}
