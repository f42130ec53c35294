//! HTTP/2: h2c by prior knowledge and h2 by ALPN on every listener (and off with
//! `http2 = false`), every handler over it (curl, nghttp, Chromium), request and response
//! bodies through the proxy, the flood defences (raw frames), GOAWAY on stop, and h2spec.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use ramjet_testkit::Server;

use crate::tls::tls_server;

fn h2c(args: &[&str]) -> (bool, Vec<u8>) {
    let mut all = vec!["--http2-prior-knowledge"];
    all.extend_from_slice(args);
    crate::curl(&all)
}

#[cfg(feature = "fault-injection")]
fn sha256(data: &[u8]) -> String {
    use std::process::Stdio;
    let mut c = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = c.stdin.take().unwrap();
    let data = data.to_vec();
    let w = std::thread::spawn(move || stdin.write_all(&data));
    let out = c.wait_with_output().unwrap();
    w.join().unwrap().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

// --- raw frames --------------------------------------------------------------------------

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0;
pub(crate) const HEADERS: u8 = 1;
const PRIORITY: u8 = 2;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;
pub(crate) const END_STREAM: u8 = 1;
pub(crate) const END_HEADERS: u8 = 4;
const ENHANCE_YOUR_CALM: u32 = 0xb;

pub(crate) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK integer with an `n`-bit prefix under `first`.
fn hpack_int(out: &mut Vec<u8>, first: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128 + 128) as u8);
        v /= 128;
    }
    out.push(v as u8);
}

/// A literal field, not indexed, its name from the static table at `index`.
fn literal(out: &mut Vec<u8>, index: usize, value: &[u8]) {
    hpack_int(out, 0x00, 4, index);
    hpack_int(out, 0x00, 7, value.len());
    out.extend_from_slice(value);
}

/// The header block of `GET path` for `localhost`.
pub(crate) fn get(path: &str) -> Vec<u8> {
    let mut b = vec![0x82, 0x86]; // :method GET, :scheme http
    literal(&mut b, 4, path.as_bytes());
    literal(&mut b, 1, b"localhost");
    b
}

/// A raw HTTP/2 client: frames written and read by hand (the other tests' too).
pub(crate) struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    /// A cleartext connection past the preface and an empty SETTINGS frame.
    pub(crate) fn open(addr: SocketAddr) -> Raw {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(PREFACE).unwrap();
        s.write_all(&frame(SETTINGS, 0, 0, &[])).unwrap();
        Raw { s, buf: Vec::new() }
    }

    pub(crate) fn send(&mut self, bytes: &[u8]) -> bool {
        self.s.write_all(bytes).is_ok()
    }

    /// The next frame (type, flags, stream, payload), `None` once the connection closed.
    fn next(&mut self) -> Option<(u8, u8, u32, Vec<u8>)> {
        loop {
            if self.buf.len() >= 9 {
                let n = (usize::from(self.buf[0]) << 16)
                    | (usize::from(self.buf[1]) << 8)
                    | usize::from(self.buf[2]);
                if self.buf.len() >= 9 + n {
                    let h: Vec<u8> = self.buf.drain(..9 + n).collect();
                    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                    return Some((h[3], h[4], stream, h[9..].to_vec()));
                }
            }
            let mut b = [0u8; 65536];
            match self.s.read(&mut b) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&b[..n]),
            }
        }
    }

    /// Read until a GOAWAY; its error code (`None`: closed without one).
    pub(crate) fn goaway(&mut self) -> Option<u32> {
        while let Some((kind, _, _, p)) = self.next() {
            if kind == GOAWAY {
                return Some(u32::from_be_bytes([p[4], p[5], p[6], p[7]]));
            }
        }
        None
    }

    /// Read until stream `id` ends: its first header block (ramjet's encoder writes
    /// literals, so a status can be found in it as text) and its DATA bytes; `None` if it
    /// was reset or the connection closed.
    fn answer_of(&mut self, id: u32) -> Option<(Vec<u8>, usize)> {
        let mut head = None;
        let mut got = 0;
        while let Some((kind, flags, stream, p)) = self.next() {
            if stream != id {
                continue;
            }
            match kind {
                RST_STREAM => return None,
                DATA => got += p.len(),
                HEADERS if head.is_none() => head = Some(p),
                _ => {}
            }
            if (kind == DATA || kind == HEADERS) && flags & END_STREAM != 0 {
                return Some((head.unwrap_or_default(), got));
            }
        }
        None
    }

    /// Read until stream `id` ends (DATA or HEADERS with END_STREAM): the DATA bytes.
    pub(crate) fn body_of(&mut self, id: u32) -> Option<usize> {
        let mut got = 0;
        while let Some((kind, flags, stream, p)) = self.next() {
            if stream != id {
                continue;
            }
            if kind == RST_STREAM {
                return None;
            }
            if kind == DATA {
                got += p.len();
            }
            if (kind == DATA || kind == HEADERS) && flags & END_STREAM != 0 {
                return Some(got);
            }
        }
        None
    }
}

fn server(files: &[(&str, &[u8])], config: &str) -> Server {
    crate::server_with(files, &format!("workers = 1\n{config}"))
}

// --- clients ---------------------------------------------------------------------------

