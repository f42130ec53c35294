//! The closed loop against small servers written here: exact counts, keep-alive,
//! pipelining, and every error kind counted.

mod support;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;

use support::server;

use ramjet_bench::{run, Spec, Target};

fn spec(addr: SocketAddr) -> Spec {
    Spec {
        targets: vec![Target {
            addr,
            host: "t".into(),
            path: "/".into(),
        }],
        connections: 8,
        duration: None,
        requests: Some(1000),
        keep_alive: true,
        http10: false,
        pipeline: 1,
        headers: vec![],
        threads: 2,
        timeout: Duration::from_secs(5),
        expect_length: Some(5),
        rate: None,
        cpus: vec![],
        discard_body: false,
        per_connection: None,
        http2: false,
        tls: false,
    }
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

#[test]
fn exact_counts_with_keep_alive() {
    let (addr, seen) = server(1, |_| Some(OK.to_vec()));
    let r = run(&spec(addr));
    assert_eq!(r.responses, 1000);
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    assert_eq!(seen.requests.load(Ordering::Relaxed), 1000);
    assert_eq!(seen.connections.load(Ordering::Relaxed), 8);
    assert_eq!(r.bytes, 1000 * OK.len() as u64);
    assert_eq!(r.latency.len(), 1000);
}

#[test]
fn without_keep_alive_every_request_has_its_connection() {
    let (addr, seen) = server(1, |_| {
        Some(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello".to_vec())
    });
    let mut s = spec(addr);
    s.keep_alive = false;
    s.requests = Some(200);
    let r = run(&s);
    assert_eq!((r.responses, r.errors.total()), (200, 0));
    assert_eq!(seen.connections.load(Ordering::Relaxed), 200);
}

#[test]
fn pipelining_keeps_depth_requests_in_flight() {
    // This server answers only when 4 requests have arrived: without pipelining it would stall.
    let (addr, seen) = server(4, |_| Some(OK.to_vec()));
    let mut s = spec(addr);
    s.pipeline = 4;
    s.connections = 1;
    s.requests = Some(800);
    let r = run(&s);
    assert_eq!((r.responses, r.errors.total()), (800, 0), "{:?}", r.errors);
    assert_eq!(seen.requests.load(Ordering::Relaxed), 800);
}

#[test]
fn errors_are_counted_by_kind() {
    // Every 10th request gets a 500.
    let (addr, _) = server(1, |n| {
        Some(if n % 10 == 9 {
            b"HTTP/1.1 500 Oops\r\nContent-Length: 5\r\n\r\nerror".to_vec()
        } else {
            OK.to_vec()
        })
    });
    let mut s = spec(addr);
    s.connections = 1;
    s.requests = Some(100);
    let r = run(&s);
    assert_eq!((r.responses, r.errors.status), (100, 10));

    // A body shorter than its Content-Length, then close.
    let (addr, _) = server(1, |_| {
        Some(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello".to_vec()).filter(|_| true)
    });
    let mut s = spec(addr);
    s.connections = 1;
    s.requests = Some(3);
    s.timeout = Duration::from_millis(300);
    let r = run(&s);
    assert_eq!(r.responses, 0);
    assert_eq!(r.errors.timeout + r.errors.short_body, 3, "{:?}", r.errors);

    // The server closes without answering.
    let (addr, _) = server(1, |_| None);
    let mut s = spec(addr);
    s.requests = Some(20);
    let r = run(&s);
    assert_eq!((r.responses, r.errors.reset), (0, 20), "{:?}", r.errors);

    // Not HTTP at all.
    let (addr, _) = server(1, |_| Some(b"SSH-2.0-nope\r\n\r\n".to_vec()));
    let mut s = spec(addr);
    s.requests = Some(5);
    let r = run(&s);
    assert_eq!(r.errors.invalid, 5, "{:?}", r.errors);

    // Wrong length when one is expected.
    let (addr, _) = server(1, |_| {
        Some(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc".to_vec())
    });
    let mut s = spec(addr);
    s.requests = Some(7);
    let r = run(&s);
    assert_eq!((r.responses, r.errors.short_body), (7, 7));

    // Nobody listening.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut s = spec(port);
    s.connections = 1;
    s.requests = None;
    s.duration = Some(Duration::from_millis(200));
    let r = run(&s);
    assert!(r.errors.connect > 0 && r.responses == 0);
}

#[test]
fn duration_bounds_the_run() {
    let (addr, _) = server(1, |_| Some(OK.to_vec()));
    let mut s = spec(addr);
    s.requests = None;
    s.duration = Some(Duration::from_millis(300));
    let r = run(&s);
    assert!(r.responses > 0 && r.errors.total() == 0);
    assert!(r.elapsed < Duration::from_secs(5));
    let _ = TcpStream::connect(addr);
}

/// A 3 MiB body answered twice per connection, then a 3 MiB promise cut short.
fn big(n: u64) -> Option<Vec<u8>> {
    let len = 3 << 20;
    let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n").into_bytes();
    let send = if n % 3 == 2 { len / 2 } else { len };
    r.resize(r.len() + send, b'x');
    if n % 3 == 2 {
        r.extend_from_slice(support::CLOSE);
    }
    Some(r)
}

#[test]
fn discarded_bodies_are_counted_and_a_short_one_is_an_error() {
    let (addr, _) = server(1, big);
    let mut s = spec(addr);
    s.connections = 1;
    s.threads = 1;
    s.requests = Some(6);
    s.expect_length = Some(3 << 20);
    s.discard_body = true;
    s.timeout = Duration::from_secs(5);
    let r = run(&s);
    // Per connection: two whole bodies, then one cut short (a new connection follows).
    assert_eq!(r.responses, 4, "{:?}", r.errors);
    assert_eq!(r.errors.short_body, 2, "{:?}", r.errors);
    assert!(r.bytes >= 4 * (3 << 20), "{}", r.bytes);
}

/// Per connection, each request's path and whether it asked to close.
type Log = std::sync::Arc<std::sync::Mutex<Vec<Vec<(String, bool)>>>>;

/// A server that records, per connection, each request's path and whether it asked to
/// close, and closes after answering one that did.
fn recording_server() -> (SocketAddr, Log) {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let log: Log = Log::default();
    let l = log.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let l = l.clone();
            std::thread::spawn(move || {
                let slot = {
                    let mut log = l.lock().unwrap();
                    log.push(Vec::new());
                    log.len() - 1
                };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                        buf.drain(..end + 4);
                        let path = head.split(' ').nth(1).unwrap_or("").to_string();
                        let close = head.contains("connection: close");
                        l.lock().unwrap()[slot].push((path, close));
                        let answer: &[u8] = if close {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
                        } else {
                            OK
                        };
                        if conn.write_all(answer).is_err() || close {
                            return;
                        }
                        continue;
                    }
                    match conn.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => buf.extend_from_slice(&chunk[..k]),
                    }
                }
            });
        }
    });
    (addr, log)
}

#[test]
fn requests_per_connection_gives_each_connection_one_url_and_a_closing_last_request() {
    let (addr, log) = recording_server();
    let mut s = spec(addr);
    s.targets.push(Target {
        addr,
        host: "t".into(),
        path: "/b".into(),
    });
    s.per_connection = Some(3);
    // One connection at a time, so the request budget ends with a whole connection (with
    // several, the one that takes the last request may have taken fewer than 3).
    s.connections = 1;
    s.threads = 1;
    s.requests = Some(30);
    let r = run(&s);
    assert_eq!((r.responses, r.errors.total()), (30, 0), "{:?}", r.errors);
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 10, "{log:?}");
    let mut per_url = [0, 0];
    for conn in log.iter() {
        assert_eq!(conn.len(), 3, "{conn:?}");
        assert!(
            conn.iter().all(|(p, _)| p == &conn[0].0),
            "one URL per connection: {conn:?}"
        );
        let closes: Vec<bool> = conn.iter().map(|(_, c)| *c).collect();
        assert_eq!(closes, [false, false, true]);
        per_url[usize::from(conn[0].0 == "/b")] += 1;
    }
    assert_eq!(per_url, [5, 5], "the URLs alternate by connection");
}
