//! The cache with real origins and real clients: Apache 2.4 serving files (validators, no
//! Cache-Control: heuristic freshness and revalidation by 304), a WSGI app under gunicorn
//! answering with Cache-Control variants and `Vary`, and curl (HTTP/1.1 and HTTP/2),
//! `wget -N` and aria2c (several connections, ranges) reading from the cache. Also a disk
//! tier that stops working under a running server: one log line, and answers still served.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use crate::proxy::eventually;
use crate::proxy_real::{Apache, Gunicorn};
use crate::{bytes, curl, server_with};

fn cache_in_front(origin: &str, cache: &str) -> ramjet_testkit::Server {
    server_with(
        &[],
        &format!(
            "workers = 2\n[upstream.o]\nservers = [\"{origin}\"]\n[cache.c]\n{cache}\n\
             [[location]]\nproxy = \"o\"\ncache = \"c\"\n\
             [[location]]\npath = \"/metrics\"\nhandlers = [\"metrics\"]\n"
        ),
    )
}

fn metric(s: &ramjet_testkit::Server, line_start: &str) -> u64 {
    let (_, out) = curl(&[&s.url("/metrics")]);
    String::from_utf8_lossy(&out)
        .lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
        .unwrap_or(0)
}

fn sha(data: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)[..64].to_string()
}

