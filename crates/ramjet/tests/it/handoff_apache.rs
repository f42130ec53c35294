//! Connections handed to a stock Apache 2.4 (Debian's `apache2`, event MPM) through
//! `integrations/apache/mod_ramjet_handoff.c`, which the test builds with `apxs`
//! (`apache2-dev`; `.ci/run` installs both). Apache then serves them with its own modules:
//! static files and a CGI script that reports what it was given.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ramjet_testkit::{Client, Server};

use crate::proxy_real::{free_port, running_as_root, terminate, wait_listening};

/// The module, built once per test run from the source in the tree.
fn module() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build_module("apache-module", &[]))
}

/// The module built with a pause of 400 ms between taking a message of several
/// connections and passing the rest of it on (`RAMJET_HANDOFF_TEST_PAUSE_MS`), which it
/// logs, for a signal to land in.
fn module_with_pause() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        build_module(
            "apache-module-pause",
            &["-Wc,-DRAMJET_HANDOFF_TEST_PAUSE_MS=400"],
        )
    })
}

/// `apxs -c` of the module's source in a directory of its own, with `flags`.
fn build_module(dir: &str, flags: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../integrations/apache/mod_ramjet_handoff.c");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(dir);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&src, dir.join("mod_ramjet_handoff.c")).unwrap();
    let out = Command::new("apxs")
        .args(["-c", "-Wc,-Wall", "-Wc,-Werror"])
        .args(flags)
        .arg("mod_ramjet_handoff.c")
        .current_dir(&dir)
        .output()
        .expect("apxs (apt-get install apache2-dev; .ci/run does it)");
    assert!(
        out.status.success(),
        "apxs failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join(".libs/mod_ramjet_handoff.so")
}

/// Apache with the module, receiving at `socket`, stopped on drop.
struct Apache {
    child: Option<Child>,
    socket: PathBuf,
    dir: tempfile::TempDir,
}

impl Apache {
    /// Apache with this MPM ("event" or "prefork").
    fn start(mpm: &str) -> Apache {
        Apache::start_with(mpm, module())
    }

    /// Apache with this MPM and this build of the module.
    fn start_with(mpm: &str, module: &Path) -> Apache {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["htdocs", "cgi-bin"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        std::fs::write(d.join("htdocs/page.html"), "<h1>apache page</h1>\n").unwrap();
        let cgi = d.join("cgi-bin/env.sh");
        std::fs::write(
            &cgi,
            "#!/bin/sh\nt=$(mktemp)\nhead -c \"${CONTENT_LENGTH:-0}\" > \"$t\"\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\necho \"addr=$REMOTE_ADDR port=$REMOTE_PORT method=$REQUEST_METHOD uri=$REQUEST_URI body=$(cat \"$t\")\"\nrm -f \"$t\"\n",
        )
        .unwrap();
        for p in [d.to_path_buf(), d.join("htdocs"), d.join("cgi-bin"), cgi] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::set_permissions(
            d.join("htdocs/page.html"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let port = free_port();
        let socket = d.join("handoff.sock");
        let m = "/usr/lib/apache2/modules";
        let user = if running_as_root() {
            "User www-data\nGroup www-data\n"
        } else {
            ""
        };
        let conf = d.join("httpd.conf");
        std::fs::write(
            &conf,
            format!(
                "ServerRoot \"{d}\"\nListen 127.0.0.1:{port}\nServerName localhost\n{user}PidFile {d}/httpd.pid\nErrorLog {d}/error.log\nLogLevel warn ramjet_handoff:info\n\
LoadModule mpm_{mpm}_module {m}/mod_mpm_{mpm}.so\nLoadModule authz_core_module {m}/mod_authz_core.so\n\
LoadModule mime_module {m}/mod_mime.so\nLoadModule alias_module {m}/mod_alias.so\nLoadModule cgid_module {m}/mod_cgid.so\n\
LoadModule ramjet_handoff_module {module}\nRamjetHandoffSocket {socket}\nScriptSock {d}/cgid.sock\n\
CustomLog {d}/access.log \"%a %r %>s\"\n\
TypesConfig /etc/mime.types\nDocumentRoot \"{d}/htdocs\"\n<Directory \"{d}\">\n  Require all granted\n</Directory>\n\
ScriptAlias /app/cgi-bin/ \"{d}/cgi-bin/\"\nAlias /app/ \"{d}/htdocs/\"\nKeepAlive On\n\
{limits}",
                d = d.display(),
                module = module.display(),
                socket = socket.display(),
                limits = if mpm == "event" {
                    "StartServers 2\nServerLimit 4\nThreadsPerChild 25\nMaxRequestWorkers 100\nMinSpareThreads 25\nMaxSpareThreads 100\n"
                } else {
                    "StartServers 4\nMinSpareServers 4\nMaxSpareServers 16\nMaxRequestWorkers 32\n"
                },
            ),
        )
        .unwrap();
        let log = d.join("error.log");
        let mut child = Command::new("/usr/sbin/apache2")
            .args(["-f"])
            .arg(&conf)
            .arg("-DFOREGROUND")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start apache");
        wait_listening(port, &mut child, &log);
        crate::poll_until(|| socket.exists().then_some(()));
        let apache = Apache {
            child: Some(child),
            socket,
            dir,
        };
        // The listener and the socket exist before the MPM installs its signal handlers; a
        // signal sent before the log says so would kill Apache outright.
        apache.wait_generation(1);
        apache
    }

    /// The parent's pid.
    fn pid(&self) -> String {
        self.child.as_ref().expect("running").id().to_string()
    }

    /// Wait until the log shows generation `n` started ("resuming normal operations" once
    /// at the start and once after each restart).
    fn wait_generation(&self, n: usize) {
        crate::poll_until(|| {
            (self
                .error_log()
                .matches("resuming normal operations")
                .count()
                == n)
                .then_some(())
        });
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&mut child);
        }
    }
}

impl Drop for Apache {
    fn drop(&mut self) {
        self.stop();
    }
}

/// ramjet on 127.0.0.1 and ::1 (same port), and on a PROXY protocol listener, handing
/// `/app/` to Apache.
fn ramjet(apache: &Apache) -> (Server, u16) {
    let (port, proxied) = (free_port(), free_port());
    let dir = Server::dir();
    std::fs::write(dir.path().join("root/static.txt"), "from ramjet").unwrap();
    let s = Server::start(
        crate::BIN,
        dir,
        &format!(
            "listen = [\"127.0.0.1:{port}\", \"[::1]:{port}\", {{ address = \"127.0.0.1:{proxied}\", proxy_protocol = true }}]\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/app/\"\nhandoff = \"{}\"\n",
            apache.socket.display()
        ),
    );
    (s, proxied)
}

#[test]
fn apache_serves_connections_ramjet_hands_it() {
    let mut apache = Apache::start("event");
    let (s, proxied) = ramjet(&apache);

    // curl: a file and a CGI script with a body, with the client's own address.
    let (ok, out) = crate::curl(&["-i", &s.url("/app/page.html")]);
    let out = String::from_utf8_lossy(&out).into_owned();
    assert!(ok, "{out}");
    assert!(out.contains("Server: Apache"), "{out}");
    assert!(out.ends_with("<h1>apache page</h1>\n"), "{out}");
    let (ok, out) = crate::curl(&["-d", "hello", &s.url("/app/cgi-bin/env.sh?q=1")]);
    assert!(ok);
    let out = String::from_utf8_lossy(&out).into_owned();
    assert!(out.starts_with("addr=127.0.0.1 port="), "{out}");
    assert!(
        out.ends_with("method=POST uri=/app/cgi-bin/env.sh?q=1 body=hello\n"),
        "{out}"
    );

    // A head in two packets and a body partly sent with it: Apache reads the rest from
    // the socket after the prefix (however ramjet's reads split the segments, the first
    // half is in the prefix or still in the socket). Keep-alive then goes on with Apache.
    let mut c = Client::connect(s.addr);
    c.stream.set_nodelay(true).unwrap();
    let me = c.stream.local_addr().unwrap();
    c.send(b"POST /app/cgi-bin/env.sh HTTP/1.1\r\nHo");
    c.send(b"st: t\r\nContent-Length: 10\r\n\r\n12345");
    c.send(b"67890");
    let r = c.response(false);
    assert_eq!(
        r.text(),
        format!(
            "addr=127.0.0.1 port={} method=POST uri=/app/cgi-bin/env.sh body=1234567890\n",
            me.port()
        )
    );
    c.send(b"GET /app/page.html HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.text(), "<h1>apache page</h1>\n");
    assert!(r.header("Server").unwrap().starts_with("Apache"));

    // Pipelined in one write: ramjet answers the first, Apache the two after it.
    let mut c = Client::connect(s.addr);
    c.send(b"GET /static.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /app/cgi-bin/env.sh?two HTTP/1.1\r\nHost: t\r\n\r\nGET /app/page.html HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "from ramjet");
    assert!(c
        .response(false)
        .text()
        .ends_with("method=GET uri=/app/cgi-bin/env.sh?two body=\n"));
    assert_eq!(c.response(false).text(), "<h1>apache page</h1>\n");

    // IPv6.
    let (ok, out) = crate::curl(&[
        "-g",
        &format!("http://[::1]:{}/app/cgi-bin/env.sh?v6", s.addr.port()),
    ]);
    assert!(ok);
    let out = String::from_utf8_lossy(&out).into_owned();
    assert!(out.starts_with("addr=::1 port="), "{out}");

    // Behind a PROXY protocol header, Apache sees the client the header named.
    let mut c = Client::connect(std::net::SocketAddr::from(([127, 0, 0, 1], proxied)));
    c.send(b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\nGET /app/cgi-bin/env.sh?proxied HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(
        c.response(false).text(),
        "addr=203.0.113.7 port=5555 method=GET uri=/app/cgi-bin/env.sh?proxied body=\n"
    );

    // ab, many new connections at once: every one answered by Apache.
    let out = Command::new("ab")
        .args(["-q", "-n", "2000", "-c", "20"])
        .arg(s.url("/app/page.html"))
        .output()
        .expect("ab (apache2-utils)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Complete requests:      2000"), "{text}");
    assert!(text.contains("Failed requests:        0"), "{text}");
    assert!(!text.contains("Non-2xx"), "{text}");
    assert!(
        !apache.error_log().contains("malformed"),
        "{}",
        apache.error_log()
    );

    // Apache stopped: its socket is gone, and the client gets ramjet's 503 at once.
    apache.stop();
    let started = Instant::now();
    let r = s.get("/app/page.html");
    assert_eq!(r.status, 503);
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// prefork (one connection per process, what mod_php needs): the children take turns on
/// the shared socket, each taking one connection of a message and passing the rest on.
#[test]
fn apache_prefork_serves_handed_connections_one_per_child() {
    let apache = Apache::start("prefork");
    let (s, _) = ramjet(&apache);
    let (ok, out) = crate::curl(&["-d", "hello", &s.url("/app/cgi-bin/env.sh?q=1")]);
    assert!(ok);
    let out = String::from_utf8_lossy(&out).into_owned();
    assert!(
        out.starts_with("addr=127.0.0.1 port=")
            && out.ends_with("method=POST uri=/app/cgi-bin/env.sh?q=1 body=hello\n"),
        "{out}"
    );
    let mut c = Client::connect(s.addr);
    c.send(b"GET /static.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /app/page.html HTTP/1.1\r\nHost: t\r\n\r\nGET /app/page.html HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "from ramjet");
    assert_eq!(c.response(false).text(), "<h1>apache page</h1>\n");
    assert_eq!(c.response(false).text(), "<h1>apache page</h1>\n");
    // Bursts of new connections arrive in batches: each batch is spread over children.
    let out = Command::new("ab")
        .args(["-q", "-n", "1000", "-c", "16"])
        .arg(s.url("/app/page.html"))
        .output()
        .expect("ab (apache2-utils)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("Complete requests:      1000"), "{text}");
    assert!(text.contains("Failed requests:        0"), "{text}");
    assert!(!text.contains("Non-2xx"), "{text}");
    let log = apache.error_log();
    assert!(
        !log.contains("AH02179") && !log.contains("malformed"),
        "{log}"
    );
}

/// What a loop of new connections through the hand-off saw: answered 200, answered
/// something else, and not answered at all (closed or reset before a whole response).
#[derive(Debug, Default)]
struct Tally {
    ok: usize,
    other: Vec<String>,
    unanswered: usize,
}

/// New connections, one request each, until `stop`; each must get Apache's page.
fn connection_loop(
    addr: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    done: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> Tally {
    use std::io::{Read, Write};
    let mut t = Tally::default();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let Ok(mut c) = std::net::TcpStream::connect(addr) else {
            t.unanswered += 1;
            continue;
        };
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let _ = c.write_all(b"GET /app/page.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        let text = String::from_utf8_lossy(&got);
        if text.starts_with("HTTP/1.1 200") && text.ends_with("<h1>apache page</h1>\n") {
            t.ok += 1;
        } else if text.starts_with("HTTP/") {
            t.other.push(text.into_owned());
        } else {
            t.unanswered += 1;
        }
        done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    t
}

/// `kill SIGNAL PID...`, which must succeed.
fn kill(signal: &str, pids: &[String]) {
    assert!(Command::new("kill")
        .arg(signal)
        .args(pids)
        .status()
        .unwrap()
        .success());
}

/// Run a loop of new connections at `target` (4 threads) through `signals` sent to
/// Apache's parent, each followed by 200 more answers; what they saw.
fn through_restarts(apache: &Apache, target: std::net::SocketAddr, signals: &[&str]) -> Tally {
    let pid = apache.pid();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let loops: Vec<_> = (0..4)
        .map(|_| {
            let (stop, done) = (stop.clone(), done.clone());
            std::thread::spawn(move || connection_loop(target, stop, done))
        })
        .collect();
    let after = |n: usize| {
        let at = done.load(std::sync::atomic::Ordering::Relaxed);
        crate::poll_until(|| {
            (done.load(std::sync::atomic::Ordering::Relaxed) >= at + n).then_some(())
        });
    };
    after(100);
    for signal in signals {
        kill(signal, std::slice::from_ref(&pid));
        // The loop goes on through the restart and well past it.
        after(200);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut all = Tally::default();
    for l in loops {
        let t = l.join().unwrap();
        all.ok += t.ok;
        all.other.extend(t.other);
        all.unanswered += t.unanswered;
    }
    all
}

/// Apache restarted gracefully under a loop of new connections through the hand-off
/// (`apache2ctl graceful`, USR1: what logrotate's daily reload does), with the event and
/// the prefork MPM: every connection is answered by Apache. The module keeps its socket
/// across restarts and passes what its stopping children had queued back to it, and
/// ramjet waits for a backend that is not there (up to `timeouts.handoff`) instead of
/// answering 503. Before, 124-293 clients per run got ramjet's 503 and some none at all.
#[test]
fn apache_graceful_restarts_lose_no_handed_off_connection() {
    for mpm in ["event", "prefork"] {
        let apache = Apache::start(mpm);
        let (s, _) = ramjet(&apache);
        let t = through_restarts(&apache, s.addr, &["-USR1", "-USR1", "-USR1"]);
        let log = apache.error_log();
        assert!(
            t.other.is_empty() && t.unanswered == 0,
            "{mpm}: {} answered, {} other {:?}, {} unanswered\n{log}",
            t.ok,
            t.other.len(),
            t.other.iter().take(3).collect::<Vec<_>>(),
            t.unanswered
        );
        assert_eq!(
            log.matches("resuming normal operations").count(),
            4,
            "{log}"
        );
    }
}

/// prefork and worker close a child's listeners from the graceful-restart signal's
/// handler. A child that took a message of several connections and is signalled before it
/// has passed the rest on must still pass them on: before, the listener's descriptor it
/// passed them through was closed by then, and each of them got the module's 503. The
/// module is built with a pause in that window; the signal is sent while a child is in it.
#[test]
fn a_prefork_child_signalled_while_it_holds_connections_passes_them_on() {
    use std::io::{Read, Write};
    let apache = Apache::start_with("prefork", module_with_pause());
    let (s, _) = ramjet(&apache);
    let paused = |log: &str| log.matches("test pause with").count();
    let mut clients = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    // Rounds of 8 connections whose requests come at once, until ramjet hands a child a
    // message of more than one: that child logs its pause, and Apache is then restarted.
    loop {
        assert!(
            Instant::now() < deadline,
            "no child took a message of several connections"
        );
        let before = paused(&apache.error_log());
        let round: Vec<_> = (0..8)
            .map(|_| std::net::TcpStream::connect(s.addr).unwrap())
            .collect();
        for mut c in &round {
            c.write_all(b"GET /app/page.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                .unwrap();
        }
        clients.extend(round);
        let round_end = Instant::now() + Duration::from_millis(300);
        while Instant::now() < round_end && paused(&apache.error_log()) == before {
            std::thread::sleep(Duration::from_millis(5));
        }
        if paused(&apache.error_log()) > before {
            break;
        }
    }
    kill("-USR1", &[apache.pid()]);
    let mut answers = Vec::new();
    for mut c in clients {
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        answers.push(String::from_utf8_lossy(&got).into_owned());
    }
    let log = apache.error_log();
    let bad: Vec<_> = answers
        .iter()
        .filter(|a| !(a.starts_with("HTTP/1.1 200") && a.ends_with("<h1>apache page</h1>\n")))
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {} not Apache's page: {:?}\n{log}",
        bad.len(),
        answers.len(),
        bad.iter().take(3).collect::<Vec<_>>()
    );
    // The restart completes (the clients' answers may come before its log line).
    apache.wait_generation(2);
}

/// Apache stopped, with or without a graceful restart before, exits cleanly and takes the
/// socket's path with it. Before, the module registered a cleanup of the process pool that
/// pointed into its own code, which httpd had unloaded by then: the parent died of SIGSEGV
/// at every stop, the path stayed, and connections still queued got no 503.
#[test]
fn apache_stops_cleanly_and_removes_its_socket_with_or_without_a_restart() {
    for (mpm, restarts) in [("event", 0), ("prefork", 0), ("event", 1), ("prefork", 1)] {
        let mut apache = Apache::start(mpm);
        let pid = apache.pid();
        for n in 0..restarts {
            kill("-USR1", std::slice::from_ref(&pid));
            apache.wait_generation(2 + n);
        }
        let mut child = apache.child.take().unwrap();
        kill("-TERM", &[pid]);
        let status = crate::poll_until(|| child.try_wait().unwrap());
        let log = apache.error_log();
        assert!(
            status.success(),
            "{mpm}, {restarts} restart(s): {status:?}\n{log}"
        );
        assert!(
            !apache.socket.exists(),
            "{mpm}, {restarts} restart(s): the socket's path stayed\n{log}"
        );
    }
}

/// A connection still queued in the socket when Apache stops gets a 503 from the parent on
/// its way out, not a silent close. Apache's children are stopped (SIGSTOP) so that none
/// takes it, then killed once the parent has been told to stop.
#[test]
fn a_connection_queued_when_apache_stops_gets_a_503() {
    use std::io::{Read, Write};
    for mpm in ["event", "prefork"] {
        let mut apache = Apache::start(mpm);
        let (s, _) = ramjet(&apache);
        let pid = apache.pid();
        let out = Command::new("pgrep").args(["-P", &pid]).output().unwrap();
        let children: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        assert!(!children.is_empty(), "{mpm}: no children");
        /// Kills the stopped children however the test ends.
        struct Reap(Vec<String>);
        impl Drop for Reap {
            fn drop(&mut self) {
                let _ = Command::new("kill").arg("-KILL").args(&self.0).status();
            }
        }
        let _reap = Reap(children.clone());
        kill("-STOP", &children);
        // `kill` returns before the children stop: a thread not yet stopped could still take
        // the connection. Wait until every thread of every child is stopped.
        crate::poll_until(|| {
            children
                .iter()
                .all(|c| {
                    std::fs::read_dir(format!("/proc/{c}/task"))
                        .into_iter()
                        .flatten()
                        .flatten()
                        .all(|t| {
                            let stat =
                                std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                            // The state follows the command's closing parenthesis.
                            stat.rsplit_once(") ")
                                .is_some_and(|(_, rest)| rest.starts_with('T'))
                        })
                })
                .then_some(())
        });
        let mut c = std::net::TcpStream::connect(s.addr).unwrap();
        c.write_all(b"GET /app/page.html HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        // The connection waits in the socket's queue.
        let socket = apache.socket.display().to_string();
        crate::poll_until(|| {
            let out = Command::new("ss")
                .args(["-xa", "src", &socket])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let queued = text
                .lines()
                .skip(1)
                .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok())
                .any(|q| q > 0);
            queued.then_some(())
        });
        let mut child = apache.child.take().unwrap();
        kill("-TERM", &[pid]);
        kill("-KILL", &children);
        let status = crate::poll_until(|| child.try_wait().unwrap());
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        let got = String::from_utf8_lossy(&got);
        let log = apache.error_log();
        assert!(
            got.starts_with("HTTP/1.1 503"),
            "{mpm}: {got:?} ({status:?})\n{log}"
        );
        assert!(
            log.contains("stopping with 1 connection(s) queued"),
            "{log}"
        );
    }
}

/// A hard restart (`apache2ctl restart`, HUP) kills Apache's children at once, with the
/// requests they are serving: clients straight to Apache lose those too. Through ramjet,
/// no client gets a 503 and none waiting in the hand-off is lost; only what Apache itself
/// was serving can go unanswered, as it does without ramjet.
#[test]
fn apache_hard_restarts_refuse_no_handed_off_connection() {
    for mpm in ["event", "prefork"] {
        let apache = Apache::start(mpm);
        let (s, _) = ramjet(&apache);
        let t = through_restarts(&apache, s.addr, &["-HUP", "-HUP"]);
        let log = apache.error_log();
        assert!(
            t.other.is_empty(),
            "{mpm}: {} answered, {} other {:?}, {} unanswered\n{log}",
            t.ok,
            t.other.len(),
            t.other.iter().take(3).collect::<Vec<_>>(),
            t.unanswered
        );
        // Requests a killed child was serving: a handful per restart at most.
        assert!(t.unanswered <= 20, "{mpm}: {} unanswered", t.unanswered);
        assert_eq!(
            log.matches("resuming normal operations").count(),
            3,
            "{log}"
        );
    }
}
