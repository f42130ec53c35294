//! 206 and 416 responses: single ranges as a slice of the body, several as
//! `multipart/byteranges` (RFC 9110 §14.6).

use std::cell::Cell;

use bytes::Bytes;
use ramjet_http1::range::ByteRange;
use ramjet_pipeline::{error_response, Body, Part, Response};

use crate::cache::Entry;

/// The body bytes `[r.start, r.end)` of the entry, from memory or from the file.
pub(crate) fn slice(entry: &Entry, r: ByteRange) -> Part {
    match &entry.body {
        Some(b) => Part::Bytes(b.slice(r.start as usize..r.end as usize)),
        None => Part::File {
            file: entry.file.clone().expect("a file entry has a descriptor"),
            offset: r.start,
            len: r.len(),
        },
    }
}

/// 206 for one range.
pub(crate) fn single(entry: &Entry, r: ByteRange) -> Response {
    let body = match slice(entry, r) {
        Part::Bytes(b) => Body::Bytes(b),
        Part::File { file, offset, len } => Body::File { file, offset, len },
    };
    let mut resp = Response::new(206, body);
    resp.shared_headers = entry.head.clone();
    resp.header(
        "Content-Range",
        format!("bytes {}-{}/{}", r.start, r.end - 1, entry.size()).as_bytes(),
    )
}

thread_local! {
    static BOUNDARY_SEQ: Cell<u64> = const { Cell::new(0) };
}

/// 206 multipart/byteranges for several ranges.
pub(crate) fn multi(entry: &Entry, ranges: &[ByteRange]) -> Response {
    let seq = BOUNDARY_SEQ.with(|s| {
        s.set(s.get() + 1);
        s.get()
    });
    let boundary = format!(
        "ramjet-{:016x}{seq:08x}",
        entry.mtime ^ entry.size().rotate_left(17)
    );
    let mut parts = Vec::with_capacity(ranges.len() * 2 + 1);
    for r in ranges {
        let part_head = format!(
            "\r\n--{boundary}\r\nContent-Type: {}\r\nContent-Range: bytes {}-{}/{}\r\n\r\n",
            entry.content_type,
            r.start,
            r.end - 1,
            entry.size()
        );
        parts.push(Part::Bytes(Bytes::from(part_head)));
        parts.push(slice(entry, *r));
    }
    parts.push(Part::Bytes(Bytes::from(format!("\r\n--{boundary}--\r\n"))));
    let mut resp = Response::new(206, Body::Parts(parts));
    resp.shared_headers = entry.validators();
    resp.header(
        "Content-Type",
        format!("multipart/byteranges; boundary={boundary}").as_bytes(),
    )
}

/// 416 with the representation's size (RFC 9110 §15.5.17).
pub(crate) fn unsatisfiable(entry: &Entry) -> Response {
    error_response(416).header(
        "Content-Range",
        format!("bytes */{}", entry.size()).as_bytes(),
    )
}
