//! Basic authentication against htpasswd files written by Apache's own `htpasswd`, and
//! custom error pages.

use std::process::Command;
use std::time::Duration;

use ramjet_testkit::Server;

/// `htpasswd -nb -<flag> user password`: one line as Apache writes it.
fn htpasswd(flag: &str, user: &str, password: &str) -> String {
    let out = Command::new("htpasswd")
        .args(["-nb", flag, user, password])
        .output()
        .expect("htpasswd (apache2-utils) is installed");
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string() + "\n"
}

/// curl's status code for `path` with `-u user:password` (`None`: no credentials).
fn code(s: &Server, path: &str, user: Option<&str>) -> String {
    let mut args = vec!["-o", "/dev/null", "-w", "%{http_code}"];
    if let Some(u) = user {
        args.extend(["-u", u]);
    }
    let url = s.url(path);
    args.push(&url);
    let (ok, out) = crate::curl(&args);
    assert!(ok);
    String::from_utf8(out).unwrap()
}

fn protected_server() -> Server {
    let dir = Server::dir();
    let mut users = String::new();
    for (flag, user) in [
        ("-B", "bcrypt"),
        ("-m", "md5"),
        ("-s", "sha"),
        ("-2", "sha256"),
        ("-5", "sha512"),
    ] {
        users.push_str(&htpasswd(flag, user, "pw of ramjet"));
    }
    std::fs::write(dir.path().join("users"), users).unwrap();
    for (p, body) in [
        ("root/staff/a.txt", "staff only"),
        ("root/staff/open/b.txt", "open"),
        ("root/c.txt", "public"),
    ] {
        let p = dir.path().join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    Server::start(
        crate::BIN,
        dir,
        "[[location]]\nroot = \"root\"\n\
         [[location]]\npath = \"/staff/\"\nroot = \"root\"\nauth_basic = \"Staff \u{e9}quipe\"\nauth_basic_user_file = \"users\"\n\
         [[location]]\npath = \"/staff/open/\"\nroot = \"root\"\nauth_basic = \"off\"\n",
    )
}

#[test]
fn basic_auth_accepts_every_htpasswd_format_and_refuses_the_rest() {
    let s = protected_server();
    // No credentials: 401 with the challenge (RFC 7617, charset parameter).
    let r = s.get("/staff/a.txt");
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate").as_deref(),
        Some("Basic realm=\"Staff \u{e9}quipe\", charset=\"UTF-8\"")
    );
    for user in ["bcrypt", "md5", "sha", "sha256", "sha512"] {
        let good = format!("{user}:pw of ramjet");
        assert_eq!(code(&s, "/staff/a.txt", Some(&good)), "200", "{user}");
        // Twice: the second is answered from the worker's verified credentials.
        assert_eq!(code(&s, "/staff/a.txt", Some(&good)), "200", "{user} again");
        let bad = format!("{user}:pw of ramjeT");
        assert_eq!(
            code(&s, "/staff/a.txt", Some(&bad)),
            "401",
            "{user} wrong password"
        );
    }
    assert_eq!(code(&s, "/staff/a.txt", Some("nobody:pw of ramjet")), "401");
    // Not Basic, or not base64: 401, never 400 or 500.
    for value in ["Bearer abc", "Basic", "Basic %%%", "Basic Zm9v"] {
        let mut c = s.client();
        c.send(
            format!("GET /staff/a.txt HTTP/1.1\r\nHost: t\r\nAuthorization: {value}\r\n\r\n")
                .as_bytes(),
        );
        assert_eq!(c.response(false).status, 401, "{value}");
        // The connection stays usable.
        c.send(b"GET /c.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(c.response(false).text(), "public");
    }
    // Elsewhere: open; a sub-location turned it off.
    assert_eq!(code(&s, "/c.txt", None), "200");
    assert_eq!(code(&s, "/staff/open/b.txt", None), "200");
    // wget, as a mirror script would use it.
    let out = Command::new("wget")
        .args([
            "-q",
            "-O",
            "-",
            "--user",
            "bcrypt",
            "--password",
            "pw of ramjet",
        ])
        .arg(s.url("/staff/a.txt"))
        .output()
        .expect("wget");
    assert!(out.status.success());
    assert_eq!(out.stdout, b"staff only");
    s.assert_clean_log(&[]);
}

#[test]
fn a_reload_reads_the_password_file_again() {
    let s = protected_server();
    assert_eq!(code(&s, "/staff/a.txt", Some("bcrypt:pw of ramjet")), "200");
    std::fs::write(s.path("users"), htpasswd("-B", "bcrypt", "new pw")).unwrap();
    s.rewrite_config(
        "[[location]]\nroot = \"root\"\n[[location]]\npath = \"/staff/\"\nroot = \"root\"\nauth_basic = \"Staff\"\nauth_basic_user_file = \"users\"\n",
    );
    s.signal(libc::SIGHUP);
    assert!(s.wait_for_log("configuration reloaded", Duration::from_secs(10)));
    // The remembered old credentials belong to the old file: refused now.
    crate::poll_until(|| {
        (code(&s, "/staff/a.txt", Some("bcrypt:pw of ramjet")) == "401").then_some(())
    });
    assert_eq!(code(&s, "/staff/a.txt", Some("bcrypt:new pw")), "200");
    assert_eq!(
        code(&s, "/staff/a.txt", Some("md5:pw of ramjet")),
        "401",
        "gone from the file"
    );
    s.assert_clean_log(&[]);
}

#[test]
fn custom_error_pages_replace_the_servers_own() {
    let dir = Server::dir();
    std::fs::create_dir_all(dir.path().join("root/dl")).unwrap();
    std::fs::write(dir.path().join("root/dl/x.txt"), "x").unwrap();
    std::fs::write(dir.path().join("404.html"), "<h1>Not on this mirror</h1>\n").unwrap();
    std::fs::write(dir.path().join("50x.txt"), "backend down\n").unwrap();
    std::fs::write(dir.path().join("dl404.html"), "<p>no such download</p>\n").unwrap();
    std::fs::write(dir.path().join("users"), htpasswd("-s", "ann", "pw")).unwrap();
    let s = Server::start(
        crate::BIN,
        dir,
        "[upstream.gone]\nservers = [\"127.0.0.1:1\"]\n\
         [defaults]\nerror_pages = { 404 = \"404.html\", \"5xx\" = \"50x.txt\" }\n\
         [[location]]\nroot = \"root\"\n\
         [[location]]\npath = \"/dl/\"\nroot = \"root\"\nerror_pages = { 404 = \"dl404.html\", 401 = \"404.html\" }\nauth_basic = \"dl\"\nauth_basic_user_file = \"users\"\n\
         [[location]]\npath = \"/app/\"\nproxy = \"gone\"\n",
    );
    let r = s.get("/nothing-here");
    assert_eq!(r.status, 404);
    assert_eq!(r.text(), "<h1>Not on this mirror</h1>\n");
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(r.header("content-length").as_deref(), Some("28"));
    // A location's own table; the 401 keeps its challenge.
    let r = s.get("/dl/missing");
    assert_eq!(r.status, 401);
    assert_eq!(r.text(), "<h1>Not on this mirror</h1>\n");
    assert!(r.header("www-authenticate").is_some());
    let (ok, out) = crate::curl(&["-u", "ann:pw", &s.url("/dl/missing")]);
    assert!(ok);
    assert_eq!(out, b"<p>no such download</p>\n");
    // A class entry: the proxy's 502 (the backend refuses connections).
    let r = s.get("/app/x");
    assert_eq!(r.status, 502);
    assert_eq!(r.text(), "backend down\n");
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("text/plain; charset=utf-8")
    );
    // HEAD: the page's length, no body.
    let mut c = s.client();
    c.send(b"HEAD /nothing HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(true);
    assert_eq!(
        (r.status, r.header("content-length").as_deref()),
        (404, Some("28"))
    );
    // The connection goes on after it.
    c.send(b"GET /dl/x.txt HTTP/1.1\r\nHost: t\r\nAuthorization: Basic YW5uOnB3\r\n\r\n");
    assert_eq!(c.response(false).text(), "x");
    // Statuses without a page keep the server's (405 from the static handler).
    let mut c = s.client();
    c.send(b"DELETE /dl/x.txt HTTP/1.1\r\nHost: t\r\nAuthorization: Basic YW5uOnB3\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 405);
    assert!(r.text().contains("405 Method Not Allowed"));
    s.assert_clean_log(&["502", "127.0.0.1:1"]);
}

#[test]
fn error_pages_from_a_backend_pass_through() {
    let backend = ramjet_testkit::Backend::start(|x| {
        x.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 12\r\n\r\nbackend page");
        ramjet_testkit::Flow::Keep
    });
    let dir = Server::dir();
    std::fs::create_dir_all(dir.path().join("root")).unwrap();
    std::fs::write(dir.path().join("404.html"), "ours").unwrap();
    let s = Server::start(
        crate::BIN,
        dir,
        &format!(
            "[upstream.app]\nservers = [\"{}\"]\n[defaults]\nerror_pages = {{ 404 = \"404.html\" }}\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/app/\"\nproxy = \"app\"\n",
            backend.addr
        ),
    );
    let r = s.get("/app/x");
    assert_eq!((r.status, r.text().as_str()), (404, "backend page"));
    assert_eq!(s.get("/x").text(), "ours");
    s.assert_clean_log(&[]);
}

#[test]
fn bad_password_files_and_pages_are_named_at_load() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(
        dir.path().join("users"),
        "ann:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\nbob:plaintext\n",
    )
    .unwrap();
    let cfg = dir.path().join("r.toml");
    std::fs::write(
        &cfg,
        "[[location]]\nroot = \"www\"\nauth_basic = \"x\"\nauth_basic_user_file = \"users\"\nerror_pages = { 404 = \"missing.html\", 200 = \"www\" }\n",
    )
    .unwrap();
    let out = Command::new(crate::BIN)
        .arg("check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("auth_basic_user_file"), "{err}");
    assert!(
        err.contains("(line 2)") && err.contains("htpasswd -B"),
        "{err}"
    );
    assert!(
        err.contains("error_pages.200") || err.contains("error_pages.404"),
        "{err}"
    );
    assert!(err.contains(&format!("{}:", cfg.display())), "{err}");
}
