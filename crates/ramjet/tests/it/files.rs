//! Files: types, index files, redirects, large files by sendfile, precompressed siblings.

use crate::{bytes, server_with};

#[test]
fn types_index_and_redirects() {
    let s = server_with(
        &[
            ("index.html", b"<h1>home</h1>"),
            ("docs/index.html", b"docs"),
            ("style.css", b"body{}"),
            ("data.json", b"{}"),
            ("a.log", b"log"),
            ("blob", b"\x00\x01"),
            ("empty/.keep", b""),
        ],
        "[defaults]\ntypes = { log = \"text/plain\" }\n",
    );
    let r = s.get("/");
    assert_eq!((r.status, r.text().as_str()), (200, "<h1>home</h1>"));
    assert_eq!(
        r.header("Content-Type").as_deref(),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(
        s.get("/style.css").header("Content-Type").as_deref(),
        Some("text/css; charset=utf-8")
    );
    assert_eq!(
        s.get("/data.json").header("Content-Type").as_deref(),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(
        s.get("/a.log").header("Content-Type").as_deref(),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(
        s.get("/blob").header("Content-Type").as_deref(),
        Some("application/octet-stream")
    );
    let r = s.get("/docs?x=1&y=%20");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("Location").as_deref(), Some("/docs/?x=1&y=%20"));
    assert_eq!(s.get("/docs/").text(), "docs");
    // A directory without index and without autoindex is forbidden, as in nginx.
    assert_eq!(s.get("/empty/").status, 403);
    assert_eq!(s.get("/nope").status, 404);
    assert_eq!(s.get("/style.css/").status, 404);
    s.assert_clean_log(&[]);
}

#[test]
fn large_files_by_sendfile_and_small_from_memory() {
    let big = bytes(3 * 1024 * 1024 + 17, 1);
    let small = bytes(1000, 2);
    let s = server_with(
        &[("big.bin", &big), ("small.bin", &small)],
        "[file_cache]\nsmall_file_max = \"64k\"\n",
    );
    let mut c = s.client();
    for _ in 0..3 {
        c.send(
            b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\nGET /small.bin HTTP/1.1\r\nHost: t\r\n\r\n",
        );
        assert!(c.response(false).body == big);
        assert!(c.response(false).body == small);
    }
    s.assert_clean_log(&[]);
}

/// A changed file is served within `file_cache.valid` plus one background re-check.
fn eventually(
    s: &ramjet_testkit::Server,
    path: &str,
    want: impl Fn(&ramjet_testkit::Response) -> bool,
) -> bool {
    for _ in 0..50 {
        if want(&s.get(path)) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

#[test]
fn file_changes_are_noticed() {
    let s = server_with(
        &[("f.txt", b"one")],
        "workers = 1\n[file_cache]\nvalid = \"100ms\"\n",
    );
    assert_eq!(s.get("/f.txt").text(), "one");
    assert_eq!(s.get("/new.txt").status, 404);
    std::fs::write(s.root().join("f.txt.new"), b"two!").unwrap();
    std::fs::rename(s.root().join("f.txt.new"), s.root().join("f.txt")).unwrap();
    std::fs::write(s.root().join("new.txt"), b"new").unwrap();
    assert!(eventually(&s, "/f.txt", |r| r.text() == "two!"));
    assert!(eventually(&s, "/new.txt", |r| r.status == 200 && r.text() == "new"));
    std::fs::remove_file(s.root().join("f.txt")).unwrap();
    assert!(eventually(&s, "/f.txt", |r| r.status == 404));
    s.assert_clean_log(&[]);
}

#[test]
fn precompressed_siblings() {
    let s = server_with(
        &[
            ("app.js", b"plain"),
            ("app.js.gz", b"GZ"),
            ("app.js.zst", b"ZSTD"),
            ("only.txt", b"x"),
        ],
        "[defaults]\nprecompressed = [\"zstd\", \"br\", \"gzip\"]\n",
    );
    let get = |ae: &str| {
        let mut c = s.client();
        c.send(format!("GET /app.js HTTP/1.1\r\nHost: t\r\nAccept-Encoding: {ae}\r\nConnection: close\r\n\r\n").as_bytes());
        c.response(false)
    };
    let r = get("gzip, deflate, br, zstd");
    assert_eq!(r.text(), "ZSTD");
    assert_eq!(r.header("Content-Encoding").as_deref(), Some("zstd"));
    assert_eq!(r.header("Vary").as_deref(), Some("Accept-Encoding"));
    assert_eq!(
        r.header("Content-Type").as_deref(),
        Some("text/javascript; charset=utf-8")
    );
    let r = get("gzip");
    assert_eq!(
        (r.text().as_str(), r.header("Content-Encoding").as_deref()),
        ("GZ", Some("gzip"))
    );
    let r = get("gzip;q=0, identity");
    assert_eq!(r.text(), "plain");
    assert_eq!(r.header("Content-Encoding"), None);
    assert_eq!(r.header("Vary").as_deref(), Some("Accept-Encoding"));
    assert_ne!(get("zstd").header("ETag"), get("identity").header("ETag"));
    s.assert_clean_log(&[]);
}

#[test]
fn virtual_hosts_and_ipv6() {
    let dir = ramjet_testkit::Server::dir();
    for (d, body) in [("root", "default"), ("a", "site a"), ("b", "site b")] {
        std::fs::create_dir_all(dir.path().join(d)).unwrap();
        std::fs::write(dir.path().join(d).join("who.txt"), body).unwrap();
    }
    let s = ramjet_testkit::Server::start(
        crate::BIN,
        dir,
        r#"
listen = ["127.0.0.1:0", "[::1]:0"]
[[location]]
root = "root"
[[vhost]]
names = ["a.example"]
root = "a"
[[vhost]]
names = ["*.b.example"]
root = "b"
"#,
    );
    let who = |host: &str| {
        let mut c = s.client();
        c.send(
            format!("GET /who.txt HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        );
        c.response(false).text()
    };
    assert_eq!(who("a.example"), "site a");
    assert_eq!(who("A.EXAMPLE:8080"), "site a");
    assert_eq!(who("www.b.example"), "site b");
    assert_eq!(who("b.example"), "default");
    assert_eq!(who("other"), "default");
    // The same server answers on IPv6 loopback.
    let v6 = s
        .stderr()
        .iter()
        .find_map(|l| {
            l.split("listening on http://[")
                .nth(1)
                .map(|r| r.split(']').nth(1).unwrap_or("").to_string())
        })
        .expect("an IPv6 listener");
    let port = v6
        .trim_start_matches(':')
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let (ok, body) = crate::curl(&[
        "-g",
        "-H",
        "Host: a.example",
        &format!("http://[::1]:{port}/who.txt"),
    ]);
    assert!(ok);
    assert_eq!(body, b"site a");
    s.assert_clean_log(&[]);
}

#[test]
fn a_location_adds_headers_and_cache_lifetimes() {
    let s = crate::server_with(
        &[("a.txt", b"a"), ("b.png", b"png"), ("dir/x", b"x")],
        "[[location]]\nroot = \"root\"\nautoindex = true\nheaders = { X-Frame-Options = \"DENY\", X-Mirror = \"eu-1\" }\nexpires = \"1h\"\nexpires_by_type = { \"image/\" = \"30d\", \"text/html\" = 0 }\n",
    );
    let r = s.get("/a.txt");
    assert_eq!(r.header("X-Frame-Options").as_deref(), Some("DENY"));
    assert_eq!(r.header("X-Mirror").as_deref(), Some("eu-1"));
    assert_eq!(r.header("Cache-Control").as_deref(), Some("max-age=3600"));
    let date = httpdate::parse_http_date(&r.header("Date").unwrap()).unwrap();
    let expires = httpdate::parse_http_date(&r.header("Expires").unwrap()).unwrap();
    let ahead = expires.duration_since(date).unwrap().as_secs();
    assert!(
        (3599..=3601).contains(&ahead),
        "Expires {ahead} s after Date"
    );
    assert_eq!(
        s.get("/b.png").header("Cache-Control").as_deref(),
        Some("max-age=2592000")
    );
    // A listing keeps its own Cache-Control (no-cache) and still gets the fields.
    let l = s.get("/dir/");
    assert_eq!(l.header("Cache-Control").as_deref(), Some("no-cache"));
    assert_eq!(l.head.matches("Cache-Control").count(), 1);
    assert_eq!(l.header("X-Frame-Options").as_deref(), Some("DENY"));
    // 304 too; errors not (as nginx's add_header without `always`).
    let etag = r.header("ETag").unwrap();
    let mut c = s.client();
    c.send(format!("GET /a.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\r\n").as_bytes());
    let nm = c.response(false);
    assert_eq!(
        (nm.status, nm.header("X-Mirror").as_deref()),
        (304, Some("eu-1"))
    );
    let e = s.get("/missing");
    assert_eq!(e.status, 404);
    assert_eq!(e.header("X-Frame-Options"), None);
    s.assert_clean_log(&[]);
}

#[test]
fn redirect_locations_send_clients_on_with_the_rest_of_the_path() {
    let s = crate::server_with(
        &[("new/a b.txt", b"moved here")],
        "[[location]]\nroot = \"root\"\n[[location]]\npath = \"/old/\"\nredirect = \"/new/\"\n[[location]]\npath = \"/gone/\"\nredirect = \"https://elsewhere.example/x/\"\nredirect_status = 308\n",
    );
    let r = s.get("/old/a%20b.txt?v=2");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("Location").as_deref(), Some("/new/a%20b.txt?v=2"));
    // curl follows it to the file.
    let (ok, body) = crate::curl(&["-L", &s.url("/old/a%20b.txt")]);
    assert!(ok);
    assert_eq!(body, b"moved here");
    // 308 keeps the method; any method is redirected.
    let mut c = s.client();
    c.send(b"POST /gone/deep/path HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi");
    let r = c.response(false);
    assert_eq!(r.status, 308);
    assert_eq!(
        r.header("Location").as_deref(),
        Some("https://elsewhere.example/x/deep/path")
    );
    s.assert_clean_log(&[]);
}
