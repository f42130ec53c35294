//! Issue 11: the edges of every size and state, as a family. A 0-byte file once hung its
//! worker (an empty `writev` retried forever), and nothing asked for one. Every size at and
//! around each threshold (0, 1, small_file_max ± 1, the sendfile chunk ± 1, two chunks + 1)
//! is asked for in every form (GET, HEAD, single, suffix and multi range, If-None-Match) and
//! every connection mode (alone, pipelined between two others, HTTP/1.0); each answer is
//! checked byte for byte, then a new connection must be answered at once by the same (only)
//! worker, and the server's CPU watchdog runs at the end.

use ramjet_http1::range::{parse_range, RangeOutcome};
use ramjet_testkit::{Client, Response, Server};

use crate::{bytes, server_with};

/// `small_file_max` in the test's config: the in-memory / sendfile crossover.
const SMALL: usize = 16 * 1024;
/// The outbox's sendfile chunk (pipeline/src/outbox.rs).
const CHUNK: usize = 256 * 1024;
/// The location's default `max_ranges`.
const MAX_RANGES: usize = 100;

const SIZES: [usize; 9] = [
    0,
    1,
    SMALL - 1,
    SMALL,
    SMALL + 1,
    CHUNK - 1,
    CHUNK,
    CHUNK + 1,
    2 * CHUNK + 1,
];

#[derive(Debug, Clone, Copy)]
enum Form {
    Get,
    Head,
    Single,
    Suffix,
    Multi,
    IfNoneMatch,
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    Alone,
    Pipelined,
    Http10,
}

fn name(size: usize) -> String {
    format!("f{size}.bin")
}

/// Request line and extra header lines for `form` on a file of `size` bytes.
fn request(size: usize, form: Form, etag: &str, version: &str, close: bool) -> (String, bool) {
    let range = match form {
        Form::Single => Some("bytes=1-".to_string()),
        Form::Suffix => Some("bytes=-2".to_string()),
        Form::Multi => Some(format!("bytes=0-0,{}-{}", size / 2 + 1, size / 2 + 2)),
        _ => None,
    };
    let mut extra = String::new();
    if let Some(r) = range {
        extra.push_str(&format!("Range: {r}\r\n"));
    }
    if let Form::IfNoneMatch = form {
        extra.push_str(&format!("If-None-Match: {etag}\r\n"));
    }
    if close {
        extra.push_str("Connection: close\r\n");
    }
    let method = if let Form::Head = form { "HEAD" } else { "GET" };
    let host = if version == "HTTP/1.0" {
        ""
    } else {
        "Host: t\r\n"
    };
    (
        format!("{method} /{} {version}\r\n{host}{extra}\r\n", name(size)),
        matches!(form, Form::Head),
    )
}

/// Check one answer against the file's bytes; the range oracle is the codec's own parser
/// (range semantics have their own tests; this family is about what reaches the wire).
fn check(r: &Response, data: &[u8], form: Form, what: &str) {
    let n = data.len() as u64;
    let len: Option<u64> = r.header("Content-Length").and_then(|v| v.parse().ok());
    match form {
        Form::Get => {
            assert_eq!((r.status, r.body.as_slice()), (200, data), "{what}");
            assert_eq!(len, Some(n), "{what}");
        }
        Form::Head => {
            assert_eq!((r.status, r.body.len()), (200, 0), "{what}");
            assert_eq!(len, Some(n), "{what}: HEAD announces the GET length");
        }
        Form::IfNoneMatch => {
            assert_eq!((r.status, r.body.len()), (304, 0), "{what}");
        }
        Form::Single | Form::Suffix | Form::Multi => {
            let spec = match form {
                Form::Single => "bytes=1-".to_string(),
                Form::Suffix => "bytes=-2".to_string(),
                _ => format!("bytes=0-0,{}-{}", n / 2 + 1, n / 2 + 2),
            };
            match parse_range(spec.as_bytes(), n, MAX_RANGES) {
                RangeOutcome::Full => {
                    assert_eq!((r.status, r.body.as_slice()), (200, data), "{what}")
                }
                RangeOutcome::Unsatisfiable => {
                    assert_eq!(r.status, 416, "{what}");
                    assert_eq!(
                        r.header("Content-Range"),
                        Some(format!("bytes */{n}")),
                        "{what}"
                    );
                }
                RangeOutcome::Partial(rs) if rs.len() == 1 => {
                    let (a, b) = (rs[0].start as usize, rs[0].end as usize);
                    assert_eq!((r.status, r.body.as_slice()), (206, &data[a..b]), "{what}");
                    assert_eq!(
                        r.header("Content-Range"),
                        Some(format!("bytes {a}-{}/{n}", b - 1)),
                        "{what}"
                    );
                }
                RangeOutcome::Partial(rs) => {
                    assert_eq!(r.status, 206, "{what}");
                    let parts = r.parts().unwrap_or_else(|| panic!("{what}: not multipart"));
                    assert_eq!(parts.len(), rs.len(), "{what}");
                    for (part, range) in parts.iter().zip(&rs) {
                        let (a, b) = (range.start as usize, range.end as usize);
                        assert_eq!(part.1, &data[a..b], "{what}");
                        assert!(
                            part.0.contains(&format!("bytes {a}-{}/{n}", b - 1)),
                            "{what}"
                        );
                    }
                }
            }
            if r.status != 200 {
                assert_eq!(len, Some(r.body.len() as u64), "{what}");
            }
        }
    }
}

