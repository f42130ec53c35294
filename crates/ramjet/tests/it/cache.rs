//! The accelerator's cache (issue 25) in front of scripted origins: one origin request for a
//! storm of concurrent requests for a cold object, hits with ranges and conditionals from
//! storage, revalidation with the stored validators (a 304 refreshes the head), stale
//! answers within stale-if-error when the origin dies and 502 after, hit-for-miss for
//! answers that may not be stored, PURGE, and a disk tier that survives `kill -9` in the
//! middle of a fill without ever serving the cut object as whole.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ramjet_testkit::{Backend, Exchange, Flow, Server};

use crate::proxy::eventually;
use crate::{bytes, server_with};

fn cached(origin: &str, cache: &str, location: &str) -> Server {
    server_with(
        &[],
        &format!(
            "workers = 2\n[upstream.o]\nservers = [\"{origin}\"]\n[cache.c]\n{cache}\n[[location]]\nproxy = \"o\"\ncache = \"c\"\n{location}\n"
        ),
    )
}

fn answer(ex: &mut Exchange<'_>, fields: &str, body: &[u8]) {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{fields}\r\n",
        body.len()
    );
    ex.write(head.as_bytes());
    ex.write(body);
}

fn get(s: &Server, path: &str, extra: &str) -> ramjet_testkit::Response {
    let mut c = s.client();
    c.send(format!("GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n").as_bytes());
    c.response(false)
}

