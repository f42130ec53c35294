//! `ramjet specweb`: the SPECweb99 file set written, verified and served.

use std::process::Command;

use ramjet_specweb::fileset::file_name;
use ramjet_specweb::postlog;
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
pub(crate) fn shared_file_set() -> &'static std::path::Path {
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
    std::fs::create_dir(dir.path().join("cgi-data")).unwrap();
    // The module, and the same workload as CGI programs (what Apache runs), each with its
    // own tables and post log.
    Server::start(
        crate::BIN,
        dir,
        &format!(
            "[log]\naccess = \"{{dir}}/access.log\"\n[[location]]\nroot = \"www\"\n[[location]]\npath = \"/specweb99\"\nmodule = \"specweb99\"\n[location.module_config]\nroot = \"{{dir}}/www\"\ndata_dir = \"{{dir}}/data\"\n\
             [[location]]\npath = \"/cgi-bin/\"\ncgi_root = \"{}\"\n\
             cgi_env = {{ SPECWEB_ROOT = \"{{dir}}/www\", SPECWEB_DATA = \"{{dir}}/cgi-data\", SPECWEB_SERVER = \"ramjet\" }}\n",
            integrations().display()
        ),
    )
}

fn integrations() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../integrations/specweb99")
        .canonicalize()
        .unwrap()
}

pub(crate) fn run_client(server: &Server, args: &[&str]) -> serde_json::Value {
    let (ok, json, err) = run_client_status(server, args);
    assert!(ok, "{err}");
    json
}

/// The client's exit status (success only for a VALID run), its JSON and its stderr.
fn run_client_status(server: &Server, args: &[&str]) -> (bool, serde_json::Value, String) {
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
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.success(), json, err)
}

#[test]
fn the_client_gives_a_valid_run_against_ramjet_with_every_request_type() {
    let mut s = specweb_server(None);
    // Two client processes, as the kit's manager drives several clients, from two source
    // addresses.
    let r = run_client(
        &s,
        &[
            "-c",
            "10",
            "--run",
            "20s",
            "--processes",
            "2",
            "--sources",
            "127.0.0.2,127.0.0.3",
        ],
    );
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
    // Both source addresses reached the server (its access log is flushed on stop).
    s.stop();
    let log = std::fs::read_to_string(s.path("access.log")).unwrap();
    for ip in ["127.0.0.2 ", "127.0.0.3 "] {
        assert!(
            log.lines().any(|l| l.starts_with(ip)),
            "no request from {ip}"
        );
    }
}

