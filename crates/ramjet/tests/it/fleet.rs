//! What one node of a caching fleet needs (issue 26): a health check that says "draining"
//! through a graceful stop while the node still serves, `Cache-Status` naming the node, and
//! `max_conns`, which holds a cold node to a few origin requests at a time across workers.
//! The fleet itself (HAProxy, three nodes, an origin, network namespaces) is run by
//! `bench/fleet.py`; `fleet_in_namespaces` runs it in its check mode.

use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ramjet_testkit::{Backend, Flow, Server};

use crate::server_with;

fn get(s: &Server, path: &str) -> ramjet_testkit::Response {
    let mut c = s.client();
    c.send(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
    c.response(false)
}

/// TERM with `timeouts.drain`: the health check answers 503 at once while every other
/// request (on new connections too) is still served; the process stops after the drain.
#[test]
fn the_health_check_says_draining_while_the_node_still_serves() {
    let mut s = server_with(
        &[("f.txt", b"file\n")],
        "[timeouts]\ndrain = \"3s\"\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/health\"\nhandlers = [\"health\"]\n\
         [[location]]\npath = \"/metrics\"\nhandlers = [\"metrics\"]\n",
    );
    let ok = get(&s, "/health");
    assert_eq!((ok.status, ok.text().as_str()), (200, "ok\n"));
    assert_eq!(ok.header("cache-control").as_deref(), Some("no-store"));
    assert!(get(&s, "/metrics").text().contains("ramjet_draining 0\n"));
    s.signal(libc::SIGTERM);
    let draining = crate::poll_until(|| {
        let r = get(&s, "/health");
        (r.status == 503).then_some(r)
    });
    assert_eq!(draining.text(), "draining\n");
    assert!(get(&s, "/metrics").text().contains("ramjet_draining 1\n"));
    assert_eq!(
        get(&s, "/f.txt").text(),
        "file\n",
        "still serving while draining"
    );
    assert!(s.wait_exit(Duration::from_secs(20)).success());
    assert!(TcpStream::connect(s.addr).is_err());
}

/// Without `timeouts.drain` a stop is immediate, as before (no 503 window).
#[test]
fn without_a_drain_time_the_stop_is_at_once() {
    let mut s = server_with(
        &[],
        "[[location]]\npath = \"/health\"\nhandlers = [\"health\"]\n",
    );
    assert_eq!(get(&s, "/health").status, 200);
    let mut post = s.client();
    post.send(b"POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(post.response(false).status, 405);
    s.signal(libc::SIGTERM);
    crate::poll_until(|| TcpStream::connect(s.addr).is_err().then_some(()));
    assert!(s.wait_exit(Duration::from_secs(20)).success());
}

/// `identity` names the node in `Cache-Status` (a balancer's client sees who answered).
#[test]
fn cache_status_names_the_node() {
    let origin = Backend::start(|ex| {
        ex.write(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 2\r\n\r\nhi");
        Flow::Keep
    });
    let s = server_with(
        &[],
        &format!(
            "[upstream.o]\nservers = [\"{}\"]\n[cache.c]\nidentity = \"node-b\"\n\
             [[location]]\nproxy = \"o\"\ncache = \"c\"\n",
            origin.addr
        ),
    );
    let first = get(&s, "/x");
    assert_eq!(
        first.header("cache-status").as_deref(),
        Some("node-b; fwd=miss; stored")
    );
    assert_eq!(
        get(&s, "/x").header("cache-status").as_deref(),
        Some("node-b; hit")
    );
}

/// An identity that is not an RFC 8941 token is refused with file, line and key.
#[test]
fn a_bad_identity_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[cache.c]\nidentity = \"node a\"\n").unwrap();
    let out = std::process::Command::new(crate::BIN)
        .arg("check-config")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:2: key `cache.c.identity`", bad.display())),
        "{err}"
    );
}

/// A backend that counts the requests it is answering at once, each taking `hold`.
fn counting(hold: Duration) -> (Backend, Arc<AtomicUsize>) {
    let now = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (n, m) = (now.clone(), most.clone());
    let origin = Backend::start(move |ex| {
        let in_progress = n.fetch_add(1, Ordering::SeqCst) + 1;
        m.fetch_max(in_progress, Ordering::SeqCst);
        std::thread::sleep(hold);
        n.fetch_sub(1, Ordering::SeqCst);
        ex.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        Flow::Keep
    });
    (origin, most)
}

