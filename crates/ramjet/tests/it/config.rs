//! check-config and configuration errors, from the command line.

use std::process::Command;

/// `ramjet check-config FILE`.
fn check_config(file: &std::path::Path) -> std::process::Output {
    Command::new(crate::BIN)
        .arg("check-config")
        .arg(file)
        .output()
        .unwrap()
}

/// The operator's four mistakes come in one run, each with file, line and key, a missing
/// certificate among them.
#[test]
fn check_config_reports_every_error_at_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "workers = \"four\"\nlisten = [{ address = \"127.0.0.1:443\", tls = { certificate = \"c.pem\", key = \"k.pem\" } }]\n[limits]\nmax_body = \"ten megs\"\n[[location]]\nroot = \"www\"\nautoindex = \"yes\"\n",
    )
    .unwrap();
    let out = check_config(&bad);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let f = bad.display();
    for want in [
        format!("{f}:1: key `workers`"),
        format!("{f}:2: key `listen[0].tls`: certificate "),
        format!("{f}:4: key `limits.max_body`"),
        format!("{f}:7: key `location[0].autoindex`"),
    ] {
        assert!(err.contains(&want), "{want} missing:\n{err}");
    }
}

#[test]
fn check_config_reports_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "listen = [\"127.0.0.1:0\"]\n\n[timeouts]\nheader = \"soon\"\n",
    )
    .unwrap();
    let out = check_config(&bad);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:4", bad.display())), "{err}");
    assert!(err.contains("timeouts.header"), "{err}");

    let good = dir.path().join("good.toml");
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(
        &good,
        "[limits]\nsend_buffer = \"8k\"\n[[location]]\nroot = \"www\"\n",
    )
    .unwrap();
    let out = check_config(&good);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("good.toml: ok"));
    // The resolved configuration, as TOML that loads back.
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("send_buffer = \"8k\"\n"), "{text}");
    assert!(
        text.contains("keepalive = \"1m\"\n"),
        "defaults filled in: {text}"
    );
    let printed = dir.path().join("printed.toml");
    std::fs::write(&printed, text.as_bytes()).unwrap();
    assert!(check_config(&printed).status.success(), "{text}");

    // A send buffer too small to be useful is refused, by key.
    std::fs::write(
        &bad,
        "[limits]\nsend_buffer = \"1k\"\n[[location]]\nroot = \"www\"\n",
    )
    .unwrap();
    let out = check_config(&bad);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("limits.send_buffer"), "{err}");
}

#[test]
fn serve_refuses_a_bad_config_and_a_busy_port() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("r.toml");
    std::fs::write(&cfg, "[[location]]\nroot = \"/nonexistent/dir\"\n").unwrap();
    let out = Command::new(crate::BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("location[0].root"));

    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let out = Command::new(crate::BIN)
        .args(["serve", ".", "--listen", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot listen on") && err.contains("another process"),
        "{err}"
    );
}

/// `ramjet ARGS` and its exit code and stderr.
fn ramjet(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(crate::BIN).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_new_users_mistakes_get_errors_in_their_terms() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let (code, err) = ramjet(&["serve", missing.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("command line: the directory to serve") && err.contains("does not exist"),
        "{err}"
    );
    let file = dir.path().join("page.html");
    std::fs::write(&file, "x").unwrap();
    let (code, err) = ramjet(&["serve", file.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(err.contains("is a file, not a directory"), "{err}");
    let (code, err) = ramjet(&["serve", "--workers", "0", "."]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--workers"), "{err}");
    // Options that only apply without --config are refused with it, not ignored.
    let cfg = dir.path().join("r.toml");
    std::fs::write(&cfg, "[[location]]\nroot = \".\"\n").unwrap();
    for extra in [&["."][..], &["--autoindex"], &["--access-log", "off"]] {
        let mut args = vec!["serve", "--config", cfg.to_str().unwrap()];
        args.extend_from_slice(extra);
        let (code, err) = ramjet(&args);
        assert_eq!(code, Some(2), "{extra:?}");
        assert!(err.contains("cannot be used with"), "{extra:?}: {err}");
    }
    // A typo in a key names the key it probably meant.
    std::fs::write(&cfg, "[[location]]\nroott = \".\"\n").unwrap();
    let out = check_config(&cfg);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(":2: key `location[0].roott`: unknown key `roott`; did you mean `root`?"),
        "{err}"
    );
}

#[test]
fn serving_a_directory_lists_it_and_says_where_to_look() {
    let dir = ramjet_testkit::Server::dir();
    std::fs::create_dir(dir.path().join("root/sub")).unwrap();
    std::fs::write(dir.path().join("root/sub/a.txt"), "a").unwrap();
    let mut child = Command::new(crate::BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--access-log",
            "off",
        ])
        .arg(dir.path().join("root"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let mut addr = None;
    let mut open = None;
    for line in lines.map_while(Result::ok) {
        if let Some(rest) = line.split("listening on http://").nth(1) {
            assert!(rest.ends_with("(1 worker)"), "{line}");
            addr = rest.split(' ').next().map(str::to_string);
        }
        if let Some(url) = line.split("INFO open http").nth(1) {
            open = Some(format!("http{url}"));
            break;
        }
    }
    let addr: std::net::SocketAddr = addr.expect("a listening line").parse().unwrap();
    assert_eq!(open.as_deref(), Some(format!("http://{addr}/").as_str()));
    let mut c = ramjet_testkit::Client::connect(addr);
    c.send(b"GET /sub/ HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 200, "a directory without an index is listed");
    assert!(r.text().contains("a.txt"));
    let _ = child.kill();
    let _ = child.wait();
}