#[test]
fn curl_gets_files_ranges_304_and_listings_over_h2c_and_h2() {
    let big = crate::bytes(3 << 20, 11);
    let small = crate::bytes(5000, 12);
    let s = tls_server(
        &[
            ("big.bin", &big),
            ("small.bin", &small),
            ("empty", b""),
            ("one", b"x"),
            ("dir/a.txt", b"a"),
        ],
        "[log]\naccess = \"{dir}/access.log\"\n[[location]]\nroot = \"root\"\nautoindex = true\n[[location]]\npath = \"/metrics\"\nhandlers = [\"metrics\"]\n",
    );
    let tls = format!("https://localhost:{}", s.tls_addr.unwrap().port());
    let clear = s.url("");
    let clear = clear.trim_end_matches('/');
    for (base, args) in [
        (clear, vec!["--http2-prior-knowledge"]),
        (&tls[..], vec!["--http2", "-k"]),
    ] {
        for (path, want) in [
            ("/big.bin", &big[..]),
            ("/small.bin", &small[..]),
            ("/empty", b""),
            ("/one", b"x"),
        ] {
            let url = format!("{base}{path}");
            let mut a = args.clone();
            a.extend(["-w", "\n%{http_version}", &url]);
            let (ok, out) = crate::curl(&a);
            assert!(ok, "{url}");
            let (body, version) = out.split_at(out.len() - 2);
            assert_eq!(version, b"\n2", "{url}: HTTP/2");
            assert!(
                body == want,
                "{url}: {} bytes, want {}",
                body.len(),
                want.len()
            );
        }
        // A range, a suffix range, a conditional request, a listing.
        let mut a = args.clone();
        let url = format!("{base}/big.bin");
        a.extend(["-r", "100-199", &url]);
        assert_eq!(crate::curl(&a).1, &big[100..200]);
        let mut a = args.clone();
        a.extend(["-r", "-10", &url]);
        assert_eq!(crate::curl(&a).1, &big[big.len() - 10..]);
        // From an odd offset across the 2 MiB windows a large file is mapped in (h2c).
        let mut a = args.clone();
        a.extend(["-r", "4097-2200000", &url]);
        assert!(crate::curl(&a).1 == big[4097..=2_200_000]);
        let mut a = args.clone();
        a.extend(["-sI", &url]);
        let head = String::from_utf8(crate::curl(&a).1).unwrap();
        assert!(head.starts_with("HTTP/2 200"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", big.len())),
            "{head}"
        );
        let etag = head
            .lines()
            .find_map(|l| l.strip_prefix("etag: "))
            .unwrap()
            .trim()
            .to_string();
        let mut a = args.clone();
        let inm = format!("If-None-Match: {etag}");
        a.extend(["-o", "/dev/null", "-w", "%{http_code}", "-H", &inm, &url]);
        assert_eq!(crate::curl(&a).1, b"304");
        let mut a = args.clone();
        let url = format!("{base}/dir/");
        a.extend([&url[..]]);
        let listing = String::from_utf8(crate::curl(&a).1).unwrap();
        assert!(listing.contains("a.txt"), "{listing}");
    }
    // The protocol is in the access log and in the counters.
    let log = crate::poll_until(|| {
        let t = std::fs::read_to_string(s.path("access.log")).ok()?;
        (t.lines().filter(|l| l.contains("HTTP/2.0\" ")).count() >= 18).then_some(t)
    });
    assert!(
        log.contains("\"GET /big.bin HTTP/2.0\" 200 3145728"),
        "{log}"
    );
    let (_, m) = crate::curl(&[&format!("{clear}/metrics")]);
    let m = String::from_utf8(m).unwrap();
    let count = |name: &str| -> u64 {
        m.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0)
    };
    assert!(count("ramjet_http2_connections_total ") >= 18, "{m}");
    assert!(count("ramjet_http2_streams_total ") >= 18, "{m}");
    s.assert_clean_log(&[]);
}

#[test]
fn http2_false_leaves_a_listener_to_http1() {
    let dir = Server::dir();
    crate::tls::certificate(dir.path(), "a", &["localhost"]);
    std::fs::create_dir_all(dir.path().join("root")).unwrap();
    std::fs::write(dir.path().join("root/f"), b"f").unwrap();
    let s = Server::start(
        crate::BIN,
        dir,
        "listen = [{ address = \"127.0.0.1:0\", tls = { certificate = \"a.pem\", key = \"a.key\" }, http2 = false }, { address = \"127.0.0.1:0\", http2 = false }]\nworkers = 1\n",
    );
    let tls = format!("https://localhost:{}/f", s.tls_addr.unwrap().port());
    let (ok, v) = crate::curl(&[
        "--http2",
        "-k",
        "-o",
        "/dev/null",
        "-w",
        "%{http_version}",
        &tls,
    ]);
    assert!(ok);
    assert_eq!(v, b"1.1", "ALPN offers no h2");
    // The preface is an HTTP/1 request line with version 2.0 there: 505.
    let mut c = s.client();
    c.send(PREFACE);
    let r = c.response(false);
    assert_eq!(r.status, 505);
    s.assert_clean_log(&[]);
}

