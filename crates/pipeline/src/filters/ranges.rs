//! 206 and 416 responses: single ranges as a slice of the representation, several as
//! `multipart/byteranges` (RFC 9110 §14.6).

use std::cell::Cell;

use bytes::Bytes;
use ramjet_http1::range::ByteRange;

use super::Representation;
use crate::error_page::error_response;
use crate::response::{Body, Part, Response};

/// 206 for one range.
pub(crate) fn single(rep: &impl Representation, r: ByteRange) -> Response {
    let body = match rep.slice(r.start, r.end) {
        Part::Bytes(b) => Body::Bytes(b),
        Part::File { file, offset, len } => Body::File { file, offset, len },
    };
    let mut resp = Response::new(206, body);
    resp.shared_headers = rep.headers();
    resp.header(
        "Content-Range",
        format!("bytes {}-{}/{}", r.start, r.end - 1, rep.length()).as_bytes(),
    )
}

thread_local! {
    static BOUNDARY_SEQ: Cell<u64> = const { Cell::new(0) };
}

/// 206 multipart/byteranges for several ranges.
pub(crate) fn multi(rep: &impl Representation, ranges: &[ByteRange]) -> Response {
    let seq = BOUNDARY_SEQ.with(|s| {
        s.set(s.get() + 1);
        s.get()
    });
    let boundary = format!(
        "ramjet-{:016x}{seq:08x}",
        rep.modified() ^ rep.length().rotate_left(17)
    );
    let mut parts = Vec::with_capacity(ranges.len() * 2 + 1);
    for r in ranges {
        let part_head = format!(
            "\r\n--{boundary}\r\nContent-Type: {}\r\nContent-Range: bytes {}-{}/{}\r\n\r\n",
            rep.content_type(),
            r.start,
            r.end - 1,
            rep.length()
        );
        parts.push(Part::Bytes(Bytes::from(part_head)));
        parts.push(rep.slice(r.start, r.end));
    }
    parts.push(Part::Bytes(Bytes::from(format!("\r\n--{boundary}--\r\n"))));
    let mut resp = Response::new(206, Body::Parts(parts));
    resp.shared_headers = rep.validators();
    resp.header(
        "Content-Type",
        format!("multipart/byteranges; boundary={boundary}").as_bytes(),
    )
}

/// 416 with the representation's length (RFC 9110 §15.5.17).
pub(crate) fn unsatisfiable(rep: &impl Representation) -> Response {
    error_response(416).header(
        "Content-Range",
        format!("bytes */{}", rep.length()).as_bytes(),
    )
}