#[test]
fn a_wrong_byte_in_replies_makes_the_run_invalid_with_the_reason() {
    // The most requested class 1 file of the most requested directory.
    let s = specweb_server(Some("file_set/dir00000/class1_4"));
    let (ok, r, err) = run_client_status(&s, &["-c", "5", "--run", "6s"]);
    // An invalid run is a failure to a script: non-zero, with the first reason.
    assert!(!ok, "an INVALID run exited 0");
    assert!(err.contains("the run is INVALID"), "{err}");
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

/// A load larger than the file set was made for is refused before it runs, with the
/// mismatch named (it used to run into 404s, report INVALID and exit 0);
/// `--fileset-connections` makes it draw from the directories there are.
#[test]
fn a_file_set_too_small_for_the_load_is_named_before_the_run() {
    let s = specweb_server(None);
    // The shared set is made for 10 connections: 31 directories; 20 need 38.
    let (ok, _, err) = run_client_status(&s, &["-c", "20", "--run", "2s"]);
    assert!(!ok);
    assert!(
        err.contains("the file set has 31 directories, made for at most 10 connections; a load of 20 connections draws from 38"),
        "{err}"
    );
    assert!(err.contains("--fileset-connections 10"), "{err}");
    let (_, r, err) = run_client_status(
        &s,
        &["-c", "12", "--fileset-connections", "10", "--run", "3s"],
    );
    assert!(err.contains("not a comparable SPECweb99 result"), "{err}");
    let m = &r["median"];
    assert!(!m["sample_errors"].to_string().contains("404"), "{m:#}");
    for row in m["ops_by_type"].as_array().unwrap() {
        assert_eq!(row["errors"], 0, "{m:#}");
    }
}

/// `--url-root`: the file set under a prefix of the server's tree. Static requests carry
/// the prefix; the dynamic queries name the file from /file_set/ on, as the kit's clients
/// do (they used to carry the prefix too, which the module answered 404).
#[test]
fn a_url_root_prefixes_static_paths_and_not_dynamic_queries() {
    let s = specweb_server(None);
    // /mirror/specweb/file_set/... is the same set.
    std::fs::create_dir(s.root().parent().unwrap().join("www/mirror")).unwrap();
    std::os::unix::fs::symlink("..", s.root().parent().unwrap().join("www/mirror/specweb"))
        .unwrap();
    // Every request answered without error is what the prefix must not break (a query
    // that carried it got 404). Validity is not asserted: at the conforming rate a 4 s run
    // makes a few dozen operations per connection, and one that draws a class 3 file can
    // spend the run on it and miss a class, which the run rules call INVALID.
    let (_, r, err) = run_client_status(
        &s,
        &["-c", "5", "--run", "4s", "--url-root", "/mirror/specweb"],
    );
    let m = &r["median"];
    assert!(
        !m["sample_errors"].to_string().contains("404"),
        "{m:#} {err}"
    );
    for row in m["ops_by_type"].as_array().unwrap() {
        assert_eq!(row["errors"], 0, "{m:#}");
    }
    let log = crate::poll_until(|| {
        std::fs::read_to_string(s.path("access.log"))
            .ok()
            .filter(|l| l.contains("GET /specweb99?"))
    });
    assert!(
        log.contains("\"GET /mirror/specweb/file_set/dir"),
        "static paths carry it"
    );
    assert!(
        log.contains("\"GET /specweb99?/file_set/dir"),
        "queries do not"
    );
    assert!(!log.contains("?/mirror/"), "a query carried the URL root");
}

/// One request on a new connection: status, the Set-Cookie value, and the body with the
/// SCRIPT_NAME line (the one line that differs by design) taken out.
/// Requests for objects of each class (`{}` is the script): a standard dynamic GET, CADs for
/// known, unknown and edge users (`cookie_before` goes before `my_cookie` in the field),
/// and a POST; each with its body.
pub(crate) fn object_requests(cookie_before: &str) -> Vec<(String, String)> {
    let mut heads = Vec::new();
    for (d, c, n) in [(0, 0, 0), (3, 1, 4), (7, 2, 8), (24, 3, 1)] {
        let q = format!("/{}", file_name(d, c, n));
        heads.push((format!("GET {{}}?{q} HTTP/1.1\r\n"), String::new()));
        for (user, last) in [(10000, 0), (10007, 359), (10039, 17), (10040, 3), (9999, 1)] {
            heads.push((
                format!(
                    "GET {{}}?{q} HTTP/1.1\r\nCookie: {cookie_before}my_cookie=user_id={user}&last_ad={last}\r\n"
                ),
                String::new(),
            ));
        }
        heads.push((
            "POST {} HTTP/1.1\r\nCookie: my_cookie=user_id=10012&last_ad=3\r\n".to_string(),
            format!("num={n}&client=4&urlroot=%2Ffile_set%2F&class={c}&dir={d:05}"),
        ));
    }
    heads
}

pub(crate) fn ask(s: &Server, head: &str, body: &str) -> (u16, Option<String>, Vec<u8>) {
    let mut c = s.client();
    c.send(
        format!(
            "{head}Host: t\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    let r = c.response(false);
    let text = r.body.clone();
    let script = text.windows(17).position(|w| w == b"<p>SCRIPT_NAME = ");
    let body = match script {
        Some(at) => {
            let end = at + text[at..].iter().position(|&b| b == b'\n').unwrap() + 1;
            [&text[..at], &text[end..]].concat()
        }
        None => text,
    };
    (r.status, r.header("set-cookie"), body)
}

#[test]
fn the_dynamic_cgi_answers_every_request_as_the_module_does() {
    let s = specweb_server(None);
    let module = "/specweb99";
    let cgi = "/cgi-bin/specweb99-dynamic.pl";
    let reset = "?command/Reset&maxload=40&pttime=100&maxthread=30&exp=5,105&urlroot=/file_set/";
    for script in [module, cgi] {
        let (status, _, _) = ask(&s, &format!("GET {script}{reset} HTTP/1.1\r\n"), "");
        assert_eq!(status, 200, "{script}");
    }
    // The tables: the users byte for byte; the ads too but for the expiry times, which
    // come from each one's clock.
    let read = |d: &str, f: &str| std::fs::read(s.path(d).join(f)).unwrap();
    assert_eq!(
        read("data", "User.Personality"),
        read("cgi-data", "User.Personality")
    );
    let ads = |d: &str| ramjet_specweb::tables::parse_ads(&read(d, "Custom.Ads")).unwrap();
    let (a, b) = (ads("data"), ads("cgi-data"));
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(
            (x.demographics, x.weightings, x.min_match),
            (y.demographics, y.weightings, y.min_match)
        );
        assert!((x.expiry - y.expiry).abs() <= 2, "{x:?} {y:?}");
    }
    let mut heads = object_requests("");
    heads.push((
        "GET {}?/file_set/dir99999/class0_0 HTTP/1.1\r\n".into(),
        String::new(),
    ));
    heads.push(("GET {}?/etc/passwd HTTP/1.1\r\n".into(), String::new()));
    // The kit's manager's Finish (2xx), and an unknown command (400).
    heads.push(("GET {}?command/Finish HTTP/1.1\r\n".into(), String::new()));
    heads.push(("GET {}?command/Nope HTTP/1.1\r\n".into(), String::new()));
    heads.push(("POST {} HTTP/1.1\r\n".into(), "dir=1".into()));
    for (head, body) in &heads {
        let m = ask(&s, &head.replace("{}", module), body);
        let g = ask(&s, &head.replace("{}", cgi), body);
        assert_eq!(m.0, g.0, "{head}");
        if m.0 == 200 {
            assert_eq!(m.1, g.1, "{head}");
            assert!(m.2 == g.2, "{head}: bodies differ");
        }
    }
    // The post logs hold the same records but for the time and process id.
    let (m, g) = (post_log(&s, module), post_log(&s, cgi));
    assert_eq!(m.0, "4");
    assert_eq!(m, g);
}

/// What `?command/Fetch` on `script` returns: the header's count and each record but for
/// the time and process id.
pub(crate) type PostLogSeen = (String, Vec<(u64, u32, u32, u32, u64, String, u64)>);

pub(crate) fn post_log(s: &Server, script: &str) -> PostLogSeen {
    let (status, _, body) = ask(s, &format!("GET {script}?command/Fetch HTTP/1.1\r\n"), "");
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    let pre = text
        .split("<pre>\n")
        .nth(1)
        .unwrap()
        .split("\n</pre>")
        .next()
        .unwrap();
    let mut lines = pre.lines();
    let count = lines.next().unwrap().trim().to_string();
    let recs = lines
        .map(|l| {
            let p = postlog::parse_record(l.as_bytes()).unwrap();
            (
                p.recno, p.dir, p.class, p.num, p.client, p.filename, p.user_id,
            )
        })
        .collect();
    (count, recs)
}

#[test]
fn the_client_gives_a_valid_run_against_the_dynamic_cgi() {
    let s = specweb_server(None);
    let r = run_client(
        &s,
        &[
            "-c",
            "4",
            "--run",
            "6s",
            "--dynamic",
            "/cgi-bin/specweb99-dynamic.pl",
        ],
    );
    let m = &r["median"];
    assert_eq!(r["valid"], true, "{:#}", m);
    for row in m["ops_by_type"].as_array().unwrap() {
        assert_eq!(row["errors"], 0, "{:#}", m);
    }
    assert_eq!(m["posts_sent"], m["post_log_records"]);
}

/// The example configuration that mounts the module (`packaging/specweb99.toml`) loads,
/// with its paths pointed at a test directory.
#[test]
fn the_example_configuration_mounts_the_module() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("packaging/specweb99.toml")).unwrap();
    assert!(text.contains("module = \"specweb99\""));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    for sub in ["srv", "data", "cgi"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    let text = text
        .replace("/srv/specweb", &format!("{d}/srv"))
        .replace("/var/lib/specweb", &format!("{d}/data"))
        .replace("/usr/lib/ramjet/specweb99", &format!("{d}/cgi"));
    let cfg = dir.path().join("specweb99.toml");
    std::fs::write(&cfg, text).unwrap();
    let out = Command::new(crate::BIN)
        .arg("check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("module = \"specweb99\""));
}
