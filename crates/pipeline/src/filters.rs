//! The response filters (stage 5), written once for every representation that offers
//! validators and a length: a file, a cached object, a module's object. A producer hands
//! its representation to [`respond`], which applies the preconditions (304/412) and the
//! range request (206/416) and otherwise answers 200 with the whole body.

pub mod conditional;
mod ranges;

use bytes::Bytes;
use ramjet_http1::range::{parse_range, RangeOutcome};
use ramjet_http1::{Method, RequestHead};

use crate::error_page::error_response;
use crate::response::{Body, Part, Response};
use conditional::{evaluate, if_range_holds, Verdict};

/// A representation the filters can answer from.
pub trait Representation {
    /// Strong entity tag, with its quotes.
    fn etag(&self) -> &[u8];
    /// Last modification in Unix seconds (the precision of `Last-Modified`).
    fn modified(&self) -> u64;
    /// Length in bytes.
    fn length(&self) -> u64;
    /// Media type, for the parts of a multipart answer.
    fn content_type(&self) -> &str;
    /// Header lines of a 200 or single-range 206 (`Content-Type`, the validators, ...).
    fn headers(&self) -> Bytes;
    /// The validator lines alone (a 304, a multipart 206).
    fn validators(&self) -> Bytes;
    /// Bytes `[start, end)` as a body part (memory or a file range: never copied).
    fn slice(&self, start: u64, end: u64) -> Part;
    /// The whole representation as a body.
    fn body(&self) -> Body;
}

/// Preconditions, then the range request, then the full representation. `max_ranges`
/// caps a multi-range request (more ranges get the whole representation).
pub fn respond(head: &RequestHead<'_>, rep: &impl Representation, max_ranges: usize) -> Response {
    match evaluate(head, rep.etag(), rep.modified()) {
        Verdict::NotModified => {
            let mut r = Response::new(304, Body::Empty);
            r.shared_headers = rep.validators();
            return r;
        }
        Verdict::PreconditionFailed => return error_response(412),
        Verdict::Proceed => {}
    }
    if let (Method::Get, Some(range)) = (head.method, head.range) {
        let applies = head
            .if_range
            .is_none_or(|v| if_range_holds(v, rep.etag(), rep.modified()));
        if applies {
            match parse_range(range, rep.length(), max_ranges) {
                RangeOutcome::Full => {}
                RangeOutcome::Unsatisfiable => return ranges::unsatisfiable(rep),
                RangeOutcome::Partial(rs) if rs.len() == 1 => return ranges::single(rep, rs[0]),
                RangeOutcome::Partial(rs) => return ranges::multi(rep, &rs),
            }
        }
    }
    let mut r = Response::new(200, rep.body());
    r.shared_headers = rep.headers();
    r
}

#[cfg(test)]
mod tests;
