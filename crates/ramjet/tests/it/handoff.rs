//! The `handoff` handler: ramjet reads a request's head, then passes the client's
//! connection itself, with the bytes read so far, to a backend process that answers the
//! client directly (`ramjet-handoff`'s receiver stands in for the backend here).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use ramjet_handoff::Receiver;
use ramjet_testkit::{Client, Server};

/// A backend thread: every request on every handed connection is answered with
/// "backend <client> <request line> body=<body>" (Content-Length bodies are read).
fn backend(path: &Path) {
    let receiver = Receiver::bind(path).unwrap();
    std::thread::spawn(move || loop {
        let channel = receiver.accept().unwrap();
        std::thread::spawn(move || {
            while let Ok(Some(batch)) = channel.recv() {
                for h in batch {
                    std::thread::spawn(move || serve(h));
                }
            }
        });
    });
}

fn serve(h: ramjet_handoff::Handed) {
    let mut stream = h.stream;
    let mut buf = h.prefix;
    let fill = |stream: &mut TcpStream, buf: &mut Vec<u8>| {
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    };
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            if !fill(&mut stream, &mut buf) {
                return;
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .map_or(0, |v| v.parse().unwrap());
        while buf.len() < end + 4 + len {
            if !fill(&mut stream, &mut buf) {
                return;
            }
        }
        let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
        buf.drain(..end + 4 + len);
        let text = format!(
            "backend {} {} body={body}",
            h.client,
            head.lines().next().unwrap_or("")
        );
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if stream.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// The access-log record (JSON) of the request with this request line, once written.
fn logged(s: &Server, request: &str) -> serde_json::Value {
    crate::poll_until(|| {
        let text = std::fs::read_to_string(s.path("access.log")).ok()?;
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["request"] == request)
    })
}

/// The value of an unlabelled metric in a /metrics scrape.
fn metric(s: &Server, name: &str) -> u64 {
    let (ok, text) = crate::curl(&[&s.url("/metrics")]);
    assert!(ok);
    let text = String::from_utf8(text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .parse()
        .unwrap()
}

fn server(socket: &Path) -> Server {
    let dir = Server::dir();
    std::fs::write(dir.path().join("root/static.txt"), "from ramjet").unwrap();
    Server::start(
        crate::BIN,
        dir,
        &format!(
            "[log]\naccess = \"{{dir}}/access.log\"\nformat = \"json\"\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/app/\"\nhandoff = \"{}\"\n[[location]]\npath = \"/metrics\"\nhandlers = [\"metrics\"]\n",
            socket.display()
        ),
    )
}

#[test]
fn a_handed_off_connection_is_answered_by_the_backend_with_the_real_client_address() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("backend.sock");
    backend(&socket);
    let s = server(&socket);
    // curl, a real client.
    let (ok, body) = crate::curl(&[&s.url("/app/hello?x=1")]);
    assert!(ok);
    let body = String::from_utf8(body).unwrap();
    assert!(body.starts_with("backend 127.0.0.1:"), "{body}");
    assert!(
        body.contains(" GET /app/hello?x=1 HTTP/1.1 body="),
        "{body}"
    );

    // A static request and a handed one pipelined in one write: ramjet answers the
    // first, then the connection goes, and the backend answers the second and what
    // follows on the same connection.
    let mut c = Client::connect(s.addr);
    let me = c.stream.local_addr().unwrap();
    c.send(b"GET /static.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /app/two HTTP/1.1\r\nHost: t\r\n\r\nGET /static.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "from ramjet");
    assert_eq!(
        c.response(false).text(),
        format!("backend {me} GET /app/two HTTP/1.1 body=")
    );
    assert_eq!(
        c.response(false).text(),
        format!("backend {me} GET /static.txt HTTP/1.1 body=")
    );

    // A head in two packets and a body partly sent with it: the backend reads the rest.
    // (Separate segments with TCP_NODELAY; however the server's reads split them, the
    // first half of the body is ramjet's prefix or still in the socket, and the backend
    // gets all ten bytes.)
    let mut c = Client::connect(s.addr);
    c.stream.set_nodelay(true).unwrap();
    c.send(b"POST /app/form HTTP/1.1\r\nHo");
    c.send(b"st: t\r\nContent-Length: 10\r\n\r\n12345");
    c.send(b"67890");
    let got = c.response(false).text();
    assert!(
        got.ends_with("POST /app/form HTTP/1.1 body=1234567890"),
        "{got}"
    );
    // Three connections handed over (curl's, the pipelined one, the POST), in at most
    // as many messages, none refused.
    // (Counted by the worker just after the send, which may be after the backend's
    // answer: polled.)
    crate::poll_until(|| (metric(&s, "ramjet_handoff_connections_total") == 3).then_some(()));
    // The access log has each handed request: 200, no bytes of ramjet's, the socket as
    // its upstream; the static one before it is logged as usual.
    let v = logged(&s, "GET /app/two HTTP/1.1");
    assert_eq!(
        (v["status"].as_u64(), v["bytes"].as_u64()),
        (Some(200), Some(0)),
        "{v}"
    );
    assert_eq!(
        v["upstream_addr"],
        format!("handoff:{}", socket.display()),
        "{v}"
    );
    assert_eq!(logged(&s, "GET /static.txt HTTP/1.1")["bytes"], 11);
    let messages = metric(&s, "ramjet_handoff_messages_total");
    assert!((1..=3).contains(&messages), "{messages}");
    assert_eq!(metric(&s, "ramjet_handoff_refused_total"), 0);
    s.assert_clean_log(&[]);
}

#[test]
fn a_backend_that_is_not_there_gets_the_client_a_503() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("absent.sock");
    let s = server(&socket);
    let mut c = Client::connect(s.addr);
    c.send(b"GET /static.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /app/x HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "from ramjet");
    assert_eq!(c.response(false).status, 503);
    // Then the connection is closed.
    assert!(c.closed());
    crate::poll_until(|| (metric(&s, "ramjet_handoff_refused_total") == 1).then_some(()));
    assert_eq!(logged(&s, "GET /app/x HTTP/1.1")["status"], 503);
    assert_eq!(metric(&s, "ramjet_handoff_connections_total"), 0);
    assert!(s.wait_for_log("hand-off to", Duration::from_secs(10)));
    s.assert_clean_log(&["hand-off to", "503"]);
}

/// A backend that is restarting (its socket gone) when a request arrives is waited for up
/// to `timeouts.handoff`: once it is back, the connection goes to it, not a 503.
#[test]
fn a_backend_that_comes_back_within_the_timeout_gets_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("later.sock");
    let s = server(&socket);
    let mut c = Client::connect(s.addr);
    c.send(b"GET /app/late HTTP/1.1\r\nHost: t\r\n\r\n");
    // The request is read and waiting (the worker's log says nothing yet): bring the
    // backend up within the second.
    std::thread::sleep(Duration::from_millis(200));
    backend(&socket);
    let r = c.response(false);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("GET /app/late HTTP/1.1"), "{}", r.text());
    assert_eq!(metric(&s, "ramjet_handoff_refused_total"), 0);
}

