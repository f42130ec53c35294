//! `ramjet specweb`: the SPECweb99 file set written, verified and served.

use std::process::Command;

use ramjet_testkit::Server;

fn fileset(args: &[&str]) -> std::process::Output {
    Command::new(crate::BIN)
        .args(["specweb", "fileset", "--no-progress"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_file_set_is_written_verified_and_served_as_its_header_says() {
    let dir = Server::dir();
    let root = dir.path().join("root");
    let root_s = root.to_str().unwrap();
    // 0 connections: the minimum of 25 directories (122 MiB).
    let out = fileset(&["--connections", "0", root_s]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("25 directories, 900 files"), "{said}");
    assert!(root.join("file_set/dir00024/class3_8").is_file());
    assert!(!root.join("file_set/dir00025").exists());

    let out = fileset(&["--connections", "0", "--verify", root_s]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Served as a static file: the header line names it and its size.
    let server = Server::start(crate::BIN, dir, "");
    let (ok, body) = crate::curl(&[&server.url("/file_set/dir00007/class2_3")]);
    assert!(ok);
    assert_eq!(body.len(), 40960);
    assert!(body.starts_with(b"    40960 file_set/dir00007/class2_3\n"));
    assert_eq!(body.windows(11).filter(|w| w == b"<!WEB99CAD>").count(), 2);

    // A damaged file fails the check, named; a set too small for the load does too.
    let victim = root.join("file_set/dir00011/class1_4");
    let mut bytes = std::fs::read(&victim).unwrap();
    // Offset 37 + 63 is the body's first newline.
    assert_eq!(bytes[100], b'\n');
    bytes[100] = b'x';
    std::fs::write(&victim, &bytes).unwrap();
    let out = fileset(&["--connections", "0", "--verify", "--threads", "1", root_s]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("dir00011/class1_4"), "{err}");

    // Written again, the set is whole; a larger load needs directories it lacks.
    let out = fileset(&["--connections", "0", root_s]);
    assert!(out.status.success());
    let out = fileset(&["--connections", "100", "--verify", root_s]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("dir000"));
}

#[test]
fn verify_without_a_file_set_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = fileset(&["-c", "10", "--verify", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no file_set directory"));
}
