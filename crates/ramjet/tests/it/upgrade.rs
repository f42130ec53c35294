//! USR2: the running process starts the binary again on its listeners, hands it every
//! connection once idle, and exits; clients notice nothing.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ramjet_testkit::Server;

use crate::{bytes, BIN};

/// The ramjet processes serving `config` (the new one is not the test's child).
fn serving(config: &std::path::Path) -> Vec<u32> {
    let needle = config.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                String::from_utf8_lossy(&c).contains(&needle)
                    && String::from_utf8_lossy(&c).contains("serve")
            })
        })
        .collect()
}

/// Kills the processes serving a config when the test ends, however it ends.
struct Reaper(std::path::PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in serving(&self.0) {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
}

fn start_bench(s: &Server, extra: &[&str]) -> Child {
    Command::new(BIN)
        .arg("bench")
        .args(["-c", "16", "-d", "4s"])
        .args(extra)
        .arg(s.url("/4k.bin"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn requests_served(s: &Server) -> u64 {
    let (ok, out) = crate::curl(&[&s.url("/metrics")]);
    assert!(ok);
    // Summed over its labels (host, location, class).
    String::from_utf8_lossy(&out)
        .lines()
        .filter(|l| l.starts_with("ramjet_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn an_upgrade_under_load_fails_no_request_and_moves_idle_connections() {
    let dir = Server::dir();
    std::fs::write(dir.path().join("root/4k.bin"), bytes(4096, 7)).unwrap();
    std::fs::write(dir.path().join("root/big.bin"), bytes(1 << 20, 8)).unwrap();
    let mut s = Server::start(
        BIN,
        dir,
        "workers = 2\n[log]\naccess = \"off\"\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/metrics\"\nhandlers = [\"metrics\"]\n",
    );
    let _reaper = Reaper(s.config_path.clone());
    let old = s.pid();
    // An idle keep-alive connection, and one with half a request head in it.
    let mut idle = s.client();
    idle.send(b"GET /4k.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(idle.response(false).body, bytes(4096, 7));
    let mut half = s.client();
    half.send(b"GET /4k.bin HTTP/1.1\r\nHo");
    // A download in progress (curl at 400 KB/s): it finishes in the old process. Its
    // output is read as it comes: a curl stalled on a full pipe would stop reading the
    // socket, and (with the short unsent queue a paced loopback client gets) the old
    // process would wait on it for the rest of the body.
    let mut download = Command::new("curl")
        .args(["-s", "--limit-rate", "400k"])
        .arg(s.url("/big.bin"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut downloaded = download.stdout.take().unwrap();
    let downloaded = std::thread::spawn(move || {
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut downloaded, &mut got).unwrap();
        got
    });
    // Load: keep-alive connections and a new connection per request.
    let keepalive = start_bench(&s, &[]);
    let fresh = start_bench(&s, &["--no-keepalive"]);
    crate::poll_until(|| (requests_served(&s) > 2000).then_some(()));

    s.signal(libc::SIGUSR2);
    assert!(s.wait_for_log("serves; handing connections over", Duration::from_secs(30)));
    // The old process ends once its connections are handed over (the half-read request
    // keeps one busy: it is answered by the old process first).
    half.send(b"st: t\r\n\r\n");
    assert_eq!(half.response(false).body, bytes(4096, 7));
    crate::poll_until(|| s.exited());
    assert!(s.wait_for_log("every connection handed over", Duration::from_secs(10)));

    // Both connections live on in the new process.
    for c in [&mut idle, &mut half] {
        c.send(b"GET /4k.bin HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(c.response(false).body, bytes(4096, 7));
    }
    let now = serving(&s.config_path);
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now[0], old);

    for (name, bench) in [("keep-alive", keepalive), ("new connections", fresh)] {
        let out = bench.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{name}: {text}");
        assert!(
            text.contains(
                "Errors: connect 0, timeout 0, reset 0, status 0, short body 0, invalid 0"
            ),
            "{name}: {text}"
        );
    }
    assert!(download.wait().unwrap().success());
    assert!(
        downloaded.join().unwrap() == bytes(1 << 20, 8),
        "the download was cut"
    );
    s.assert_clean_log(&[]);
}

#[test]
fn a_new_binary_that_fails_to_start_leaves_the_old_one_serving() {
    let dir = Server::dir();
    std::fs::write(dir.path().join("root/a.txt"), "still here").unwrap();
    let mut s = Server::start(BIN, dir, "[log]\naccess = \"off\"\n");
    let _reaper = Reaper(s.config_path.clone());
    let mut c = s.client();
    c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "still here");
    // The new process reads the same configuration, which is broken now.
    std::fs::write(&s.config_path, "listen = [\n").unwrap();
    s.signal(libc::SIGUSR2);
    assert!(s.wait_for_log(
        "upgrade failed; this process goes on serving",
        Duration::from_secs(30)
    ));
    assert!(s.exited().is_none());
    c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "still here");
    assert_eq!(s.get("/a.txt").text(), "still here");
    assert_eq!(serving(&s.config_path), vec![s.pid()]);
}

#[test]
fn an_upgrade_sends_http2_connections_goaway_and_finishes_their_streams() {
    let dir = Server::dir();
    std::fs::write(dir.path().join("root/big.bin"), bytes(1 << 20, 9)).unwrap();
    let mut s = Server::start(
        BIN,
        dir,
        "workers = 1\n[log]\naccess = \"off\"\n[[location]]\nroot = \"root\"\n",
    );
    let _reaper = Reaper(s.config_path.clone());
    let old = s.pid();
    // An idle HTTP/2 connection (raw frames), and an HTTP/2 download in progress.
    let mut idle = crate::http2::Raw::open(s.addr);
    let got = s.path("got.bin");
    let download = Command::new("curl")
        .args([
            "-s",
            "--http2-prior-knowledge",
            "--limit-rate",
            "400k",
            "-o",
        ])
        .arg(&got)
        .arg(s.url("/big.bin"))
        .spawn()
        .unwrap();
    crate::poll_until(|| {
        std::fs::metadata(&got)
            .ok()
            .filter(|m| m.len() > 0)
            .map(|_| ())
    });
    s.signal(libc::SIGUSR2);
    // The idle connection is told to go away.
    let goaway = idle.goaway();
    assert_eq!(goaway, Some(0), "GOAWAY with NO_ERROR");
    // The download finishes whole in the old process, which then exits.
    let out = download.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(
        std::fs::read(&got).unwrap() == bytes(1 << 20, 9),
        "the download was cut"
    );
    crate::poll_until(|| s.exited());
    // The new process serves HTTP/2.
    let (ok, body) = crate::curl(&["--http2-prior-knowledge", &s.url("/big.bin")]);
    assert!(ok && body == bytes(1 << 20, 9));
    let now = serving(&s.config_path);
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now[0], old);
    s.assert_clean_log(&[]);
}
