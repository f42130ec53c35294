//! Traffic shaping: send rates per connection, per client address, per location and in
//! all, connection limits per client, request rates. Durations are only ever checked from
//! below (a slow machine makes a throttled download slower, never faster).

use std::time::{Duration, Instant};

use ramjet_testkit::Server;

/// Download `path` with curl from `from`; returns the body.
fn fetch(s: &Server, path: &str, from: &str) -> Vec<u8> {
    let (ok, body) = crate::curl(&["--interface", from, &s.url(path)]);
    assert!(ok, "curl {path} from {from}");
    body
}

#[test]
fn limit_rate_after_the_first_bytes() {
    let data = crate::bytes(300 * 1024, 1);
    let s = crate::server_with(
        &[("slow/f.bin", &data), ("fast/f.bin", &data)],
        "[[location]]\nroot = \"root\"\n[[location]]\npath = \"/slow/\"\nroot = \"root\"\nlimit_rate = \"100k\"\nlimit_rate_after = \"100k\"\n",
    );
    let t = Instant::now();
    assert_eq!(fetch(&s, "/fast/f.bin", "127.0.0.1"), data);
    let fast = t.elapsed();
    let t = Instant::now();
    assert_eq!(fetch(&s, "/slow/f.bin", "127.0.0.1"), data);
    let slow = t.elapsed();
    // 200 KiB past the first 100 KiB at 100 KiB/s: 2 s, less the bucket's 1/8 s.
    assert!(
        slow >= Duration::from_millis(1800),
        "{slow:?} (unthrottled: {fast:?})"
    );
    s.assert_clean_log(&[]);
}

/// Two downloads at once; returns how long both took.
fn two_at_once(
    s: &Server,
    a: (&'static str, &'static str),
    b: (&'static str, &'static str),
    expect: &[u8],
) -> Duration {
    let t = Instant::now();
    std::thread::scope(|scope| {
        let one = scope.spawn(|| fetch(s, a.0, a.1));
        let two = scope.spawn(|| fetch(s, b.0, b.1));
        assert_eq!(one.join().unwrap(), expect);
        assert_eq!(two.join().unwrap(), expect);
    });
    t.elapsed()
}

#[test]
fn a_clients_connections_share_its_rate_and_a_location_shares_one() {
    let data = crate::bytes(200 * 1024, 2);
    let s = crate::server_with(
        &[
            ("c/f.bin", &data),
            ("l/f.bin", &data),
            ("each/f.bin", &data),
        ],
        "workers = 2\n[[location]]\nroot = \"root\"\n\
         [[location]]\npath = \"/c/\"\nroot = \"root\"\nlimit_rate_client = \"100k\"\n\
         [[location]]\npath = \"/l/\"\nroot = \"root\"\nlimit_rate_location = \"100k\"\n\
         [[location]]\npath = \"/each/\"\nroot = \"root\"\nlimit_rate = \"100k\"\n",
    );
    // Per connection: each 200 KiB at 100 KiB/s in parallel, about 2 s (a reference).
    let each = two_at_once(
        &s,
        ("/each/f.bin", "127.0.0.1"),
        ("/each/f.bin", "127.0.0.1"),
        &data,
    );
    assert!(each >= Duration::from_millis(1700), "{each:?}");
    // One client, two connections: 400 KiB through one 100 KiB/s, about 4 s.
    let client = two_at_once(
        &s,
        ("/c/f.bin", "127.0.0.1"),
        ("/c/f.bin", "127.0.0.1"),
        &data,
    );
    assert!(client >= Duration::from_millis(3500), "{client:?}");
    // Two clients, one location: the same.
    let location = two_at_once(
        &s,
        ("/l/f.bin", "127.0.0.1"),
        ("/l/f.bin", "127.0.0.2"),
        &data,
    );
    assert!(location >= Duration::from_millis(3500), "{location:?}");
    s.assert_clean_log(&[]);
}

#[test]
fn a_global_send_rate_covers_every_location() {
    let data = crate::bytes(150 * 1024, 3);
    let s = crate::server_with(
        &[("a/f.bin", &data), ("b/f.bin", &data)],
        "workers = 2\n[limits]\nsend_rate = \"100k\"\n[[location]]\nroot = \"root\"\n",
    );
    let both = two_at_once(
        &s,
        ("/a/f.bin", "127.0.0.1"),
        ("/b/f.bin", "127.0.0.3"),
        &data,
    );
    // 300 KiB through 100 KiB/s.
    assert!(both >= Duration::from_millis(2500), "{both:?}");
    s.assert_clean_log(&[]);
}

