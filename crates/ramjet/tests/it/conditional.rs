//! Conditional requests: 304 and 412.

use crate::server_with;

fn get_with(s: &ramjet_testkit::Server, method: &str, extra: &str) -> ramjet_testkit::Response {
    let mut c = s.client();
    c.send(
        format!("{method} /f.txt HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n")
            .as_bytes(),
    );
    c.response(method == "HEAD")
}

#[test]
fn not_modified_and_precondition_failed() {
    let s = server_with(&[("f.txt", b"content")], "");
    let full = s.get("/f.txt");
    let etag = full.header("ETag").unwrap();
    let lm = full.header("Last-Modified").unwrap();
    let r = get_with(&s, "GET", &format!("If-None-Match: {etag}\r\n"));
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    assert_eq!(r.header("ETag"), Some(etag.clone()));
    assert_eq!(r.header("Content-Length"), None);
    assert_eq!(
        get_with(&s, "HEAD", &format!("If-None-Match: \"x\", W/{etag}\r\n")).status,
        304
    );
    assert_eq!(
        get_with(&s, "GET", &format!("If-Modified-Since: {lm}\r\n")).status,
        304
    );
    assert_eq!(
        get_with(
            &s,
            "GET",
            "If-Modified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\n"
        )
        .status,
        200
    );
    // If-None-Match wins over If-Modified-Since.
    assert_eq!(
        get_with(
            &s,
            "GET",
            &format!("If-None-Match: \"other\"\r\nIf-Modified-Since: {lm}\r\n")
        )
        .status,
        200
    );
    assert_eq!(get_with(&s, "GET", "If-Match: \"other\"\r\n").status, 412);
    assert_eq!(
        get_with(&s, "GET", &format!("If-Match: {etag}\r\n")).status,
        200
    );
    assert_eq!(
        get_with(
            &s,
            "GET",
            "If-Unmodified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\n"
        )
        .status,
        412
    );
    // curl -z uses If-Modified-Since.
    let (ok, out) = crate::curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-z",
        &lm,
        &s.url("/f.txt"),
    ]);
    assert!(ok);
    assert_eq!(String::from_utf8_lossy(&out), "304");
    s.assert_clean_log(&[]);
}
