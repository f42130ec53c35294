//! Nothing leaves the document root: encodings, dot segments, symlinks.

use std::os::unix::fs::symlink;

use crate::server_with;

#[test]
fn traversal_attempts_never_escape() {
    let s = server_with(&[("pub/file.txt", b"inside\n")], "");
    // Something outside the root that must never be served.
    std::fs::write(s.path("outside.txt"), b"TOP SECRET\n").unwrap();
    let attempts = [
        "/../outside.txt",
        "/pub/../../outside.txt",
        "/%2e%2e/outside.txt",
        "/%2E%2E/outside.txt",
        "/.%2e/outside.txt",
        "/%2e./outside.txt",
        "/pub/%2e%2e/%2e%2e/outside.txt",
        "/..%2foutside.txt",
        "/pub%2f..%2f..%2foutside.txt",
        "/%252e%252e/outside.txt",
        "/..%5coutside.txt",
        "/pub/..%00/outside.txt",
        "/%c0%ae%c0%ae/outside.txt",
        "/%uff0e%uff0e/outside.txt",
        "//../outside.txt",
        "/./../outside.txt",
        "/pub/./../../outside.txt",
        "/pub/file.txt/../../outside.txt",
        "/..;/outside.txt",
        "/outside.txt%00.html",
    ];
    for path in attempts {
        let mut c = s.client();
        c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes());
        let r = c.response(false);
        assert!(
            matches!(r.status, 400 | 403 | 404),
            "{path} -> {} {:?}",
            r.status,
            r.text()
        );
        assert!(!r.text().contains("TOP SECRET"), "{path} leaked the file");
    }
    // curl with --path-as-is sends the dots unmodified.
    let (_, out) = crate::curl(&["--path-as-is", &s.url("/pub/../../outside.txt")]);
    assert!(!String::from_utf8_lossy(&out).contains("TOP SECRET"));
    // Normal dot segments inside the root still work.
    assert_eq!(s.get("/pub/./../pub/file.txt").text(), "inside\n");
    s.assert_clean_log(&[]);
}

#[test]
fn symlinks_follow_the_policy() {
    let dir = ramjet_testkit::Server::dir();
    let root = dir.path().join("root");
    std::fs::write(dir.path().join("outside.txt"), b"TOP SECRET\n").unwrap();
    std::fs::write(root.join("real.txt"), b"real\n").unwrap();
    symlink(dir.path().join("outside.txt"), root.join("abs-out")).unwrap();
    symlink("../outside.txt", root.join("rel-out")).unwrap();
    symlink("real.txt", root.join("inside-link")).unwrap();
    symlink("/etc/passwd", root.join("passwd")).unwrap();
    std::fs::create_dir(root.join("never")).unwrap();
    symlink("../real.txt", root.join("never/link")).unwrap();
    let s = ramjet_testkit::Server::start(
        crate::BIN,
        dir,
        r#"
[[location]]
root = "root"
[[location]]
path = "/never/"
root = "root"
symlinks = "never"
"#,
    );
    for path in ["/abs-out", "/rel-out", "/passwd"] {
        let r = s.get(path);
        assert_eq!(r.status, 403, "{path}");
        assert!(!r.text().contains("TOP SECRET") && !r.text().contains("root:"));
    }
    assert_eq!(s.get("/inside-link").text(), "real\n");
    assert_eq!(s.get("/never/link").status, 403);
    s.assert_clean_log(&[]);
}

#[test]
fn symlinks_owner_match() {
    let dir = ramjet_testkit::Server::dir();
    let root = dir.path().join("root");
    std::fs::write(root.join("mine.txt"), b"mine\n").unwrap();
    std::fs::write(root.join("theirs.txt"), b"theirs\n").unwrap();
    std::os::unix::fs::chown(root.join("theirs.txt"), Some(4242), Some(4242)).unwrap();
    symlink("mine.txt", root.join("to-mine")).unwrap();
    symlink("theirs.txt", root.join("to-theirs")).unwrap();
    let s = ramjet_testkit::Server::start(
        crate::BIN,
        dir,
        "[[location]]\nroot = \"root\"\nsymlinks = \"owner-match\"\n",
    );
    assert_eq!(s.get("/to-mine").text(), "mine\n");
    assert_eq!(s.get("/to-theirs").status, 403);
    assert_eq!(s.get("/theirs.txt").text(), "theirs\n");
    s.assert_clean_log(&[]);
}

#[test]
fn special_files_are_refused() {
    let s = server_with(&[("ok.txt", b"ok")], "");
    let fifo = s.root().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    assert_eq!(s.get("/fifo").status, 403);
    s.assert_clean_log(&[]);
}

#[test]
fn allow_and_deny_by_address_prefix_ipv4_and_ipv6() {
    let s = crate::server_with(
        &[("private/a.txt", b"secret"), ("public/b.txt", b"open"), ("v6/c.txt", b"six")],
        "listen = [\"127.0.0.1:0\"]\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/private/\"\nroot = \"root\"\nallow = [\"127.0.0.1\", \"::1\"]\n[[location]]\npath = \"/v6/\"\nroot = \"root\"\ndeny = [\"127.0.0.0/30\"]\n",
    );
    let code = |path: &str, from: &str| {
        let (ok, out) = crate::curl(&[
            "--interface",
            from,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &s.url(path),
        ]);
        assert!(ok, "curl from {from}");
        String::from_utf8(out).unwrap()
    };
    assert_eq!(code("/private/a.txt", "127.0.0.1"), "200");
    assert_eq!(code("/private/a.txt", "127.0.0.2"), "403", "not in allow");
    assert_eq!(
        code("/public/b.txt", "127.0.0.2"),
        "200",
        "no rules elsewhere"
    );
    assert_eq!(code("/v6/c.txt", "127.0.0.3"), "403", "in the denied /30");
    assert_eq!(code("/v6/c.txt", "127.0.0.4"), "200", "just past it");
    s.assert_clean_log(&[]);
    // IPv6: a denied prefix on an IPv6 listener.
    let s6 = crate::server_with(
        &[("x.txt", b"x")],
        "listen = [\"[::1]:0\"]\n[[location]]\nroot = \"root\"\ndeny = [\"::1/128\"]\n",
    );
    let (ok, out) = crate::curl(&[
        "-g",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("http://{}/x.txt", s6.addr),
    ]);
    assert!(ok);
    assert_eq!(String::from_utf8(out).unwrap(), "403");
}
