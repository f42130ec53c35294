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

/// A file set for 10 connections (25 directories), made once for the client tests.
fn shared_file_set() -> &'static std::path::Path {
    static SET: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    SET.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = fileset(&["-c", "10", dir.path().to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
    .path()
}

/// ramjet serving `www` (a copy of the shared set with `damage` applied) and the module.
fn specweb_server(damage: Option<&str>) -> Server {
    let dir = Server::dir();
    let www = dir.path().join("www");
    let status = Command::new("cp")
        .arg("-a")
        .arg(shared_file_set())
        .arg(&www)
        .status()
        .unwrap();
    assert!(status.success());
    if let Some(rel) = damage {
        // One wrong byte in the file's header line.
        let p = www.join(rel);
        let mut b = std::fs::read(&p).unwrap();
        b[20] ^= 0x01;
        std::fs::write(&p, b).unwrap();
    }
    std::fs::create_dir(dir.path().join("data")).unwrap();
    Server::start(
        crate::BIN,
        dir,
        "[[location]]\nroot = \"www\"\n[[location]]\npath = \"/specweb99\"\nmodule = \"specweb99\"\n[location.module_config]\nroot = \"{dir}/www\"\ndata_dir = \"{dir}/data\"\n",
    )
}

fn run_client(server: &Server, args: &[&str]) -> serde_json::Value {
    let out = Command::new(crate::BIN)
        .args([
            "specweb",
            "run",
            &server.url(""),
            "--json",
            "--iterations",
            "1",
            "--warmup",
            "1s",
            "--rampdown",
            "1s",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_client_gives_a_valid_run_against_ramjet_with_every_request_type() {
    let s = specweb_server(None);
    let r = run_client(&s, &["-c", "10", "--run", "20s"]);
    let m = &r["median"];
    assert_eq!(r["valid"], true, "{:#}", m);
    assert_eq!(m["conforming"], 10, "{:#}", m);
    // Rated receive: about 400 kbit/s per connection, about 3.4 operations a second each.
    let rate = m["mean_bit_rate"].as_f64().unwrap();
    assert!((320_000.0..=400_001.0).contains(&rate), "{rate}");
    for row in m["ops_by_type"].as_array().unwrap() {
        let op = row["op"].as_str().unwrap();
        assert_eq!(row["errors"], 0, "{op}");
        if op != "cgi" {
            assert!(row["ops"].as_u64().unwrap() > 0, "no {op} request: {:#}", m);
        }
    }
    for c in m["classes"].as_array().unwrap() {
        assert!(c["ops"].as_u64().unwrap() > 0);
    }
    // Every POST of the iteration is in the post log.
    assert_eq!(m["posts_sent"], m["post_log_records"]);
    assert!(m["posts_sent"].as_u64().unwrap() > 0);
}

#[test]
fn a_wrong_byte_in_replies_makes_the_run_invalid_with_the_reason() {
    // The most requested class 1 file of the most requested directory.
    let s = specweb_server(Some("file_set/dir00000/class1_4"));
    let r = run_client(&s, &["-c", "5", "--run", "6s"]);
    assert_eq!(r["valid"], false);
    let m = &r["median"];
    let reasons = m["reasons"].to_string();
    assert!(reasons.contains("class 1 errors"), "{reasons}");
    let errors = m["sample_errors"].to_string();
    assert!(
        errors.contains("dir00000/class1_4") && errors.contains("bad url name"),
        "{errors}"
    );
}
