//! Modules: the example module mounted from the configuration, answering what it sees of
//! the request, with bytes and file ranges in one body; its options checked at load; a
//! reload starting it anew.

use std::time::Duration;

use ramjet_testkit::Server;

const HELLO: &str = "workers = 1\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/hello/\"\nmodule = \"hello\"\n[location.module_config]\ngreeting = \"Hi\"\nfile = \"{dir}/root/motd.bin\"\n";

fn hello_server(motd: &[u8]) -> Server {
    crate::server_with(&[("motd.bin", motd), ("a.txt", b"static a")], HELLO)
}

#[test]
fn the_example_module_answers_get_head_post_and_refuses_other_methods() {
    let s = hello_server(b"MOTD\n");
    let mut c = s.client();
    c.send(b"GET /hello/x?y=1 HTTP/1.1\r\nHost: t\r\nCookie: a=b; name=bob\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 200);
    let text = r.text();
    assert!(text.starts_with("Hi, 127.0.0.1!\n"), "{text}");
    assert!(
        text.contains("method GET target /hello/x?y=1 query y=1\n"),
        "{text}"
    );
    assert!(text.contains("cookie name bob\n"), "{text}");
    assert!(
        text.ends_with("--- file ---\nMOTD\n--- end ---\n"),
        "{text}"
    );
    assert_eq!(
        r.header("content-length").unwrap(),
        r.body.len().to_string()
    );
    assert_eq!(r.header("cache-control").as_deref(), Some("no-store"));

    // HEAD: the same head, no body; the per-worker state counts both.
    c.send(b"HEAD /hello/ HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(true);
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
    c.send(b"GET /hello/ HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(c
        .response(false)
        .text()
        .contains("request 3 on this worker"));

    // POST with a chunked body in pieces.
    c.send(
        b"POST /hello/ HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nline1\n\r\n",
    );
    std::thread::sleep(Duration::from_millis(50));
    c.send(b"5\r\nline2\r\n0\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.text(), "Hi: 11 bytes, first line \"line1\"\n");

    // Another method: 405 with Allow; the connection stays usable.
    c.send(b"DELETE /hello/ HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow").as_deref(), Some("GET, HEAD, POST"));
    assert!(r.keep_alive);

    // Pipelined: module and static answers in order.
    c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /hello/p HTTP/1.1\r\nHost: t\r\n\r\nGET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "static a");
    assert!(c.response(false).text().contains("target /hello/p "));
    assert_eq!(c.response(false).text(), "static a");

    // A body over the module's limit gets its status, not a hang.
    let big = vec![b'x'; 70 * 1024];
    c.send(
        format!(
            "POST /hello/ HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
            big.len()
        )
        .as_bytes(),
    );
    c.send(&big);
    assert_eq!(c.response(false).status, 413);
}

#[test]
fn a_file_inside_a_module_reply_arrives_whole_at_every_size() {
    // 0 bytes, 1 byte, and sizes around the socket and page sizes.
    for len in [0usize, 1, 4095, 4096, 4097, 1 << 20] {
        let motd = crate::bytes(len, len as u64);
        let s = hello_server(&motd);
        let (ok, body) = crate::curl(&[&s.url("/hello/")]);
        assert!(ok, "{len}");
        let start = body
            .windows(13)
            .position(|w| w == b"--- file ---\n")
            .unwrap()
            + 13;
        assert_eq!(&body[start..start + len], &motd[..], "{len}");
        assert_eq!(&body[start + len..], b"--- end ---\n", "{len}");
    }
}

#[test]
fn a_reload_starts_the_module_again_with_its_new_options() {
    let s = hello_server(b"x");
    assert!(s.get("/hello/").text().starts_with("Hi, "));
    s.rewrite_config(&HELLO.replace("\"Hi\"", "\"Bonjour\""));
    s.signal(libc::SIGHUP);
    assert!(s.wait_for_log("configuration reloaded", Duration::from_secs(10)));
    crate::poll_until(|| {
        let t = s.get("/hello/").text();
        t.starts_with("Bonjour, ").then_some(())
    });
    // Fresh per-worker state.
    assert!(s.get("/hello/").text().contains("request 2 on this worker"));
    // A reload with a wrong option is refused and the module keeps answering.
    s.rewrite_config(&HELLO.replace("greeting = \"Hi\"", "greeting = 3"));
    s.signal(libc::SIGHUP);
    assert!(s.wait_for_log("reload refused", Duration::from_secs(10)));
    assert!(s.get("/hello/").text().starts_with("Bonjour, "));
}

