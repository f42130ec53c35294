//! HTTPS: TLS listeners with certificates chosen by SNI, checked at load and on reload;
//! every handler over TLS; plaintext, garbage, truncated and stalled handshakes; session
//! resumption; real clients (curl, wget, openssl s_client, Python's ssl).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ramjet_testkit::Server;

/// A self-signed certificate for `names` (its own CA), written as `NAME.pem` and
/// `NAME.key` under `dir`.
pub(crate) fn certificate(dir: &Path, file: &str, names: &[&str]) -> (PathBuf, PathBuf) {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let c = rcgen::generate_simple_self_signed(names).unwrap();
    let cert = dir.join(format!("{file}.pem"));
    let key = dir.join(format!("{file}.key"));
    std::fs::write(&cert, c.cert.pem()).unwrap();
    std::fs::write(&key, c.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

/// A server with a TLS listener (certificate for `localhost` and `a.test`, in
/// `{dir}/a.pem`) and a cleartext one; `config` adds to it.
pub(crate) fn tls_server(files: &[(&str, &[u8])], config: &str) -> Server {
    let dir = Server::dir();
    certificate(dir.path(), "a", &["localhost", "a.test"]);
    for (path, data) in files {
        let p = dir.path().join("root").join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
    }
    let listen = "listen = [{ address = \"127.0.0.1:0\", tls = { certificate = \"a.pem\", key = \"a.key\" } }, \"127.0.0.1:0\"]\nworkers = 1\n";
    Server::start(crate::BIN, dir, &format!("{listen}{config}"))
}

fn https(s: &Server, host: &str, path: &str) -> String {
    let a = s.tls_addr.expect("a TLS listener");
    format!("https://{host}:{}{path}", a.port())
}

/// curl resolving `host` to the TLS listener, trusting `ca`.
fn curl_tls(s: &Server, ca: &Path, host: &str, args: &[&str]) -> (bool, Vec<u8>) {
    let a = s.tls_addr.unwrap();
    let resolve = format!("{host}:{}:127.0.0.1", a.port());
    let mut all = vec!["--cacert", ca.to_str().unwrap(), "--resolve", &resolve];
    all.extend_from_slice(args);
    crate::curl(&all)
}

#[test]
fn curl_fetches_files_ranges_and_revalidates_over_tls() {
    let big = crate::bytes(3 << 20, 7);
    let small = crate::bytes(100_000, 8);
    let s = tls_server(
        &[
            ("big.bin", &big),
            ("small.bin", &small),
            ("empty", b""),
            ("one", b"x"),
        ],
        "",
    );
    let ca = s.path("a.pem");
    for (path, want) in [
        ("/big.bin", &big[..]),
        ("/small.bin", &small[..]),
        ("/empty", b""),
        ("/one", b"x"),
    ] {
        let (ok, body) = curl_tls(&s, &ca, "a.test", &[&https(&s, "a.test", path)]);
        assert!(ok, "{path}");
        assert!(
            body == want,
            "{path}: {} bytes, want {}",
            body.len(),
            want.len()
        );
    }
    // A range from inside the large file, across the 64 KiB pieces it is encrypted in.
    let (ok, body) = curl_tls(
        &s,
        &ca,
        "a.test",
        &["-r", "65530-200009", &https(&s, "a.test", "/big.bin")],
    );
    assert!(ok);
    assert!(body == big[65_530..=200_009]);
    // Keep-alive over one TLS connection, then a 304.
    let (ok, out) = curl_tls(
        &s,
        &ca,
        "a.test",
        &[
            "-o",
            "/dev/null",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{num_connects} %{scheme}\n",
            &https(&s, "a.test", "/small.bin"),
            &https(&s, "a.test", "/one"),
        ],
    );
    assert!(ok);
    assert_eq!(String::from_utf8_lossy(&out), "200 1 HTTPS\n200 0 HTTPS\n");
    let r = s.get("/one");
    let etag = r.header("etag").unwrap();
    let (ok, out) = curl_tls(
        &s,
        &ca,
        "a.test",
        &[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            &format!("If-None-Match: {etag}"),
            &https(&s, "a.test", "/one"),
        ],
    );
    assert!(ok);
    assert_eq!(out, b"304");
    s.assert_clean_log(&[]);
}

#[test]
fn wget_python_and_openssl_speak_to_it() {
    let s = tls_server(&[("f.txt", b"hello tls\n")], "");
    let ca = s.path("a.pem");
    let port = s.tls_addr.unwrap().port();
    let url = format!("https://localhost:{port}/f.txt");
    let out = Command::new("wget")
        .args(["-q", "-O", "-", "--ca-certificate"])
        .arg(&ca)
        .arg(&url)
        .output()
        .expect("wget is installed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"hello tls\n");
    let py = format!(
        "import ssl, urllib.request\nctx = ssl.create_default_context(cafile={:?})\nprint(urllib.request.urlopen({url:?}, context=ctx).read().decode(), end='')\n",
        ca.display().to_string()
    );
    let out = Command::new("python3").args(["-c", &py]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"hello tls\n");
    // ALPN: h2 is chosen when offered, else http/1.1.
    let text = s_client(
        &s,
        &["-alpn", "h2,http/1.1", "-servername", "localhost"],
        b"",
    );
    assert!(text.contains("ALPN protocol: h2"), "{text}");
    assert!(text.contains("Verify return code: 0"), "{text}");
    let text = s_client(&s, &["-alpn", "http/1.1", "-servername", "localhost"], b"");
    assert!(text.contains("ALPN protocol: http/1.1"), "{text}");
}

/// Run `openssl s_client` against the TLS listener, trusting `a.pem`, with `input` on stdin.
fn s_client(s: &Server, args: &[&str], input: &[u8]) -> String {
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect"])
        .arg(s.tls_addr.unwrap().to_string())
        .arg("-CAfile")
        .arg(s.path("a.pem"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("openssl is installed");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn tls13_sessions_resume_with_a_ticket() {
    let s = tls_server(
        &[("f.txt", b"x")],
        "[[location]]\nroot = \"root\"\n[[location]]\npath = \"/metrics\"\nhandlers = [\"metrics\"]\n",
    );
    let sess = s.path("session.pem");
    let sess = sess.to_str().unwrap();
    // The client sends a request and waits for the answer, so the tickets that follow the
    // handshake arrive before it closes.
    let req = b"GET /f.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let first = s_client(
        &s,
        &[
            "-tls1_3",
            "-servername",
            "localhost",
            "-sess_out",
            sess,
            "-ign_eof",
        ],
        req,
    );
    assert!(first.contains("New, TLSv1.3"), "{first}");
    let again = s_client(
        &s,
        &[
            "-tls1_3",
            "-servername",
            "localhost",
            "-sess_in",
            sess,
            "-ign_eof",
        ],
        req,
    );
    assert!(again.contains("Reused, TLSv1.3"), "{again}");
    assert!(again.contains("HTTP/1.1 200 OK"), "{again}");
    // TLS 1.2 too (a ticket as well).
    let sess12 = s.path("session12.pem");
    let sess12 = sess12.to_str().unwrap();
    let first = s_client(&s, &["-tls1_2", "-sess_out", sess12, "-ign_eof"], req);
    assert!(first.contains("New, TLSv1.2"), "{first}");
    let again = s_client(&s, &["-tls1_2", "-sess_in", sess12, "-ign_eof"], req);
    assert!(again.contains("Reused, TLSv1.2"), "{again}");
    // Four handshakes, two of them resumed, as the metrics count them.
    let m = s.get("/metrics").text();
    for line in [
        "ramjet_tls_handshakes_total 4\n",
        "ramjet_tls_handshakes_completed_total 4\n",
        "ramjet_tls_handshakes_resumed_total 2\n",
    ] {
        assert!(m.contains(line), "{line} in\n{m}");
    }
}

#[test]
fn sni_chooses_the_sites_certificate_and_the_listener_default_otherwise() {
    let dir = Server::dir();
    certificate(dir.path(), "a", &["localhost", "a.test"]);
    certificate(dir.path(), "b", &["b.test"]);
    certificate(dir.path(), "w", &["*.w.test"]);
    std::fs::write(dir.path().join("root/f"), b"f").unwrap();
    let s = Server::start(
        crate::BIN,
        dir,
        "listen = [{ address = \"127.0.0.1:0\", tls = { certificate = \"a.pem\", key = \"a.key\" } }]\nworkers = 1\n\
         [[vhost]]\nnames = [\"b.test\"]\nroot = \"root\"\ntls = { certificate = \"b.pem\", key = \"b.key\" }\n\
         [[vhost]]\nnames = [\"*.w.test\"]\nroot = \"root\"\ntls = { certificate = \"w.pem\", key = \"w.key\" }\n\
         [[vhost]]\nnames = [\"*\"]\nroot = \"root\"\n",
    );
    let ok = |ca: &str, host: &str| curl_tls(&s, &s.path(ca), host, &[&https(&s, host, "/f")]).0;
    // Each certificate is its own CA: a fetch verifies only when that one was presented.
    assert!(ok("b.pem", "b.test"));
    assert!(!ok("a.pem", "b.test"));
    assert!(ok("w.pem", "x.w.test"));
    assert!(ok("a.pem", "a.test"));
    assert!(ok("a.pem", "localhost"));
    assert!(!ok("b.pem", "a.test"));
    // No SNI at all (an IP address): the listener's certificate, which verifies against
    // itself (s_client trusts `a.pem` only).
    let text = s_client(&s, &["-noservername"], b"");
    assert!(text.contains("Verify return code: 0 (ok)"), "{text}");
    let text = s_client(&s, &["-servername", "b.test"], b"");
    assert!(!text.contains("Verify return code: 0 (ok)"), "{text}");
}

#[test]
fn plaintext_garbage_and_stalled_handshakes_are_closed_and_the_server_goes_on() {
    let s = tls_server(&[("f", b"f")], "[timeouts]\nheader = \"1s\"\n");
    let a = s.tls_addr.unwrap();
    let read_all = |mut c: TcpStream| {
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        out
    };
    // Plain HTTP: a plain 400 that says why, then the close.
    let mut c = TcpStream::connect(a).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let out = String::from_utf8_lossy(&read_all(c)).to_string();
    assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
    assert!(out.contains("Connection: close\r\n"), "{out}");
    assert!(
        out.ends_with("The plain HTTP request was sent to HTTPS port\n"),
        "{out}"
    );
    // Garbage: a TLS alert or nothing, then the close; never HTTP.
    let mut c = TcpStream::connect(a).unwrap();
    c.write_all(&crate::bytes(5000, 3)).unwrap();
    let out = read_all(c);
    assert!(!out.starts_with(b"HTTP"), "{out:?}");
    // A record header that promises an 18 KB handshake record (over TLS's 16 KB limit).
    let mut c = TcpStream::connect(a).unwrap();
    let mut rec = vec![0x16, 3, 1, 0x48, 0];
    rec.extend(crate::bytes(0x4800, 4));
    let _ = c.write_all(&rec);
    let out = read_all(c);
    assert!(
        out.is_empty() || out[0] == 0x15,
        "an alert or nothing: {out:?}"
    );
    // A ClientHello cut short, then silence: closed after the header timeout, not held.
    let started = Instant::now();
    let mut c = TcpStream::connect(a).unwrap();
    c.write_all(&[0x16, 3, 1, 0, 200, 1, 0, 0, 196, 3, 3])
        .unwrap();
    let _ = read_all(c);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(900), "closed after {took:?}");
    assert!(took < Duration::from_secs(9), "held for {took:?}");
    // Connected, then nothing at all.
    let started = Instant::now();
    let c = TcpStream::connect(a).unwrap();
    let _ = read_all(c);
    assert!(started.elapsed() < Duration::from_secs(9));
    // A client that vanishes mid-handshake.
    let mut c = TcpStream::connect(a).unwrap();
    c.write_all(&[0x16, 3, 1, 0, 200, 1]).unwrap();
    drop(c);
    // And it still serves.
    let (ok, body) = curl_tls(
        &s,
        &s.path("a.pem"),
        "a.test",
        &[&https(&s, "a.test", "/f")],
    );
    assert!(ok);
    assert_eq!(body, b"f");
    s.assert_clean_log(&[]);
}

#[test]
fn proxy_and_cgi_learn_the_request_came_over_tls() {
    let b = ramjet_testkit::Backend::start(|ex| {
        let head = ex.head.clone();
        ex.ok(head.as_bytes());
        ramjet_testkit::Flow::Keep
    });
    let dir = Server::dir();
    certificate(dir.path(), "a", &["a.test"]);
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let script = bin.join("env.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\necho \"HTTPS=$HTTPS SCHEME=$REQUEST_SCHEME\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = Server::start(
        crate::BIN,
        dir,
        &format!(
            "listen = [{{ address = \"127.0.0.1:0\", tls = {{ certificate = \"a.pem\", key = \"a.key\" }} }}, \"127.0.0.1:0\"]\nworkers = 1\n\
             [upstream.app]\nservers = [\"{}\"]\n\
             [[location]]\nroot = \"root\"\n\
             [[location]]\npath = \"/app/\"\nhandlers = [\"proxy\"]\nproxy = \"app\"\n\
             [[location]]\npath = \"/cgi-bin/\"\ncgi_root = \"{{dir}}/bin\"\n",
            b.addr
        ),
    );
    let ca = s.path("a.pem");
    let (ok, body) = curl_tls(&s, &ca, "a.test", &[&https(&s, "a.test", "/app/x")]);
    assert!(ok);
    let seen = String::from_utf8_lossy(&body).to_string();
    assert!(seen.contains("X-Forwarded-Proto: https\r\n"), "{seen}");
    assert!(seen.contains(";proto=https\r\n"), "{seen}");
    let (ok, body) = curl_tls(
        &s,
        &ca,
        "a.test",
        &[&https(&s, "a.test", "/cgi-bin/env.sh")],
    );
    assert!(ok);
    assert_eq!(String::from_utf8_lossy(&body), "HTTPS=on SCHEME=https\n");
    // The cleartext listener says http.
    let r = s.get("/cgi-bin/env.sh");
    assert_eq!(r.text(), "HTTPS= SCHEME=http\n");
}

/// `ramjet check-config FILE`: (success, stderr).
fn check(dir: &Path, config: &str) -> (bool, String) {
    let file = dir.join("c.toml");
    std::fs::write(&file, config).unwrap();
    let out = Command::new(crate::BIN)
        .arg("check-config")
        .arg(&file)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn bad_certificates_are_configuration_errors_that_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("root")).unwrap();
    certificate(d, "a", &["a.test"]);
    certificate(d, "b", &["b.test"]);
    let listen = |c: &str, k: &str| {
        format!("listen = [{{ address = \"127.0.0.1:0\", tls = {{ certificate = \"{c}\", key = \"{k}\" }} }}]\n[[location]]\nroot = \"root\"\n")
    };
    let (ok, err) = check(d, &listen("missing.pem", "a.key"));
    assert!(!ok);
    assert!(
        err.contains("c.toml:1:") && err.contains("listen[0].tls"),
        "{err}"
    );
    assert!(
        err.contains("missing.pem") && err.contains("cannot read"),
        "{err}"
    );
    let (ok, err) = check(d, &listen("a.pem", "b.key"));
    assert!(!ok);
    assert!(
        err.contains("b.key does not match certificate") && err.contains("a.pem"),
        "{err}"
    );
    let (ok, err) = check(d, &listen("a.key", "a.key"));
    assert!(!ok && err.contains("no certificate"), "{err}");
    // Both a bad listener and a bad vhost certificate, in one run.
    let text = format!(
        "{}[[vhost]]\nnames = [\"b.test\"]\nroot = \"root\"\ntls = {{ certificate = \"b.pem\", key = \"a.key\" }}\n",
        listen("nope.pem", "a.key")
    );
    let (ok, err) = check(d, &text);
    assert!(!ok);
    assert!(
        err.contains("nope.pem") && err.contains("vhost[0].tls"),
        "{err}"
    );
    // A site whose certificate does not name it: loads, with a warning.
    let text = format!(
        "{}[[vhost]]\nnames = [\"c.test\"]\nroot = \"root\"\ntls = {{ certificate = \"b.pem\", key = \"b.key\" }}\n",
        listen("a.pem", "a.key")
    );
    let (ok, err) = check(d, &text);
    assert!(ok, "{err}");
    assert!(
        err.contains("warning") && err.contains("does not name `c.test`"),
        "{err}"
    );
    // `tls` is a table or "acme", and "acme" needs its section.
    let (ok, err) = check(
        d,
        "listen = [{ address = \"127.0.0.1:0\", tls = \"yes\" }]\n[[location]]\nroot = \"root\"\n",
    );
    assert!(
        !ok && err.contains("listen[0].tls") && err.contains("`yes` is not \"acme\""),
        "{err}"
    );
    let (ok, err) = check(
        d,
        "[[vhost]]\nnames = [\"a.test\"]\nroot = \"root\"\ntls = \"acme\"\n",
    );
    assert!(!ok && err.contains("needs an [acme] section"), "{err}");
    // A hand-off location cannot sit behind a TLS listener.
    let text = format!(
        "{}[[location]]\npath = \"/h/\"\nhandlers = [\"handoff\"]\nhandoff = \"/run/x.sock\"\n",
        listen("a.pem", "a.key")
    );
    let (ok, err) = check(d, &text);
    assert!(!ok);
    assert!(err.contains("TLS listener cannot hand"), "{err}");
}

#[test]
fn a_reload_with_a_bad_certificate_keeps_the_old_one_serving() {
    let s = tls_server(&[("f", b"f")], "");
    let ca = s.path("a.pem");
    let fetch = |ca: &Path| curl_tls(&s, ca, "a.test", &[&https(&s, "a.test", "/f")]).0;
    assert!(fetch(&ca));
    // A broken certificate file: the reload fails, the old certificate serves on.
    let good = std::fs::read(&ca).unwrap();
    std::fs::write(&ca, b"not a certificate").unwrap();
    s.signal(libc::SIGHUP);
    assert!(s.wait_for_log("no certificate", Duration::from_secs(10)));
    std::fs::write(s.path("old.pem"), &good).unwrap();
    assert!(fetch(&s.path("old.pem")));
    // A new valid certificate: served after the next HUP.
    certificate(s.dir.path(), "a", &["a.test"]);
    s.signal(libc::SIGHUP);
    crate::poll_until(|| fetch(&ca).then_some(()));
    assert!(!fetch(&s.path("old.pem")));
}

/// A TLS listener with a 90-day ECDSA P-256 certificate for `localhost` (as an ACME CA
/// issues), for the scanners.
fn scanned() -> Server {
    let dir = Server::dir();
    let ok = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ])
        .args([
            "-days",
            "90",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
        ])
        .arg("-keyout")
        .arg(dir.path().join("a.key"))
        .arg("-out")
        .arg(dir.path().join("a.pem"))
        .output()
        .unwrap()
        .status
        .success();
    assert!(ok);
    std::fs::write(dir.path().join("root/index.html"), b"hi").unwrap();
    Server::start(
        crate::BIN,
        dir,
        "listen = [{ address = \"127.0.0.1:0\", tls = { certificate = \"a.pem\", key = \"a.key\" } }]\nworkers = 1\n",
    )
}

#[test]
fn sslyze_finds_mozilla_intermediate_but_for_the_test_certificate_trust() {
    let s = scanned();
    let target = format!("localhost:{}", s.tls_addr.unwrap().port());
    let out = Command::new("sslyze")
        .args(["--mozilla_config=intermediate", &target])
        .output()
        .expect("sslyze is installed (.ci/deps)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("SCANS COMPLETED"), "{text}");
    // A self-signed test certificate cannot chain to a public root: the one finding
    // allowed. Everything else (versions, suites, curves, key, lifespan) must comply.
    let findings: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("* "))
        .filter(|l| l.contains(':') && text.contains("Not compliant"))
        .filter(|l| {
            let name = l.split(':').next().unwrap_or("");
            !name.contains(' ') && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        })
        .collect();
    assert!(
        findings
            .iter()
            .all(|f| f.starts_with("certificate_path_validation:")),
        "{findings:?}\n{text}"
    );
    assert!(
        text.contains("Supported curves:                  X25519, secp256r1, secp384r1"),
        "{text}"
    );
}

#[test]
fn testssl_reports_no_vulnerability() {
    let s = scanned();
    let target = format!("localhost:{}", s.tls_addr.unwrap().port());
    let out = Command::new("testssl")
        .args(["--quiet", "--color", "0", "-U", "--ip", "one", &target])
        .output()
        .expect("testssl.sh is installed (.ci/deps)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("Heartbleed") && text.contains("LUCKY13"),
        "{text}"
    );
    let bad: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("VULNERABLE") || l.contains("potentially"))
        .collect();
    assert!(bad.is_empty(), "{bad:?}\n{text}");
}