#[test]
fn nghttp_and_h2load_fetch_many_streams_on_one_connection() {
    let files: Vec<(String, Vec<u8>)> = (0..20)
        .map(|i| (format!("f{i}.bin"), crate::bytes(1000 * i + 1, i as u64)))
        .collect();
    let refs: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (n.as_str(), &b[..])).collect();
    let s = server(&refs, "[log]\naccess = \"{dir}/access.log\"\n");
    let urls: Vec<String> = files.iter().map(|(n, _)| s.url(&format!("/{n}"))).collect();
    let out = Command::new("nghttp")
        .arg("-ns")
        .args(&urls)
        .output()
        .expect("nghttp is installed (nghttp2-client, .ci/deps)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for (n, b) in &files {
        let row = text
            .lines()
            .find(|l| l.ends_with(&format!("/{n}")))
            .unwrap_or_else(|| panic!("{n} in {text}"));
        assert!(row.contains(" 200 "), "{row}");
        let _ = b;
    }
    let log = crate::poll_until(|| {
        let t = std::fs::read_to_string(s.path("access.log")).ok()?;
        (t.matches(" HTTP/2.0\" 200").count() >= 20).then_some(t)
    });
    assert!(log.contains("\"GET /f19.bin HTTP/2.0\" 200 19001"), "{log}");
    let h2load = Command::new("h2load")
        .args(["-n", "2000", "-c", "4", "-m", "10", &urls[3]])
        .output()
        .expect("h2load is installed");
    let text = String::from_utf8_lossy(&h2load.stdout);
    assert!(text.contains("2000 succeeded, 0 failed"), "{text}");
    assert!(text.contains("Application protocol: h2c"), "{text}");
    s.assert_clean_log(&[]);
}

#[test]
fn python_httpx_speaks_h2() {
    let s = server(&[("a.txt", b"hello over h2")], "");
    let script = format!(
        "import httpx\nc = httpx.Client(http1=False, http2=True)\nr = c.get('{}')\nprint(r.http_version, r.status_code, r.text)\n",
        s.url("/a.txt")
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "httpx[http2] is installed (.ci/deps): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "HTTP/2 200 hello over h2"
    );
    s.assert_clean_log(&[]);
}

#[test]
fn chromium_loads_a_page_and_its_images_over_h2() {
    let png = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/img/status-page.png"
    ))
    .unwrap_or_else(|_| b"\x89PNG\r\n\x1a\n".to_vec());
    let mut page = String::from("<html><body>");
    for i in 0..6 {
        page.push_str(&format!("<img src=\"i{i}.png\">"));
    }
    page.push_str("</body></html>");
    let files: Vec<(String, Vec<u8>)> = (0..6)
        .map(|i| (format!("site/i{i}.png"), png.clone()))
        .chain([("site/index.html".to_string(), page.into_bytes())])
        .collect();
    let refs: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (n.as_str(), &b[..])).collect();
    let s = tls_server(
        &refs,
        "[log]\naccess = \"{dir}/access.log\"\n[[location]]\nroot = \"root\"\nautoindex = true\n[[location]]\npath = \"/metrics\"\nhandlers = [\"metrics\"]\n",
    );
    let port = s.tls_addr.unwrap().port();
    let trust = format!(
        "--ignore-certificate-errors-spki-list={}",
        crate::tls::spki_hash(&s.path("a.pem"))
    );
    let work = tempfile::tempdir().unwrap();
    let dom = crate::observe::chromium(
        work.path(),
        &[
            &trust,
            "--dump-dom",
            &format!("https://localhost:{port}/site/"),
        ],
    );
    assert!(dom.contains("i5.png"), "{dom}");
    let log = crate::poll_until(|| {
        let t = std::fs::read_to_string(s.path("access.log")).ok()?;
        (t.matches(".png HTTP/2.0\" 200").count() >= 6).then_some(t)
    });
    assert!(log.contains("\"GET /site/ HTTP/2.0\" 200"), "{log}");
    // The page and its six images as streams of HTTP/2 connections (Chromium opens a
    // spare connection besides the one it uses, so at most two).
    let (_, m) = crate::curl(&[&s.url("/metrics")]);
    let m = String::from_utf8(m).unwrap();
    let count = |name: &str| -> u64 {
        m.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0)
    };
    assert!(
        (1..=2).contains(&count("ramjet_http2_connections_total ")),
        "{m}"
    );
    assert!(count("ramjet_http2_streams_total ") >= 7, "{m}");
    assert!(!log.contains("HTTP/1.1\""), "{log}");
    s.assert_clean_log(&[]);
}

// --- handlers over h2 ------------------------------------------------------------------

#[test]
#[cfg(feature = "fault-injection")]
fn the_proxy_streams_100mb_up_and_down_over_h2c() {
    let big = crate::bytes(100 << 20, 21);
    let backend = server(&[("big.bin", &big)], "[limits]\nmax_body = \"200m\"\n");
    let front = server(
        &[],
        &format!(
            "[upstream.app]\nservers = [\"{}\"]\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/app/\"\nhandlers = [\"proxy\"]\nproxy = \"app\"\nproxy_path = \"/\"\n[limits]\nmax_body = \"200m\"\n",
            backend.addr
        ),
    );
    let want = sha256(&big);
    let (ok, down) = h2c(&[&front.url("/app/big.bin")]);
    assert!(ok);
    assert_eq!(sha256(&down), want, "download");
    let file = front.path("up.bin");
    std::fs::write(&file, &big).unwrap();
    let (ok, echoed) = h2c(&[
        "-T",
        file.to_str().unwrap(),
        &front.url("/app/__ramjet_fault/echo"),
    ]);
    assert!(ok);
    assert_eq!(echoed.len(), big.len(), "echoed length");
    assert_eq!(sha256(&echoed), want, "upload echoed back");
    front.assert_clean_log(&[]);
    backend.assert_clean_log(&[]);
}

