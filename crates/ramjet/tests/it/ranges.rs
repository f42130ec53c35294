//! Range requests: single, suffix, open-ended, multipart, 416, If-Range, files over 4 GiB.

use crate::{bytes, server_with};

fn get_range(s: &ramjet_testkit::Server, path: &str, extra: &str) -> ramjet_testkit::Response {
    let mut c = s.client();
    c.send(
        format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n").as_bytes(),
    );
    c.response(false)
}

#[test]
fn single_ranges_in_memory_and_by_sendfile() {
    let small = bytes(1000, 3);
    let big = bytes(200_000, 4);
    let s = server_with(
        &[("s.bin", &small), ("b.bin", &big)],
        "[file_cache]\nsmall_file_max = \"4k\"\n",
    );
    for (path, data) in [("/s.bin", &small), ("/b.bin", &big)] {
        let n = data.len();
        let r = get_range(&s, path, "Range: bytes=10-19\r\n");
        assert_eq!(r.status, 206);
        assert_eq!(r.body, data[10..20]);
        assert_eq!(r.header("Content-Range"), Some(format!("bytes 10-19/{n}")));
        let r = get_range(&s, path, "Range: bytes=-5\r\n");
        assert_eq!(r.body, data[n - 5..]);
        let r = get_range(&s, path, &format!("Range: bytes={}-\r\n", n - 3));
        assert_eq!(r.body, data[n - 3..]);
        let r = get_range(&s, path, &format!("Range: bytes=0-{}\r\n", n * 2));
        assert_eq!((r.status, r.body.len()), (206, n));
        let r = get_range(&s, path, &format!("Range: bytes={n}-\r\n"));
        assert_eq!(r.status, 416);
        assert_eq!(r.header("Content-Range"), Some(format!("bytes */{n}")));
        // Syntactically invalid: ignored, full response.
        let r = get_range(&s, path, "Range: bytes=5-1\r\n");
        assert_eq!((r.status, r.body.len()), (200, n));
    }
    s.assert_clean_log(&[]);
}

#[test]
fn multipart_byteranges() {
    let data = bytes(100_000, 5);
    let s = server_with(
        &[("m.bin", &data)],
        "[file_cache]\nsmall_file_max = \"1k\"\n",
    );
    let r = get_range(&s, "/m.bin", "Range: bytes=0-9,50-59,99990-\r\n");
    assert_eq!(r.status, 206);
    let parts = r.parts().expect("multipart");
    assert_eq!(parts.len(), 3);
    assert!(parts[0].0.contains("Content-Range: bytes 0-9/100000"));
    assert_eq!(parts[0].1, data[0..10]);
    assert_eq!(parts[1].1, data[50..60]);
    assert_eq!(parts[2].1, data[99990..]);
    // Overlapping ranges are coalesced; the 2011 "0-,0-,0-..." attack yields one range.
    let many = vec!["0-"; 300].join(",");
    let r = get_range(&s, "/m.bin", &format!("Range: bytes={many}\r\n"));
    assert_eq!((r.status, r.body.len()), (206, data.len()));
    assert!(r.header("Content-Range").is_some());
    // Too many distinct ranges: the whole file instead.
    let distinct: Vec<String> = (0..40).map(|i| format!("{}-{}", i * 10, i * 10)).collect();
    let r = get_range(
        &s,
        "/m.bin",
        &format!("Range: bytes={}\r\n", distinct.join(",")),
    );
    assert_eq!((r.status, r.body.len()), (200, data.len()));
    // curl agrees on a multi-range answer.
    let (ok, out) = crate::curl(&["-r", "0-1,3-4", &s.url("/m.bin")]);
    assert!(ok && String::from_utf8_lossy(&out).contains("Content-Range: bytes 3-4/100000"));
    s.assert_clean_log(&[]);
}

#[test]
fn if_range() {
    let data = bytes(5000, 6);
    let s = server_with(&[("f.bin", &data)], "");
    let etag = s.get("/f.bin").header("ETag").unwrap();
    let lm = s.get("/f.bin").header("Last-Modified").unwrap();
    let r = get_range(
        &s,
        "/f.bin",
        &format!("Range: bytes=0-9\r\nIf-Range: {etag}\r\n"),
    );
    assert_eq!((r.status, r.body.len()), (206, 10));
    let r = get_range(
        &s,
        "/f.bin",
        &format!("Range: bytes=0-9\r\nIf-Range: {lm}\r\n"),
    );
    assert_eq!(r.status, 206);
    let r = get_range(&s, "/f.bin", "Range: bytes=0-9\r\nIf-Range: \"stale\"\r\n");
    assert_eq!((r.status, r.body.len()), (200, 5000));
    s.assert_clean_log(&[]);
}

#[test]
fn files_over_4gib() {
    let dir = ramjet_testkit::Server::dir();
    let path = dir.path().join("root/huge.bin");
    let f = std::fs::File::create(&path).unwrap();
    let size: u64 = 5 * (1 << 30) + 123;
    f.set_len(size).unwrap();
    // Mark a few places so the bytes can be checked.
    use std::os::unix::fs::FileExt;
    let marks: [(u64, &[u8]); 3] = [
        (1 << 32, b"FOURGIB"),
        ((1 << 32) - 3, b"edg"),
        (size - 4, b"END!"),
    ];
    for (off, m) in marks {
        f.write_at(m, off).unwrap();
    }
    drop(f);
    let s = ramjet_testkit::Server::start(crate::BIN, dir, "");
    let r = get_range(&s, "/huge.bin", "Range: bytes=4294967296-4294967302\r\n");
    assert_eq!((r.status, r.body.as_slice()), (206, &b"FOURGIB"[..]));
    assert_eq!(
        r.header("Content-Range"),
        Some(format!("bytes 4294967296-4294967302/{size}"))
    );
    let r = get_range(&s, "/huge.bin", "Range: bytes=-4\r\n");
    assert_eq!(r.body, b"END!");
    let r = get_range(&s, "/huge.bin", "Range: bytes=4294967293-4294967298\r\n");
    assert_eq!(
        r.body,
        b"edg".iter().chain(b"FOU").copied().collect::<Vec<u8>>()
    );
    // The whole file (5 GiB of mostly holes) by sendfile, counted and spot-checked by curl.
    let mut c = s.client();
    c.send(b"HEAD /huge.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(
        c.response(true).header("Content-Length"),
        Some(size.to_string())
    );
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "curl -s --max-time 120 {} | wc -c",
            s.url("/huge.bin")
        ))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        size.to_string()
    );
    s.assert_clean_log(&[]);
}