/// The SHA-256 of a certificate's public key, base64 (what Chromium's
/// `--ignore-certificate-errors-spki-list` trusts).
pub(crate) fn spki_hash(cert: &Path) -> String {
    let script = format!(
        "openssl x509 -in '{}' -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64",
        cert.display()
    );
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Headless Chromium trusting exactly this server's key: a page and a listing over HTTPS,
/// with a screenshot of the listing kept under `target/tmp/artifacts/`.
#[test]
fn chromium_shows_a_page_and_a_listing_over_https() {
    let s = tls_server(
        &[
            (
                "site/index.html",
                b"<html><body><h1>over tls</h1></body></html>",
            ),
            ("files/a.txt", b"a"),
            ("files/b.bin", &[0u8; 3000]),
        ],
        "[[location]]\nroot = \"root\"\nautoindex = true\n",
    );
    let port = s.tls_addr.unwrap().port();
    let trust = format!(
        "--ignore-certificate-errors-spki-list={}",
        spki_hash(&s.path("a.pem"))
    );
    let work = tempfile::tempdir().unwrap();
    let page = crate::observe::chromium(
        work.path(),
        &[
            &trust,
            "--dump-dom",
            &format!("https://localhost:{port}/site/"),
        ],
    );
    assert!(page.contains("<h1>over tls</h1>"), "{page}");
    let listing = crate::observe::chromium(
        work.path(),
        &[
            &trust,
            "--dump-dom",
            &format!("https://localhost:{port}/files/"),
        ],
    );
    assert!(
        listing.contains("a.txt") && listing.contains("b.bin"),
        "{listing}"
    );
    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("listing-over-https.png");
    let _ = std::fs::remove_file(&shot);
    crate::observe::chromium(
        work.path(),
        &[
            &trust,
            &format!("--screenshot={}", shot.display()),
            &format!("https://localhost:{port}/files/"),
        ],
    );
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // Without trusting the key, Chromium refuses the page: the trust above is what let it in.
    let refused = crate::observe::chromium(
        work.path(),
        &["--dump-dom", &format!("https://localhost:{port}/site/")],
    );
    assert!(!refused.contains("<h1>over tls</h1>"), "{refused}");
}

/// A rustls client over TCP to the TLS listener, trusting `a.pem`, for `name`.
fn tls_client(s: &Server, name: &str) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(s.path("a.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn = rustls::ClientConnection::new(
        std::sync::Arc::new(config),
        name.to_string().try_into().unwrap(),
    )
    .unwrap();
    let tcp = TcpStream::connect(s.tls_addr.unwrap()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

#[test]
fn websocket_tunnels_and_pipelined_requests_work_over_tls() {
    let b = ramjet_testkit::Backend::start(|ex| {
        ex.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nhello|");
        let mut buf = [0u8; 65536];
        loop {
            match ex.stream.read(&mut buf) {
                Ok(0) | Err(_) => return ramjet_testkit::Flow::Close,
                Ok(n) => {
                    let _ = ex.stream.write_all(&buf[..n]);
                }
            }
        }
    });
    let s = tls_server(
        &[("p", b"pipelined")],
        &format!(
            "[upstream.app]\nservers = [\"{}\"]\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/ws\"\nhandlers = [\"proxy\"]\nproxy = \"app\"\n",
            b.addr
        ),
    );
    let mut c = tls_client(&s, "a.test");
    c.write_all(b"GET /ws HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nearly|").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while !got.ends_with(b"early|") {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{text}"
    );
    assert!(text.ends_with("\r\n\r\nhello|early|"), "{text}");
    // Both ways through the tunnel, across several TLS records.
    for msg in [&b"one"[..], &crate::bytes(70_000, 5)[..]] {
        c.write_all(msg).unwrap();
        let mut back = vec![0u8; msg.len()];
        c.read_exact(&mut back).unwrap();
        assert!(back == msg);
    }
    drop(c);
    // Three pipelined requests in one TLS record, answered in order.
    let mut c = tls_client(&s, "a.test");
    c.write_all(b"GET /p HTTP/1.1\r\nHost: a\r\n\r\nGET /p HTTP/1.1\r\nHost: a\r\n\r\nGET /p HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").unwrap();
    let mut all = Vec::new();
    let _ = c.read_to_end(&mut all);
    let all = String::from_utf8_lossy(&all);
    assert_eq!(all.matches("HTTP/1.1 200 OK\r\n").count(), 3, "{all}");
    assert_eq!(all.matches("pipelined").count(), 3, "{all}");
}

#[test]
fn h2load_and_ab_over_tls_see_no_failure() {
    let s = tls_server(&[("4k", &[7u8; 4096])], "");
    let url = https(&s, "localhost", "/4k");
    let out = Command::new("h2load")
        .args(["--h1", "-n", "3000", "-c", "30", "-t", "1", &url])
        .output()
        .expect("h2load is installed (.ci/deps)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("requests: 3000 total, 3000 started, 3000 done, 3000 succeeded, 0 failed, 0 errored, 0 timeout"),
        "{text}"
    );
    let out = Command::new("ab")
        .args(["-q", "-n", "1000", "-c", "10", "-k", &url])
        .output()
        .expect("ab is installed (.ci/deps)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("Complete requests:      1000"), "{text}");
    assert!(text.contains("Failed requests:        0"), "{text}");
    assert!(text.contains("SSL/TLS Protocol:"), "{text}");
    s.assert_clean_log(&[]);
}

#[test]
fn modules_redirects_listings_and_the_status_page_answer_over_tls() {
    let s = tls_server(
        &[("motd.bin", b"MOTD\n"), ("dir/a.txt", b"a")],
        "[[location]]\nroot = \"root\"\nautoindex = true\n\
         [[location]]\npath = \"/hello/\"\nmodule = \"hello\"\n[location.module_config]\ngreeting = \"Hi\"\nfile = \"{dir}/root/motd.bin\"\n\
         [[location]]\npath = \"/old/\"\nredirect = \"/new/\"\n\
         [[location]]\npath = \"/server-status\"\nhandlers = [\"status\"]\n",
    );
    let ca = s.path("a.pem");
    let get = |path: &str, extra: &[&str]| {
        let url = https(&s, "a.test", path);
        // HTTP/1.1 here (curl asks for h2 over TLS by default; `http2.rs` covers that).
        let mut args = vec!["-i", "--http1.1"];
        args.extend_from_slice(extra);
        args.push(&url);
        let (ok, out) = curl_tls(&s, &ca, "a.test", &args);
        assert!(ok, "{path}");
        String::from_utf8_lossy(&out).to_string()
    };
    let hello = get("/hello/x", &[]);
    assert!(hello.starts_with("HTTP/1.1 200 OK\r\n"), "{hello}");
    assert!(
        hello.contains("Hi, 127.0.0.1!\n") && hello.contains("MOTD\n"),
        "{hello}"
    );
    let moved = get("/old/page?q=1", &[]);
    assert!(moved.starts_with("HTTP/1.1 301"), "{moved}");
    assert!(moved.contains("\r\nLocation: /new/page?q=1\r\n"), "{moved}");
    let listing = get("/dir/", &[]);
    assert!(
        listing.starts_with("HTTP/1.1 200 OK\r\n") && listing.contains("a.txt"),
        "{listing}"
    );
    let slash = get("/dir", &[]);
    assert!(
        slash.starts_with("HTTP/1.1 301") && slash.contains("Location: /dir/"),
        "{slash}"
    );
    let status = get("/server-status?auto", &[]);
    assert!(status.contains("Total Accesses:"), "{status}");
    s.assert_clean_log(&[]);
}