/// A new connection is answered by the one worker: it did not stall on what came before.
fn follow_up(s: &Server, what: &str) {
    let r = s.get("/one.txt");
    assert_eq!((r.status, r.text().as_str()), (200, "1"), "after {what}");
}

#[test]
fn issue11_every_size_form_and_mode() {
    let files: Vec<(String, Vec<u8>)> = SIZES
        .iter()
        .map(|&n| (name(n), bytes(n, n as u64 + 1)))
        .collect();
    let mut list: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, d)| (p.as_str(), d.as_slice()))
        .collect();
    list.push(("one.txt", b"1"));
    let s = server_with(
        &list,
        "workers = 1\n[file_cache]\nsmall_file_max = \"16k\"\n",
    );
    for (size, (_, data)) in SIZES.iter().zip(&files) {
        let etag = s.get(&format!("/{}", name(*size))).header("ETag").unwrap();
        for form in [
            Form::Get,
            Form::Head,
            Form::Single,
            Form::Suffix,
            Form::Multi,
            Form::IfNoneMatch,
        ] {
            for mode in [Mode::Alone, Mode::Pipelined, Mode::Http10] {
                let what = format!("{size} bytes, {form:?}, {mode:?}");
                let mut c = Client::connect(s.addr);
                match mode {
                    Mode::Alone => {
                        let (req, head) = request(*size, form, &etag, "HTTP/1.1", false);
                        c.send(req.as_bytes());
                        check(&c.response(head), data, form, &what);
                    }
                    Mode::Pipelined => {
                        let (req, head) = request(*size, form, &etag, "HTTP/1.1", false);
                        let around = "GET /one.txt HTTP/1.1\r\nHost: t\r\n\r\n";
                        c.send(format!("{around}{req}{around}").as_bytes());
                        assert_eq!(c.response(false).text(), "1", "{what}: before");
                        check(&c.response(head), data, form, &what);
                        assert_eq!(c.response(false).text(), "1", "{what}: after");
                    }
                    Mode::Http10 => {
                        let (req, head) = request(*size, form, &etag, "HTTP/1.0", false);
                        c.send(req.as_bytes());
                        check(&c.response(head), data, form, &what);
                        assert!(c.closed(), "{what}: HTTP/1.0 without keep-alive closes");
                    }
                }
                follow_up(&s, &what);
            }
        }
    }
    s.assert_idle();
    s.assert_clean_log(&[]);
}

/// The reproduction from issue 11, with curl: a 0-byte file, then another file.
#[test]
fn issue11_empty_file_then_another_with_curl() {
    let s = server_with(&[("empty.txt", b""), ("hi.txt", b"hi\n")], "workers = 1\n");
    for _ in 0..3 {
        let (ok, out) = crate::curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{size_download}",
            &s.url("/empty.txt"),
        ]);
        assert!(ok);
        assert_eq!(String::from_utf8_lossy(&out), "200 0");
        let (ok, out) = crate::curl(&["-m", "3", &s.url("/hi.txt")]);
        assert!(ok, "the next request timed out");
        assert_eq!(out, b"hi\n");
    }
    s.assert_idle();
    s.assert_clean_log(&[]);
}
