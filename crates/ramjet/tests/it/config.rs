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
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("good.toml: ok"));
    assert!(
        text.contains("send_buffer: Some(\n            8192,"),
        "{text}"
    );

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