/// Twelve clients at once on two workers reach the origin two at a time (`max_conns`
/// counts across workers); every one of them is answered.
#[test]
fn max_conns_holds_the_origin_to_its_limit_across_workers() {
    let (origin, most) = counting(Duration::from_millis(150));
    let s = server_with(
        &[],
        &format!(
            "workers = 2\n[upstream.o]\nservers = [\"{}\"]\nmax_conns = 2\n\
             [[location]]\nproxy = \"o\"\n",
            origin.addr
        ),
    );
    let addr = s.addr;
    let clients: Vec<_> = (0..12)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = ramjet_testkit::Client::connect(addr);
                c.send(format!("GET /{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
                c.response(false).status
            })
        })
        .collect();
    for c in clients {
        assert_eq!(c.join().unwrap(), 200);
    }
    assert_eq!(origin.requests(), 12);
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 2, "{most} requests at once at the origin");
}

/// A request that waits longer than `queue_timeout` for its turn gets 504 (and the origin
/// never sees it).
#[test]
fn a_request_past_the_queue_timeout_gets_504() {
    let (origin, _) = counting(Duration::from_secs(3));
    let s = server_with(
        &[],
        &format!(
            "[upstream.o]\nservers = [\"{}\"]\nmax_conns = 1\nqueue_timeout = \"500ms\"\n\
             [[location]]\nproxy = \"o\"\n",
            origin.addr
        ),
    );
    let addr = s.addr;
    let first = std::thread::spawn(move || {
        let mut c = ramjet_testkit::Client::connect(addr);
        c.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
        c.response(false).status
    });
    crate::poll_until(|| (origin.requests() == 1).then_some(()));
    assert_eq!(get(&s, "/queued").status, 504);
    assert_eq!(first.join().unwrap(), 200);
    assert_eq!(origin.requests(), 1);
    assert!(s.wait_for_log("max_conns", Duration::from_secs(5)));
}

/// The fleet of issue 26 on this machine, in network namespaces `bench/fleet.py` creates:
/// HAProxy (consistent hashing of the URI, PROXY v2, health checks) in front of three
/// ramjet nodes with disk caches, an origin, and a client driving a Zipf load over more
/// objects than one node holds. Shorter phases than the benchmark's; the same checks.
#[test]
fn fleet_in_namespaces() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/fleet.py");
    let out = std::process::Command::new("python3")
        .args([script, "--check", "--bin", crate::BIN])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "bench/fleet.py --check failed (it needs root, ip netns and haproxy):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let (steady, kill, join, down) = (&r["steady"], &r["kill"], &r["join"], &r["origin_down"]);
    let drain = &r["drain"];
    // Every object the clients asked for came from the origin once, however many asked.
    let ratio = steady["origin_ratio"].as_f64().unwrap();
    assert!(
        (0.99..=1.01).contains(&ratio),
        "origin bytes {ratio}x: {steady}"
    );
    assert!(steady["objects"].as_u64().unwrap() > 0);
    for phase in [steady, kill, drain, join, down] {
        assert!(phase["requests"].as_u64().unwrap() > 0, "{phase}");
        assert_eq!(phase["errors"], 0, "client errors: {phase}");
    }
    // kill -9 and a restart: only the victim's objects were fetched again (by the nodes
    // that took its keys while it was down), and its disk tier kept what it held.
    assert_eq!(kill["refetched_others"], serde_json::json!([]), "{kill}");
    assert!(kill["victim_held"].as_u64().unwrap() > 0, "{kill}");
    assert_eq!(kill["victim_fetched_again_after_restart"], 0, "{kill}");
    // TERM: the node's health check said 503 (draining) and HAProxy took it out on that,
    // before its listeners closed; it stopped cleanly.
    assert_eq!(drain["exit_status"], 0, "{drain}");
    let saw = drain["haproxy_saw"][0].as_str().unwrap_or("");
    assert!(
        saw.contains("code: 503"),
        "HAProxy took the node out for: {saw}"
    );
    // The origin down past the objects' max-age: they are served stale (stale-if-error).
    assert!(down["stale"].as_u64().unwrap() > 0, "{down}");
    // A fourth node takes about a quarter of the objects, and only objects going to it move.
    let share = join["moved_share"].as_f64().unwrap();
    assert!((0.15..=0.40).contains(&share), "{join}");
    assert_eq!(join["moved"], join["moved_to_new"], "{join}");
}
