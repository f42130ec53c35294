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
