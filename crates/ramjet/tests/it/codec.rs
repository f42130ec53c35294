//! Request framing, keep-alive, pipelining and every error status of the codec.

use crate::server_with;

fn hello() -> ramjet_testkit::Server {
    server_with(
        &[("hello.txt", b"hello\n"), ("secret.txt", b"secret\n")],
        "",
    )
}

#[test]
fn get_head_and_keep_alive() {
    let s = hello();
    let mut c = s.client();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(false);
    assert_eq!((r.status, r.text().as_str()), (200, "hello\n"));
    assert!(r.keep_alive);
    assert!(r.header("Date").is_some());
    c.send(b"HEAD /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(true);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Length").as_deref(), Some("6"));
    assert!(r.body.is_empty());
    // The HEAD response really had no body: the next response parses cleanly.
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.header("Connection").as_deref(), Some("close"));
    assert!(c.closed());
    s.assert_clean_log(&[]);
}

#[test]
fn http10_keep_alive_rules() {
    let s = hello();
    let mut c = s.client();
    c.send(b"GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.header("Connection").as_deref(), Some("keep-alive"));
    c.send(b"GET /hello.txt HTTP/1.0\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 200);
    assert!(c.closed());
    s.assert_clean_log(&[]);
}

#[test]
fn pipelined_responses_come_in_order() {
    let s = server_with(&[("a", b"A"), ("b", b"BB"), ("c", b"CCC")], "");
    let mut c = s.client();
    c.send(b"GET /a HTTP/1.1\r\nHost: t\r\n\r\nGET /missing HTTP/1.1\r\nHost: t\r\n\r\nHEAD /b HTTP/1.1\r\nHost: t\r\n\r\nGET /c HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "A");
    assert_eq!(c.response(false).status, 404);
    let r = c.response(true);
    assert_eq!(r.header("Content-Length").as_deref(), Some("2"));
    assert_eq!(c.response(false).text(), "CCC");
    // A request split across writes.
    c.send(b"GET /a HT");
    std::thread::sleep(std::time::Duration::from_millis(50));
    c.send(b"TP/1.1\r\nHo");
    std::thread::sleep(std::time::Duration::from_millis(50));
    c.send(b"st: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "A");
    s.assert_clean_log(&[]);
}

#[test]
fn absolute_form_target() {
    let s = hello();
    let mut c = s.client();
    c.send(b"GET http://other.example/hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "hello\n");
    s.assert_clean_log(&[]);
}

/// Send `raw` on a fresh connection; return the status and whether the server closed.
fn status_of(s: &ramjet_testkit::Server, raw: &[u8]) -> (u16, bool) {
    let mut c = s.client();
    c.send(raw);
    let r = c.response(false);
    let closed = !r.keep_alive && c.closed();
    (r.status, closed)
}

#[test]
fn malformed_requests_get_400_and_close() {
    let s = hello();
    for raw in [
        &b"GET /hello.txt HTTP/1.1\r\n\r\n"[..],
        b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nNoColon\r\n\r\n",
        b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nX-A : b\r\n\r\n",
        b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nX-A: b\r\n folded\r\n\r\n",
        b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n",
        b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"POST /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"GET /hello.txt HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET hello.txt HTTP/1.1\r\nHost: t\r\n\r\n",
        b"GET / HTTP/1.1 x\r\nHost: t\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    ] {
        assert_eq!(status_of(&s, raw), (400, true), "{:?}", String::from_utf8_lossy(raw));
    }
    s.assert_clean_log(&[]);
}

#[test]
fn other_error_statuses() {
    let s = hello();
    assert_eq!(
        status_of(&s, b"BREW /pot HTTP/1.1\r\nHost: t\r\n\r\n").0,
        501
    );
    assert_eq!(
        status_of(
            &s,
            b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
        ),
        (501, true)
    );
    let (status, _) = status_of(&s, b"GET / HTTP/2.0\r\nHost: t\r\n\r\n");
    assert_eq!(status, 505);
    let long = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(10_000));
    assert_eq!(status_of(&s, long.as_bytes()), (414, true));
    let big = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    assert_eq!(status_of(&s, big.as_bytes()), (431, true));
    assert_eq!(
        status_of(
            &s,
            b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999\r\n\r\n"
        ),
        (413, true)
    );
    // 405 keeps the connection and names what is allowed.
    let mut c = s.client();
    c.send(b"POST /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nbodyDELETE /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 405);
    assert_eq!(r.header("Allow").as_deref(), Some("GET, HEAD, OPTIONS"));
    assert_eq!(c.response(false).status, 405);
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).status, 200);
    s.assert_clean_log(&[]);
}

#[test]
fn request_bodies_are_never_parsed_as_requests() {
    let s = hello();
    let mut c = s.client();
    // Content-Length body that looks like a request.
    let smuggled = b"GET /secret.txt HTTP/1.1\r\nHost: t\r\n\r\n";
    let first = format!(
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        smuggled.len()
    );
    c.send(first.as_bytes());
    c.send(smuggled);
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "hello\n");
    assert_eq!(c.response(false).text(), "hello\n");
    // Chunked body, split oddly.
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nGET /");
    c.send(b"\r\n1b;x=y\r\nsecret.txt HTTP/1.1\r\nHost: \r\n0\r\n\r\n");
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_eq!(c.response(false).text(), "hello\n");
    assert_eq!(c.response(false).text(), "hello\n");
    assert!(c.closed());
    // A bad chunk size ends the connection instead of resynchronising on the attacker's bytes.
    let mut c = s.client();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nGET /secret.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "hello\n");
    assert!(c.try_response(false).is_none());
    s.assert_clean_log(&[]);
}

#[test]
fn curl_keep_alive_and_head() {
    let s = hello();
    let url = s.url("/hello.txt");
    let (ok, out) = crate::curl(&[&url, &url, "-w", "%{num_connects}\n"]);
    assert!(ok);
    assert_eq!(String::from_utf8_lossy(&out), "hello\n1\nhello\n0\n");
    let (ok, out) = crate::curl(&["-I", &url]);
    assert!(ok);
    assert!(String::from_utf8_lossy(&out).contains("Content-Length: 6"));
    s.assert_clean_log(&[]);
}