#[test]
fn module_options_are_checked_at_load_with_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    let check = |text: &str| {
        let f = dir.path().join("m.toml");
        std::fs::write(&f, text).unwrap();
        let out = std::process::Command::new(crate::BIN)
            .arg("check-config")
            .arg(&f)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let base = "listen = [\"127.0.0.1:0\"]\n[[location]]\nroot = \"www\"\n[[location]]\npath = \"/m/\"\nmodule = \"hello\"\n";
    let (code, err) = check(&format!("{base}[location.module_config]\ngreeting = 5\n"));
    assert_eq!(code, Some(2));
    assert!(err.contains("m.toml:7"), "{err}");
    assert!(err.contains("location[1].module_config.greeting"), "{err}");
    let (_, err) = check(&format!(
        "{base}[location.module_config]\nfile = \"/nonexistent/x\"\n"
    ));
    assert!(
        err.contains("module_config.file") && err.contains("/nonexistent/x"),
        "{err}"
    );
    let (_, err) = check(&base.replace("\"hello\"", "\"nope\""));
    assert!(
        err.contains("m.toml:6") && err.contains("no module `nope`"),
        "{err}"
    );
    let (_, err) = check(&base.replace("module = \"hello\"\n", "handlers = [\"module\"]\n"));
    assert!(
        err.contains("location[1].module") && err.contains("missing"),
        "{err}"
    );
    let (code, _) = check(base);
    assert_eq!(code, Some(0));
}

/// `n` numbered lines as the example modules stream them.
pub(crate) fn lines(greeting: &str, n: u64) -> String {
    (1..=n)
        .map(|i| format!("{greeting} {i} of {n}\n"))
        .collect()
}

#[test]
fn a_streaming_module_reply_is_chunked_to_http11_and_closes_for_http10() {
    let s = hello_server(b"x");
    let mut c = s.client();
    for n in [0u64, 1, 2, 5000] {
        c.send(format!("GET /hello/?lines={n} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        let r = c.response(false);
        assert_eq!(r.status, 200, "{n}");
        assert_eq!(r.header("transfer-encoding").as_deref(), Some("chunked"));
        assert_eq!(r.header("content-length"), None);
        assert_eq!(r.text(), lines("Hi", n), "{n}");
    }
    // The connection stays usable after a streamed body, pipelined or not.
    c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /hello/?lines=3 HTTP/1.1\r\nHost: t\r\n\r\nGET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "static a");
    assert_eq!(c.response(false).text(), lines("Hi", 3));
    assert_eq!(c.response(false).text(), "static a");
    // HEAD: the head, no body.
    c.send(b"HEAD /hello/?lines=3 HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(c.response(true).body.is_empty());

    // HTTP/1.0 has no chunked framing: the body ends with the connection.
    let mut c = s.client();
    c.send(b"GET /hello/?lines=4 HTTP/1.0\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.header("transfer-encoding"), None);
    assert_eq!(r.text(), lines("Hi", 4));
    assert!(c.try_response(false).is_none(), "closed after the body");

    // curl over HTTP/1.1 and HTTP/2 (h2c).
    let (ok, body) = crate::curl(&[&s.url("/hello/?lines=100000")]);
    assert!(ok);
    assert_eq!(body, lines("Hi", 100_000).into_bytes());
    let (ok, body) = crate::curl(&["--http2-prior-knowledge", &s.url("/hello/?lines=777")]);
    assert!(ok);
    assert_eq!(body, lines("Hi", 777).into_bytes());
    s.assert_clean_log(&[]);
}

#[test]
fn a_client_that_stops_reading_holds_the_module_back_not_the_server() {
    let s = hello_server(b"x");
    let before = s.status_kb("VmRSS").unwrap();
    // Ten million lines (about 230 MB) asked for and never read: the module may only run
    // ahead of the client by what the socket buffers hold.
    let mut stalled = s.client();
    stalled.send(b"GET /hello/?lines=10000000 HTTP/1.1\r\nHost: t\r\n\r\n");
    // The worker goes on answering others meanwhile.
    for _ in 0..20 {
        assert_eq!(s.get("/a.txt").text(), "static a");
        assert_eq!(s.get("/hello/?lines=2").text(), lines("Hi", 2));
    }
    let after = s.status_kb("VmRSS").unwrap();
    assert!(
        after < before + 32 * 1024,
        "resident {before} KB before, {after} KB with a stalled stream"
    );
    // An aborted client ends its stream; the server carries on.
    drop(stalled);
    assert_eq!(s.get("/hello/?lines=1").text(), lines("Hi", 1));
    s.assert_clean_log(&[]);
}