#[test]
#[cfg(feature = "fault-injection")]
fn streams_of_unknown_length_and_request_bodies_reach_handlers() {
    let s = server(&[], "[[location]]\nroot = \"root\"\n");
    // A stream of unknown length (chunked to HTTP/1.1 clients) ends with END_STREAM.
    let (ok, body) = h2c(&[&s.url("/__ramjet_fault/stream/9")]);
    assert!(ok);
    assert_eq!(body.len(), 2 * (1 + 1000 + 65_537));
    // A failing stream resets the stream: curl reports an error.
    let (ok, _) = h2c(&[&s.url("/__ramjet_fault/stream-fail/9")]);
    assert!(!ok);
    // An upload of unknown length (no content-length: DATA frames until END_STREAM), here
    // empty, and a small one with its length.
    let (ok, echoed) = h2c(&["-T", "-", &s.url("/__ramjet_fault/echo")]);
    assert!(ok);
    assert_eq!(echoed, b"");
    let (ok, echoed) = h2c(&["--data-binary", "abc", &s.url("/__ramjet_fault/echo")]);
    assert!(ok);
    assert_eq!(echoed, b"abc");
    s.assert_clean_log(&["stream failed", "fault injection"]);
}

// --- defences --------------------------------------------------------------------------

fn assert_flood_closed(s: &Server, name: &str, attack: impl Fn(&mut Raw)) {
    let mut raw = Raw::open(s.addr);
    attack(&mut raw);
    assert_eq!(
        raw.goaway(),
        Some(ENHANCE_YOUR_CALM),
        "{name}: GOAWAY ENHANCE_YOUR_CALM"
    );
    // The server goes on serving others.
    let (ok, body) = h2c(&[&s.url("/f")]);
    assert!(ok && body == b"f", "{name}: others still served");
}

#[test]
fn floods_are_closed_with_goaway() {
    let s = server(&[("f", b"f")], "");
    assert_flood_closed(&s, "PING", |r| {
        let all = frame(PING, 0, 0, &[0; 8]).repeat(1_000);
        r.send(&all);
    });
    assert_flood_closed(&s, "SETTINGS", |r| {
        let all = frame(SETTINGS, 0, 0, &[]).repeat(1_000);
        r.send(&all);
    });
    assert_flood_closed(&s, "PRIORITY", |r| {
        let all = frame(PRIORITY, 0, 1, &[0, 0, 0, 0, 16]).repeat(2_000);
        r.send(&all);
    });
    assert_flood_closed(&s, "Rapid Reset", |r| {
        let mut all = Vec::new();
        for i in 0..500u32 {
            let id = 2 * i + 1;
            all.extend(frame(HEADERS, END_HEADERS | END_STREAM, id, &get("/f")));
            all.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
        }
        r.send(&all);
    });
    assert_flood_closed(&s, "empty DATA", |r| {
        let mut all = frame(HEADERS, END_HEADERS, 1, &get("/f"));
        all.extend(frame(DATA, 0, 1, &[]).repeat(1_000));
        r.send(&all);
    });
    assert_flood_closed(&s, "CONTINUATION", |r| {
        let mut all = frame(HEADERS, 0, 1, &get("/f"));
        all.extend(frame(CONTINUATION, 0, 1, &[]).repeat(1_000));
        r.send(&all);
    });
    // PING acknowledgements and window updates are not floods, nor are many requests.
    let mut r = Raw::open(s.addr);
    let mut all = frame(PING, 1, 0, &[0; 8]).repeat(5_000);
    all.extend(frame(WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes()).repeat(1_000));
    for i in 0..100u32 {
        all.extend(frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            2 * i + 1,
            &get("/f"),
        ));
    }
    r.send(&all);
    assert_eq!(r.body_of(199), Some(1), "the last request answered");
    s.assert_clean_log(&[
        "PING flood",
        "SETTINGS flood",
        "PRIORITY flood",
        "Rapid Reset",
        "empty DATA flood",
        "CONTINUATION flood",
    ]);
}

#[test]
fn floods_are_warned_of_at_most_once_a_second_per_worker() {
    let s = server(&[("f", b"f")], "");
    let start = Instant::now();
    const FLOODS: usize = 30;
    for _ in 0..FLOODS {
        let mut r = Raw::open(s.addr);
        r.send(&frame(PING, 0, 0, &[0; 8]).repeat(1_000));
        assert_eq!(r.goaway(), Some(ENHANCE_YOUR_CALM));
    }
    let secs = start.elapsed().as_secs() as usize;
    // Every flood was closed; the log has a line for the first of each second on each
    // worker (2 here) and not one per flood.
    let warned = || {
        s.stderr()
            .iter()
            .filter(|l| l.contains("PING flood"))
            .count()
    };
    crate::poll_until(|| (warned() >= 1).then_some(()));
    let lines = warned();
    assert!(
        lines <= 2 * (secs + 2) && lines < FLOODS,
        "{lines} warnings for {FLOODS} floods in {secs} s"
    );
    s.assert_clean_log(&["PING flood"]);
}

