//! One stream: its request as the pipeline's request model (a head like any other, so
//! handlers never learn which protocol they serve), the stages, the response.

use std::net::SocketAddr;
use std::sync::Arc;

use ramjet_http1::{parse_request_head, BodyFraming, Method, Parse, Version};
use tokio::time::Instant;

use super::body::StreamBody;
use super::fields::Refused;
use super::frame::Code;
use super::machine::NewStream;
use super::send;
use super::Shared;
use crate::content::Content;
use crate::error_page::{customise, error_response};
use crate::request_body::{Finished, RequestBody};
use crate::response::Response;
use crate::stage;
use crate::throttle::Throttle;
use crate::worker::{Generation, HttpWorker};

/// What every stream of a connection shares.
#[derive(Debug, Clone, Copy)]
pub(super) struct ConnInfo {
    pub peer: SocketAddr,
    pub listener: SocketAddr,
    pub secure: bool,
    /// Over `limits.max_connections_per_client`: every stream is answered 429.
    pub refuse: bool,
}

/// What the access log keeps of a stream until it ends: `GET /path HTTP/2.0` (as nginx
/// writes it), the logged fields, when it began, and the backend's record.
#[derive(Debug)]
pub(crate) struct LogLine {
    pub bytes: Vec<u8>,
    pub line: std::ops::Range<usize>,
    pub host: Option<std::ops::Range<usize>>,
    pub referer: Option<std::ops::Range<usize>>,
    pub user_agent: Option<std::ops::Range<usize>>,
    pub started: Instant,
    pub unix_secs: u64,
    pub upstream: Option<ramjet_observe::UpstreamLog>,
}

impl LogLine {
    fn new(
        first: &[u8],
        fields: [Option<&[u8]>; 3],
        started: Instant,
        unix_secs: u64,
        upstream: Option<ramjet_observe::UpstreamLog>,
    ) -> LogLine {
        // The head built for the stream says `HTTP/1.1`; the log says what was spoken.
        let method_target = first
            .iter()
            .rposition(|&b| b == b' ')
            .map_or(first, |at| &first[..at]);
        let mut bytes = Vec::with_capacity(method_target.len() + 9 + 128);
        bytes.extend_from_slice(method_target);
        bytes.extend_from_slice(b" HTTP/2.0");
        let line = 0..bytes.len();
        let mut keep = |f: Option<&[u8]>| {
            f.map(|v| {
                let at = bytes.len();
                bytes.extend_from_slice(v);
                at..bytes.len()
            })
        };
        let [host, referer, user_agent] = fields;
        let (host, referer, user_agent) = (keep(host), keep(referer), keep(user_agent));
        LogLine {
            bytes,
            line,
            host,
            referer,
            user_agent,
            started,
            unix_secs,
            upstream,
        }
    }

    pub(super) fn field(&self, r: &Option<std::ops::Range<usize>>) -> Option<&[u8]> {
        r.as_ref().map(|r| &self.bytes[r.clone()])
    }
}

/// Serve one stream to its end (its answer queued; the connection frames it).
pub(super) async fn serve<C: Content>(
    w: &HttpWorker<C>,
    gen: Arc<Generation>,
    m: Shared,
    new: NewStream,
    info: ConnInfo,
    started: Instant,
) {
    let id = new.id;
    // The request's state lives in this block only: a body sent over time (`finish`) does
    // not keep it.
    let rest = 'answer: {
        let config = &gen.config;
        let raw = match new.request {
            Ok(r) => r,
            Err(Refused::TooLarge) => {
                let mut r = error_response(431);
                customise(&mut r, config.error_pages.as_deref());
                let a = Answer::bare(&m, id, info, started);
                break 'answer a.send(w, &gen, r, None, false, b"- - HTTP/2.0", [None; 3], None, 0);
            }
            Err(Refused::Malformed) => {
                m.borrow_mut().stream_error(id, Code::PROTOCOL_ERROR);
                return;
            }
        };
        let declared = raw.content_length;
        let mut head = match parse_request_head(&raw.head, &config.limits.http1) {
            Parse::Complete(h) => h,
            Parse::Invalid(kind) => {
                let mut r = error_response(kind.status());
                customise(&mut r, config.error_pages.as_deref());
                let line = &raw.head[..raw.head.iter().position(|&b| b == b'\r').unwrap_or(0)];
                let a = Answer::bare(&m, id, info, started);
                break 'answer a.send(w, &gen, r, None, false, line, [None; 3], None, 0);
            }
            Parse::Partial => {
                m.borrow_mut().stream_error(id, Code::PROTOCOL_ERROR);
                return;
            }
        };
        head.version = Version::Http2;
        head.keep_alive = true;
        if !new.end_stream && head.framing == BodyFraming::None {
            // A body of unknown length: what the pipeline calls chunked (a proxy sends it so).
            head.framing = BodyFraming::Chunked;
        }
        let body = RequestBody::http2((!new.end_stream).then(|| {
            StreamBody::new(
                m.clone(),
                id,
                declared,
                config.limits.max_body_any,
                config.timeouts.header,
            )
        }));
        let addrs = (info.peer, info.listener, info.secure);
        let (mut response, body_result, location) = if info.refuse {
            (crate::conn::too_many(config), Ok(body.finish()), None)
        } else {
            match stage::respond(&w.content, config, &head, started, addrs, body) {
                Ok(a) => a,
                Err(later) => later.await,
            }
        };
        if response.status == 101
            || response
                .extras
                .as_ref()
                .is_some_and(|e| e.handoff.is_some())
        {
            // A connection cannot be handed to an HTTP/1 backend or switch protocols from
            // inside an HTTP/2 one: the client asks again over HTTP/1.1 (RFC 9113 §8.1).
            m.borrow_mut().stream_error(id, Code::HTTP_1_1_REQUIRED);
            return;
        }
        if let Ok(Some(Finished::Http2(mut rest))) = body_result {
            // The request is read to its end before it is answered, as an HTTP/1 connection
            // reads a body before the next request: a stream the client breaks later (a bad
            // trailer section, a wrong length, a reset) gets its error, not an answer.
            // (Boxed: few requests have a body, and every stream's state would hold it.)
            if !Box::pin(rest.drain()).await {
                return;
            }
        }
        let upstream = response.extras.as_mut().and_then(|e| e.upstream.take());
        let slot = location.map_or(0, |l| l.metrics);
        let head_only = head.method == Method::Head;
        let a = Answer::bare(&m, id, info, started);
        a.send(
            w,
            &gen,
            response,
            location,
            head_only,
            head.request_line(),
            [head.host, head.referer, head.user_agent],
            upstream,
            slot,
        )
    };
    finish(&m, id, rest).await;
}

