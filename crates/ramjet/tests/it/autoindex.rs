//! Directory listings with hostile names, HTML and JSON.

use crate::server_with;
use ramjet_testkit::Server;

const HOSTILE: [&str; 9] = [
    "with space.txt",
    "100%.txt",
    "hash#tag.txt",
    "plus+sign.txt",
    "quote\"d.txt",
    "<img src=x onerror=alert(1)>.txt",
    "apos'trophe.txt",
    "ünïcödé.txt",
    "q?mark.txt",
];

#[test]
fn html_listing_escapes_and_links_every_name() {
    let files: Vec<(String, Vec<u8>)> = HOSTILE
        .iter()
        .map(|n| (format!("pub/{n}"), n.as_bytes().to_vec()))
        .collect();
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    let s = server_with(&refs, "[[location]]\nroot = \"root\"\nautoindex = true\n");
    std::fs::create_dir(s.root().join("pub/sub dir")).unwrap();
    std::fs::write(s.root().join("pub/HEADER.html"), "<p>mirror header</p>").unwrap();
    std::fs::write(s.root().join("pub/.hidden"), "x").unwrap();
    let r = s.get("/pub/");
    assert_eq!(r.status, 200);
    let html = r.text();
    assert!(html.contains("<p>mirror header</p>"));
    assert!(!html.contains("<img src=x"), "unescaped name");
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;.txt"));
    assert!(!html.contains(".hidden"));
    assert!(html.contains("href=\"sub%20dir/\""));
    // Every link, followed, gives back the file whose content is its own name.
    for name in HOSTILE {
        let href = html
            .split("href=\"")
            .skip(1)
            .map(|h| &h[..h.find('"').unwrap()])
            .find(|h| {
                let decoded = percent_decode(h);
                decoded == name.as_bytes()
            })
            .unwrap_or_else(|| panic!("no link for {name}"));
        assert_eq!(s.get(&format!("/pub/{href}")).text(), name, "{href}");
        let (ok, body) = crate::curl(&[&s.url(&format!("/pub/{href}"))]);
        assert!(ok);
        assert_eq!(String::from_utf8_lossy(&body), name);
    }
    s.assert_clean_log(&[]);
}

fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

#[test]
fn json_listing_has_exact_sizes_and_times() {
    let s = server_with(
        &[("m/a.bin", &[7u8; 12345]), ("m/b.txt", b"b")],
        "[[location]]\nroot = \"root\"\nautoindex = true\n",
    );
    std::fs::create_dir(s.root().join("m/dir")).unwrap();
    for req in ["/m/?format=json", "/m/"] {
        let mut c = s.client();
        let accept = if req.contains("format") {
            ""
        } else {
            "Accept: application/json\r\n"
        };
        c.send(
            format!("GET {req} HTTP/1.1\r\nHost: t\r\n{accept}Connection: close\r\n\r\n")
                .as_bytes(),
        );
        let r = c.response(false);
        assert_eq!(
            r.header("Content-Type").as_deref(),
            Some("application/json")
        );
        let text = r.text();
        assert!(text.contains("\"name\": \"a.bin\""), "{text}");
        assert!(text.contains("\"size\": 12345"));
        assert!(text.contains("\"type\": \"directory\""));
        assert!(text.contains("\"mtime_unix\": "));
    }
    // Sorting by size, descending.
    let html = s.get("/m/?C=S;O=D").text();
    assert!(html.find("a.bin").unwrap() < html.find("b.txt").unwrap());
    let html = s.get("/m/?C=S;O=A").text();
    assert!(html.find("b.txt").unwrap() < html.find("a.bin").unwrap());
    s.assert_clean_log(&[]);
}

#[test]
fn listing_is_off_by_default() {
    let s = server_with(&[("d/x", b"x")], "");
    assert_eq!(s.get("/d/").status, 403);
    s.assert_clean_log(&[]);
}

/// A GET with extra header lines, on a new connection.
fn get_with(s: &ramjet_testkit::Server, path: &str, headers: &str) -> ramjet_testkit::Response {
    let mut c = s.client();
    c.send(
        format!("GET {path} HTTP/1.1\r\nHost: t\r\n{headers}Connection: close\r\n\r\n").as_bytes(),
    );
    c.response(false)
}

