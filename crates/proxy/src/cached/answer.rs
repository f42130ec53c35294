//! Answering a client from a stored object (`Age`, `Cache-Status`, and the access log's
//! cache word), through the response filters for a complete 200, or from the bytes as they
//! arrive for one still being fetched.

use std::sync::Arc;

use ramjet_cache::fill::Fill;
use ramjet_cache::{Hit, Object, Stored};
use ramjet_http1::range::{parse_range, ByteRange, RangeOutcome};
use ramjet_http1::{Method, RequestHead};
use ramjet_pipeline::filters::conditional::{evaluate, if_range_holds, Verdict};
use ramjet_pipeline::filters::{self, Representation};
use ramjet_pipeline::{error_response, Body, Outcome, Response};

/// Serve a stored object: the filters for a complete 200, its own status otherwise.
pub(crate) fn answer(
    o: &Object,
    head: &RequestHead<'_>,
    now: u64,
    cache: &str,
    status: &str,
) -> Response {
    let mut r = if o.meta.status != 200 {
        let mut r = Response::new(o.meta.status, Hit(o).body());
        r.shared_headers = o.meta.fields.clone();
        r
    } else if let Stored::Filling(fill) = &o.body {
        filling(o, fill, head)
    } else {
        filters::respond(head, &Hit(o), ramjet_config::DEFAULT_MAX_RANGES)
    };
    // The origin's Date goes with what was stored (not with a 304's validators or an
    // error page).
    r.own_date = o.has_date
        && r.shared_headers.len() == o.meta.fields.len()
        && r.shared_headers.as_ptr() == o.meta.fields.as_ptr();
    r.headers.extend_from_slice(b"Age: ");
    r.headers.extend_from_slice(
        itoa::Buffer::new()
            .format(o.meta.freshness.age_ms(now) / 1000)
            .as_bytes(),
    );
    r.headers.extend_from_slice(b"\r\n");
    cache_status(&mut r, cache, status);
    r
}

/// A 200 still arriving: preconditions now, a single range as soon as its bytes are there.
fn filling(o: &Object, fill: &Arc<Fill>, head: &RequestHead<'_>) -> Response {
    match evaluate(head, &o.etag, o.modified) {
        Verdict::NotModified => {
            let mut r = Response::new(304, Body::Empty);
            r.shared_headers = o.validators.clone();
            return r;
        }
        Verdict::PreconditionFailed => return error_response(412),
        Verdict::Proceed => {}
    }
    if let (Method::Get, Some(range), Some(len)) = (head.method, head.range, fill.length) {
        let applies = head
            .if_range
            .is_none_or(|v| if_range_holds(v, &o.etag, o.modified));
        if applies {
            if let RangeOutcome::Partial(rs) = parse_range(range, len, 1) {
                if let [ByteRange { start, end }] = rs[..] {
                    let body = Body::Stream(Box::new(fill.reader(start, Some(end))));
                    let mut r = Response::new(206, body);
                    r.shared_headers = o.meta.fields.clone();
                    r.headers.extend_from_slice(
                        format!("Content-Range: bytes {start}-{}/{len}\r\n", end - 1).as_bytes(),
                    );
                    return r;
                }
            }
        }
    }
    let mut r = Response::new(200, Hit(o).body());
    r.shared_headers = o.meta.fields.clone();
    r
}

pub(crate) fn with_status(mut out: Outcome, cache: &str, status: &str) -> Outcome {
    if let Outcome::Respond(r) = &mut out {
        cache_status(r, cache, status);
    }
    out
}

/// `Cache-Status` (RFC 9211) on the response, with the cache's identifier (`[cache.NAME]
/// identity`), and the access log's word for it (nginx's `$upstream_cache_status`).
pub(crate) fn cache_status(r: &mut Response, cache: &str, status: &str) {
    r.headers.extend_from_slice(b"Cache-Status: ");
    r.headers.extend_from_slice(cache.as_bytes());
    r.headers.extend_from_slice(b"; ");
    r.headers.extend_from_slice(status.as_bytes());
    r.headers.extend_from_slice(b"\r\n");
    let word = if status.contains("stale-if-error") || status.contains("stale-while") {
        "STALE"
    } else if status.starts_with("hit") {
        "HIT"
    } else if status.contains("fwd-status=304") {
        "REVALIDATED"
    } else if status.starts_with("fwd=stale") {
        "EXPIRED"
    } else if status.starts_with("fwd=miss") {
        "MISS"
    } else {
        "BYPASS"
    };
    let extras = r.extras.get_or_insert_with(Default::default);
    match extras.upstream.as_mut() {
        Some(u) => u.cache = word,
        None => {
            extras.upstream = Some(ramjet_observe::UpstreamLog {
                addr: String::new(),
                status: 0,
                micros: 0,
                cache: word,
            })
        }
    }
}
