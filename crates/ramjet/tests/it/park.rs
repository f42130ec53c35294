//! Idle keep-alive connections leave their tasks for the worker's parking lot and come
//! back when they have a request; their keep-alive timeout, shutdown, reloads and limits
//! hold while parked.

use std::io::Read;
use std::time::Duration;

use ramjet_testkit::Server;
use serde_json::Value;

/// The status page's connection counts.
fn connections(s: &Server) -> Value {
    let (ok, body) = crate::curl(&[&s.url("/server-status?json")]);
    assert!(ok);
    let v: Value = serde_json::from_slice(&body).unwrap();
    v["connections"].clone()
}

/// Wait until `n` connections are parked.
fn parked(s: &Server, n: u64) {
    crate::poll_until(|| (connections(s)["parked"].as_u64() == Some(n)).then_some(()));
}

const STATUS: &str =
    "[[location]]\nroot = \"root\"\n[[location]]\npath = \"/server-status\"\nhandlers = [\"status\"]\n";

#[test]
fn a_parked_connection_serves_its_next_requests() {
    let s = crate::server_with(&[("a.txt", b"a"), ("b.txt", b"bb")], STATUS);
    let mut c = s.client();
    c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "a");
    parked(&s, 1);
    // Pipelined requests arriving at a parked connection are all answered, in order.
    c.send(b"GET /b.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "bb");
    assert_eq!(c.response(false).text(), "a");
    // Parked again, and a request in two pieces.
    parked(&s, 1);
    c.send(b"GET /b.txt HT");
    std::thread::sleep(Duration::from_millis(50));
    c.send(b"TP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "bb");
    // A client that goes away while parked is closed and forgotten.
    parked(&s, 1);
    drop(c);
    parked(&s, 0);
    assert_eq!(connections(&s)["open"], 1, "only the status request's own");
    s.assert_clean_log(&[]);
}

#[test]
fn keepalive_timeout_shutdown_and_reload_hold_while_parked() {
    let config = format!("[timeouts]\nkeepalive = \"1s\"\n{STATUS}");
    let mut s = crate::server_with(&[("v.txt", b"one")], &config);
    // The keep-alive timeout closes a parked connection.
    let mut c = s.client();
    c.send(b"GET /v.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "one");
    assert!(c.closed(), "closed after the keep-alive timeout");
    // A reload while parked: the connection's next request sees the new configuration.
    let mut c = s.client();
    c.send(b"GET /v.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "one");
    std::fs::create_dir_all(s.path("root2")).unwrap();
    std::fs::write(s.path("root2/v.txt"), "two").unwrap();
    s.rewrite_config(&format!(
        "[timeouts]\nkeepalive = \"30s\"\n{}",
        STATUS.replace("\"root\"", "\"root2\"")
    ));
    s.signal(libc::SIGHUP);
    assert!(s.wait_for_log("configuration reloaded", Duration::from_secs(10)));
    // Each worker takes the new configuration in its own event loop, a moment after the
    // log line: the same connection sees it within the deadline, without reconnecting.
    crate::poll_until(|| {
        c.send(b"GET /v.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        (c.response(false).text() == "two").then_some(())
    });
    // Shutdown closes parked connections at once instead of waiting out the timeout.
    parked(&s, 1);
    let mut raw = std::net::TcpStream::connect(s.addr).unwrap();
    use std::io::Write;
    raw.write_all(b"GET /v.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 512];
    let n = raw.read(&mut buf).unwrap();
    assert!(n > 0);
    parked(&s, 2);
    s.signal(libc::SIGTERM);
    let status = s.wait_exit(Duration::from_secs(10));
    assert!(status.success());
    assert!(c.closed());
}

#[test]
fn a_parked_connection_keeps_its_place_in_the_per_client_limit() {
    let s = crate::server_with(
        &[("a.txt", b"a")],
        &format!("[limits]\nmax_connections_per_client = 1\n{STATUS}"),
    );
    let mut c = s.client();
    c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "a");
    // Parked (seen from another address, which has its own limit).
    crate::poll_until(|| {
        let (ok, body) = crate::curl(&["--interface", "127.0.0.2", &s.url("/server-status?json")]);
        let v: Value = serde_json::from_slice(&body).ok()?;
        (ok && v["connections"]["parked"] == 1).then_some(())
    });
    let mut second = s.client();
    second.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(second.response(false).status, 429);
    // The parked one still works.
    c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "a");
    s.assert_clean_log(&[]);
}

/// An idle HTTP/2 connection (prior knowledge) is parked too, with its state: the next
/// request on it refers to a field the client's HPACK encoder added to the dynamic table
/// before the parking, and is answered; the keep-alive time then ends it with GOAWAY.
#[test]
fn an_idle_h2c_connection_is_parked_with_its_hpack_table() {
    use crate::http2::{frame, get, Raw, END_HEADERS, END_STREAM, HEADERS};
    let config = format!("[timeouts]\nkeepalive = \"4s\"\n{STATUS}");
    let s = crate::server_with(&[("a.txt", b"a")], &config);
    let mut r = Raw::open(s.addr);
    // The first request adds `x-kept: yes` to the dynamic table (literal with
    // incremental indexing, new name).
    let mut block = get("/a.txt");
    block.push(0x40);
    block.push(6);
    block.extend_from_slice(b"x-kept");
    block.push(3);
    block.extend_from_slice(b"yes");
    r.send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &block));
    assert_eq!(r.body_of(1), Some(1));
    parked(&s, 1);
    // The second refers to it by index (62, the newest entry): only the same table
    // decodes it; a fresh one would be a COMPRESSION_ERROR.
    let mut block = get("/a.txt");
    block.push(0x80 | 62);
    r.send(&frame(HEADERS, END_HEADERS | END_STREAM, 3, &block));
    assert_eq!(r.body_of(3), Some(1), "answered after the parking");
    parked(&s, 1);
    // Its keep-alive time ends while parked: GOAWAY, then the close.
    assert_eq!(r.goaway(), Some(0), "GOAWAY with NO_ERROR");
    parked(&s, 0);
    s.assert_clean_log(&[]);
}

/// Parked HTTP/2 connections hold little memory: their states are moved out of the
/// memory their streams used (which then goes back to the kernel). Measured as the growth
/// of the server's resident memory over 1,000 connections parked after one request each
/// (one worker); before the move, each held 7-8 KB (a page of its freed memory kept
/// resident).
#[test]
fn parked_h2c_connections_hold_little_memory() {
    use crate::http2::{frame, get, Raw, END_HEADERS, END_STREAM, HEADERS};
    let s = crate::server_with(&[("a.txt", b"a")], &format!("workers = 1\n{STATUS}"));
    let open = |n: usize| -> Vec<Raw> {
        (0..n)
            .map(|_| {
                let mut r = Raw::open(s.addr);
                r.send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &get("/a.txt")));
                assert_eq!(r.body_of(1), Some(1));
                r
            })
            .collect()
    };
    // The worker's pools and tables grown first, then given back.
    drop(open(100));
    parked(&s, 0);
    let base = s.status_kb("VmRSS").unwrap();
    const N: u64 = 1000;
    let held = open(N as usize);
    parked(&s, N);
    // Freed memory goes back at the next heap trim (at most one a second).
    crate::poll_until(|| {
        let grown = s.status_kb("VmRSS").unwrap().saturating_sub(base);
        (grown * 1024 / N < 3 * 1024).then_some(())
    });
    drop(held);
    s.assert_clean_log(&[]);
}
