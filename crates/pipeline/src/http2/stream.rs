//! One stream: its request as the pipeline's request model (a head like any other, so
//! handlers never learn which protocol they serve), the stages, the response, the log.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use ramjet_http1::{parse_request_head, BodyFraming, Method, Parse, Version};
use ramjet_observe::Entry;
use tokio::time::Instant;

use super::body::StreamBody;
use super::send;
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

/// The request's fields as an HTTP/1.1 head (RFC 9113 §8.3.1: `:authority` as Host,
/// cookie crumbs joined into one field), for the same parser and the same handlers.
fn head_bytes(parts: &http::request::Parts, out: &mut Vec<u8>) {
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    let authority = parts.uri.authority().map(|a| a.as_str());
    match parts.uri.path_and_query() {
        Some(p) => out.extend_from_slice(p.as_str().as_bytes()),
        // CONNECT: authority-form.
        None => out.extend_from_slice(authority.unwrap_or("/").as_bytes()),
    }
    let host = authority.is_some() || parts.headers.contains_key(http::header::HOST);
    // Without any host, HTTP/1.0 semantics (the parser requires Host of HTTP/1.1): the
    // default virtual host answers, as it would for an HTTP/1.0 client.
    out.extend_from_slice(if host {
        b" HTTP/1.1\r\n"
    } else {
        b" HTTP/1.0\r\n"
    });
    if let Some(a) = authority {
        out.extend_from_slice(b"Host: ");
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let mut cookies = 0;
    for (name, value) in &parts.headers {
        if name == http::header::COOKIE {
            cookies += 1;
            continue;
        }
        if name == http::header::HOST && authority.is_some() {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if cookies > 0 {
        out.extend_from_slice(b"Cookie: ");
        for (i, v) in parts
            .headers
            .get_all(http::header::COOKIE)
            .iter()
            .enumerate()
        {
            if i > 0 {
                out.extend_from_slice(b"; ");
            }
            out.extend_from_slice(v.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Serve one stream to its end.
pub(super) async fn serve<C: Content>(
    w: &HttpWorker<C>,
    gen: Arc<Generation>,
    request: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    info: ConnInfo,
) {
    let started = Instant::now();
    let config = &gen.config;
    let (parts, recv) = request.into_parts();
    let mut raw = Vec::with_capacity(512);
    head_bytes(&parts, &mut raw);
    drop(parts);
    let mut head = match parse_request_head(&raw, &config.limits.http1) {
        Parse::Complete(h) => h,
        Parse::Invalid(kind) => {
            let mut r = error_response(kind.status());
            customise(&mut r, config.error_pages.as_deref());
            let line = &raw[..raw.iter().position(|&b| b == b'\r').unwrap_or(raw.len())];
            let logged = Logged {
                host: None,
                referer: None,
                user_agent: None,
                upstream: None,
                slot: 0,
            };
            answer(
                w,
                &gen,
                &mut respond,
                r,
                None,
                false,
                info,
                started,
                line,
                logged,
            )
            .await;
            return;
        }
        Parse::Partial => {
            respond.send_reset(Reason::PROTOCOL_ERROR);
            return;
        }
    };
    head.version = Version::Http2;
    head.keep_alive = true;
    let end_stream = recv.is_end_stream();
    if !end_stream && head.framing == BodyFraming::None {
        // A body of unknown length: what the pipeline calls chunked (a proxy sends it so).
        head.framing = BodyFraming::Chunked;
    }
    let declared = match head.framing {
        BodyFraming::Length(n) => Some(n),
        _ => None,
    };
    let body = RequestBody::http2((!end_stream).then(|| {
        StreamBody::new(
            recv,
            declared,
            config.limits.max_body_any,
            config.timeouts.header,
        )
    }));
    let addrs = (info.peer, info.listener, info.secure);
    let (response, body_result, location) = if info.refuse {
        (crate::conn::too_many(config), Ok(body.finish()), None)
    } else {
        match stage::respond(&w.content, config, &head, started, addrs, body) {
            Ok(a) => a,
            Err(later) => later.await,
        }
    };
    let mut response = response;
    if response
        .extras
        .as_ref()
        .is_some_and(|e| e.handoff.is_some())
    {
        // A connection cannot be handed to an HTTP/1 backend from inside an HTTP/2 one:
        // the client asks again over HTTP/1.1 (RFC 9113 §8.1, HTTP_1_1_REQUIRED).
        respond.send_reset(Reason::HTTP_1_1_REQUIRED);
        return;
    }
    let upstream = response.extras.as_mut().and_then(|e| e.upstream.take());
    if response.status == 101 {
        respond.send_reset(Reason::HTTP_1_1_REQUIRED);
        return;
    }
    let slot = location.map_or(0, |l| l.metrics);
    if let Ok(Some(Finished::Http2(mut rest))) = body_result {
        // The request is read to its end before it is answered, as an HTTP/1 connection
        // reads a body before the next request: a stream the client breaks later (a bad
        // trailer section, a wrong length, a reset) gets its error, not an answer.
        if !rest.drain().await {
            return;
        }
    }
    let head_only = head.method == Method::Head;
    let logged = Logged {
        host: head.host,
        referer: head.referer,
        user_agent: head.user_agent,
        upstream: upstream.as_ref(),
        slot,
    };
    answer(
        w,
        &gen,
        &mut respond,
        response,
        location,
        head_only,
        info,
        started,
        head.request_line(),
        logged,
    )
    .await;
}

/// The access log's request line, `GET /path HTTP/2.0` as nginx writes it, from the first
/// line of the head built for the stream (`GET /path HTTP/1.1`).
fn log_line(first: &[u8]) -> Vec<u8> {
    let method_target = first
        .iter()
        .rposition(|&b| b == b' ')
        .map_or(first, |at| &first[..at]);
    let mut line = Vec::with_capacity(method_target.len() + 9);
    line.extend_from_slice(method_target);
    line.extend_from_slice(b" HTTP/2.0");
    line
}

/// What the log takes from the head.
struct Logged<'a> {
    host: Option<&'a [u8]>,
    referer: Option<&'a [u8]>,
    user_agent: Option<&'a [u8]>,
    upstream: Option<&'a ramjet_observe::UpstreamLog>,
    slot: u16,
}

#[allow(clippy::too_many_arguments)]
async fn answer<C: Content>(
    w: &HttpWorker<C>,
    gen: &Generation,
    respond: &mut SendResponse<Bytes>,
    mut response: Response,
    location: Option<&ramjet_config::Location>,
    head_only: bool,
    info: ConnInfo,
    started: Instant,
    first_line: &[u8],
    logged: Logged<'_>,
) {
    let status = response.status;
    // Informational heads a backend sent first (103 Early Hints, ...), as HEADERS frames.
    if let Some(interim) = response
        .extras
        .as_mut()
        .map(|e| std::mem::take(&mut e.interim))
    {
        for h in send::interim_heads(&interim) {
            let _ = respond.send_informational(h);
        }
    }
    let (h, unix_secs) = {
        let mut date = w.date.borrow_mut();
        let (date, unix_secs) = date.now();
        let extra = location.and_then(|l| l.response_headers.as_deref());
        (send::head(&mut response, date, unix_secs, extra), unix_secs)
    };
    let no_body = head_only
        || matches!(status, 204 | 304)
        || status < 200
        || matches!(response.body, crate::response::Body::Empty);
    let mut sent = 0u64;
    match respond.send_response(h, no_body) {
        Err(_) => {}
        Ok(mut tx) if !no_body => {
            // Send rates only when a location or the server has them.
            let mut throttle = if gen.config.send_rate.is_some()
                || location.is_some_and(|l| l.shaping.is_some())
            {
                Throttle::of((location, 0), &gen.config, info.peer, None)
            } else {
                None
            };
            let mut out = send::Out {
                tx: &mut tx,
                idle: gen.config.timeouts.send,
                throttle: throttle.as_mut().map(|t| t.get_mut()),
                sent: 0,
            };
            let r = send::body(&mut out, response.body).await;
            sent = out.sent;
            match r {
                Ok(()) => {}
                Err(send::Stopped::Gone) => {}
                Err(send::Stopped::Stalled) => tx.send_reset(Reason::CANCEL),
                Err(send::Stopped::Source) => tx.send_reset(Reason::INTERNAL_ERROR),
            }
        }
        Ok(_) => {}
    }
    w.stats.request(logged.slot, status, sent);
    let mut log = w.log.borrow_mut();
    if !log.enabled() {
        return;
    }
    let micros = if log.wants_duration() {
        started.elapsed().as_micros() as u64
    } else {
        0
    };
    let line = log_line(first_line);
    log.record(&Entry {
        remote: info.peer.ip(),
        unix_secs,
        request_line: &line,
        host: logged.host,
        status,
        body_bytes: sent,
        referer: logged.referer,
        user_agent: logged.user_agent,
        micros,
        upstream: logged.upstream,
    });
}