#[test]
fn a_flooding_connection_is_held_unread_after_its_goaway_then_closed() {
    let s = server(&[("f", b"f")], "");
    let mut r = Raw::open(s.addr);
    let sent = Instant::now();
    r.send(&frame(PING, 0, 0, &[0; 8]).repeat(1_000));
    assert_eq!(r.goaway(), Some(ENHANCE_YOUR_CALM));
    // More PINGs are not read: none is answered, and the connection ends after the hold
    // (2 s from the GOAWAY), not at once, so the attacker cannot reconnect at once.
    r.send(&frame(PING, 0, 0, &[1; 8]).repeat(50));
    let mut answered = 0;
    while let Some((kind, flags, _, p)) = r.next() {
        if kind == PING && flags & 1 == 1 && p == [1; 8] {
            answered += 1;
        }
    }
    let held = sent.elapsed();
    assert_eq!(answered, 0, "PINGs after the GOAWAY were answered");
    assert!(
        held >= Duration::from_millis(1900),
        "closed {held:?} after the flood began: not held"
    );
    // Others are served meanwhile and after.
    let (ok, body) = h2c(&[&s.url("/f")]);
    assert!(ok && body == b"f");
    s.assert_clean_log(&["PING flood"]);
}

#[test]
fn oversized_header_lists_and_hpack_bombs_are_refused() {
    let s = server(&[("f", b"f")], "[limits]\nmax_head = \"8k\"\n");
    // A field larger than the head limit (curl): refused, not served.
    let big = format!("X-Big: {}", "x".repeat(20_000));
    let (_, code) = h2c(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        &big,
        &s.url("/f"),
    ]);
    assert_ne!(code, b"200", "a 20 KB field over an 8 KB limit");
    // HPACK bomb: one 4 KB entry in the dynamic table, then referenced 1,000 times (4 MB
    // decoded from 1 KB sent).
    let mut r = Raw::open(s.addr);
    let mut block = get("/f");
    block.push(0x40); // literal with incremental indexing, new name
    hpack_int(&mut block, 0, 7, 6);
    block.extend_from_slice(b"x-bomb");
    hpack_int(&mut block, 0, 7, 4000);
    block.extend(std::iter::repeat_n(b'b', 4000));
    block.extend(std::iter::repeat_n(0xbe, 1000)); // index 62: the entry just added
    r.send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &block));
    let (head, body) = r.answer_of(1).expect("the bomb's stream is answered");
    assert!(
        head.windows(3).any(|w| w == b"431"),
        "431 Request Header Fields Too Large, not the file"
    );
    assert_ne!(body, 1);
    let rss = s.status_kb("VmRSS").unwrap();
    assert!(rss < 200_000, "{rss} KB resident");
    let (ok, body) = h2c(&[&s.url("/f")]);
    assert!(ok && body == b"f");
    s.assert_clean_log(&[]);
}

#[test]
fn too_many_streams_are_refused_beyond_max_concurrent_streams() {
    let s = server(&[("f", b"f")], "");
    let mut r = Raw::open(s.addr);
    // The server's SETTINGS name its limit.
    let (kind, _, _, p) = r.next().unwrap();
    assert_eq!(kind, SETTINGS);
    let limit = p
        .chunks(6)
        .find(|c| c[..2] == [0, 3])
        .map(|c| u32::from_be_bytes([c[2], c[3], c[4], c[5]]))
        .expect("SETTINGS_MAX_CONCURRENT_STREAMS");
    assert_eq!(limit, 128);
    // 129 streams left open (no END_STREAM): the last is refused.
    let mut all = Vec::new();
    for i in 0..=limit {
        all.extend(frame(HEADERS, END_HEADERS, 2 * i + 1, &get("/f")));
    }
    r.send(&all);
    let last = 2 * limit + 1;
    let refused = loop {
        match r.next() {
            Some((RST_STREAM, _, id, p)) if id == last => {
                break Some(u32::from_be_bytes([p[0], p[1], p[2], p[3]]))
            }
            Some((GOAWAY, ..)) | None => break None,
            _ => {}
        }
    };
    assert_eq!(refused, Some(7), "REFUSED_STREAM");
    s.assert_clean_log(&[]);
}

#[test]
fn a_stalled_download_does_not_hold_back_other_streams() {
    let big = crate::bytes(4 << 20, 5);
    let s = server(&[("big.bin", &big), ("f", b"f")], "");
    let mut r = Raw::open(s.addr);
    // The connection's window wide open, the big stream's left at 64 KiB and never opened.
    r.send(&frame(WINDOW_UPDATE, 0, 0, &(1u32 << 30).to_be_bytes()));
    r.send(&frame(
        HEADERS,
        END_HEADERS | END_STREAM,
        1,
        &get("/big.bin"),
    ));
    let t = Instant::now();
    r.send(&frame(HEADERS, END_HEADERS | END_STREAM, 3, &get("/f")));
    assert_eq!(r.body_of(3), Some(1));
    assert!(t.elapsed() < Duration::from_secs(5));
    s.assert_clean_log(&[]);
}

#[test]
fn stop_sends_goaway_and_finishes_streams_in_flight() {
    let big = crate::bytes(2 << 20, 9);
    let mut s = server(&[("big.bin", &big)], "[timeouts]\nshutdown = \"20s\"\n");
    // An idle HTTP/2 connection, and a slow download on another.
    let mut idle = Raw::open(s.addr);
    let url = s.url("/big.bin");
    let out = s.path("got.bin");
    let out2 = out.clone();
    let curl = std::thread::spawn(move || {
        crate::curl(&[
            "--http2-prior-knowledge",
            "--limit-rate",
            "1M",
            "-o",
            out2.to_str().unwrap(),
            &url,
        ])
    });
    // Under way: the first bytes are in.
    crate::poll_until(|| {
        std::fs::metadata(&out)
            .ok()
            .filter(|m| m.len() > 0)
            .map(|_| ())
    });
    s.signal(libc::SIGTERM);
    assert_eq!(
        idle.goaway(),
        Some(0),
        "the idle connection is told to go away (NO_ERROR)"
    );
    let (ok, _) = curl.join().unwrap();
    assert!(ok, "the download in flight finished");
    let body = std::fs::read(&out).unwrap();
    assert!(body == big, "{} bytes", body.len());
    assert!(s.wait_exit(Duration::from_secs(20)).success());
}

