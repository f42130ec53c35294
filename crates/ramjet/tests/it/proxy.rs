//! The reverse proxy (issue 7) against scripted backends that misbehave on purpose:
//! forwarding of methods, bodies and fields, the static-then-proxy fall-through, pooled
//! connections and the stale keep-alive race, retries and passive/active health,
//! balancing, 502/504 with their log lines, responses that must never reach the client
//! (bad framing, injection, smuggling), 1xx, trailers, 100-continue, websocket tunnels,
//! and client aborts that must release the upstream connection. Real backends (gunicorn,
//! Apache) are in `proxy_real.rs`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ramjet_testkit::{Backend, Client, Exchange, Flow, Server};

use crate::{bytes, curl, server_with};

/// A server whose `/` location serves `root/` files first and forwards the rest to
/// `servers`; `upstream` adds lines to the `[upstream.app]` table, `top` to the top level.
pub fn proxy_to(servers: &[String], upstream: &str, top: &str, files: &[(&str, &[u8])]) -> Server {
    let list: Vec<String> = servers.iter().map(|s| format!("\"{s}\"")).collect();
    server_with(
        files,
        &format!(
            "workers = 1\n{top}\n[upstream.app]\nservers = [{}]\n{upstream}\n[[location]]\nroot = \"root\"\nhandlers = [\"static\", \"proxy\"]\nproxy = \"app\"\n",
            list.join(", ")
        ),
    )
}

/// Echo the request head and body back: `head` then a blank line then the body.
fn echo(ex: &mut Exchange<'_>) -> Flow {
    let mut out = ex.head.clone().into_bytes();
    out.extend_from_slice(&ex.body);
    ex.ok(&out);
    Flow::Keep
}

/// After a 101: send back whatever arrives until the client closes.
fn echo_until_closed(ex: &mut Exchange<'_>) -> Flow {
    let mut buf = [0u8; 4096];
    loop {
        match ex.stream.read(&mut buf) {
            Ok(0) | Err(_) => return Flow::Close,
            Ok(n) => {
                let _ = ex.stream.write_all(&buf[..n]);
            }
        }
    }
}

/// A port nothing listens on.
fn dead_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    drop(l);
    a.to_string()
}

/// Poll `cond` until it holds or `within` passes.
pub(crate) fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// A name with `_` is not forwarded (nginx `underscores_in_headers off`): many backends
/// would read `X_Forwarded_For` as `X-Forwarded-For`; a location may keep them.
#[test]
fn fields_with_underscores_are_not_forwarded_unless_kept() {
    let b = Backend::start(echo);
    let s = proxy_to(
        &[b.addr.to_string()],
        "",
        "[defaults]\nunderscores_in_headers = false",
        &[],
    );
    let req = b"GET /app/u HTTP/1.1\r\nHost: h\r\nX_Forwarded_For: 6.6.6.6\r\nX_Other: 1\r\n\r\n";
    let mut c = s.client();
    c.send(req);
    let u = c.response(false).text();
    assert!(!u.contains("6.6.6.6") && !u.contains("X_Other"), "{u}");
    assert!(u.contains("X-Forwarded-For: 127.0.0.1\r\n"), "{u}");
    let s = proxy_to(
        &[b.addr.to_string()],
        "",
        "[defaults]\nunderscores_in_headers = true",
        &[],
    );
    let mut c = s.client();
    c.send(req);
    let u = c.response(false).text();
    assert!(u.contains("X_Other: 1\r\n"), "{u}");
}

