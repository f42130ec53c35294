//! The filters on a representation that is not a file: an in-memory object, as a cache
//! tier or a module would offer.

use bytes::Bytes;
use ramjet_http1::{parse_request_head, Limits, Parse};

use super::{respond, Representation};
use crate::response::{Body, Part, Response};

struct Object(Bytes);

impl Representation for Object {
    fn etag(&self) -> &[u8] {
        b"\"obj-1\""
    }
    fn modified(&self) -> u64 {
        784_111_777
    }
    fn length(&self) -> u64 {
        self.0.len() as u64
    }
    fn content_type(&self) -> &str {
        "text/plain"
    }
    fn headers(&self) -> Bytes {
        Bytes::from_static(b"Content-Type: text/plain\r\nETag: \"obj-1\"\r\n")
    }
    fn validators(&self) -> Bytes {
        Bytes::from_static(b"ETag: \"obj-1\"\r\n")
    }
    fn slice(&self, start: u64, end: u64) -> Part {
        Part::Bytes(self.0.slice(start as usize..end as usize))
    }
    fn body(&self) -> Body {
        Body::Bytes(self.0.clone())
    }
}

fn answer(method: &str, extra: &str) -> Response {
    let raw = format!("{method} / HTTP/1.1\r\nHost: x\r\n{extra}\r\n");
    let Parse::Complete(head) = parse_request_head(raw.as_bytes(), &Limits::default()) else {
        panic!("test request does not parse")
    };
    respond(&head, &Object(Bytes::from_static(b"0123456789")), 16)
}

fn bytes(r: &Response) -> Vec<u8> {
    match &r.body {
        Body::Bytes(b) => b.to_vec(),
        Body::Parts(parts) => parts
            .iter()
            .flat_map(|p| match p {
                Part::Bytes(b) => b.to_vec(),
                Part::File { .. } => panic!("no file here"),
            })
            .collect(),
        Body::Empty => Vec::new(),
        other => panic!("unexpected body {other:?}"),
    }
}

#[test]
fn full_conditional_and_ranged_answers() {
    let r = answer("GET", "");
    assert_eq!((r.status, bytes(&r)), (200, b"0123456789".to_vec()));
    assert!(r.shared_headers.starts_with(b"Content-Type: text/plain"));

    let r = answer("GET", "If-None-Match: \"obj-1\"\r\n");
    assert_eq!((r.status, bytes(&r)), (304, Vec::new()));
    assert_eq!(&r.shared_headers[..], b"ETag: \"obj-1\"\r\n");
    assert_eq!(answer("GET", "If-Match: \"other\"\r\n").status, 412);

    let r = answer("GET", "Range: bytes=2-4\r\n");
    assert_eq!((r.status, bytes(&r)), (206, b"234".to_vec()));
    assert!(String::from_utf8_lossy(&r.headers).contains("Content-Range: bytes 2-4/10"));

    let r = answer("GET", "Range: bytes=0-0,8-\r\n");
    assert_eq!(r.status, 206);
    let text = String::from_utf8_lossy(&bytes(&r)).into_owned();
    assert!(
        text.contains("Content-Range: bytes 0-0/10\r\n\r\n0"),
        "{text}"
    );
    assert!(
        text.contains("Content-Range: bytes 8-9/10\r\n\r\n89"),
        "{text}"
    );

    let r = answer("GET", "Range: bytes=10-\r\n");
    assert_eq!(r.status, 416);
    assert!(String::from_utf8_lossy(&r.headers).contains("Content-Range: bytes */10"));

    // A stale If-Range: the whole object; HEAD and ranges: no range applies.
    let r = answer("GET", "Range: bytes=2-4\r\nIf-Range: \"old\"\r\n");
    assert_eq!((r.status, bytes(&r).len()), (200, 10));
    assert_eq!(answer("HEAD", "Range: bytes=2-4\r\n").status, 200);
}
