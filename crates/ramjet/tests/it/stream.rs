//! Streamed response bodies (`Body::Stream`, the seam a proxy or module answers through):
//! chunked to HTTP/1.1 clients with no empty chunk before the end, close-delimited to
//! HTTP/1.0, no body for HEAD, keep-alive and pipelining after a stream, and a producer
//! that fails mid-body ends the connection without the final chunk. Served by the
//! test-only producer of the `fault-injection` feature.
#![cfg(feature = "fault-injection")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::server_with;

/// The test producer's piece sizes (crates/ramjet/src/fault.rs).
const PIECES: [usize; 4] = [0, 1, 1000, 65_537];

fn expected(n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| vec![i as u8; PIECES[i % PIECES.len()]])
        .collect()
}

/// Everything the server sends on a fresh connection after `request`, until it closes.
fn raw(s: &ramjet_testkit::Server, request: &str) -> Vec<u8> {
    let mut t = TcpStream::connect(s.addr).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    t.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    t.read_to_end(&mut out).unwrap();
    out
}

#[test]
fn streamed_bodies_are_chunked_for_http11_and_keep_the_connection() {
    let s = server_with(&[("one.txt", b"1")], "workers = 1\n");
    for n in [0usize, 1, 2, 3, 4, 9] {
        let mut c = s.client();
        let req = format!("GET /__ramjet_fault/stream/{n} HTTP/1.1\r\nHost: t\r\n\r\n");
        // Pipelined: a file before and after the stream, all in one write.
        let around = "GET /one.txt HTTP/1.1\r\nHost: t\r\n\r\n";
        c.send(format!("{around}{req}{around}").as_bytes());
        assert_eq!(c.response(false).text(), "1");
        let r = c.response(false);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("Transfer-Encoding").as_deref(), Some("chunked"));
        assert_eq!(r.header("Content-Length"), None);
        assert!(r.body == expected(n), "{n} pieces");
        assert_eq!(
            c.response(false).text(),
            "1",
            "the connection goes on after {n} pieces"
        );
    }
    // On the wire: no empty chunk before the end (it would end the body early).
    let wire = raw(
        &s,
        "GET /__ramjet_fault/stream/5 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    let body_at = wire.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let body = &wire[body_at..];
    assert!(body.ends_with(b"\r\n0\r\n\r\n"));
    assert_eq!(
        body.windows(5).filter(|w| w == b"\r\n0\r\n").count(),
        1,
        "one last-chunk only"
    );
    s.assert_clean_log(&[]);
}

#[test]
fn streamed_bodies_to_http10_end_with_the_connection_and_head_gets_none() {
    let s = server_with(&[("one.txt", b"1")], "workers = 1\n");
    let wire = raw(&s, "GET /__ramjet_fault/stream/6 HTTP/1.0\r\n\r\n");
    let body_at = wire.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&wire[..body_at]).to_lowercase();
    assert!(head.contains("connection: close"), "{head}");
    assert!(
        !head.contains("transfer-encoding") && !head.contains("content-length"),
        "{head}"
    );
    assert!(wire[body_at..] == expected(6));
    // Keep-alive asked for, but a close-delimited body cannot keep the connection.
    let wire = raw(
        &s,
        "GET /__ramjet_fault/stream/3 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    );
    let body_at = wire.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(wire[body_at..] == expected(3));
    // HEAD: the head only, and the connection stays usable.
    let mut c = s.client();
    c.send(b"HEAD /__ramjet_fault/stream/4 HTTP/1.1\r\nHost: t\r\n\r\nGET /one.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(true);
    assert_eq!((r.status, r.body.len()), (200, 0));
    assert_eq!(c.response(false).text(), "1");
    s.assert_clean_log(&[]);
}

#[test]
fn a_stream_that_fails_mid_body_ends_the_connection_without_the_last_chunk() {
    let s = server_with(&[("one.txt", b"1")], "workers = 1\n");
    let wire = raw(
        &s,
        "GET /__ramjet_fault/stream-fail/3 HTTP/1.1\r\nHost: t\r\n\r\nGET /one.txt HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&wire);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        !wire.ends_with(b"0\r\n\r\n"),
        "a failed stream must not look complete"
    );
    assert_eq!(
        text.matches("HTTP/1.1 ").count(),
        1,
        "nothing after a failed stream"
    );
    // curl reports the transfer as incomplete, and the server goes on serving.
    let out = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--max-time", "10"])
        .arg(s.url("/__ramjet_fault/stream-fail/2"))
        .status()
        .unwrap();
    assert_eq!(out.code(), Some(18), "curl: partial file");
    let (ok, body) = crate::curl(&[&s.url("/__ramjet_fault/stream/7")]);
    assert!(ok && body == expected(7));
    assert_eq!(s.get("/one.txt").text(), "1");
    s.assert_clean_log(&[]);
}

/// A stream of known length (a backend's Content-Length) keeps it on the wire, to HTTP/1.1
/// and HTTP/1.0 alike, and keeps the connection; a source that yields fewer or more bytes
/// than it declared ends the connection after at most the declared bytes.
#[test]
fn streams_of_declared_length_are_held_to_it() {
    let s = server_with(&[("one.txt", b"1")], "workers = 1\n");
    for n in [0usize, 1, 3, 6] {
        let mut c = s.client();
        let around = "GET /one.txt HTTP/1.1\r\nHost: t\r\n\r\n";
        c.send(
            format!("GET /__ramjet_fault/stream-len/{n} HTTP/1.1\r\nHost: t\r\n\r\n{around}")
                .as_bytes(),
        );
        let r = c.response(false);
        let want = expected(n);
        assert_eq!(
            r.header("Content-Length"),
            Some(want.len().to_string()),
            "{n}"
        );
        assert_eq!(r.header("Transfer-Encoding"), None);
        assert!(r.body == want, "{n} pieces");
        assert_eq!(c.response(false).text(), "1", "keep-alive after {n} pieces");
    }
    let mut c = s.client();
    c.send(b"GET /__ramjet_fault/stream-len/3 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /one.txt HTTP/1.0\r\n\r\n");
    assert!(c.response(false).body == expected(3));
    assert_eq!(
        c.response(false).text(),
        "1",
        "HTTP/1.0 keep-alive with a known length"
    );
    for (path, declared) in [
        ("stream-short", expected(6).len() + 1),
        ("stream-long", expected(6).len() - 1),
    ] {
        let wire = raw(
            &s,
            &format!("GET /__ramjet_fault/{path}/6 HTTP/1.1\r\nHost: t\r\n\r\nGET /one.txt HTTP/1.1\r\nHost: t\r\n\r\n"),
        );
        let body_at = wire.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&wire[..body_at]);
        assert!(
            head.contains(&format!("Content-Length: {declared}")),
            "{head}"
        );
        let sent = &wire[body_at..];
        assert!(sent.len() <= declared, "{path}: more bytes than declared");
        assert!(expected(6).starts_with(sent), "{path}: other bytes");
        assert_eq!(
            String::from_utf8_lossy(sent).matches("HTTP/1.1 ").count(),
            0,
            "{path}: the connection ends, nothing follows"
        );
    }
    s.assert_clean_log(&[]);
}