/// A handed-off location leaves the request body to the backend: ramjet's `max_body`
/// (1 MB by default) does not apply there unless the location sets one.
#[test]
fn a_handed_off_request_body_is_not_limited_by_ramjet() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("b.sock");
    backend(&socket);
    let s = server(&socket);
    let body = vec![b'x'; 3 * 1024 * 1024];
    let mut req = format!(
        "POST /app/upload HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    let mut c = Client::connect(s.addr);
    c.send(&req);
    let r = c.response(false);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("POST /app/upload HTTP/1.1"));
    // Elsewhere the limit holds.
    let mut c = Client::connect(s.addr);
    let mut other = format!(
        "POST /other HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    other.extend_from_slice(&body);
    c.send(&other);
    assert_eq!(c.response(false).status, 413);
}

/// `ramjet check-config` of `text` written to `bad.toml`: it must refuse it; its stderr.
fn refused(text: &str) -> String {
    let dir = Server::dir();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, text).unwrap();
    let out = std::process::Command::new(crate::BIN)
        .arg("check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_bad_handoff_setting_names_file_line_and_key() {
    let err = refused(
        "[[location]]\nroot = \"root\"\n[[location]]\npath = \"/app/\"\nhandoff = \"relative.sock\"\n",
    );
    assert!(
        err.contains("bad.toml:5")
            && err.contains("handoff")
            && err.contains("not an absolute path"),
        "{err}"
    );
    // A batch size outside what one message carries.
    let err = refused("[limits]\nhandoff_batch = 65\n[[location]]\nroot = \"root\"\n");
    assert!(
        err.contains("limits.handoff_batch") && err.contains("from 1 to 64"),
        "{err}"
    );
}

