//! Directory listings with hostile names, HTML and JSON.

use crate::server_with;

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
fn listings_revalidate_compress_and_mark_what_mirror_tools_need() {
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
    let etag = r.header("ETag").expect("a listing has an ETag");
    let modified = r.header("Last-Modified").expect("and a Last-Modified");
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
    // Revalidation: the same listing is 304 by tag and by date; a change makes a new tag.
    assert_eq!(
        get_with(&s, "/pub/", &format!("If-None-Match: {etag}\r\n")).status,
        304
    );
    assert_eq!(
        get_with(&s, "/pub/", &format!("If-Modified-Since: {modified}\r\n")).status,
        304
    );
    std::fs::write(s.root().join("pub/file-0001.iso"), b"grown in place").unwrap();
    let r = crate::poll_until(|| {
        let r = get_with(&s, "/pub/", &format!("If-None-Match: {etag}\r\n"));
        (r.status == 200).then_some(r)
    });
    assert_ne!(
        r.header("ETag").unwrap(),
        etag,
        "a file changed in place changes the tag"
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
    assert_ne!(gz.header("ETag"), r.header("ETag"));
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

#[test]
fn wget_timestamping_does_not_refetch_an_unchanged_listing() {
    let s = server_with(
        &[("pub/a.txt", b"a")],
        "[[location]]\nroot = \"root\"\nautoindex = true\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let run = || {
        let out = std::process::Command::new("wget")
            .args(["-N", "-S", "-q", &s.url("/pub/")])
            .current_dir(dir.path())
            .output()
            .expect("wget is installed");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let first = run();
    assert!(first.contains("200 OK"), "{first}");
    let second = run();
    assert!(second.contains("304 Not Modified"), "{second}");
}