#[test]
fn listings_compress_sort_and_mark_what_mirror_tools_need() {
    let mut files: Vec<(String, Vec<u8>)> = (0..300)
        .map(|i| (format!("pub/file-{i:04}.iso"), vec![b'x'; i]))
        .collect();
    files.push(("pub/.dotfile".into(), b"d".to_vec()));
    files.push(("hidden/.only".into(), b"h".to_vec()));
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    let s = server_with(
        &refs,
        "[[location]]\nroot = \"root\"\nautoindex = true\n[[location]]\npath = \"/hidden/\"\nroot = \"root\"\nautoindex = true\nautoindex_dotfiles = true\n",
    );
    // A symlink leaving the root cannot be opened: listed as unreadable, not dropped.
    std::os::unix::fs::symlink("/etc/passwd", s.root().join("pub/escape")).unwrap();
    let r = s.get("/pub/");
    assert_eq!(r.status, 200);
    // No validators, as Apache's and nginx's listings have none (see below).
    assert_eq!((r.header("ETag"), r.header("Last-Modified")), (None, None));
    let html = r.text();
    assert!(
        html.contains("<tr><td>escape</td><td>-</td><td class=\"s\">unreadable</td>"),
        "{html}"
    );
    assert!(!html.contains(".dotfile"));
    assert!(html.contains("Parent Directory"));
    assert!(
        html.contains("<a href=\"?C=N;O=D\">Name</a> \u{25b2}"),
        "the sorted column is marked"
    );
    // Sorted by size, descending: marked the other way.
    assert!(s.get("/pub/?C=S;O=D").text().contains("Size</a> \u{25bc}"));
    // Compressed when accepted, a variant with its own tag; the JSON lists the unreadable one.
    let gz = get_with(&s, "/pub/", "Accept-Encoding: gzip\r\n");
    assert_eq!(gz.header("Content-Encoding").as_deref(), Some("gzip"));
    assert!(
        gz.body.len() * 3 < html.len(),
        "{} compressed vs {}",
        gz.body.len(),
        html.len()
    );
    let (ok, unpacked) = crate::curl(&["--compressed", &s.url("/pub/")]);
    assert!(ok && String::from_utf8_lossy(&unpacked).contains("file-0299.iso"));
    let json: serde_json::Value = serde_json::from_slice(&s.get("/pub/?format=json").body).unwrap();
    assert!(json
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "escape" && e["type"] == "unreadable"));
    // Dotfiles where the location asks for them; no parent link at the top.
    assert!(s.get("/hidden/").text().contains(".only"));
    assert!(!s.get("/").text().contains("Parent Directory"));
    // OPTIONS on a static location.
    let mut c = s.client();
    c.send(b"OPTIONS /pub/ HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(false);
    assert_eq!(
        (r.status, r.header("Allow").as_deref()),
        (200, Some("GET, HEAD, OPTIONS"))
    );
    assert_eq!(r.header("Content-Length").as_deref(), Some("0"));
    s.assert_clean_log(&[]);
}

/// A tree for the mirror tools: a change deep down must reach every mirror.
fn mirror_tree() -> Server {
    server_with(
        &[
            ("pub/top.txt", b"top"),
            ("pub/a/b/c/d/deep.txt", b"deep v1"),
            ("pub/a/side.txt", b"side"),
            ("pub/empty.txt", b""),
        ],
        "[[location]]\nroot = \"root\"\nautoindex = true\n",
    )
}

/// Change `pub/a/b/c/d/deep.txt` (and its mtime, a minute on, as a publisher's copy would
/// leave it).
fn change_deep_file(s: &Server) {
    let p = s.root().join("pub/a/b/c/d/deep.txt");
    std::fs::write(&p, b"deep v2, longer").unwrap();
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_modified(later)
        .unwrap();
}

/// `wget -r -N` after a change deep in the tree fetches the changed file: listings carry
/// no validators, so wget never gets a 304 for one and always descends (it used to get a
/// 304 for the unchanged root listing and stop there).
#[test]
fn wget_mirror_sees_a_change_deep_in_the_tree() {
    let s = mirror_tree();
    let dir = tempfile::tempdir().unwrap();
    let run = || {
        let out = std::process::Command::new("wget")
            .args(["-r", "-N", "-np", "-nH", "-q", &s.url("/pub/")])
            .current_dir(dir.path())
            .output()
            .expect("wget is installed");
        assert!(out.status.success(), "{out:?}");
    };
    run();
    let deep = dir.path().join("pub/a/b/c/d/deep.txt");
    assert_eq!(std::fs::read(&deep).unwrap(), b"deep v1");
    assert_eq!(
        std::fs::read(dir.path().join("pub/empty.txt")).unwrap(),
        b""
    );
    change_deep_file(&s);
    run();
    assert_eq!(std::fs::read(&deep).unwrap(), b"deep v2, longer");
}

/// How a mirror tool is run into a directory.
type MirrorCommand<'a> = Box<dyn Fn(&std::path::Path) -> std::process::Command + 'a>;

/// lftp's `mirror` over HTTP, and rclone's HTTP remote, after the same deep change.
#[test]
fn lftp_and_rclone_mirrors_see_a_change_deep_in_the_tree() {
    let s = mirror_tree();
    let url = s.url("/pub/");
    let tools: [(&str, MirrorCommand); 2] = [
        (
            "lftp",
            Box::new(|to| {
                let mut c = std::process::Command::new("lftp");
                c.args([
                    "-c",
                    &format!(
                        "set net:max-retries 1; set cmd:fail-exit yes; mirror --only-newer {url} {}",
                        to.display()
                    ),
                ]);
                c
            }),
        ),
        (
            "rclone",
            Box::new(|to| {
                let mut c = std::process::Command::new("rclone");
                c.args([
                    "sync",
                    "--http-url",
                    &url,
                    ":http:",
                    &to.display().to_string(),
                ])
                .env("RCLONE_CONFIG", "/dev/null");
                c
            }),
        ),
    ];
    let dirs: Vec<tempfile::TempDir> = tools.iter().map(|_| tempfile::tempdir().unwrap()).collect();
    let run = |i: usize| {
        let out = (tools[i].1)(dirs[i].path())
            .output()
            .unwrap_or_else(|e| panic!("{} is installed: {e}", tools[i].0));
        assert!(out.status.success(), "{}: {out:?}", tools[i].0);
    };
    for i in 0..tools.len() {
        run(i);
        let deep = dirs[i].path().join("a/b/c/d/deep.txt");
        assert_eq!(std::fs::read(&deep).unwrap(), b"deep v1", "{}", tools[i].0);
    }
    change_deep_file(&s);
    for i in 0..tools.len() {
        run(i);
        let deep = dirs[i].path().join("a/b/c/d/deep.txt");
        assert_eq!(
            std::fs::read(&deep).unwrap(),
            b"deep v2, longer",
            "{}",
            tools[i].0
        );
    }
}