#[test]
fn an_idle_h2_connection_is_closed_with_goaway_after_keepalive() {
    let s = server(&[("f", b"f")], "[timeouts]\nkeepalive = \"1s\"\n");
    let mut r = Raw::open(s.addr);
    r.send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &get("/f")));
    assert_eq!(r.body_of(1), Some(1));
    let t = Instant::now();
    assert_eq!(r.goaway(), Some(0));
    assert!(t.elapsed() < Duration::from_secs(8));
    s.assert_clean_log(&[]);
}

#[test]
fn h2spec_passes_every_test_on_h2c_and_tls() {
    let bin = {
        let out = Command::new("go")
            .args(["env", "GOPATH"])
            .output()
            .expect("go is installed");
        std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("bin/h2spec")
    };
    let s = tls_server(&[("index.html", b"hello")], "");
    for (port, tls) in [(s.addr.port(), false), (s.tls_addr.unwrap().port(), true)] {
        let mut c = Command::new(&bin);
        c.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-o", "5", "-j"]);
        let report = s.path(&format!("h2spec-{tls}.xml"));
        c.arg(&report);
        if tls {
            c.args(["-t", "-k"]);
        }
        let out = c
            .output()
            .expect("h2spec is installed (.ci/deps: go install)");
        let text = String::from_utf8_lossy(&out.stdout);
        let summary = text
            .lines()
            .rev()
            .find(|l| l.contains("tests,"))
            .unwrap_or("")
            .to_string();
        assert!(
            summary.contains("145 tests, 145 passed, 0 skipped, 0 failed"),
            "tls={tls}: {summary}\n{text}"
        );
    }
    s.assert_clean_log(&[]);
}

#[test]
fn modules_cgi_auth_redirects_status_and_request_rates_answer_over_h2() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Server::dir();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let script = bin.join("echo.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\nX-Script: 1\\r\\n\\r\\n'\necho \"proto=$SERVER_PROTOCOL method=$REQUEST_METHOD len=$CONTENT_LENGTH\"\ncat\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(dir.path().join("root/staff")).unwrap();
    std::fs::write(dir.path().join("root/staff/x"), b"secret").unwrap();
    let users = Command::new("htpasswd")
        .args(["-nbB", "-C", "4", "ann", "pw"])
        .output()
        .expect("htpasswd is installed");
    std::fs::write(dir.path().join("users"), users.stdout).unwrap();
    let s = Server::start(
        crate::BIN,
        dir,
        "workers = 1\n\
         [[location]]\nroot = \"root\"\n\
         [[location]]\npath = \"/hello/\"\nmodule = \"hello\"\n\
         [[location]]\npath = \"/cgi-bin/\"\ncgi_root = \"{dir}/bin\"\n\
         [[location]]\npath = \"/staff/\"\nroot = \"root\"\nauth_basic = \"Staff\"\nauth_basic_user_file = \"users\"\n\
         [[location]]\npath = \"/old/\"\nredirect = \"/new/\"\n\
         [[location]]\npath = \"/status\"\nhandlers = [\"status\"]\n\
         [[location]]\npath = \"/limited/\"\nroot = \"root\"\nlimit_req = \"1r/m\"\n",
    );
    let code = |args: &[&str]| -> String {
        let mut a = vec!["-o", "/dev/null", "-w", "%{http_code} %{http_version}"];
        a.extend_from_slice(args);
        String::from_utf8(h2c(&a).1).unwrap()
    };
    // A module, GET and POST (its body read through the request model).
    let (ok, body) = h2c(&[&s.url("/hello/x?q=1")]);
    assert!(ok);
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.starts_with("Hello, 127.0.0.1!\nmethod GET target /hello/x?q=1 query q=1"),
        "{text}"
    );
    let (_, body) = h2c(&["--data-binary", "line one\nline two", &s.url("/hello/")]);
    assert_eq!(
        String::from_utf8(body).unwrap(),
        "Hello: 17 bytes, first line \"line one\"\n"
    );
    // CGI, with a body.
    let (ok, body) = h2c(&["--data-binary", "abc", &s.url("/cgi-bin/echo.sh")]);
    assert!(ok);
    assert_eq!(
        String::from_utf8(body).unwrap(),
        "proto=HTTP/2.0 method=POST len=3\nabc"
    );
    // Basic authentication.
    assert_eq!(code(&[&s.url("/staff/x")]), "401 2");
    assert_eq!(code(&["-u", "ann:pw", &s.url("/staff/x")]), "200 2");
    // A redirect keeps the rest of the path.
    let (_, head) = h2c(&["-sI", &s.url("/old/a/b")]);
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/2 301"), "{head}");
    assert!(head.contains("location: /new/a/b"), "{head}");
    // The status page.
    let (_, page) = h2c(&[&format!("{}?auto", s.url("/status"))]);
    assert!(String::from_utf8(page).unwrap().contains("Total Accesses"));
    // A request rate: the second request within the second is refused.
    assert_eq!(code(&[&s.url("/limited/")]), "404 2");
    assert_eq!(code(&[&s.url("/limited/")]), "429 2");
    s.assert_clean_log(&[]);
}

