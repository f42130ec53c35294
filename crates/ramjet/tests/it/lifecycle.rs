//! Timeouts, slow and vanishing clients, reload, graceful stop, access log and reopen.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ramjet_testkit::Server;

use crate::{bytes, server_with};

/// Body bytes logged on a Combined-format access-log line of a 200 response.
fn logged_bytes(line: &str) -> u64 {
    line.split("\" 200 ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The access log at `file` once it holds `needle` (it is written at least once a
/// second; polled with a deadline).
fn logged(s: &Server, file: &str, needle: &str) -> String {
    crate::poll_until(|| {
        std::fs::read_to_string(s.path(file))
            .ok()
            .filter(|l| l.contains(needle))
    })
}

#[test]
fn slowloris_does_not_starve_normal_clients() {
    let s = server_with(
        &[("ok.txt", b"ok")],
        "workers = 1\n[timeouts]\nheader = \"2s\"\n",
    );
    // Hundreds of connections that send a partial head and then stall.
    let mut idle: Vec<TcpStream> = (0..400)
        .map(|_| {
            let mut t = TcpStream::connect(s.addr).unwrap();
            t.write_all(b"GET /ok.txt HTTP/1.1\r\nHost: t\r\nX-Slow: ")
                .unwrap();
            t
        })
        .collect();
    for _ in 0..20 {
        assert_eq!(s.get("/ok.txt").text(), "ok");
    }
    // Past the header timeout each stalled connection gets 408 and is closed.
    let t = &mut idle[0];
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    t.read_to_end(&mut got).unwrap();
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    s.assert_clean_log(&[]);
}

#[test]
fn idle_keep_alive_connections_are_closed() {
    let s = server_with(&[("ok.txt", b"ok")], "[timeouts]\nkeepalive = \"300ms\"\n");
    let mut c = s.client();
    c.send(b"GET /ok.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "ok");
    let start = Instant::now();
    assert!(c.closed());
    assert!(start.elapsed() < Duration::from_secs(5));
    s.assert_clean_log(&[]);
}

#[test]
fn client_abort_mid_download_is_logged_and_harmless() {
    let big = bytes(20 * 1024 * 1024, 9);
    let s = server_with(
        &[("big.bin", &big), ("ok.txt", b"ok")],
        "[log]\naccess = \"{dir}/access.log\"\n",
    );
    for _ in 0..5 {
        let mut t = TcpStream::connect(s.addr).unwrap();
        t.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut part = vec![0u8; 100_000];
        t.read_exact(&mut part).unwrap();
        drop(t); // vanish mid-body
    }
    assert_eq!(s.get("/ok.txt").text(), "ok");
    let log = crate::poll_until(|| {
        std::fs::read_to_string(s.path("access.log"))
            .ok()
            .filter(|l| l.matches("/big.bin").count() >= 5)
    });
    let aborted: Vec<&str> = log.lines().filter(|l| l.contains("/big.bin")).collect();
    assert_eq!(aborted.len(), 5, "{log}");
    for line in aborted {
        let sent = logged_bytes(line);
        assert!(
            sent < big.len() as u64,
            "logged {sent} bytes for an aborted download"
        );
    }
    s.assert_clean_log(&[]);
}

#[test]
fn reload_under_load_without_failed_requests() {
    let mut s = server_with(&[("v.txt", b"one")], "");
    std::fs::create_dir(s.path("root2")).unwrap();
    std::fs::write(s.path("root2/v.txt"), b"two").unwrap();
    let addr = s.addr;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let bodies = seen.clone();
    let load = std::thread::spawn(move || {
        let mut failures = 0;
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            let mut c = ramjet_testkit::Client::connect(addr);
            for _ in 0..20 {
                c.send(b"GET /v.txt HTTP/1.1\r\nHost: t\r\n\r\n");
                match c.try_response(false) {
                    Some(r) if r.status == 200 => bodies.lock().unwrap().push(r.text()),
                    _ => failures += 1,
                }
            }
        }
        failures
    });
    // Answers seen so far, and whether the last one is `body`.
    let count = || seen.lock().unwrap().len();
    crate::poll_until(|| (count() > 50).then_some(()));
    s.rewrite_config("[[location]]\nroot = \"root2\"\n");
    s.signal(libc::SIGHUP);
    assert!(s.wait_for_log("configuration reloaded", Duration::from_secs(10)));
    let at = count();
    crate::poll_until(|| (count() > at + 50).then_some(()));
    // A broken config is refused; the running one stays.
    s.rewrite_config("[[location]]\nroot = \"does-not-exist\"\n");
    s.signal(libc::SIGHUP);
    assert!(s.wait_for_log("reload refused", Duration::from_secs(10)));
    let at = count();
    crate::poll_until(|| (count() > at + 50).then_some(()));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let failures = load.join().unwrap();
    assert_eq!(failures, 0);
    let seen = seen.lock().unwrap();
    assert!(seen.iter().any(|t| t == "one") && seen.last().map(String::as_str) == Some("two"));
    assert_eq!(s.get("/v.txt").text(), "two");
    s.assert_clean_log(&["reload refused"]);
    assert!(s.stop().success());
}

#[test]
fn graceful_stop_finishes_in_flight_downloads() {
    let big = bytes(8 * 1024 * 1024, 11);
    let mut s = server_with(&[("big.bin", &big)], "[timeouts]\nshutdown = \"20s\"\n");
    let mut t = TcpStream::connect(s.addr).unwrap();
    t.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut first = vec![0u8; 1000];
    t.read_exact(&mut first).unwrap();
    // An idle keep-alive connection is closed at once on stop.
    let mut idle = s.client();
    idle.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=0-0\r\n\r\n");
    assert_eq!(idle.response(false).status, 206);
    s.signal(libc::SIGTERM);
    assert!(idle.closed());
    // New connections are refused once the listeners are closed.
    crate::poll_until(|| TcpStream::connect(s.addr).is_err().then_some(()));
    let mut rest = Vec::new();
    t.read_to_end(&mut rest).unwrap();
    let all = [first, rest].concat();
    let body_at = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(
        all[body_at..] == big[..],
        "download cut short: {} bytes",
        all.len() - body_at
    );
    assert!(s.wait_exit(Duration::from_secs(30)).success());
}

#[test]
fn access_log_formats_and_reopen() {
    let s = server_with(
        &[("x.txt", b"hello")],
        "[log]\naccess = \"{dir}/access.log\"\n",
    );
    let mut c = s.client();
    c.send(b"GET /x.txt HTTP/1.1\r\nHost: t\r\nReferer: http://r/\r\nUser-Agent: t\"ester\r\nConnection: close\r\n\r\n");
    c.response(false);
    let log = logged(&s, "access.log", "/x.txt");
    assert!(log.contains("127.0.0.1 - - ["), "{log}");
    assert!(
        log.contains("] \"GET /x.txt HTTP/1.1\" 200 5 \"http://r/\" \"t\\x22ester\"\n"),
        "{log}"
    );
    // logrotate: move the file away, USR1, new lines go to a new file.
    std::fs::rename(s.path("access.log"), s.path("access.log.1")).unwrap();
    s.signal(libc::SIGUSR1);
    assert!(s.wait_for_log("access log reopened", Duration::from_secs(5)));
    s.get("/missing");
    let fresh = logged(&s, "access.log", "\"GET /missing HTTP/1.1\" 404");
    assert!(!fresh.contains("/x.txt"), "{fresh}");
    s.assert_clean_log(&[]);
}

#[test]
fn json_access_log() {
    let s = server_with(
        &[("x.txt", b"hello")],
        "[log]\naccess = \"{dir}/a.json\"\nformat = \"json\"\n",
    );
    s.get("/x.txt");
    let log = logged(&s, "a.json", "\"status\"");
    assert!(
        log.contains("\"status\":200") && log.contains("\"bytes\":5"),
        "{log}"
    );
    s.assert_clean_log(&[]);
}

#[test]
fn serve_a_directory_with_no_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "home").unwrap();
    let mut child = std::process::Command::new(crate::BIN)
        .args(["serve"])
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        std::io::BufRead::read_line(&mut err, &mut line).unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split(' ').next().unwrap().to_string();
        }
    };
    let (ok, body) = crate::curl(&[&format!("http://{addr}/")]);
    let _ = child.kill();
    let _ = child.wait();
    assert!(ok);
    assert_eq!(body, b"home");
}

