//! The reverse proxy in front of real backends from the package registries: Apache 2.4
//! (Debian `apache2`: static files, ranges, a CGI script reading a request body, its
//! keep-alive timeout closing pooled connections) and a WSGI app under gunicorn (PyPI:
//! bodies, streamed answers without a length, a worker that closes after each response).
//! `.ci/run` installs both.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::proxy::proxy_to;
use crate::{bytes, curl};

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Poll until something accepts on `port`.
pub(crate) fn wait_listening(port: u16, child: &mut Child, log: &Path) {
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "backend exited with {status}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "backend did not listen on {port}: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// A stock Apache with its own minimal configuration, stopped on drop.
pub(crate) struct Apache {
    child: Child,
    port: u16,
    pub(crate) dir: tempfile::TempDir,
}

impl Apache {
    pub(crate) fn start(keepalive_timeout: u32) -> Apache {
        let bin = ["/usr/sbin/apache2", "/usr/sbin/httpd"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("Apache 2.4 is installed (apt-get install apache2; .ci/run does it)");
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["htdocs", "cgi-bin"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        std::fs::write(d.join("htdocs/page.html"), "<h1>apache page</h1>\n").unwrap();
        std::fs::write(d.join("htdocs/data.bin"), bytes(300_000, 11)).unwrap();
        let cgi = d.join("cgi-bin/echo.sh");
        std::fs::write(
            &cgi,
            // The body is read whole before the answer: mod_cgi writes all of stdin before
            // it reads stdout, so echoing as it reads would deadlock past a pipe's 64 KiB.
            "#!/bin/sh\nt=$(mktemp)\nhead -c \"${CONTENT_LENGTH:-0}\" > \"$t\"\nprintf 'Content-Type: text/plain\\r\\nX-Method: %s\\r\\nX-Forwarded: %s\\r\\n\\r\\n' \"$REQUEST_METHOD\" \"$HTTP_X_FORWARDED_FOR\"\ncat \"$t\"\nrm -f \"$t\"\n",
        )
        .unwrap();
        for p in [
            d.to_path_buf(),
            d.join("htdocs"),
            d.join("cgi-bin"),
            cgi.clone(),
        ] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        for f in ["htdocs/page.html", "htdocs/data.bin"] {
            std::fs::set_permissions(d.join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let port = free_port();
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
                "ServerRoot \"{d}\"\nListen 127.0.0.1:{port}\nServerName localhost\n{user}PidFile {d}/httpd.pid\nErrorLog {d}/error.log\nLogLevel warn\n\
LoadModule mpm_prefork_module {m}/mod_mpm_prefork.so\nLoadModule authz_core_module {m}/mod_authz_core.so\n\
LoadModule mime_module {m}/mod_mime.so\nLoadModule alias_module {m}/mod_alias.so\nLoadModule cgi_module {m}/mod_cgi.so\n\
TypesConfig /etc/mime.types\nDocumentRoot \"{d}/htdocs\"\n<Directory \"{d}\">\n  Require all granted\n</Directory>\n\
ScriptAlias /cgi-bin/ \"{d}/cgi-bin/\"\nKeepAlive On\nKeepAliveTimeout {keepalive_timeout}\nStartServers 2\nMinSpareServers 2\nMaxSpareServers 4\nMaxRequestWorkers 16\n",
                d = d.display()
            ),
        )
        .unwrap();
        let log = d.join("error.log");
        let mut child = Command::new(bin)
            .args(["-f"])
            .arg(&conf)
            .arg("-DFOREGROUND")
            // prefork signals its whole process group on shutdown: give it its own.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start apache");
        wait_listening(port, &mut child, &log);
        Apache { child, port, dir }
    }

    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// Whether the tests run as root (Apache then needs a `User` to switch to).
pub(crate) fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

impl Drop for Apache {
    fn drop(&mut self) {
        // TERM to the parent stops its children too.
        terminate(&mut self.child);
    }
}

/// TERM, wait up to 10 s, then KILL.
pub(crate) fn terminate(child: &mut Child) {
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn apache_behind_ramjet_files_ranges_cgi_and_its_keepalive_timeout() {
    let apache = Apache::start(1);
    let s = proxy_to(
        &[apache.addr()],
        "",
        "",
        &[("local.txt", b"served by ramjet")],
    );
    assert_eq!(s.get("/local.txt").text(), "served by ramjet");
    let r = s.get("/page.html");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "<h1>apache page</h1>\n");
    assert_eq!(r.header("Content-Type").as_deref(), Some("text/html"));
    assert!(
        r.header("ETag").is_some(),
        "Apache's validators pass through"
    );
    assert_eq!(s.get("/nope.html").status, 404);
    // Ranges are Apache's to answer; ramjet passes the 206 on.
    let (ok, out) = curl(&["-r", "1000-1999", &s.url("/data.bin")]);
    assert!(ok);
    assert_eq!(out, bytes(300_000, 11)[1000..2000]);
    // The whole file with curl and wget, through ramjet.
    let (ok, out) = curl(&[&s.url("/data.bin")]);
    assert!(ok && out == bytes(300_000, 11));
    // A request body through to a CGI script, and the forwarded client address.
    let body = "b".repeat(200_000);
    let file = s.path("body.txt");
    std::fs::write(&file, &body).unwrap();
    let (ok, out) = curl(&[
        "-i",
        "--data-binary",
        &format!("@{}", file.display()),
        &s.url("/cgi-bin/echo.sh"),
    ]);
    let out = String::from_utf8_lossy(&out);
    assert!(ok, "{out}");
    assert!(
        out.contains("X-Method: POST") && out.contains("X-Forwarded: 127.0.0.1"),
        "{out}"
    );
    assert!(out.ends_with(&body));
    // Apache closes idle connections after 1 s; ramjet's pool keeps them up to 4 s. Every
    // request after a pause meets a connection Apache has closed or is closing.
    let mut c = s.client();
    for i in 0..4 {
        c.send(b"GET /page.html HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(c.response(false).status, 200, "request {i} after a pause");
        std::thread::sleep(Duration::from_millis(1000));
    }
    if Path::new("/usr/bin/wget").exists() {
        let out = Command::new("wget")
            .args(["-q", "-O", "-", &s.url("/page.html")])
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(out.stdout, b"<h1>apache page</h1>\n");
    }
    s.assert_clean_log(&[]);
}

/// gunicorn serving a WSGI app written here, stopped on drop.
pub(crate) struct Gunicorn {
    child: Child,
    pub(crate) port: u16,
    /// gunicorn also listens on this UNIX socket.
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

/// The echo app of the proxy tests.
const ECHO_APP: &str = r#"
def app(environ, start_response):
    path = environ['PATH_INFO']
    if path == '/stream':
        # No length: gunicorn sends it chunked (HTTP/1.1) and closes.
        start_response('200 OK', [('Content-Type', 'text/plain')])
        return (('line %d\n' % i).encode() for i in range(2000))
    if path == '/status/418':
        start_response('418 I\'m a teapot', [('Content-Length', '0')])
        return [b'']
    body = environ['wsgi.input'].read()
    out = ('%s %s?%s len=%d xff=%s host=%s proto=%s\n' % (
        environ['REQUEST_METHOD'], path, environ.get('QUERY_STRING', ''), len(body),
        environ.get('HTTP_X_FORWARDED_FOR'), environ.get('HTTP_HOST'),
        environ.get('HTTP_X_FORWARDED_PROTO'))).encode() + body
    start_response('200 OK', [('Content-Type', 'text/plain'), ('Content-Length', str(len(out))),
                              ('Set-Cookie', 'a=1'), ('Set-Cookie', 'b=2')])
    return [out]
"#;

impl Gunicorn {
    fn start() -> Gunicorn {
        Gunicorn::with_app(ECHO_APP)
    }

    /// gunicorn (2 sync workers) running the WSGI `app` in `source`.
    pub(crate) fn with_app(source: &str) -> Gunicorn {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("app.py"), source).unwrap();
        let port = free_port();
        let log = dir.path().join("gunicorn.log");
        let socket = dir.path().join("app.sock");
        let mut child = Command::new("gunicorn")
            .args(["-w", "2", "-b", &format!("127.0.0.1:{port}")])
            .arg("-b")
            .arg(format!("unix:{}", socket.display()))
            .arg("--chdir")
            .arg(dir.path())
            .args(["--error-logfile"])
            .arg(&log)
            .arg("app:app")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("gunicorn is installed (pip install gunicorn; .ci/run does it)");
        wait_listening(port, &mut child, &log);
        let end = Instant::now() + Duration::from_secs(10);
        while !socket.exists() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
        Gunicorn {
            child,
            port,
            socket,
            _dir: dir,
        }
    }
}

impl Drop for Gunicorn {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

#[test]
fn gunicorn_behind_ramjet_bodies_streams_and_status_codes() {
    let g = Gunicorn::start();
    let s = proxy_to(
        &[format!("127.0.0.1:{}", g.port)],
        "",
        "[limits]\nmax_body = \"64m\"",
        &[],
    );
    let mut c = s.client();
    c.send(b"GET /hello?x=1 HTTP/1.1\r\nHost: app.example\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.text(),
        "GET /hello?x=1 len=0 xff=127.0.0.1 host=app.example proto=http\n"
    );
    assert_eq!(
        r.head.matches("Set-Cookie").count(),
        2,
        "repeated fields pass on"
    );
    // gunicorn's sync workers close after every response: the next request on the same
    // client connection still works (a new upstream connection).
    c.send(b"POST /form HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nabcde");
    assert!(c
        .response(false)
        .text()
        .ends_with("len=5 xff=127.0.0.1 host=h proto=http\nabcde"));
    // A streamed answer without a length: chunked to an HTTP/1.1 client...
    c.send(b"GET /stream HTTP/1.1\r\nHost: h\r\n\r\n");
    let r = c.response(false);
    let expected: String = (0..2000).map(|i| format!("line {i}\n")).collect();
    assert_eq!(r.text(), expected);
    assert_eq!(r.header("Transfer-Encoding").as_deref(), Some("chunked"));
    // ...and delimited by close to HTTP/1.0.
    let mut c10 = s.client();
    c10.send(b"GET /stream HTTP/1.0\r\n\r\n");
    let r = c10.response(false);
    assert_eq!(r.text(), expected);
    assert!(c10.closed());
    let r = s.get("/status/418");
    assert_eq!(r.status, 418);
    // A 20 MB upload with curl (chunked with -T -, and by length).
    let body = bytes(20 << 20, 5);
    let file = s.path("up.bin");
    std::fs::write(&file, &body).unwrap();
    let (ok, out) = curl(&[
        "--data-binary",
        &format!("@{}", file.display()),
        &s.url("/up"),
    ]);
    assert!(ok);
    assert!(out.starts_with(format!("POST /up? len={} ", body.len()).as_bytes()));
    assert!(out.ends_with(&body));
    let (ok, out) = curl(&[
        "-T",
        &file.display().to_string(),
        "-H",
        "Transfer-Encoding: chunked",
        &s.url("/chunked"),
    ]);
    assert!(ok);
    assert!(
        out.starts_with(format!("PUT /chunked? len={} ", body.len()).as_bytes()),
        "{}",
        String::from_utf8_lossy(&out[..100.min(out.len())])
    );
    // Concurrent clients.
    let url = s.url("/par");
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                (0..10).all(|_| {
                    let (ok, out) = curl(&[&url]);
                    ok && out.starts_with(b"GET /par")
                })
            })
        })
        .collect();
    for h in handles {
        assert!(h.join().unwrap());
    }
    s.assert_clean_log(&[]);
}

/// HAProxy in front of ramjet, sending the PROXY protocol (v1 or v2).
struct Haproxy {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    fn start(to: std::net::SocketAddr, send_proxy: &str) -> Haproxy {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let conf = dir.path().join("haproxy.cfg");
        std::fs::write(
            &conf,
            format!(
                "global\n  maxconn 200\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 20s\n  timeout server 20s\nfrontend f\n  bind 127.0.0.1:{port}\n  default_backend b\nbackend b\n  server ramjet {to} {send_proxy}\n"
            ),
        )
        .unwrap();
        let log = dir.path().join("haproxy.log");
        let bin = ["/usr/sbin/haproxy", "/usr/bin/haproxy"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .unwrap_or("haproxy");
        let mut child = Command::new(bin)
            .args(["-db", "-f"])
            .arg(&conf)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("HAProxy is installed (apt-get install haproxy; .ci/run does it)");
        wait_listening(port, &mut child, &log);
        Haproxy {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn behind_haproxy_the_proxy_protocol_carries_the_real_client() {
    let g = Gunicorn::start();
    let s = crate::server_with(
        &[("f.txt", b"file")],
        &format!(
            "workers = 1\nlisten = [{{ address = \"127.0.0.1:0\", proxy_protocol = true }}]\n[upstream.app]\nservers = [\"127.0.0.1:{}\"]\n[[location]]\nroot = \"root\"\nhandlers = [\"static\", \"proxy\"]\nproxy = \"app\"\n",
            g.port
        ),
    );
    for mode in ["send-proxy", "send-proxy-v2"] {
        let h = Haproxy::start(s.addr, mode);
        let url = format!("http://127.0.0.1:{}", h.port);
        // The client connects from 127.0.0.2; HAProxy connects to ramjet from 127.0.0.1.
        let (ok, out) = curl(&["--interface", "127.0.0.2", &format!("{url}/who")]);
        assert!(ok, "{mode}");
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("xff=127.0.0.2"), "{mode}: {text}");
        let (ok, out) = curl(&["--interface", "127.0.0.2", &format!("{url}/f.txt")]);
        assert!(ok && out == b"file", "{mode}");
    }
    s.assert_clean_log(&[]);
}

#[test]
fn a_unix_socket_upstream_and_a_reload_that_moves_the_traffic() {
    let g = Gunicorn::start();
    let config = |server: &str| {
        format!(
            "workers = 2\n[upstream.app]\nservers = [\"{server}\"]\n[[location]]\nproxy = \"app\"\n"
        )
    };
    let s = crate::server_with(&[], &config(&format!("unix:{}", g.socket.display())));
    for i in 0..4 {
        let r = s.get(&format!("/over-unix/{i}"));
        assert_eq!(r.status, 200);
        assert!(
            r.text()
                .starts_with(&format!("GET /over-unix/{i}? len=0 xff=127.0.0.1")),
            "{}",
            r.text()
        );
    }
    // The same app over TCP after a reload; requests keep working throughout.
    let b = ramjet_testkit::Backend::start(|ex| {
        ex.ok(b"new backend");
        ramjet_testkit::Flow::Keep
    });
    s.rewrite_config(&config(&b.addr.to_string()));
    s.signal(libc::SIGHUP);
    assert!(s.wait_for_log("configuration reloaded", Duration::from_secs(10)));
    let end = Instant::now() + Duration::from_secs(10);
    let mut moved = 0;
    while moved < 4 && Instant::now() < end {
        let r = s.get("/after");
        assert_eq!(r.status, 200);
        if r.text() == "new backend" {
            moved += 1;
        }
    }
    assert_eq!(moved, 4, "both workers forward to the new upstream");
    s.assert_clean_log(&[]);
}