#[test]
fn a_backends_early_hints_and_trailers_reach_h2_clients() {
    use ramjet_testkit::{Backend, Flow};
    let b = Backend::start(|ex| {
        ex.write(b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n");
        ex.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n");
        Flow::Keep
    });
    let s = server(
        &[],
        &format!(
            "[upstream.app]\nservers = [\"{}\"]\n[[location]]\nhandlers = [\"proxy\"]\nproxy = \"app\"\n",
            b.addr
        ),
    );
    let (ok, out) = h2c(&["-D", "-", &s.url("/hints")]);
    assert!(ok);
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/2 103"), "{text}");
    assert!(text.contains("link: </s.css>; rel=preload"), "{text}");
    assert!(text.contains("HTTP/2 200"), "{text}");
    assert!(text.contains("abc"), "{text}");
    assert!(text.contains("x-sum: 1"), "the trailer: {text}");
    s.assert_clean_log(&[]);
}

#[test]
fn a_client_over_its_connection_limit_gets_429_over_h2() {
    let s = server(&[("f", b"f")], "[limits]\nmax_connections_per_client = 1\n");
    // One connection held open; the second is refused, over HTTP/2 as over HTTP/1.
    let _held = Raw::open(s.addr);
    let (_, code) = h2c(&["-o", "/dev/null", "-w", "%{http_code}", &s.url("/f")]);
    assert_eq!(code, b"429");
    s.assert_clean_log(&[]);
}

#[test]
fn h2c_follows_a_proxy_protocol_header() {
    let s = crate::server_with(
        &[("f", b"f")],
        "workers = 1\nlisten = [{ address = \"127.0.0.1:0\", proxy_protocol = true }]\n[log]\naccess = \"{dir}/access.log\"\n",
    );
    let mut r = Raw {
        s: TcpStream::connect(s.addr).unwrap(),
        buf: Vec::new(),
    };
    r.s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut first = b"PROXY TCP4 192.0.2.7 127.0.0.1 5555 80\r\n".to_vec();
    first.extend_from_slice(PREFACE);
    first.extend(frame(SETTINGS, 0, 0, &[]));
    first.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &get("/f")));
    r.send(&first);
    assert_eq!(r.body_of(1), Some(1));
    let log = crate::poll_until(|| {
        let t = std::fs::read_to_string(s.path("access.log")).ok()?;
        t.contains("HTTP/2.0").then_some(t)
    });
    assert!(
        log.starts_with("192.0.2.7 "),
        "the address from the PROXY header: {log}"
    );
    s.assert_clean_log(&[]);
}

#[test]
fn a_reload_applies_to_the_next_stream_of_an_open_connection() {
    let s = server(
        &[("a/f", b"a"), ("b/f", b"b")],
        "[[location]]\nroot = \"root/a\"\n",
    );
    let mut r = Raw::open(s.addr);
    r.send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &get("/f")));
    let first = r.body_of(1);
    assert_eq!(first, Some(1));
    s.rewrite_config("workers = 1\n[[location]]\nroot = \"root/b\"\n");
    s.signal(libc::SIGHUP);
    assert!(s.wait_for_log("reloaded", Duration::from_secs(10)));
    // The same connection, new streams: the new root, once the worker has taken the new
    // configuration (it does so between two events; polled, not waited for).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut id = 3;
    let body = loop {
        r.send(&frame(HEADERS, END_HEADERS | END_STREAM, id, &get("/f")));
        let mut body = Vec::new();
        while let Some((kind, flags, sid, p)) = r.next() {
            if sid == id && kind == DATA {
                body.extend_from_slice(&p);
            }
            if sid == id && flags & END_STREAM != 0 {
                break;
            }
        }
        if body == b"b" || Instant::now() > deadline {
            break body;
        }
        id += 2;
    };
    assert_eq!(body, b"b");
    s.assert_clean_log(&[]);
}

/// SETTINGS and WINDOW_UPDATE that open the largest windows for every stream and the
/// connection at once, as h2load does: the client then sends nothing while it downloads.
fn windows_wide_open() -> Vec<u8> {
    let mut f = frame(SETTINGS, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]);
    f.extend(frame(
        WINDOW_UPDATE,
        0,
        0,
        &(0x7fff_ffffu32 - 65_535).to_be_bytes(),
    ));
    f
}

/// A file that is not in the page cache is read ahead on the blocking pool, piece by
/// piece, and still sent whole. The client opens windows for all of it at once (as h2load
/// does) and sends nothing more, so nothing but the read-ahead itself wakes the
/// connection: a read-ahead that is lost leaves the stream waiting (here, past the
/// client's 10 s read timeout).
#[test]
fn a_file_not_in_the_page_cache_is_read_ahead_and_sent_whole() {
    // Past what the static handler reads ahead before it answers (8 MiB).
    let big = crate::bytes(24 << 20, 31);
    let s = server(&[("cold.bin", &big)], "");
    for round in 0..3u32 {
        let f = std::fs::File::open(s.root().join("cold.bin")).unwrap();
        f.sync_all().unwrap();
        ramjet_runtime::sys::drop_from_page_cache(&f).unwrap();
        let mut r = Raw::open(s.addr);
        let mut first = windows_wide_open();
        first.extend(frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            1,
            &get("/cold.bin"),
        ));
        r.send(&first);
        assert_eq!(r.body_of(1), Some(big.len()), "round {round}");
    }
    s.assert_clean_log(&[]);
}