#[test]
fn a_client_that_stops_reading_is_dropped_after_the_send_timeout() {
    let big = bytes(64 * 1024 * 1024, 12);
    let s = server_with(
        &[("big.bin", &big), ("ok.txt", b"ok")],
        "[timeouts]\nsend = \"1s\"\n[log]\naccess = \"{dir}/access.log\"\n",
    );
    let mut t = TcpStream::connect(s.addr).unwrap();
    t.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    // Read nothing: the socket buffers fill and stay full, and once the send timeout has
    // passed without progress the server drops the connection and logs it.
    let log = logged(&s, "access.log", "/big.bin");
    // Other clients are still served.
    assert_eq!(s.get("/ok.txt").text(), "ok");
    // What arrives is only what the kernel had buffered; then the server has closed.
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let _ = t.read_to_end(&mut got);
    assert!(
        got.len() < big.len(),
        "the whole body arrived although the client stalled"
    );
    let line = log
        .lines()
        .find(|l| l.contains("/big.bin"))
        .expect("logged");
    let sent = logged_bytes(line);
    assert!(sent < big.len() as u64, "{line}");
    s.assert_clean_log(&[]);
}

/// Issue 11: a second instance started by mistake on a port in use is refused with the
/// "address in use" error any program gets, instead of silently splitting the traffic
/// through SO_REUSEPORT; the first instance's workers still share the port.
#[test]
fn issue11_a_second_instance_on_the_same_port_is_refused() {
    let s = server_with(&[("mine.txt", b"first")], "workers = 2\n");
    let other = tempfile::tempdir().unwrap();
    let port = s.addr.port();
    for listen in [s.addr.to_string(), format!("0.0.0.0:{port}")] {
        let mut second = std::process::Command::new(crate::BIN)
            .arg("serve")
            .arg(other.path())
            .args(["--listen", &listen, "--workers", "2", "--access-log", "off"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = second.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > end {
                let _ = second.kill();
                let _ = second.wait();
                panic!("a second instance on {listen} started and kept running");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        second
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(!status.success(), "second instance on {listen}: {err}");
        assert!(
            err.contains(&format!("cannot listen on {listen}")) && err.contains("in use"),
            "{err}"
        );
    }
    // Every request still reaches the first instance, over both of its workers.
    for _ in 0..20 {
        assert_eq!(s.get("/mine.txt").text(), "first");
    }
    s.assert_clean_log(&[]);
}

/// Issue 11: a restart on the same port right after a stop that left TIME_WAIT sockets
/// behind is not taken for a second instance.
#[test]
fn issue11_restart_on_the_same_port_after_stop() {
    let mut s = server_with(&[("a.txt", b"a")], "workers = 2\n");
    for _ in 0..10 {
        assert_eq!(s.get("/a.txt").text(), "a");
    }
    let addr = s.addr;
    assert!(s.stop().success());
    let dir = Server::dir();
    std::fs::write(dir.path().join("root/a.txt"), b"again").unwrap();
    let again = Server::start(
        crate::BIN,
        dir,
        &format!("listen = [\"{addr}\"]\nworkers = 2\n"),
    );
    assert_eq!(again.get("/a.txt").text(), "again");
    again.assert_clean_log(&[]);
}

/// Issue 11: TERM ends the process within `timeouts.shutdown` plus a margin even when a
/// worker never returns to its event loop (the test-only spin path).
#[cfg(feature = "fault-injection")]
#[test]
fn issue11_term_ends_the_process_even_when_a_worker_spins() {
    let mut s = server_with(
        &[("ok.txt", b"ok")],
        "workers = 1\n[timeouts]\nshutdown = \"1s\"\n",
    );
    let mut c = s.client();
    c.send(b"GET /__ramjet_fault/spin HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(s.wait_for_log("spins forever", Duration::from_secs(10)));
    s.signal(libc::SIGTERM);
    // 1 s of grace, 1 s for the workers to flush, and a wide margin for a slow machine.
    let status = s.wait_exit(Duration::from_secs(15));
    assert!(
        !status.success(),
        "a stuck worker is reported in the exit status"
    );
    assert!(s.wait_for_log("did not stop within", Duration::from_secs(5)));
}

#[test]
fn a_long_download_gives_back_its_read_buffer_and_still_logs_and_pipelines() {
    // At 2 MiB the download is listed and its 4 KiB read buffer is shrunk to the logged
    // fields and the pipelined input; both must survive.
    let big = bytes(2 * 1024 * 1024, 11);
    let s = server_with(
        &[("big.bin", &big), ("ok.txt", b"ok")],
        "[log]\naccess = \"{dir}/access.log\"\n",
    );
    let mut c = s.client();
    c.send(
        b"GET /big.bin HTTP/1.1\r\nHost: t\r\nReferer: http://r.example/\r\nUser-Agent: mirror-tool/1.0\r\n\r\n\
          GET /ok.txt HTTP/1.1\r\nHost: t\r\nUser-Agent: second\r\n\r\n",
    );
    let r = c.response(false);
    assert_eq!(r.status, 200);
    assert!(r.body == big, "the download is intact");
    assert_eq!(c.response(false).text(), "ok");
    crate::poll_until(|| {
        let log = std::fs::read_to_string(s.path("access.log")).ok()?;
        let lines: Vec<&str> = log.lines().collect();
        (lines.len() == 2).then_some(())?;
        assert!(
            lines[0].contains(
                "\"GET /big.bin HTTP/1.1\" 200 2097152 \"http://r.example/\" \"mirror-tool/1.0\""
            ),
            "{log}"
        );
        assert!(
            lines[1].contains("\"GET /ok.txt HTTP/1.1\" 200 2 \"-\" \"second\""),
            "{log}"
        );
        Some(())
    });
    s.assert_clean_log(&[]);
}

/// A free loopback port (bound and released: good enough for a test on loopback).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn processes_share_the_port_and_take_signals_from_their_parent() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "a").unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut parent = std::process::Command::new(crate::BIN)
        .arg("serve")
        .arg(dir.path())
        .args(["--listen", &listen, "--processes", "3", "--workers", "1"])
        .args(["--access-log", "off", "--pid-file"])
        .arg(dir.path().join("ramjet.pid"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = parent.stderr.take().unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            sink.lock().unwrap().push(l);
        }
    });
    let count = |needle: &str| {
        lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    };
    crate::poll_until(|| (count("listening on") == 3).then_some(()));
    let children: Vec<u32> = std::fs::read_to_string(format!(
        "/proc/{}/task/{}/children",
        parent.id(),
        parent.id()
    ))
    .unwrap()
    .split_whitespace()
    .map(|p| p.parse().unwrap())
    .collect();
    assert_eq!(children.len(), 3);
    // The pid file names the parent, which passes signals on (logrotate's USR1 reaches
    // every process through it, and nothing else named ramjet).
    let pid_file = dir.path().join("ramjet.pid");
    let named = crate::poll_until(|| std::fs::read_to_string(&pid_file).ok());
    assert_eq!(named, format!("{}\n", parent.id()));
    for _ in 0..20 {
        let (ok, body) = crate::curl(&[&format!("http://{listen}/a.txt")]);
        assert!(ok);
        assert_eq!(body, b"a");
    }
    // Another instance on the same port is still refused.
    let second = std::process::Command::new(crate::BIN)
        .arg("serve")
        .arg(dir.path())
        .args(["--listen", &listen, "--access-log", "off"])
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("another process is listening there"));
    // HUP to the parent reloads every process; TERM stops them all.
    let kill = |sig: &str, pid: u32| {
        assert!(std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success());
    };
    kill("-HUP", parent.id());
    crate::poll_until(|| (count("configuration reloaded") == 3).then_some(()));
    kill("-TERM", parent.id());
    let end = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = parent.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < end, "the parent did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    assert!(!pid_file.exists(), "the pid file outlived the server");
    for c in children {
        assert!(
            !std::path::Path::new(&format!("/proc/{c}")).exists()
                || std::fs::read_to_string(format!("/proc/{c}/stat"))
                    .map_or(true, |s| s.contains(") Z ")),
            "process {c} still runs"
        );
    }
    // A port of 0 cannot be shared.
    let zero = std::process::Command::new(crate::BIN)
        .arg("serve")
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0", "--processes", "2"])
        .output()
        .unwrap();
    assert!(!zero.status.success());
    assert!(String::from_utf8_lossy(&zero.stderr).contains("fixed ports"));
}

/// Listeners defer accepting until a connection's first bytes arrive (TCP_DEFER_ACCEPT);
/// a client that connects and sends nothing must still be dealt with: accepted after the
/// deferral, then closed by the header timeout, not left open for ever.
#[test]
fn a_connection_that_sends_nothing_is_still_closed() {
    let s = server_with(&[("a.txt", b"a")], "[timeouts]\nheader = \"1s\"\n");
    let mut silent = TcpStream::connect(s.addr).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 256];
    // EOF (or a reset) within the deferral plus the header timeout, generously bounded.
    match silent.read(&mut buf) {
        Ok(n) => assert!(n == 0 || String::from_utf8_lossy(&buf[..n]).contains("408")),
        Err(e) => assert_ne!(
            e.kind(),
            std::io::ErrorKind::WouldBlock,
            "still open after 30 s"
        ),
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    // Meanwhile and after, others are served at once.
    assert_eq!(s.get("/a.txt").text(), "a");
    s.assert_clean_log(&[]);
}