/// What of an answer's body is left to send over time: a produced body, or one under a
/// send rate.
struct Rest {
    body: crate::response::Body,
    throttle: Option<Box<std::cell::RefCell<Throttle>>>,
}

/// Send what is left of an answer's body. Its future is boxed only here, so a stream
/// answered at once (most are) keeps a small state of its own.
async fn finish(m: &Shared, id: u32, rest: Option<Rest>) {
    let Some(Rest { body, mut throttle }) = rest else {
        return;
    };
    let r = Box::pin(send::body(
        m,
        id,
        body,
        throttle.as_mut().map(|t| t.get_mut()),
    ))
    .await;
    if let Err(send::Stopped::Source) = r {
        m.borrow_mut().stream_error(id, Code::INTERNAL_ERROR);
    }
}

/// Where an answer goes.
struct Answer<'a> {
    m: &'a Shared,
    id: u32,
    info: ConnInfo,
    started: Instant,
}

impl<'a> Answer<'a> {
    fn bare(m: &'a Shared, id: u32, info: ConnInfo, started: Instant) -> Answer<'a> {
        Answer {
            m,
            id,
            info,
            started,
        }
    }

    /// Frame the head and queue the body; what must be sent over time is returned.
    #[allow(clippy::too_many_arguments)]
    fn send<C: Content>(
        self,
        w: &HttpWorker<C>,
        gen: &Generation,
        mut response: Response,
        location: Option<&ramjet_config::Location>,
        head_only: bool,
        first_line: &[u8],
        fields: [Option<&[u8]>; 3],
        upstream: Option<ramjet_observe::UpstreamLog>,
        slot: u16,
    ) -> Option<Rest> {
        let (m, id) = (self.m, self.id);
        let status = response.status;
        // Informational heads a backend sent first (103 Early Hints, ...).
        if let Some(interim) = response
            .extras
            .as_mut()
            .map(|e| std::mem::take(&mut e.interim))
        {
            for h in send::interim_heads(&interim) {
                m.borrow_mut().interim(id, &h);
            }
        }
        let no_body = head_only
            || matches!(status, 204 | 304)
            || status < 200
            || matches!(response.body, crate::response::Body::Empty);
        {
            // The connection read the clock for this turn.
            let date = w.date.borrow();
            let (date, unix_secs) = date.last();
            let log = w.log.borrow().enabled().then(|| {
                Box::new(LogLine::new(
                    first_line,
                    fields,
                    self.started,
                    unix_secs,
                    upstream,
                ))
            });
            let mut m = m.borrow_mut();
            m.note(id, status, slot, log);
            let extra = location.and_then(|l| l.response_headers.as_deref());
            let sent = m.respond_with(id, no_body, |enc, out| {
                send::head(&mut response, date, extra, unix_secs, enc, out)
            });
            if !sent || no_body {
                return None;
            }
        }
        // Send rates only when a location or the server has them.
        let throttle =
            if gen.config.send_rate.is_some() || location.is_some_and(|l| l.shaping.is_some()) {
                Throttle::of((location, 0), &gen.config, self.info.peer, None)
            } else {
                None
            };
        if throttle.is_none() {
            match send::body_now(m, id, response.body) {
                Ok(None) | Err(send::Stopped::Gone) => return None,
                Err(send::Stopped::Source) => {
                    m.borrow_mut().stream_error(id, Code::INTERNAL_ERROR);
                    return None;
                }
                Ok(Some(body)) => return Some(Rest { body, throttle }),
            }
        }
        Some(Rest {
            body: response.body,
            throttle,
        })
    }
}