/// An h2c connection with a small receive buffer (so the server's socket fills and waits
/// on it) and the widest windows, that has asked for `path` on stream 1.
fn slow_reader_get(s: &Server, path: &str) -> Raw {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(16 * 1024).unwrap();
    sock.connect(&s.addr.into()).unwrap();
    let mut c: TcpStream = sock.into();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut first = PREFACE.to_vec();
    first.extend(windows_wide_open());
    first.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &get(path)));
    c.write_all(&first).unwrap();
    Raw {
        s: c,
        buf: Vec::new(),
    }
}

/// A client that reads slowly but steadily keeps its download however long it takes:
/// `timeouts.send` is a limit on no progress at all, not on the whole download.
#[test]
fn a_slow_steady_reader_gets_all_of_a_download_longer_than_the_send_timeout() {
    // More than the server's send buffer and this receive buffer hold together.
    let big = crate::bytes(8 << 20, 41);
    let s = server(&[("big.bin", &big)], "[timeouts]\nsend = \"1s\"\n");
    let started = Instant::now();
    let mut r = slow_reader_get(&s, "/big.bin");
    let mut got = 0;
    let mut ended = false;
    while let Some((kind, flags, stream, p)) = r.next() {
        if stream == 1 && kind == DATA {
            got += p.len();
            // About 5 MB/s at most: the download takes 1.5 s or more.
            std::thread::sleep(Duration::from_millis(3));
        }
        if stream == 1 && flags & END_STREAM != 0 {
            ended = true;
            break;
        }
    }
    assert!(ended, "the stream ended ({got} bytes)");
    assert_eq!(got, big.len());
    assert!(
        started.elapsed() > Duration::from_millis(1500),
        "the download outlasted the send timeout"
    );
}

/// A large file's frames go out from a mapping of it on h2c. A file that shrinks under
/// the mapping mid-download ends that download (short of its length), not the worker:
/// the kernel's copy from the vanished pages fails the write, and the next client is
/// served.
#[test]
fn a_file_shrinking_under_an_h2c_download_ends_the_download_not_the_worker() {
    let dir = Server::dir();
    let path = dir.path().join("root/big.bin");
    let size: u64 = 64 << 20;
    std::fs::File::create(&path).unwrap().set_len(size).unwrap();
    std::fs::write(dir.path().join("root/ok.txt"), b"ok").unwrap();
    let s = Server::start(crate::BIN, dir, "workers = 1\n");
    // The server's frames wait in its socket while the file shrinks.
    let mut r = slow_reader_get(&s, "/big.bin");
    let mut got = 0;
    let mut truncated = false;
    let mut ended = false;
    while let Some((kind, flags, stream, p)) = r.next() {
        if stream != 1 {
            continue;
        }
        if kind == RST_STREAM {
            break;
        }
        if kind == DATA {
            got += p.len();
            if !truncated && got >= 3 << 20 {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(1 << 20)
                    .unwrap();
                truncated = true;
            }
        }
        if flags & END_STREAM != 0 {
            ended = true;
            break;
        }
    }
    assert!(
        truncated,
        "the download ended before the file shrank ({got} bytes)"
    );
    assert!(
        !ended && (got as u64) < size,
        "all of it arrived ({got} bytes)"
    );
    assert_eq!(s.get("/ok.txt").text(), "ok");
    assert_eq!(h2c_get(&s, "/ok.txt"), Some(2));
    s.assert_clean_log(&[]);
}

/// One stream's DATA bytes over a fresh h2c connection.
fn h2c_get(s: &Server, path: &str) -> Option<usize> {
    let mut r = Raw::open(s.addr);
    r.send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &get(path)));
    r.body_of(1)
}

#[test]
fn a_client_that_leaves_mid_download_leaves_nothing_open() {
    let big = crate::bytes(8 << 20, 3);
    let s = server(&[("big.bin", &big)], "");
    let before = s.open_fds();
    for reset in [false, true] {
        let mut r = Raw::open(s.addr);
        r.send(&frame(WINDOW_UPDATE, 0, 0, &(1u32 << 30).to_be_bytes()));
        r.send(&frame(WINDOW_UPDATE, 0, 1, &(1u32 << 30).to_be_bytes()));
        r.send(&frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            1,
            &get("/big.bin"),
        ));
        // Some of the body, then the stream is reset or the connection closed.
        while let Some((kind, ..)) = r.next() {
            if kind == DATA {
                break;
            }
        }
        if reset {
            r.send(&frame(RST_STREAM, 0, 1, &8u32.to_be_bytes()));
            r.send(&frame(
                HEADERS,
                END_HEADERS | END_STREAM,
                3,
                &get("/big.bin"),
            ));
            r.send(&frame(RST_STREAM, 0, 3, &8u32.to_be_bytes()));
        }
        drop(r);
    }
    crate::poll_until(|| (s.open_fds() <= before).then_some(()));
    s.assert_clean_log(&[]);
}

#[test]
fn send_rates_apply_to_h2_streams() {
    let big = crate::bytes(300_000, 4);
    let s = server(
        &[("slow/big.bin", &big)],
        "[[location]]\nroot = \"root\"\n[[location]]\npath = \"/slow/\"\nroot = \"root\"\nlimit_rate = \"100k\"\n",
    );
    let t = Instant::now();
    let (ok, body) = h2c(&[&s.url("/slow/big.bin")]);
    assert!(ok && body == big, "{} bytes", body.len());
    // 300 KB at 100 KiB/s is about 3 s; at least half of that whatever the machine.
    assert!(
        t.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    s.assert_clean_log(&[]);
}