/// ramjet with one worker sending each connection alone, waiting `wait` for a full
/// backend.
fn stalled_server(socket: &Path, wait: &str) -> Server {
    Server::start(
        crate::BIN,
        Server::dir(),
        &format!(
            "workers = 1\n[timeouts]\nhandoff = \"{wait}\"\n[limits]\nhandoff_batch = 1\n[log]\naccess = \"{{dir}}/access.log\"\nformat = \"json\"\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/app/\"\nhandoff = \"{}\"\n[[location]]\npath = \"/metrics\"\nhandlers = [\"metrics\"]\n",
            socket.display()
        ),
    )
}

/// `n` connections, each with one request for a handed-off path.
fn requests(s: &Server, n: usize) -> Vec<Client> {
    (0..n)
        .map(|i| {
            let mut c = Client::connect(s.addr);
            c.send(format!("GET /app/{i} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
            c
        })
        .collect()
}

/// A backend that stops reading fills its channel (the kernel's queue for it); the
/// connections after that wait in ramjet, and go when the backend reads again.
#[test]
fn connections_wait_for_a_backend_whose_queue_is_full() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("slow.sock");
    let receiver = Receiver::bind(&socket).unwrap();
    let s = stalled_server(&socket, "60s");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(receiver.accept().unwrap()).unwrap());
    let mut clients = requests(&s, 300);
    // The backend reads nothing yet: the handed count stops short of 300.
    let mut last = u64::MAX;
    let went = crate::poll_until(|| {
        let now = metric(&s, "ramjet_handoff_connections_total");
        let stable = now == last && now > 0;
        last = now;
        if !stable {
            std::thread::sleep(Duration::from_millis(100));
        }
        stable.then_some(now)
    });
    assert!(went < 300, "the backend's queue never filled: {went}");
    assert_eq!(metric(&s, "ramjet_handoff_refused_total"), 0);
    // Now the backend reads and answers: every connection, waiting ones included.
    let channel = rx.recv().unwrap();
    std::thread::spawn(move || {
        while let Ok(Some(batch)) = channel.recv() {
            for h in batch {
                std::thread::spawn(move || serve(h));
            }
        }
    });
    for (i, c) in clients.iter_mut().enumerate() {
        let r = c.response(false);
        assert_eq!(r.status, 200, "connection {i}");
        assert!(r.text().contains(&format!("GET /app/{i} HTTP/1.1")));
    }
    assert_eq!(metric(&s, "ramjet_handoff_refused_total"), 0);
    assert_eq!(metric(&s, "ramjet_handoff_connections_total"), 300);
}

/// A backend that never reads: the connections it has no room for get a 503 once their
/// `[timeouts] handoff` has passed, not before.
#[test]
fn a_backend_that_stays_full_gets_its_waiting_clients_a_503_after_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("stuck.sock");
    let receiver = Receiver::bind(&socket).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(receiver.accept().unwrap()).unwrap());
    let s = stalled_server(&socket, "500ms");
    let sent = std::time::Instant::now();
    let mut clients = requests(&s, 300);
    // Some connection past the backend's queue is answered 503, and not before the
    // timeout.
    let refused = clients
        .iter_mut()
        .rev()
        .take(50)
        .find_map(|c| {
            c.stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            let r = c.response(false);
            (r.status == 503).then_some(r)
        })
        .expect("a 503");
    assert!(sent.elapsed() >= Duration::from_millis(500));
    assert_eq!(refused.header("Retry-After").as_deref(), Some("1"));
    crate::poll_until(|| (metric(&s, "ramjet_handoff_refused_total") > 0).then_some(()));
    assert!(s.wait_for_log("after waiting", Duration::from_secs(10)));
    let _channel = rx.recv().unwrap(); // held open, never read
}