#[test]
fn methods_bodies_and_fields_are_forwarded_over_pooled_connections() {
    let b = Backend::start(echo);
    let s = proxy_to(&[b.addr.to_string()], "", "", &[]);
    let mut c = s.client();
    c.send(b"GET /app/x?y=1 HTTP/1.1\r\nHost: site.example\r\nConnection: keep-alive, X-Hop\r\nX-Hop: secret\r\nX-Forwarded-For: 10.1.1.1\r\nAccept: text/plain\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 200);
    let seen = r.text();
    assert!(
        seen.starts_with("GET /app/x?y=1 HTTP/1.1\r\nHost: site.example\r\n"),
        "{seen}"
    );
    assert!(seen.contains("Accept: text/plain\r\n"));
    assert!(
        !seen.contains("X-Hop"),
        "a field named by Connection was forwarded: {seen}"
    );
    assert!(
        seen.contains("X-Forwarded-For: 10.1.1.1, 127.0.0.1\r\n"),
        "{seen}"
    );
    assert!(seen.contains("X-Forwarded-Proto: http\r\n"));
    assert!(seen.contains("X-Forwarded-Host: site.example\r\n"));
    assert!(seen.contains("Forwarded: for=127.0.0.1;host=\"site.example\";proto=http\r\n"));
    assert!(seen.contains("Via: 1.1 ramjet\r\n"));
    // A body by length, a chunked body (sent on chunked), an extension method.
    let body = bytes(100_000, 7);
    let mut req = format!(
        "POST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    c.send(&req);
    let r = c.response(false);
    assert_eq!(r.status, 200);
    assert!(r.body.ends_with(&body), "the body arrived whole");
    c.send(b"PUT /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    let r = c.response(false);
    assert!(r.text().contains("Transfer-Encoding: chunked\r\n"));
    assert!(r.text().ends_with("hello world"));
    c.send(b"PURGE /cache/x HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(c
        .response(false)
        .text()
        .starts_with("PURGE /cache/x HTTP/1.1"));
    c.send(b"HEAD /h HTTP/1.1\r\nHost: h\r\n\r\n");
    let r = c.response(true);
    assert_eq!(r.status, 200);
    assert!(
        r.header("Content-Length").is_some(),
        "HEAD keeps the upstream's length"
    );
    // HTTP/1.0 client: the answer still arrives whole.
    let mut c10 = s.client();
    c10.send(b"GET /old HTTP/1.0\r\n\r\n");
    let r = c10.response(false);
    assert!(r.text().contains("Via: 1.0 ramjet"));
    assert_eq!(b.requests(), 6);
    assert_eq!(
        b.connections(),
        1,
        "one pooled upstream connection carried every request"
    );
    s.assert_clean_log(&[]);
}

#[test]
fn fall_through_serves_files_itself_and_forwards_the_rest() {
    let b = Backend::start(echo);
    let s = proxy_to(
        &[b.addr.to_string()],
        "",
        "",
        &[
            ("static.txt", b"from disk"),
            ("empty.txt", b""),
            ("docs/index.html", b"docs"),
        ],
    );
    assert_eq!(s.get("/static.txt").text(), "from disk");
    assert_eq!(s.get("/empty.txt").body.len(), 0);
    assert_eq!(s.get("/docs/").text(), "docs");
    assert_eq!(
        b.requests(),
        0,
        "the backend saw a request for a file that exists"
    );
    assert!(s.get("/missing").text().starts_with("GET /missing "));
    // A directory without an index belongs to the backend.
    assert!(s.get("/").text().starts_with("GET / "));
    // Methods other than GET/HEAD on an existing file go to the backend too.
    let mut c = s.client();
    c.send(b"POST /static.txt HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi");
    assert!(c.response(false).text().starts_with("POST /static.txt "));
    assert_eq!(b.requests(), 3);
    // Path traversal is refused before any handler.
    let mut c = s.client();
    c.send(b"GET /../../etc/passwd HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(c.response(false).status, 400);
    s.assert_clean_log(&[]);
}

#[test]
fn down_backends_are_502_and_slow_ones_504_each_logged() {
    let dead = dead_port();
    let s = proxy_to(std::slice::from_ref(&dead), "", "", &[]);
    let r = s.get("/x");
    assert_eq!(r.status, 502);
    assert!(
        s.wait_for_log(
            &format!("upstream app ({dead}): connect"),
            Duration::from_secs(5)
        ),
        "{:?}",
        s.stderr()
    );
    drop(s);

    // Reads the request, never answers.
    let b = Backend::start(|_ex| {
        std::thread::sleep(Duration::from_secs(5));
        Flow::Close
    });
    let s = proxy_to(&[b.addr.to_string()], "header_timeout = \"1s\"", "", &[]);
    let t = Instant::now();
    let r = s.get("/slow");
    assert_eq!(r.status, 504);
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "504 came after the header timeout, not the backend"
    );
    assert!(s.wait_for_log("no response head within 1s", Duration::from_secs(5)));
    assert_eq!(b.requests(), 1, "a timeout is not retried");
    s.assert_clean_log(&["upstream app", "out of service"]);
}

/// A backend whose handshake never completes (its accept queue is full, so the kernel drops
/// the SYNs) is a 504 after `connect_timeout`, and so is every request while it stays so: the
/// connect that finds the handshake under way waits for it, bounded, not for ever.
#[test]
fn a_backend_that_never_completes_the_handshake_is_504_after_the_connect_timeout() {
    use ramjet_runtime::sys::{connect_outcome, start_connect};
    let l = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    l.bind(&any.into()).unwrap();
    l.listen(0).unwrap();
    let addr = l.local_addr().unwrap().as_socket().unwrap();
    // Fill the accept queue: the first connection that stays under way shows it is full.
    let mut fillers = Vec::new();
    for _ in 0..8 {
        let c = start_connect(&addr).unwrap();
        let up = connect_outcome(&c).unwrap();
        fillers.push(c);
        if !up {
            break;
        }
    }
    assert!(
        !connect_outcome(fillers.last().unwrap()).unwrap(),
        "the accept queue never filled"
    );
    let s = proxy_to(&[addr.to_string()], "connect_timeout = \"1s\"", "", &[]);
    for _ in 0..2 {
        let t = Instant::now();
        let r = s.get("/x");
        let waited = t.elapsed();
        assert_eq!(r.status, 504);
        assert!(
            waited >= Duration::from_millis(900),
            "504 after {waited:?}: before the connect timeout"
        );
    }
    assert!(
        s.wait_for_log(
            &format!("upstream app ({addr}): connect: no connection within 1s"),
            Duration::from_secs(5)
        ),
        "{:?}",
        s.stderr()
    );
    s.assert_clean_log(&["upstream app"]);
}

/// A pooled connection keeps one timer for its response heads, armed by the exchange before:
/// the timeout still counts from each request, neither ending a later wait at the earlier
/// exchange's deadline nor letting it run on past its own.
#[test]
fn the_header_timeout_counts_from_each_request_on_a_pooled_connection() {
    let b = Backend::start(|ex| {
        if ex.target() == "/slow" {
            std::thread::sleep(Duration::from_secs(5));
            return Flow::Close;
        }
        ex.ok(b"quick");
        Flow::Keep
    });
    let s = proxy_to(&[b.addr.to_string()], "header_timeout = \"1s\"", "", &[]);
    let mut c = s.client();
    c.send(b"GET /quick HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(c.response(false).text(), "quick");
    // Not a wait for anything: the gap puts the first exchange's deadline inside the
    // second one's wait.
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    c.send(b"GET /slow HTTP/1.1\r\nHost: h\r\n\r\n");
    let r = c.response(false);
    let waited = t.elapsed();
    assert_eq!(r.status, 504);
    assert_eq!(
        b.connections(),
        1,
        "the second request did not reuse the connection"
    );
    assert!(
        waited >= Duration::from_secs(1),
        "504 after {waited:?}: before the second request's own timeout"
    );
    assert!(
        waited < Duration::from_secs(4),
        "504 after {waited:?}: after the header timeout, from the backend"
    );
}

#[test]
fn invalid_upstream_responses_never_reach_the_client() {
    let cases: [(&str, &[u8]); 7] = [
        ("garbage", b"this is not http\r\n\r\n"),
        ("smuggling", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n"),
        ("injection", b"HTTP/1.1 200 OK\r\nX-A: a\rSet-Cookie: evil=1\r\nContent-Length: 2\r\n\r\nhi"),
        ("two lengths", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi"),
        ("unknown coding", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxx"),
        ("unasked 101", b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"),
        ("closed mid-head", b"HTTP/1.1 200 OK\r\nContent-"),
    ];
    for (name, reply) in cases {
        let b = Backend::start(move |ex| {
            ex.write(reply);
            Flow::Close
        });
        let s = proxy_to(&[b.addr.to_string()], "", "", &[]);
        let mut c = s.client();
        c.send(b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n");
        let r = c.response(false);
        assert_eq!(r.status, 502, "{name}: {}", r.head);
        assert!(!r.head.contains("evil"), "{name}");
        assert!(
            s.wait_for_log("invalid response", Duration::from_secs(5))
                || s.wait_for_log("upstream app", Duration::from_secs(1)),
            "{name}: {:?}",
            s.stderr()
        );
        // The connection to the client is still good.
        c.send(b"GET /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
        assert_eq!(c.response(false).status, 502, "{name}");
        // A single server is never taken out of service by failures (nginx's rule).
        assert_eq!(b.requests(), 2, "{name}");
        // Every line logged is about the upstream's fault.
        s.assert_clean_log(&["upstream app ("]);
    }
    // A head larger than max_response_head.
    let b = Backend::start(|ex| {
        let big = format!(
            "HTTP/1.1 200 OK\r\nX-Big: {}\r\nContent-Length: 0\r\n\r\n",
            "a".repeat(8000)
        );
        ex.write(big.as_bytes());
        Flow::Keep
    });
    let s = proxy_to(&[b.addr.to_string()], "max_response_head = \"4k\"", "", &[]);
    assert_eq!(s.get("/x").status, 502);
    assert!(s.wait_for_log(
        "response head larger than 4096 bytes",
        Duration::from_secs(5)
    ));
    s.assert_clean_log(&["upstream app ("]);
}

#[test]
fn a_body_cut_short_by_the_backend_ends_the_client_connection() {
    let b = Backend::start(|ex| {
        ex.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
        ex.write(&[b'x'; 1000]);
        Flow::Close
    });
    let s = proxy_to(&[b.addr.to_string()], "", "", &[]);
    let mut c = s.client();
    c.send(b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n");
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match c.stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n") && text.contains("Content-Length: 100000\r\n"));
    assert!(
        got.len() < 100_000,
        "the client saw the connection end, not a complete body"
    );
    assert!(s.wait_for_log("closed before the end of the body", Duration::from_secs(5)));
    s.assert_clean_log(&["closed before the end of the body"]);
}

#[test]
fn the_stale_keepalive_race_is_retried_and_never_reaches_the_client() {
    // Every second request on a connection: the backend closes it without answering, as
    // a backend does whose keep-alive timeout fires just as the request arrives.
    let b = Backend::start(|ex| {
        if ex.earlier >= 1 {
            return Flow::Close;
        }
        echo(ex)
    });
    let s = proxy_to(&[b.addr.to_string()], "", "", &[]);
    let mut c = s.client();
    for i in 0..6 {
        c.send(format!("GET /n{i} HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes());
        let r = c.response(false);
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
    }
    // Resending a body: one by length, and an empty chunked one (its terminating chunk
    // must be sent again too).
    for i in 0..3 {
        c.send(
            format!("PUT /put{i} HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nxyz").as_bytes(),
        );
        let r = c.response(false);
        assert!(r.status == 200 && r.text().ends_with("xyz"), "PUT {i}");
        c.send(
            format!(
                "PUT /empty{i} HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
            )
            .as_bytes(),
        );
        assert_eq!(c.response(false).status, 200, "empty chunked PUT {i}");
    }
    s.assert_clean_log(&[]);
    // A POST is not resent: its effect may have happened (502), unless configured.
    c.send(b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx");
    assert_eq!(c.response(false).status, 502);
    drop(s);
    let s = proxy_to(
        &[b.addr.to_string()],
        "retry_non_idempotent = true",
        "",
        &[],
    );
    let mut c = s.client();
    for i in 0..4 {
        c.send(
            format!("POST /p{i} HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc").as_bytes(),
        );
        let r = c.response(false);
        assert_eq!(r.status, 200, "POST {i} with retry_non_idempotent");
        assert!(r.text().ends_with("abc"));
    }
    s.assert_clean_log(&[]);
}

#[test]
fn retries_and_passive_health_route_around_a_dead_server() {
    let b = Backend::start(echo);
    let dead = dead_port();
    let s = proxy_to(
        &[dead.clone(), b.addr.to_string()],
        "fail_timeout = \"30s\"",
        "",
        &[],
    );
    for i in 0..10 {
        let r = s.get(&format!("/r{i}"));
        assert_eq!(r.status, 200, "request {i}");
    }
    assert!(s.wait_for_log(
        &format!("upstream app ({dead}): 1 failure(s)"),
        Duration::from_secs(5)
    ));
    // Marked down once: one connect attempt, then no traffic.
    assert_eq!(
        s.stderr().iter().filter(|l| l.contains("connect:")).count(),
        0,
        "a retried connect failure is not a request error"
    );
    s.assert_clean_log(&["out of service"]);
}

#[test]
fn active_health_checks_take_a_failing_server_out_and_back() {
    let healthy = Arc::new(AtomicUsize::new(0));
    let h = healthy.clone();
    let sick = Backend::start(move |ex| {
        if ex.target() == "/healthz" {
            if h.load(Ordering::SeqCst) == 1 {
                ex.ok(b"ok");
            } else {
                ex.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
            }
            return Flow::Close;
        }
        ex.ok(b"sick");
        Flow::Keep
    });
    let good = Backend::start(|ex| {
        ex.ok(b"good");
        Flow::Keep
    });
    let s = proxy_to(
        &[sick.addr.to_string(), good.addr.to_string()],
        "health_check = \"/healthz\"\nhealth_interval = \"1s\"",
        "",
        &[],
    );
    assert!(
        s.wait_for_log(
            "health check /healthz failed: status 503",
            Duration::from_secs(10)
        ),
        "{:?}",
        s.stderr()
    );
    for _ in 0..6 {
        assert_eq!(s.get("/x").text(), "good");
    }
    healthy.store(1, Ordering::SeqCst);
    assert!(s.wait_for_log("health check passed", Duration::from_secs(10)));
    let answers: Vec<String> = (0..6).map(|_| s.get("/x").text()).collect();
    assert!(
        answers.iter().any(|a| a == "sick"),
        "back in service: {answers:?}"
    );
    s.assert_clean_log(&["health check"]);
}

#[test]
fn balancing_round_robin_least_connections_and_hash() {
    let named = |name: &'static str| {
        Backend::start(move |ex| {
            ex.ok(name.as_bytes());
            Flow::Keep
        })
    };
    let (a, b) = (named("a"), named("b"));
    let servers = [a.addr.to_string(), b.addr.to_string()];
    for balance in ["round-robin", "least-connections"] {
        let s = proxy_to(&servers, &format!("balance = \"{balance}\""), "", &[]);
        let answers: Vec<String> = (0..10).map(|i| s.get(&format!("/{i}")).text()).collect();
        let to_a = answers.iter().filter(|x| *x == "a").count();
        assert!((3..=7).contains(&to_a), "{balance}: {answers:?}");
        s.assert_clean_log(&[]);
    }
    let s = proxy_to(&servers, "balance = \"hash-uri\"", "", &[]);
    for i in 0..10 {
        let path = format!("/obj/{i}");
        let first = s.get(&path).text();
        for _ in 0..3 {
            assert_eq!(s.get(&path).text(), first, "{path} moved");
        }
    }
    // Weights: 3 to 1.
    let s = server_with(
        &[],
        &format!(
            "workers = 1\n[upstream.app]\nservers = [{{ address = \"{}\", weight = 3 }}, \"{}\"]\n[[location]]\nproxy = \"app\"\n",
            a.addr, b.addr
        ),
    );
    let to_a = (0..8)
        .filter(|i| s.get(&format!("/{i}")).text() == "a")
        .count();
    assert_eq!(to_a, 6);
    s.assert_clean_log(&[]);
}

#[test]
fn interim_responses_trailers_and_continue() {
    let b = Backend::start(|ex| {
        if ex.target() == "/hints" {
            ex.write(b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n");
            ex.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n");
            return Flow::Keep;
        }
        echo(ex)
    });
    let s = proxy_to(
        &[b.addr.to_string()],
        "",
        "[limits]\nmax_body = \"8m\"",
        &[],
    );
    let mut c = s.client();
    c.send(b"GET /hints HTTP/1.1\r\nHost: h\r\n\r\n");
    let hint = c.response(false);
    assert_eq!(hint.status, 103);
    assert!(hint.header("Link").is_some());
    let r = c.response(false);
    assert_eq!((r.status, r.text().as_str()), (200, "abc"));
    // A 1.0 client gets no 1xx.
    let mut c = s.client();
    c.send(b"GET /hints HTTP/1.0\r\n\r\n");
    assert_eq!(c.response(false).status, 200);
    // Expect: 100-continue: ramjet answers 100 when the proxy reads the body.
    let mut c = s.client();
    c.send(b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
    let cont = c.response(false);
    assert_eq!(cont.status, 100);
    c.send(b"hello");
    let r = c.response(false);
    assert!(r.text().ends_with("hello") && !r.text().contains("Expect"));
    // curl, which waits for 100 Continue before a large body.
    let data = "x".repeat(2_000_000);
    let path = s.path("upload.bin");
    std::fs::write(&path, &data).unwrap();
    let (ok, out) = curl(&[
        "--data-binary",
        &format!("@{}", path.display()),
        &s.url("/curl"),
    ]);
    assert!(ok);
    assert!(out.ends_with(data.as_bytes()));
    s.assert_clean_log(&[]);
}

#[test]
fn websocket_upgrades_become_tunnels() {
    let b = Backend::start(|ex| {
        assert_eq!(ex.header("Upgrade").as_deref(), Some("websocket"));
        ex.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\nhello-from-backend|");
        echo_until_closed(ex)
    });
    let s = proxy_to(&[b.addr.to_string()], "", "", &[]);
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /chat HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\nearly-bytes|").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"early-bytes|") {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{text}"
    );
    assert!(text.contains("Upgrade: websocket\r\n") && text.contains("Connection: upgrade\r\n"));
    assert!(
        text.contains("\r\n\r\nhello-from-backend|early-bytes|"),
        "{text}"
    );
    for msg in [&b"one"[..], &[0u8; 70_000][..]] {
        c.write_all(msg).unwrap();
        let mut back = vec![0u8; msg.len()];
        c.read_exact(&mut back).unwrap();
        assert_eq!(back, msg);
    }
    drop(c);
    s.assert_clean_log(&[]);
}

#[test]
fn client_aborts_release_the_upstream_connection() {
    // A download far larger than any buffer, and an upload the client abandons.
    let b = Backend::start(|ex| {
        if ex.target() == "/big" {
            ex.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n");
            let chunk = vec![b'z'; 1 << 16];
            for _ in 0..(1_000_000_000 / chunk.len()) {
                if ex.stream.write_all(&chunk).is_err() {
                    return Flow::Close;
                }
            }
            return Flow::Close;
        }
        echo(ex)
    });
    let s = proxy_to(
        &[b.addr.to_string()],
        "keepalive = 0",
        "[limits]\nmax_body = \"1g\"",
        &[],
    );
    // Warm up (the worker's first request opens its log, caches, ...).
    assert_eq!(s.get("/warm").status, 200);
    // The warm-up's own sockets close just after its answer: settle first.
    let mut baseline = s.open_fds();
    eventually(Duration::from_secs(5), || {
        std::thread::sleep(Duration::from_millis(100));
        let now = s.open_fds();
        let settled = now == baseline;
        baseline = now;
        settled
    });
    {
        let mut c = s.client();
        c.send(b"GET /big HTTP/1.1\r\nHost: h\r\n\r\n");
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0;
        while got < 4 << 20 {
            got += c.stream.read(&mut buf).unwrap();
        }
        // The client stops reading: ramjet must not buffer the backend's gigabyte.
        std::thread::sleep(Duration::from_millis(300));
        let rss_kb = s.status_kb("VmRSS").unwrap();
        assert!(
            rss_kb < 200_000,
            "the server holds {rss_kb} kB while its client does not read"
        );
    }
    assert!(
        eventually(Duration::from_secs(10), || s.open_fds() <= baseline),
        "download abort: {} descriptors open, {baseline} before",
        s.open_fds()
    );
    {
        let mut c = s.client();
        c.send(b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 500000000\r\n\r\n");
        c.send(&vec![b'u'; 1 << 20]);
        assert!(eventually(Duration::from_secs(10), || b.requests() >= 1));
    }
    assert!(
        eventually(Duration::from_secs(10), || s.open_fds() <= baseline),
        "upload abort: {} descriptors open, {baseline} before",
        s.open_fds()
    );
    // Still serving.
    assert_eq!(s.get("/after").status, 200);
    s.assert_clean_log(&["response body", "request body"]);
}

#[test]
fn large_uploads_and_slow_downloads_stream_without_sitting_in_memory() {
    let received = Arc::new(AtomicUsize::new(0));
    let r2 = received.clone();
    // The backend counts what it reads rather than keeping it.
    let b = Backend::start(move |ex| {
        r2.store(ex.body.len(), Ordering::SeqCst);
        ex.ok(format!("{}", ex.body.len()).as_bytes());
        Flow::Keep
    });
    let s = proxy_to(
        &[b.addr.to_string()],
        "",
        "[limits]\nmax_body = \"1g\"",
        &[],
    );
    let size: usize = 256 << 20;
    let mut c = s.client();
    c.send(format!("PUT /big HTTP/1.1\r\nHost: h\r\nContent-Length: {size}\r\n\r\n").as_bytes());
    let chunk = vec![b'q'; 1 << 20];
    for _ in 0..(size >> 20) {
        c.send(&chunk);
    }
    let r = c.response(false);
    assert_eq!(r.text(), size.to_string());
    let peak = s.status_kb("VmHWM").unwrap();
    assert!(
        peak < 150_000,
        "peak resident memory {peak} kB for a {size}-byte upload"
    );
    s.assert_clean_log(&[]);
}

#[test]
fn a_proxy_only_location_needs_no_root_and_rewrites_its_prefix() {
    let b = Backend::start(echo);
    let s = server_with(
        &[("index.html", b"home")],
        &format!(
            "workers = 1\n[upstream.api]\nservers = [\"{}\"]\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/api/\"\nproxy = \"api\"\nproxy_path = \"/v2/\"\nproxy_host = \"api.internal\"\n",
            b.addr
        ),
    );
    assert_eq!(s.get("/").text(), "home");
    let r = s.get("/api/users/a%20b?x=1");
    assert!(
        r.text()
            .starts_with("GET /v2/users/a%20b?x=1 HTTP/1.1\r\nHost: api.internal\r\n"),
        "{}",
        r.text()
    );
    // Static locations still refuse what they do not serve.
    let mut c = s.client();
    c.send(b"DELETE /index.html HTTP/1.1\r\nHost: h\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 405);
    assert_eq!(r.header("Allow").as_deref(), Some("GET, HEAD, OPTIONS"));
    let mut c = Client::connect(s.addr);
    c.send(b"GET /api/ HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(c.response(false).text().starts_with("GET /v2/ HTTP/1.1"));
    s.assert_clean_log(&[]);
}

#[test]
fn the_access_log_names_the_upstream_its_status_and_time() {
    let b = Backend::start(|ex| {
        ex.write(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok");
        Flow::Keep
    });
    let dead = dead_port();
    let s = proxy_to(
        &[dead.clone(), b.addr.to_string()],
        "balance = \"round-robin\"",
        "[log]\naccess = \"{dir}/access.log\"\nformat = \"json\"",
        &[("file.txt", b"f")],
    );
    assert_eq!(s.get("/made").status, 201);
    assert_eq!(s.get("/file.txt").status, 200);
    let path = s.path("access.log");
    let mut lines: Vec<serde_json::Value> = Vec::new();
    assert!(eventually(Duration::from_secs(10), || {
        lines = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        lines.len() >= 2
    }));
    let proxied = lines
        .iter()
        .find(|l| l["request"] == "GET /made HTTP/1.1")
        .unwrap();
    assert_eq!(proxied["status"], 201);
    assert_eq!(proxied["upstream_status"], 201);
    let addr = proxied["upstream_addr"].as_str().unwrap();
    assert!(addr.ends_with(&b.addr.to_string()), "{addr}");
    assert!(proxied["upstream_time_us"].as_u64().is_some());
    let file = lines
        .iter()
        .find(|l| l["request"] == "GET /file.txt HTTP/1.1")
        .unwrap();
    assert!(
        file["upstream_addr"].is_null(),
        "a static hit has no upstream"
    );
    s.assert_clean_log(&["out of service"]);
}

#[test]
fn proxy_protocol_listeners_take_the_client_address_from_the_balancer() {
    let b = Backend::start(echo);
    let s = server_with(
        &[],
        &format!(
            "workers = 1\nlisten = [{{ address = \"127.0.0.1:0\", proxy_protocol = true }}]\n[log]\naccess = \"{{dir}}/access.log\"\n[upstream.app]\nservers = [\"{}\"]\n[[location]]\nproxy = \"app\"\n",
            b.addr
        ),
    );
    // v1, in the same packet as the request.
    let mut c = s.client();
    c.send(b"PROXY TCP4 203.0.113.9 127.0.0.1 5555 80\r\nGET /v1 HTTP/1.1\r\nHost: h\r\n\r\n");
    let r = c.response(false);
    assert!(
        r.text().contains("X-Forwarded-For: 203.0.113.9\r\n"),
        "{}",
        r.text()
    );
    // The next request on the connection keeps the address.
    c.send(b"GET /again HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(c
        .response(false)
        .text()
        .contains("X-Forwarded-For: 203.0.113.9\r\n"));
    // v2 (IPv6 source), split over two writes.
    let mut v2 = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    v2.extend_from_slice(&[0x21, 0x21, 0, 36]);
    let src: std::net::Ipv6Addr = "2001:db8::7".parse().unwrap();
    v2.extend_from_slice(&src.octets());
    v2.extend_from_slice(&[0u8; 16]);
    v2.extend_from_slice(&[0x30, 0x39, 0, 80]);
    let mut c = s.client();
    c.send(&v2[..10]);
    std::thread::sleep(Duration::from_millis(50));
    c.send(&v2[10..]);
    c.send(b"GET /v2 HTTP/1.1\r\nHost: h\r\n\r\n");
    let r = c.response(false);
    assert!(
        r.text().contains("X-Forwarded-For: 2001:db8::7\r\n"),
        "{}",
        r.text()
    );
    assert!(r.text().contains("Forwarded: for=\"[2001:db8::7]\""));
    // A connection without the header is closed unanswered.
    let mut c = s.client();
    c.send(b"GET /plain HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(c.closed());
    // The access log has the real client.
    let log = s.path("access.log");
    assert!(eventually(Duration::from_secs(10), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("203.0.113.9 - - [")
    }));
    assert_eq!(b.requests(), 3);
    s.assert_clean_log(&[]);
}

#[test]
fn an_idle_tunnel_is_closed_after_the_body_timeout_and_a_busy_one_is_not() {
    let b = Backend::start(|ex| {
        ex.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
        echo_until_closed(ex)
    });
    let s = proxy_to(&[b.addr.to_string()], "body_timeout = \"2s\"", "", &[]);
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(
        b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(c.read(&mut byte).unwrap(), 1);
        head.push(byte[0]);
    }
    // Busy for longer than the timeout: a message every 200 ms for 3 s.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        c.write_all(b"ping").unwrap();
        let mut back = [0u8; 4];
        c.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"ping");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Then idle: ramjet closes it (EOF) after about 2 s.
    let idle_from = Instant::now();
    let mut rest = [0u8; 16];
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    match c.read(&mut rest) {
        Ok(0) => {}
        Ok(n) => panic!("{n} unexpected bytes"),
        Err(e) => panic!("the idle tunnel was not closed within 10 s: {e}"),
    }
    assert!(
        idle_from.elapsed() >= Duration::from_secs(1),
        "closed while busy"
    );
    s.assert_clean_log(&[]);
}

#[test]
fn upstream_trailers_reach_chunked_clients_checked() {
    let b = Backend::start(|ex| {
        ex.write(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n3\r\nabc\r\n",
        );
        if ex.target() == "/slow" {
            // The rest after a pause: the body streams, it does not arrive whole.
            std::thread::sleep(Duration::from_millis(100));
        }
        ex.write(b"2\r\nde\r\n0\r\nX-Sum: 99\r\nContent-Length: 5\r\nX-Evil: a\x01b\r\n\r\n");
        Flow::Keep
    });
    let s = proxy_to(&[b.addr.to_string()], "", "", &[]);
    for path in ["/whole", "/slow"] {
        let mut c = TcpStream::connect(s.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let mut raw = Vec::new();
        c.read_to_end(&mut raw).unwrap();
        let text = String::from_utf8_lossy(&raw);
        assert!(
            text.contains("Transfer-Encoding: chunked\r\n"),
            "{path}: {text}"
        );
        assert!(text.ends_with("0\r\nX-Sum: 99\r\n\r\n"), "{path}: {text}");
        assert!(
            !text.contains("X-Evil") && !text.contains("Content-Length"),
            "{path}: {text}"
        );
        // The body itself, as a client decodes it.
        let mut c = s.client();
        c.send(format!("GET {path} HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes());
        assert_eq!(c.response(false).text(), "abcde");
    }
    // A 1.0 client gets the body, delimited by close, without trailers.
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /slow HTTP/1.0\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).unwrap();
    assert!(
        raw.ends_with(b"\r\n\r\nabcde"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    s.assert_clean_log(&[]);
}

#[test]
fn a_location_sets_its_own_body_limit_either_way() {
    let b = Backend::start(|ex| {
        let n = ex.body.len().to_string();
        ex.ok(n.as_bytes());
        Flow::Keep
    });
    let s = server_with(
        &[],
        &format!(
            "workers = 1\n[limits]\nmax_body = \"1k\"\n[upstream.app]\nservers = [\"{}\"]\n[[location]]\nproxy = \"app\"\n[[location]]\npath = \"/upload/\"\nproxy = \"app\"\nmax_body = \"8m\"\n[[location]]\npath = \"/tiny/\"\nproxy = \"app\"\nmax_body = 10\n",
            b.addr
        ),
    );
    let post = |path: &str, n: usize, chunked: bool| {
        let mut c = s.client();
        let body = vec![b'x'; n];
        let mut req = if chunked {
            format!(
                "POST {path} HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n{n:x}\r\n"
            )
            .into_bytes()
        } else {
            format!("POST {path} HTTP/1.1\r\nHost: h\r\nContent-Length: {n}\r\n\r\n").into_bytes()
        };
        req.extend_from_slice(&body);
        if chunked {
            req.extend_from_slice(b"\r\n0\r\n\r\n");
        }
        c.send(&req);
        c.response(false)
    };
    // Raised above the global limit.
    let r = post("/upload/big", 5 << 20, false);
    assert_eq!((r.status, r.text()), (200, (5 << 20).to_string()));
    assert_eq!(post("/upload/big", 5 << 20, true).status, 200);
    // The global limit elsewhere, exactly at it and one past.
    assert_eq!(post("/other", 1024, false).status, 200);
    assert_eq!(post("/other", 1025, false).status, 413);
    // Lowered below it, by length and chunked.
    assert_eq!(post("/tiny/x", 10, false).status, 200);
    assert_eq!(post("/tiny/x", 11, false).status, 413);
    assert_eq!(post("/tiny/x", 11, true).status, 413);
    s.assert_clean_log(&[]);
}

#[test]
fn head_answers_keep_the_upstream_framing() {
    let b = Backend::start(|ex| {
        let head: &[u8] = match ex.target() {
            "/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "/sized" => b"HTTP/1.1 200 OK\r\nContent-Length: 12345\r\n\r\n",
            _ => b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        };
        ex.write(head);
        Flow::Keep
    });
    let s = proxy_to(&[b.addr.to_string()], "", "", &[]);
    let mut c = s.client();
    c.send(b"HEAD /chunked HTTP/1.1\r\nHost: h\r\n\r\n");
    let r = c.response(true);
    assert_eq!(
        r.header("Transfer-Encoding").as_deref(),
        Some("chunked"),
        "{}",
        r.head
    );
    assert_eq!(r.header("Content-Length"), None);
    c.send(b"HEAD /sized HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(
        c.response(true).header("Content-Length").as_deref(),
        Some("12345")
    );
    c.send(b"HEAD /empty HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(
        c.response(true).header("Content-Length").as_deref(),
        Some("0")
    );
    // All three on one client connection and one upstream connection.
    assert_eq!(b.connections(), 1);
    s.assert_clean_log(&[]);
}

#[test]
fn a_request_in_flight_across_a_reload_finishes_on_its_own_configuration() {
    // s1 holds the request until the reload is done, then closes without answering, so
    // the request is retried (a GET) after the configuration changed under it.
    let reloaded = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = reloaded.clone();
    let s1 = Backend::start(move |_ex| {
        let end = Instant::now() + Duration::from_secs(20);
        while !flag.load(Ordering::SeqCst) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
        Flow::Close
    });
    let s2 = Backend::start(|ex| {
        ex.ok(b"from s2");
        Flow::Keep
    });
    // Upstreams are kept sorted by name: "z" is the second; after the reload it is the
    // only one, so its old index no longer exists.
    let before = format!(
        "workers = 1\n[upstream.a]\nservers = [\"{}\"]\n[upstream.z]\nservers = [\"{}\", \"{}\"]\nbalance = \"round-robin\"\n[[location]]\nproxy = \"z\"\n",
        s2.addr, s1.addr, s2.addr
    );
    let after = format!(
        "workers = 1\n[upstream.z]\nservers = [\"{}\"]\n[[location]]\nproxy = \"z\"\n",
        s2.addr
    );
    let s = server_with(&[], &before);
    let addr = s.addr;
    let in_flight = std::thread::spawn(move || {
        let mut c = Client::connect(addr);
        c.send(b"GET /long HTTP/1.1\r\nHost: h\r\n\r\n");
        c.response(false)
    });
    assert!(eventually(Duration::from_secs(10), || s1.requests() == 1));
    s.rewrite_config(&after);
    s.signal(libc::SIGHUP);
    assert!(s.wait_for_log("configuration reloaded", Duration::from_secs(10)));
    // Let the worker take the new configuration (its next request or tick) first.
    assert_eq!(s.get("/new").text(), "from s2");
    reloaded.store(true, Ordering::SeqCst);
    let r = in_flight.join().unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "from s2"));
    assert_eq!(s.get("/after").text(), "from s2");
    // s1's close is a failure of s1 (passive health), nothing else.
    s.assert_clean_log(&["out of service"]);
}

#[test]
fn location_headers_and_expires_apply_to_proxied_answers_too() {
    let b = Backend::start(|ex| {
        if ex.target() == "/own" {
            ex.write(b"HTTP/1.1 200 OK\r\nCache-Control: private\r\nContent-Length: 2\r\n\r\nok");
        } else {
            ex.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok");
        }
        Flow::Keep
    });
    let s = server_with(
        &[],
        &format!(
            "workers = 1\n[upstream.app]\nservers = [\"{}\"]\n[[location]]\nproxy = \"app\"\nheaders = {{ X-Via-Edge = \"1\" }}\nexpires = \"10m\"\n",
            b.addr
        ),
    );
    let r = s.get("/plain");
    assert_eq!(r.header("X-Via-Edge").as_deref(), Some("1"));
    assert_eq!(r.header("Cache-Control").as_deref(), Some("max-age=600"));
    let r = s.get("/own");
    assert_eq!(
        r.header("Cache-Control").as_deref(),
        Some("private"),
        "the backend's own wins"
    );
    assert_eq!(r.head.matches("Cache-Control").count(), 1);
    s.assert_clean_log(&[]);
}