/// Apache's files through the cache: aria2c's ranges over several connections, `wget -N`
/// (a second run downloads nothing), and a file changed at the origin seen once its
/// heuristic lifetime (a tenth of its age) is over (no Cache-Control: Apache's validators
/// make each later use a revalidation, answered 304 while unchanged).
#[test]
fn apache_files_through_the_cache_with_aria2c_wget_and_curl() {
    let apache = Apache::start(5);
    let data = bytes(300_000, 11);
    let s = cache_in_front(&apache.addr(), "memory = \"64m\"\nmax_object = \"16m\"");
    let dl = tempfile::tempdir().unwrap();
    let d = dl.path().to_str().unwrap();
    let (ok, body) = curl(&[&s.url("/data.bin")]);
    assert!(ok && body == data);
    // aria2c splits a file of several MiB into 1 MiB ranges over 4 connections: the first
    // request starts the fill, the ranges are answered from it and from storage.
    let big = bytes(6 << 20, 12);
    let big_path = apache.dir.path().join("htdocs/big.bin");
    std::fs::write(&big_path, &big).unwrap();
    std::fs::set_permissions(&big_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    // Apache's files carry validators and no Cache-Control: a file just written has no
    // heuristic lifetime, so each range is a revalidation (a 304 from Apache), not a
    // second download of the body.
    let served = |s: &ramjet_testkit::Server| {
        metric(s, "ramjet_cache_requests_total{cache=\"c\",result=\"hit\"}")
            + metric(
                s,
                "ramjet_cache_requests_total{cache=\"c\",result=\"revalidated\"}",
            )
    };
    let fetched =
        |s: &ramjet_testkit::Server| metric(s, "ramjet_cache_miss_bytes_total{cache=\"c\"}");
    let (served_before, fetched_before) = (served(&s), fetched(&s));
    let aria = Command::new("aria2c")
        .args(["-q", "-x4", "-s4", "-k", "1M", "--allow-overwrite=true"])
        // Held to 10 MB/s, the first connection cannot finish before aria2c splits the file.
        .arg("--max-download-limit=10M")
        .args(["-d", d, "-o", "aria.bin"])
        .arg(s.url("/big.bin"))
        .status()
        .expect("aria2c is installed");
    assert!(aria.success());
    assert_eq!(
        sha(&std::fs::read(dl.path().join("aria.bin")).unwrap()),
        sha(&big)
    );
    assert!(
        served(&s) > served_before,
        "aria2c's ranges came from the cache"
    );
    assert_eq!(
        fetched(&s) - fetched_before,
        big.len() as u64,
        "the body came from Apache once"
    );
    // wget -N twice: the second finds the file unchanged and does not download it.
    for _ in 0..2 {
        let w = Command::new("wget")
            .args(["-q", "-N", "-P", d])
            .arg(s.url("/page.html"))
            .status()
            .expect("wget is installed");
        assert!(w.success());
    }
    assert_eq!(
        std::fs::read(dl.path().join("page.html")).unwrap(),
        b"<h1>apache page</h1>\n"
    );
    assert!(
        metric(
            &s,
            "ramjet_cache_requests_total{cache=\"c\",result=\"revalidated\"}"
        ) >= 1
    );
    // A change at the origin (new size and time) is what the next request gets.
    let page = apache.dir.path().join("htdocs/page.html");
    std::fs::write(&page, "<h1>changed</h1>\n").unwrap();
    let later = std::time::SystemTime::now() + Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(&page)
        .unwrap()
        .set_modified(later)
        .unwrap();
    // Fresh for a tenth of its age since Last-Modified (heuristic: a second or so when the
    // machine is slow), then revalidated and replaced.
    assert!(eventually(Duration::from_secs(30), || curl(&[
        &s.url("/page.html")
    ])
    .1
        == b"<h1>changed</h1>\n"));
    // HTTP/2 (prior knowledge) reads the same stored object.
    let (ok, body) = curl(&["--http2-prior-knowledge", &s.url("/data.bin")]);
    assert!(ok && body == data);
}

const VARIANTS_APP: &str = r#"
import os
def app(environ, start_response):
    path = environ['PATH_INFO']
    cc = {
        '/max-age': 'max-age=60',
        '/no-store': 'no-store',
        '/private': 'private, max-age=60',
        '/s-maxage': 's-maxage=60, max-age=0',
        '/no-cache': 'no-cache',
        '/vary': 'max-age=60',
    }[path]
    n = os.urandom(6).hex()
    headers = [('Content-Type', 'text/plain'), ('Cache-Control', cc), ('ETag', '"e%s"' % path[1:])]
    if path == '/vary':
        headers.append(('Vary', 'Accept-Language'))
        body = ('%s %s' % (environ.get('HTTP_ACCEPT_LANGUAGE'), n)).encode()
    else:
        body = ('%s %s' % (path, n)).encode()
    if path == '/no-cache' and environ.get('HTTP_IF_NONE_MATCH') == '"eno-cache"':
        start_response('304 Not Modified', headers)
        return [b'']
    headers.append(('Content-Length', str(len(body))))
    start_response('200 OK', headers)
    return [body]
"#;

/// gunicorn answering with Cache-Control variants: what is stored, what is not, what is
/// revalidated every time, and `Vary` keeping a variant per Accept-Language.
#[test]
fn gunicorn_cache_control_variants() {
    let g = Gunicorn::with_app(VARIANTS_APP);
    let s = cache_in_front(&format!("127.0.0.1:{}", g.port), "");
    let body = |path: &str, extra: &[&str]| {
        let mut args: Vec<&str> = extra.to_vec();
        let url = s.url(path);
        args.push(&url);
        let (ok, out) = curl(&args);
        assert!(ok);
        String::from_utf8(out).unwrap()
    };
    // Stored: the second answer is the first's.
    for path in ["/max-age", "/s-maxage"] {
        assert_eq!(body(path, &[]), body(path, &[]), "{path} is stored");
    }
    // Not stored: every request reaches the app.
    for path in ["/no-store", "/private"] {
        assert_ne!(body(path, &[]), body(path, &[]), "{path} is not stored");
    }
    // no-cache: stored, revalidated every time (the app's 304 keeps the stored body).
    let first = body("/no-cache", &[]);
    assert_eq!(body("/no-cache", &[]), first);
    // Vary: one variant per language, each stored.
    let de = body("/vary", &["-H", "Accept-Language: de"]);
    let fr = body("/vary", &["-H", "Accept-Language: fr"]);
    assert!(de.starts_with("de ") && fr.starts_with("fr "));
    assert_eq!(body("/vary", &["-H", "Accept-Language: de"]), de);
    assert_eq!(body("/vary", &["-H", "Accept-Language: fr"]), fr);
}

/// A disk tier that stops working under a running server: one clear log line, and the
/// answers are still served (from memory, or passed through).
#[test]
fn a_failing_disk_tier_degrades_to_memory_with_one_log_line() {
    let apache = Apache::start(5);
    let disk = tempfile::tempdir().unwrap();
    let s = cache_in_front(
        &apache.addr(),
        &format!(
            "memory = \"16m\"\ndisk = \"{}\"\ndisk_size = \"64m\"\nmemory_object_max = \"64k\"",
            disk.path().display()
        ),
    );
    // The tier's folder becomes a file: every new disk object fails.
    std::fs::remove_dir_all(disk.path()).unwrap();
    std::fs::write(disk.path(), b"not a folder").unwrap();
    let data = bytes(300_000, 11);
    for _ in 0..3 {
        let (ok, body) = curl(&[&s.url("/data.bin")]);
        assert!(ok && body == data);
        let (ok, body) = curl(&[&s.url("/page.html")]);
        assert!(ok && body == b"<h1>apache page</h1>\n");
    }
    assert!(s.wait_for_log("the disk tier at", Duration::from_secs(10)));
    assert!(eventually(Duration::from_secs(5), || s
        .stderr()
        .iter()
        .filter(|l| l.contains("the disk tier at"))
        .count()
        == 1));
    s.assert_clean_log(&["the disk tier at"]);
}
