//! CGI/1.1: the environment, the body on stdin, the output's head understood and its body
//! streamed, failures as 502/504 with the reason logged, the process cap, no descriptor
//! leaks, and the SPECweb99 CGI.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use ramjet_testkit::Server;

/// A server whose `/cgi-bin/` runs the given scripts (name, text), with `extra` config.
fn cgi_server(scripts: &[(&str, &str)], extra: &str) -> Server {
    let dir = Server::dir();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for (name, text) in scripts {
        let p = bin.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    Server::start(
        crate::BIN,
        dir,
        &format!("{extra}\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/cgi-bin/\"\ncgi_root = \"{{dir}}/bin\"\ncgi_env = {{ SITE = \"test\" }}\n"),
    )
}

const ENV_PL: &str = r#"#!/usr/bin/perl
binmode STDIN; binmode STDOUT;
my $body = do { local $/; <STDIN> } // '';
print "Content-Type: text/plain\r\nX-Script: env\r\n\r\n";
for my $k (sort keys %ENV) { print "$k=$ENV{$k}\n"; }
print "BODY=$body\n";
opendir(my $d, "/proc/self/fd");
my @fds = sort { $a <=> $b } grep { /^\d+$/ && readlink("/proc/self/fd/$_") !~ m{^/proc/} } readdir($d);
print "FDS=@fds\n";
"#;

#[test]
fn the_program_gets_the_cgi_environment_the_body_and_no_other_descriptors() {
    let s = cgi_server(&[("env.pl", ENV_PL)], "");
    let mut c = s.client();
    c.send(b"POST /cgi-bin/env.pl/a/b?x=1&y=2 HTTP/1.1\r\nHost: example.org:8080\r\nContent-Type: text/plain\r\nContent-Length: 11\r\nX-Custom: v\r\nProxy: http://evil\r\n\r\nhello world");
    let r = c.response(false);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-script").as_deref(), Some("env"));
    let t = r.text();
    for line in [
        "GATEWAY_INTERFACE=CGI/1.1",
        "REQUEST_METHOD=POST",
        "SCRIPT_NAME=/cgi-bin/env.pl",
        "PATH_INFO=/a/b",
        "QUERY_STRING=x=1&y=2",
        "REQUEST_URI=/cgi-bin/env.pl/a/b?x=1&y=2",
        "SERVER_NAME=example.org",
        "SERVER_PROTOCOL=HTTP/1.1",
        "REMOTE_ADDR=127.0.0.1",
        "CONTENT_LENGTH=11",
        "CONTENT_TYPE=text/plain",
        "HTTP_X_CUSTOM=v",
        "SITE=test",
        "BODY=hello world",
        "FDS=0 1 2",
    ] {
        assert!(t.lines().any(|l| l == line), "{line} missing:\n{t}");
    }
    assert!(!t.contains("HTTP_PROXY"), "{t}");
    assert!(t.contains(&format!(
        "SCRIPT_FILENAME={}",
        s.path("bin/env.pl").display()
    )));
    // The connection goes on; a chunked body arrives whole, with its length.
    c.send(b"POST /cgi-bin/env.pl HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
    let t = c.response(false).text();
    assert!(
        t.contains("BODY=abcde\n") && t.contains("CONTENT_LENGTH=5\n"),
        "{t}"
    );
    // Over curl, a GET without a body.
    let (ok, out) = crate::curl(&[&s.url("/cgi-bin/env.pl")]);
    assert!(ok && String::from_utf8_lossy(&out).contains("REQUEST_METHOD=GET"));
}

#[test]
fn status_location_and_a_program_that_fails_or_lies() {
    let s = cgi_server(
        &[
            ("nf.sh", "#!/bin/sh\nprintf 'Status: 404 Not Here\\r\\nContent-Type: text/plain\\r\\n\\r\\ngone\\n'\n"),
            ("loc.sh", "#!/bin/sh\nprintf 'Location: /elsewhere\\n\\n'\n"),
            ("exit.sh", "#!/bin/sh\necho 'about to fail' >&2\nexit 3\n"),
            ("crash.sh", "#!/bin/sh\nkill -SEGV $$\n"),
            ("nohead.sh", "#!/bin/sh\necho 'just text'\n"),
            ("notype.sh", "#!/bin/sh\nprintf 'X-A: 1\\n\\nbody'\n"),
            ("noexec.sh", "#!/bin/sh\necho hi\n"),
        ],
        "",
    );
    std::fs::set_permissions(
        s.path("bin/noexec.sh"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let mut c = s.client();
    let mut get = |path: &str| {
        c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        c.response(false)
    };
    let r = get("/cgi-bin/nf.sh");
    assert_eq!((r.status, r.text().as_str()), (404, "gone\n"));
    let r = get("/cgi-bin/loc.sh");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location").as_deref(), Some("/elsewhere"));
    assert_eq!(get("/cgi-bin/exit.sh").status, 502);
    assert_eq!(get("/cgi-bin/crash.sh").status, 502);
    assert_eq!(get("/cgi-bin/nohead.sh").status, 502);
    assert_eq!(get("/cgi-bin/notype.sh").status, 502);
    assert_eq!(get("/cgi-bin/noexec.sh").status, 403);
    assert_eq!(get("/cgi-bin/missing.sh").status, 404);
    assert_eq!(get("/cgi-bin/../root/x").status, 404);
    // Each failure is logged with its reason; the program's stderr goes to the log.
    assert!(s.wait_for_log(
        "cgi /cgi-bin/exit.sh: ended (exit status: 3)",
        Duration::from_secs(10)
    ));
    assert!(s.wait_for_log(
        "cgi /cgi-bin/exit.sh: about to fail",
        Duration::from_secs(10)
    ));
    assert!(s.wait_for_log(
        "cgi /cgi-bin/crash.sh: ended (signal: 11",
        Duration::from_secs(10)
    ));
    assert!(s.wait_for_log(
        "cgi /cgi-bin/nohead.sh: output ended before its header",
        Duration::from_secs(10)
    ));
    assert!(s.wait_for_log(
        "cgi /cgi-bin/notype.sh: no Content-Type, Location or Status",
        Duration::from_secs(10)
    ));
}

#[test]
fn output_is_streamed_while_the_program_runs() {
    // The program writes a first part, then waits for a file the test creates only once
    // it has read that part: without streaming the test would wait forever.
    let s = cgi_server(
        &[(
            "stream.sh",
            "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nfirst\\n'\nwhile [ ! -e \"$0.go\" ]; do sleep 0.05; done\necho second\n",
        )],
        "",
    );
    let mut stream = std::net::TcpStream::connect(s.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    use std::io::{Read, Write};
    stream
        .write_all(b"GET /cgi-bin/stream.sh HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("first\n") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(!String::from_utf8_lossy(&got).contains("second"));
    std::fs::write(s.path("bin/stream.sh.go"), "").unwrap();
    while !String::from_utf8_lossy(&got).contains("0\r\n\r\n") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.contains("Transfer-Encoding: chunked") && text.contains("second\n"),
        "{text}"
    );
}

#[test]
fn a_silent_program_is_killed_and_answered_504_and_the_cap_gives_503() {
    let s = cgi_server(
        &[
            ("hang.sh", "#!/bin/sh\necho $$ > \"$0.pid\"\nsleep 600\n"),
            (
                "ok.sh",
                "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nok\\n'\n",
            ),
        ],
        "[timeouts]\ncgi = \"1s\"\n[limits]\ncgi_processes = 1\n",
    );
    let hang = std::thread::spawn({
        let mut c = s.client();
        move || {
            c.send(b"GET /cgi-bin/hang.sh HTTP/1.1\r\nHost: t\r\n\r\n");
            c.response(false).status
        }
    });
    // While it runs, the one process allowed is taken.
    let pid: u32 = crate::poll_until(|| {
        std::fs::read_to_string(s.path("bin/hang.sh.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    });
    let r = s.get("/cgi-bin/ok.sh");
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after").as_deref(), Some("1"));
    assert_eq!(hang.join().unwrap(), 504);
    assert!(s.wait_for_log(
        "cgi /cgi-bin/hang.sh: no header within 1s; killed",
        Duration::from_secs(10)
    ));
    // The shell that ran the script is gone (its sleep child may outlive it briefly).
    crate::poll_until(|| (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(()));
    // And the place is free again.
    crate::poll_until(|| (s.get("/cgi-bin/ok.sh").status == 200).then_some(()));
}

#[test]
fn the_specweb99_cgi_frames_a_file_as_the_module_does() {
    let dir = Server::dir();
    let obj = ramjet_specweb::fileset::file_name(2, 1, 3);
    let p = dir.path().join("root").join(&obj);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let bytes = ramjet_specweb::fileset::file_bytes(2, 1, 3);
    std::fs::write(&p, &bytes).unwrap();
    let cgi_dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../integrations/specweb99");
    let s = Server::start(
        crate::BIN,
        dir,
        &format!(
            "[[location]]\nroot = \"root\"\n[[location]]\npath = \"/cgi-bin/\"\ncgi_root = \"{}\"\ncgi_env = {{ SPECWEB_ROOT = \"{{dir}}/root\" }}\n",
            cgi_dir.canonicalize().unwrap().display()
        ),
    );
    let r = s.get(&format!("/cgi-bin/specweb99-cgi.pl?/{obj}"));
    assert_eq!(r.status, 200, "{}", r.text());
    let mut want = format!(
        "<html>\n<head><title>SPECweb99 Dynamic GET & POST Test</title></head>\n<body>\n<p>SERVER_SOFTWARE = ramjet\n<p>REMOTE_ADDR = 127.0.0.1\n<p>SCRIPT_NAME = /cgi-bin/specweb99-cgi.pl\n<p>QUERY_STRING = /{obj}\n<pre>\n"
    )
    .into_bytes();
    want.extend_from_slice(&bytes);
    want.extend_from_slice(b"\n</pre>\n</body></html>\n");
    assert_eq!(r.body, want);
    assert_eq!(r.header("content-length"), Some(want.len().to_string()));
    assert_eq!(s.get("/cgi-bin/specweb99-cgi.pl?/etc/passwd").status, 404);
}

/// What a client can no longer slip into a program's environment, and what Apache sets that
/// ramjet did not: a name with `_` is dropped instead of merging with its dashed twin
/// (`X_Forwarded_For` spoofing `X-Forwarded-For`); `Authorization` is withheld and the user
/// the location admitted is `REMOTE_USER`; `DOCUMENT_ROOT`, `PATH_TRANSLATED`, and
/// `SERVER_NAME`/`SERVER_PORT` from the `Host` field.
#[test]
fn spoofed_fields_and_passwords_stay_out_and_the_user_is_named() {
    let dir = Server::dir();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let p = bin.join("env.pl");
    std::fs::write(&p, ENV_PL).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    // ann's password is "password".
    std::fs::write(
        dir.path().join("users"),
        "ann:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n",
    )
    .unwrap();
    let s = Server::start(
        crate::BIN,
        dir,
        "[[location]]\nroot = \"root\"\n\
         [[location]]\npath = \"/cgi-bin/\"\nroot = \"root\"\ncgi_root = \"{dir}/bin\"\n\
         [[location]]\npath = \"/private/\"\ncgi_root = \"{dir}/bin\"\nauth_basic = \"p\"\nauth_basic_user_file = \"users\"\n\
         [[location]]\npath = \"/keep/\"\ncgi_root = \"{dir}/bin\"\nunderscores_in_headers = true\ncgi_pass_auth = true\n",
    );
    let get = |path: &str, extra: &str| {
        let mut c = s.client();
        c.send(format!("GET {path} HTTP/1.1\r\nHost: www.example:8081\r\n{extra}\r\n").as_bytes());
        let r = c.response(false);
        assert_eq!(r.status, 200, "{}", r.text());
        r.text()
    };
    let spoof = "X_Forwarded_For: 6.6.6.6\r\nX-Forwarded-For: 1.1.1.1\r\n";
    let t = get("/cgi-bin/env.pl/a/b", spoof);
    let root = s.root().display().to_string();
    for line in [
        "HTTP_X_FORWARDED_FOR=1.1.1.1".to_string(),
        "SERVER_NAME=www.example".into(),
        "SERVER_PORT=8081".into(),
        format!("DOCUMENT_ROOT={root}"),
        format!("PATH_TRANSLATED={root}/a/b"),
    ] {
        assert!(t.lines().any(|l| l == line), "{line} missing:\n{t}");
    }
    assert!(!t.contains("6.6.6.6") && !t.contains("REMOTE_USER"), "{t}");
    // Without a port in Host: the port the connection came in on.
    let mut c = s.client();
    c.send(b"GET /cgi-bin/env.pl HTTP/1.1\r\nHost: www.example\r\n\r\n");
    let t = c.response(false).text();
    let port = format!("SERVER_PORT={}", s.addr.port());
    assert!(t.lines().any(|l| l == port), "{port} missing:\n{t}");
    // Behind Basic authentication: the user, never the credentials.
    let auth = "Authorization: Basic YW5uOnBhc3N3b3Jk\r\n";
    let t = get("/private/env.pl", auth);
    assert!(t.lines().any(|l| l == "REMOTE_USER=ann"), "{t}");
    assert!(t.lines().any(|l| l == "AUTH_TYPE=Basic"), "{t}");
    assert!(!t.contains("YW5uOnBhc3N3b3Jk"), "{t}");
    // A location that keeps them (nginx underscores_in_headers on, Apache CGIPassAuth On).
    let t = get("/keep/env.pl", &format!("{spoof}{auth}"));
    assert!(
        t.lines()
            .any(|l| l == "HTTP_X_FORWARDED_FOR=6.6.6.6, 1.1.1.1"),
        "{t}"
    );
    assert!(
        t.lines()
            .any(|l| l == "HTTP_AUTHORIZATION=Basic YW5uOnBhc3N3b3Jk"),
        "{t}"
    );
}

/// `cgi_user`: programs run as that account (ramjet runs as root in the tests and CI).
#[test]
fn cgi_user_runs_programs_as_that_account() {
    if !std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:\t0\t"))
    {
        eprintln!("skipped: only root can switch users");
        return;
    }
    let id = "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n%s %s\\n' \"$(id -un)\" \"$(id -G)\"\n";
    let s = cgi_server(&[("id", id)], "[defaults]\ncgi_user = \"nobody\"\n");
    // The temporary directory is the test's own (0700): let the program's user in.
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = s.get("/cgi-bin/id");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "nobody 65534\n");
}
