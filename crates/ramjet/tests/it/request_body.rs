//! Request bodies reach the producer as a stream (`RequestBody`): Content-Length and chunked,
//! spread over many reads, `Expect: 100-continue` answered only when the producer asks for
//! the body, the `max_body` limit, pipelined requests after a body (also when they arrive
//! in the same read as its end), and a client that vanishes mid-body. Read by the
//! test-only echo producer of the `fault-injection` feature; static files refuse methods
//! that carry a body with 405 themselves.
#![cfg(feature = "fault-injection")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::{bytes, server_with};

const ECHO: &str = "/__ramjet_fault/echo";

#[test]
fn content_length_bodies_in_one_read_and_in_many() {
    let s = server_with(
        &[("one.txt", b"1")],
        "workers = 1\n[limits]\nmax_body = \"4m\"\n",
    );
    for n in [0usize, 1, 4096, 65_536, 65_537, 1 << 20] {
        let body = bytes(n, n as u64);
        let mut c = s.client();
        let mut req =
            format!("POST {ECHO} HTTP/1.1\r\nHost: t\r\nContent-Length: {n}\r\n\r\n").into_bytes();
        req.extend_from_slice(&body);
        req.extend_from_slice(b"GET /one.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        c.send(&req);
        let r = c.response(false);
        assert_eq!(r.status, 200, "{n} bytes");
        assert!(r.body == body, "{n} bytes echoed");
        assert_eq!(
            c.response(false).text(),
            "1",
            "the request after a {n}-byte body"
        );
    }
    s.assert_clean_log(&[]);
}

#[test]
fn chunked_bodies_and_a_request_arriving_with_the_end_of_a_body() {
    let s = server_with(&[("one.txt", b"1")], "workers = 1\n");
    let mut c = s.client();
    c.send(b"PUT /__ramjet_fault/echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
    c.send(b"5;ext=1\r\nhello\r\n");
    c.send(b"1\r\n \r\n6\r\nworld!\r\n0\r\nX-Trailer: yes\r\n\r\nGET /one.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(false);
    assert_eq!((r.status, r.text().as_str()), (200, "hello world!"));
    assert_eq!(c.response(false).text(), "1");
    // A body larger than the first read, its end and the next request in one write: the
    // bytes read past the body go back to the connection.
    let body = bytes(300_000, 3);
    let mut c = s.client();
    let head = format!(
        "POST {ECHO} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    c.send(head.as_bytes());
    c.send(&body[..100_000]);
    let mut rest = body[100_000..].to_vec();
    rest.extend_from_slice(b"GET /one.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    c.send(&rest);
    let r = c.response(false);
    assert!(r.body == body);
    assert!(r.header("X-Pieces").unwrap().parse::<u32>().unwrap() >= 1);
    assert_eq!(c.response(false).text(), "1");
    s.assert_clean_log(&[]);
}

#[test]
fn expect_100_continue_is_answered_when_the_body_is_wanted() {
    let s = server_with(&[("one.txt", b"1")], "workers = 1\n");
    let mut t = TcpStream::connect(s.addr).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    t.write_all(
        format!(
            "POST {ECHO} HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut interim = [0u8; 25];
    t.read_exact(&mut interim).unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    t.write_all(b"abcde").unwrap();
    let mut c = ramjet_testkit::Client::from_stream(t);
    let r = c.response(false);
    assert_eq!((r.status, r.text().as_str()), (200, "abcde"));
    // curl waits for the 100 before it sends.
    let (ok, out) = crate::curl(&[
        "-H",
        "Expect: 100-continue",
        "--data-binary",
        "xyz",
        &s.url(ECHO),
    ]);
    assert!(ok && out == b"xyz");
    s.assert_clean_log(&[]);
}

#[test]
fn bodies_over_the_limit_and_static_files_refusing_bodies() {
    let s = server_with(
        &[("one.txt", b"1")],
        "workers = 1\n[limits]\nmax_body = \"1k\"\n",
    );
    let mut c = s.client();
    c.send(format!("POST {ECHO} HTTP/1.1\r\nHost: t\r\nContent-Length: 1025\r\n\r\n").as_bytes());
    assert_eq!(c.response(false).status, 413);
    // Chunked past the limit: found while reading.
    let mut c = s.client();
    let chunk = format!("{:x}\r\n{}\r\n", 2000, "a".repeat(2000));
    c.send(
        format!(
            "POST {ECHO} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n{chunk}0\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(c.response(false).status, 413);
    // Static files: POST is 405 with Allow, the body is drained and the connection goes on.
    let mut c = s.client();
    c.send(b"POST /one.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabcGET /one.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 405);
    assert_eq!(r.header("Allow").as_deref(), Some("GET, HEAD, OPTIONS"));
    assert_eq!(c.response(false).text(), "1");
    s.assert_clean_log(&[]);
}

#[test]
fn a_client_vanishing_mid_body_leaves_the_worker_healthy() {
    let s = server_with(&[("one.txt", b"1")], "workers = 1\n");
    for _ in 0..5 {
        let mut t = TcpStream::connect(s.addr).unwrap();
        t.write_all(
            format!("POST {ECHO} HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n").as_bytes(),
        )
        .unwrap();
        t.write_all(&bytes(10_000, 1)).unwrap();
        drop(t);
    }
    let (ok, out) = crate::curl(&["--data-binary", "@/dev/null", &s.url(ECHO)]);
    assert!(ok && out.is_empty());
    assert_eq!(s.get("/one.txt").text(), "1");
    s.assert_idle();
    s.assert_clean_log(&[]);
}

/// The producer sees the client's address and the listener the connection came in on, for
/// each of several listeners (IPv4 and IPv6).
#[test]
fn the_producer_sees_client_and_listener_addresses() {
    let s = server_with(
        &[("one.txt", b"1")],
        "listen = [\"127.0.0.1:0\", \"[::1]:0\"]\nworkers = 2\n",
    );
    assert!(s.wait_for_log("listening on http://[::1]", Duration::from_secs(10)));
    let v6: std::net::SocketAddr = s
        .stderr()
        .iter()
        .filter_map(|l| {
            l.split("listening on http://")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .find(|a: &std::net::SocketAddr| a.is_ipv6())
        .expect("an IPv6 listener");
    for addr in [s.addr, v6] {
        for _ in 0..4 {
            let mut t = TcpStream::connect(addr).unwrap();
            let local = t.local_addr().unwrap();
            t.write_all(
                format!("GET {ECHO} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .unwrap();
            let r = ramjet_testkit::Client::from_stream(t).response(false);
            assert_eq!(r.header("X-Client"), Some(local.to_string()));
            assert_eq!(r.header("X-Listener"), Some(addr.to_string()));
        }
    }
    s.assert_clean_log(&[]);
}