#[test]
fn connections_per_client_are_limited_with_429() {
    let s = crate::server_with(
        &[("a.txt", b"a")],
        "workers = 2\n[limits]\nmax_connections_per_client = 2\n",
    );
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = s.client();
        c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(c.response(false).text(), "a");
        held.push(c);
    }
    // The third is answered 429, told when to retry, and closed.
    let mut third = s.client();
    third.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = third.response(false);
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after").as_deref(), Some("1"));
    assert!(third.closed());
    // Another address is not affected.
    assert_eq!(fetch(&s, "/a.txt", "127.0.0.2"), b"a");
    // One closes: there is room again.
    drop(held.pop());
    crate::poll_until(|| {
        let (ok, code) = crate::curl(&["-o", "/dev/null", "-w", "%{http_code}", &s.url("/a.txt")]);
        (ok && code == b"200").then_some(())
    });
    s.assert_clean_log(&[]);
}

#[test]
fn request_rates_per_client_with_a_burst() {
    let s = crate::server_with(
        &[("api/a.txt", b"a"), ("b.txt", b"b")],
        "[[location]]\nroot = \"root\"\n[[location]]\npath = \"/api/\"\nroot = \"root\"\nlimit_req = \"1r/m\"\nlimit_req_burst = 2\n",
    );
    let code = |path: &str, from: &str| {
        let (ok, out) = crate::curl(&[
            "--interface",
            from,
            "-D",
            "-",
            "-o",
            "/dev/null",
            &s.url(path),
        ]);
        assert!(ok);
        String::from_utf8(out).unwrap()
    };
    // One at the rate and two of burst, on one keep-alive connection as a browser would.
    let mut c = s.client();
    for _ in 0..3 {
        c.send(b"GET /api/a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(c.response(false).status, 200);
    }
    c.send(b"GET /api/a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 429);
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    // The connection stays usable; other locations and other clients are not limited.
    c.send(b"GET /b.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "b");
    assert!(code("/api/a.txt", "127.0.0.2").starts_with("HTTP/1.1 200"));
    assert!(code("/api/a.txt", "127.0.0.1").starts_with("HTTP/1.1 429"));
    s.assert_clean_log(&[]);
}

/// A download that outlasts `timeouts.keepalive` leaves its connection open for the next
/// request: idle time counts from the end of the response (as nginx counts it), not from
/// when the request was read. Before, the connection was closed as the download ended and
/// the client's next request met a reset (apt, wget or lftp fetching several large files
/// over one slow connection). curl fetches twice over one connection and says how many
/// connections it opened for each.
#[test]
fn a_download_longer_than_the_keepalive_timeout_keeps_its_connection() {
    let data = crate::bytes(300 * 1024, 7);
    let s = crate::server_with(
        &[("slow/f.bin", &data)],
        "[timeouts]\nkeepalive = \"1s\"\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/slow/\"\nroot = \"root\"\nlimit_rate = \"100k\"\n",
    );
    let url = s.url("/slow/f.bin");
    let t = Instant::now();
    let (ok, out) = crate::curl(&[
        "-o",
        "/dev/null",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{num_connects} %{size_download}\\n",
        &url,
        &url,
    ]);
    let took = t.elapsed();
    let out = String::from_utf8_lossy(&out).into_owned();
    assert!(ok, "{out}");
    // Each download takes about 3 s at 100 KiB/s, three times the keep-alive timeout.
    assert!(took >= Duration::from_secs(4), "{took:?}");
    let n = data.len();
    assert_eq!(out, format!("200 1 {n}\n200 0 {n}\n"), "{took:?}");
    s.assert_clean_log(&[]);
}

/// A slow reader with a small receive window, as `ramjet bench --slow` holds mirror
/// downloads: the server hands a whole 400 KB response to the kernel in a moment (its
/// socket's send buffer grows to megabytes), and the client takes 12 s to read it. The
/// keep-alive timeout (3 s) must not close the connection while the client is still
/// receiving: before, every download then ended in a reset when the client sent its next
/// request (20 of 20 clients in the reported run, downloads of 98 s).
#[test]
fn a_slow_reader_still_receiving_is_not_idle() {
    let data = crate::bytes(400 * 1000, 8);
    let s = crate::server_with(
        &[("f.bin", &data)],
        "[timeouts]\nkeepalive = \"3s\"\n[[location]]\nroot = \"root\"\n",
    );
    let out = std::process::Command::new(crate::BIN)
        .args([
            "bench",
            "--slow",
            "-c",
            "2",
            "--throttle",
            "256kbit",
            "-d",
            "27s",
            "--json",
        ])
        .arg(s.url("/f.bin"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["errors"]["reset"], 0, "{r:#}");
    assert_eq!(r["errors"]["connect"], 0, "{r:#}");
    // Two downloads of 12.5 s each per connection, both on the connection it opened.
    assert!(r["bytes"].as_u64().unwrap() >= 3 * 400 * 1000, "{r:#}");
    assert_eq!(r["established"], 2, "{r:#}");
}