/// `n` clients, all connected first, ask for `path` at once: their responses.
fn at_once(s: &Server, n: usize, path: &str) -> Vec<ramjet_testkit::Response> {
    let (addr, go) = (s.addr, Arc::new(std::sync::Barrier::new(n)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (go, request) = (go.clone(), request.clone());
            std::thread::spawn(move || {
                let mut c = ramjet_testkit::Client::connect(addr);
                go.wait();
                c.send(request.as_bytes());
                c.response(false)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// 500 concurrent requests for a cold object make exactly one origin request, and every
/// client gets the whole object.
#[test]
fn a_storm_for_a_cold_object_makes_one_origin_request() {
    let body = Arc::new(bytes(300_000, 7));
    let b2 = body.clone();
    let origin = Backend::start(move |ex| {
        // Slow enough that the storm arrives while the fetch is under way.
        std::thread::sleep(Duration::from_millis(300));
        let head = format!(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: {}\r\n\r\n",
            b2.len()
        );
        ex.write(head.as_bytes());
        for piece in b2.chunks(50_000) {
            ex.write(piece);
            std::thread::sleep(Duration::from_millis(20));
        }
        Flow::Keep
    });
    let s = cached(&origin.addr.to_string(), "memory = \"16m\"", "");
    let ok = at_once(&s, 500, "/obj")
        .iter()
        .filter(|r| r.status == 200 && r.body == *body)
        .count();
    assert_eq!(ok, 500);
    assert_eq!(origin.requests(), 1, "one origin fetch for the storm");
    let r = get(&s, "/obj", "");
    assert!(
        r.header("cache-status").unwrap().contains("hit"),
        "{}",
        r.head
    );
    s.assert_clean_log(&[]);
}

/// Hits answer ranges and conditionals from storage; Age and Cache-Status are set.
#[test]
fn hits_answer_ranges_and_conditionals_from_storage() {
    let origin = Backend::start(|ex| {
        answer(
            ex,
            "Cache-Control: max-age=600\r\nETag: \"v1\"\r\n",
            b"0123456789",
        );
        Flow::Keep
    });
    let s = cached(&origin.addr.to_string(), "", "");
    let first = get(&s, "/r", "Range: bytes=2-4\r\n");
    assert_eq!(first.status, 206, "{}", first.head);
    assert_eq!(first.body, b"234");
    assert!(first.header("cache-status").unwrap().contains("fwd=miss"));
    let hit = get(&s, "/r", "Range: bytes=-3\r\n");
    assert_eq!((hit.status, hit.body.as_slice()), (206, &b"789"[..]));
    assert!(hit.header("cache-status").unwrap().contains("hit"));
    assert!(hit.header("age").is_some());
    let nm = get(&s, "/r", "If-None-Match: \"v1\"\r\n");
    assert_eq!(nm.status, 304);
    assert_eq!(origin.requests(), 1);
    // HEAD: from the stored GET; a HEAD for what is not stored goes to the origin as HEAD.
    let mut c = s.client();
    c.send(b"HEAD /r HTTP/1.1\r\nHost: x\r\n\r\n");
    let head = c.response(true);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length").as_deref(), Some("10"));
    assert!(head.header("cache-status").unwrap().contains("hit"));
    assert_eq!(origin.requests(), 1);
    c.send(b"HEAD /other HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response(true).status, 200);
    assert!(origin.heads().last().unwrap().starts_with("HEAD /other"));
    // The origin never saw the client's range or conditional.
    assert!(!origin.heads()[0].to_ascii_lowercase().contains("range"));
}

/// A stale answer is revalidated with its validators; the 304 refreshes it.
#[test]
fn a_stale_answer_is_revalidated_with_one_conditional_request() {
    let origin = Backend::start(|ex| {
        if ex.header("if-none-match").as_deref() == Some("\"v1\"") {
            ex.write(b"HTTP/1.1 304 Not Modified\r\nCache-Control: max-age=600\r\nX-Fresh: yes\r\nETag: \"v1\"\r\n\r\n");
        } else {
            answer(ex, "Cache-Control: max-age=1\r\nETag: \"v1\"\r\n", b"first");
        }
        Flow::Keep
    });
    let s = cached(&origin.addr.to_string(), "", "");
    assert_eq!(get(&s, "/v", "").body, b"first");
    // Once stale (after a second), the next request revalidates.
    assert!(eventually(Duration::from_secs(10), || {
        let r = get(&s, "/v", "");
        r.header("cache-status")
            .is_some_and(|c| c.contains("fwd-status=304"))
            && r.body == b"first"
            && r.header("x-fresh").as_deref() == Some("yes")
    }));
    let n = origin.requests();
    let r = get(&s, "/v", "");
    assert!(r.header("cache-status").unwrap().contains("hit"));
    assert_eq!(origin.requests(), n, "fresh again after the 304");
    assert!(origin
        .heads()
        .last()
        .unwrap()
        .contains("If-None-Match: \"v1\""));
}

/// When the origin dies, a stale answer is served within stale-if-error, and 502 after.
#[test]
fn a_dead_origin_serves_stale_within_stale_if_error_then_502() {
    let origin = Backend::start(|ex| {
        let cc = if ex.target() == "/sie" {
            "Cache-Control: max-age=1, stale-if-error=600\r\n"
        } else {
            "Cache-Control: max-age=1\r\n"
        };
        answer(ex, cc, b"kept");
        Flow::Close
    });
    let s = cached(&origin.addr.to_string(), "", "");
    assert_eq!(get(&s, "/sie", "").body, b"kept");
    assert_eq!(get(&s, "/plain", "").body, b"kept");
    drop(origin);
    assert!(eventually(Duration::from_secs(10), || {
        let r = get(&s, "/sie", "");
        r.status == 200
            && r.body == b"kept"
            && r.header("cache-status")
                .is_some_and(|c| c.contains("stale-if-error"))
    }));
    assert!(eventually(Duration::from_secs(10), || get(
        &s, "/plain", ""
    )
    .status
        == 502));
}

/// Answers that may not be stored are passed on, and the requests that waited for them go
/// to the origin side by side.
#[test]
fn uncacheable_answers_pass_and_purge_removes() {
    let origin = Backend::start(|ex| {
        match ex.target() {
            "/private" => answer(ex, "Cache-Control: private\r\n", b"p"),
            _ => answer(ex, "Cache-Control: max-age=600\r\n", b"x"),
        }
        Flow::Keep
    });
    let s = cached(
        &origin.addr.to_string(),
        "",
        "cache_purge = [\"127.0.0.1\"]\n[[location]]\npath = \"/metrics\"\nhandlers = [\"metrics\"]",
    );
    let r = get(&s, "/private", "");
    assert!(
        r.header("cache-status").unwrap().contains("private"),
        "{}",
        r.head
    );
    get(&s, "/private", "");
    assert_eq!(origin.requests(), 2);
    get(&s, "/d/a", "");
    get(&s, "/d/b", "");
    let before = origin.requests();
    get(&s, "/d/a", "");
    assert_eq!(origin.requests(), before);
    let mut c = s.client();
    c.send(b"PURGE /d/* HTTP/1.1\r\nHost: x\r\n\r\n");
    let p = c.response(false);
    assert_eq!(p.status, 200);
    assert!(p.text().contains("\"purged\": 2"), "{}", p.text());
    get(&s, "/d/a", "");
    assert_eq!(origin.requests(), before + 1);
    let m = get(&s, "/metrics", "").text();
    for line in [
        "ramjet_cache_requests_total{cache=\"c\",result=\"hit\"} 1",
        "ramjet_cache_requests_total{cache=\"c\",result=\"miss\"} 3",
        "ramjet_cache_requests_total{cache=\"c\",result=\"bypass\"} 2",
        "ramjet_cache_purged_total{cache=\"c\"} 2",
        "ramjet_cache_objects{cache=\"c\"} 1",
    ] {
        assert!(m.contains(line), "{line} in\n{m}");
    }
}

/// `kill -9` in the middle of a 200 MB disk fill: after a restart the cut object is not served
/// (the origin is asked again) and the whole one is.
#[test]
fn a_fill_cut_by_kill_9_is_never_served_as_whole() {
    let disk = tempfile::tempdir().unwrap();
    let body = Arc::new(bytes(200 << 20, 3));
    let stall = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (b2, st2) = (body.clone(), stall.clone());
    let origin = Backend::start(move |ex| {
        let head = format!(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: {}\r\n\r\n",
            b2.len()
        );
        ex.write(head.as_bytes());
        if st2.load(Ordering::Relaxed) {
            ex.write(&b2[..50 << 20]);
            std::thread::sleep(Duration::from_secs(30));
            return Flow::Close;
        }
        ex.write(&b2);
        Flow::Keep
    });
    let config = format!(
        "memory = \"4m\"\ndisk = \"{}\"\ndisk_size = \"1g\"\nmax_object = \"512m\"",
        disk.path().display()
    );
    let mut s = cached(&origin.addr.to_string(), &config, "");
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = vec![0u8; 20 << 20];
    c.read_exact(&mut got).unwrap();
    s.signal(9);
    s.wait_exit(Duration::from_secs(10));
    stall.store(false, Ordering::Relaxed);
    let s = cached(&origin.addr.to_string(), &config, "");
    let r = get(&s, "/big", "");
    assert_eq!(r.status, 200);
    assert!(r.body == *body, "a whole, correct body");
    assert_eq!(origin.requests(), 2, "the cut fill was not kept");
    // Complete now: after another restart it is served from disk.
    let n = origin.requests();
    // Committed once its object file is in place (its record written before the rename).
    let committed = || {
        std::fs::read_dir(disk.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().len() == 2)
            .flat_map(|d| std::fs::read_dir(d.path()).unwrap().filter_map(Result::ok))
            .any(|f| f.file_name().to_string_lossy().ends_with(".obj"))
    };
    assert!(eventually(Duration::from_secs(30), committed));
    drop(s);
    let s = cached(&origin.addr.to_string(), &config, "");
    let r = get(&s, "/big", "");
    assert!(r.body == *body);
    assert_eq!(
        origin.requests(),
        n,
        "served from the disk tier after a restart"
    );
    assert!(r.header("cache-status").unwrap().contains("hit"));
}

/// The cache-tests suite (the one behind cache-tests.fyi, npm `http-cache-tests` 0.4.5,
/// installed by `.ci/deps` under /opt/http-cache-tests): its origin behind ramjet's cache,
/// its client in front. Required tests: the issue's target, at least 140 of 165 pass and
/// fewer than 5 fail (157 and 1 on an idle machine; the failure is explained in
/// bench/results/2026-11-25-cache/cache-tests.md; some tests pause for seconds, and a
/// loaded machine may cost one).
#[test]
fn the_cache_tests_suite_passes() {
    let pkg = std::path::PathBuf::from(
        std::env::var("RAMJET_CACHE_TESTS").unwrap_or("/opt/http-cache-tests/package".into()),
    );
    assert!(
        pkg.join("cli.mjs").exists(),
        "the cache-tests suite is not at {} (.ci/deps installs it)",
        pkg.display()
    );
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let scratch = tempfile::tempdir().unwrap();
    let mut origin = std::process::Command::new("node")
        .arg("server/server.mjs")
        .current_dir(&pkg)
        .env("npm_config_protocol", "http")
        .env("npm_config_port", port.to_string())
        .env("npm_config_pidfile", scratch.path().join("origin.pid"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("node runs");
    assert!(eventually(Duration::from_secs(20), || TcpStream::connect(
        ("127.0.0.1", port)
    )
    .is_ok()));
    let s = cached(&format!("127.0.0.1:{port}"), "memory = \"64m\"", "");
    let out = std::process::Command::new("node")
        .args(["--no-warnings", "cli.mjs"])
        .current_dir(&pkg)
        .env("npm_config_base", format!("http://{}", s.addr))
        .env("npm_config_id", "")
        .env("npm_package_config_id", "")
        .output()
        .expect("node runs");
    let _ = origin.kill();
    let _ = origin.wait();
    let results = scratch.path().join("results.json");
    std::fs::write(&results, &out.stdout).unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let score = std::process::Command::new("node")
        .arg(root.join("bench/cache-tests/score.mjs"))
        .arg(&pkg)
        .arg(&results)
        .output()
        .expect("node runs");
    let text = String::from_utf8_lossy(&score.stdout).to_string();
    let count = |what: &str| -> usize {
        text.split(&format!("\"{what}\": "))
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    eprintln!("{text}");
    assert!(count("pass") >= 140, "{text}");
    assert!(count("fail") < 5, "{text}");
}

/// Within stale-while-revalidate a stale answer is served at once while a task of its own
/// revalidates it; the new answer follows.
#[test]
fn stale_while_revalidate_serves_stale_and_refreshes_in_the_background() {
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    let origin = Backend::start(move |ex| {
        let v = n2.fetch_add(1, Ordering::Relaxed);
        answer(
            ex,
            "Cache-Control: max-age=1, stale-while-revalidate=600\r\n",
            format!("v{v}").as_bytes(),
        );
        Flow::Keep
    });
    let s = cached(&origin.addr.to_string(), "", "");
    assert_eq!(get(&s, "/swr", "").body, b"v0");
    // Stale after a second: served as it is, with the refresh under way.
    assert!(eventually(Duration::from_secs(10), || {
        let r = get(&s, "/swr", "");
        r.body == b"v0"
            && r.header("cache-status")
                .is_some_and(|c| c.contains("stale-while-revalidate"))
    }));
    assert!(eventually(Duration::from_secs(10), || get(&s, "/swr", "")
        .body
        == b"v1"));
    s.assert_clean_log(&[]);
}

/// The waiters of a fetch take its answer even when it must be revalidated before every
/// use (`no-cache`): they do not revalidate one after another.
#[test]
fn waiters_of_a_no_cache_answer_do_not_revalidate_one_by_one() {
    let origin = Backend::start(|ex| {
        std::thread::sleep(Duration::from_millis(300));
        if ex.header("if-none-match").is_some() {
            ex.write(
                b"HTTP/1.1 304 Not Modified\r\nETag: \"n\"\r\nCache-Control: no-cache\r\n\r\n",
            );
        } else {
            answer(ex, "Cache-Control: no-cache\r\nETag: \"n\"\r\n", b"nc");
        }
        Flow::Keep
    });
    let s = cached(&origin.addr.to_string(), "", "");
    for r in at_once(&s, 100, "/nc") {
        assert_eq!(r.body, b"nc");
    }
    // One fetch for the storm (a straggler that arrived after it revalidates once more).
    assert!(
        origin.requests() <= 2,
        "{} origin requests",
        origin.requests()
    );
}

/// When the revalidation the others waited for fails, they take the stale answer within
/// stale-if-error instead of each trying the origin again in turn.
#[test]
fn waiters_of_a_failed_revalidation_take_the_stale_answer() {
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let f2 = failing.clone();
    let origin = Backend::start(move |ex| {
        if f2.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(300));
            ex.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
        } else {
            answer(
                ex,
                "Cache-Control: max-age=1, stale-if-error=600\r\nETag: \"s\"\r\n",
                b"kept",
            );
        }
        Flow::Keep
    });
    let s = cached(&origin.addr.to_string(), "", "");
    assert_eq!(get(&s, "/s", "").body, b"kept");
    failing.store(true, Ordering::Relaxed);
    // Stale after a second.
    assert!(eventually(Duration::from_secs(10), || {
        get(&s, "/s", "")
            .header("cache-status")
            .is_some_and(|c| c.contains("stale-if-error"))
    }));
    let before = origin.requests();
    for r in at_once(&s, 50, "/s") {
        assert_eq!(r.body, b"kept");
    }
    // One revalidation for the 50 (a straggler may make one more).
    assert!(
        origin.requests() - before <= 2,
        "{} origin requests",
        origin.requests() - before
    );
}
