//! One proxied request: pick a server, connect or reuse, send, read the head, answer.
//!
//! Retries (nginx `proxy_next_upstream error`): a request is tried on another server when
//! the connection could not be made (nothing was sent, so any method), and, for idempotent
//! methods (or with `retry_non_idempotent`), when the server closed or reset the connection
//! before sending a byte of the response. A reused pooled connection that fails that way is
//! the stale keep-alive race: the same server is tried again on a fresh connection, without
//! counting it as a failure. A request body is replayed from memory if it was at most
//! [`REPLAY_MAX`]; a larger one is not retried once any of it was sent. A timeout waiting for
//! the response is 504 and not retried (the backend may still be working on it).

use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ramjet_config::{Balance, ProxyOptions, Upstream};
use ramjet_http1::{BodyDecoder, Method, RequestHead};
use ramjet_observe::UpstreamLog;
use ramjet_pipeline::{Body, Extras, FailKind, Failure, Outcome, Request, Response, Side};
use tokio::time::Instant;

use crate::balance::fnv1a;
use crate::body::{Declared, Upgraded, UpstreamBody, Whole};
use crate::forward;
use crate::handler::{InFlight, Shared, UpstreamState};
use crate::response_head::{self, Framing, Parsed};
use crate::upstream_io::Io;

/// A request body up to this size is kept while it is sent, so it can be sent again.
const REPLAY_MAX: usize = 64 * 1024;
/// First read buffer for a response head; grows to `max_response_head`.
const HEAD_READ: usize = 16 * 1024;

/// Why one attempt failed.
enum AttemptError {
    /// Nothing was sent (connect failed): try another server.
    Connect(String, FailKind),
    /// The upstream closed or reset before a byte of the response.
    Closed { reused: bool, why: String },
    /// Answered, but not in a way we pass on; or too slow.
    Final(FailKind, String),
    /// The client's side failed (its body).
    Downstream(FailKind, String),
}

/// The request body as sent so far, kept for a retry while small.
struct Replay {
    pieces: Vec<Bytes>,
    kept: usize,
    /// Some of the body was sent and not kept: it cannot be sent again.
    lost: bool,
    /// The body has been read to its end.
    complete: bool,
}

/// What an exchange needs of a request: a view a task of its own can also build from
/// owned parts (the cache's background revalidation).
pub(crate) struct Asking<'a> {
    pub(crate) head: &'a RequestHead<'a>,
    /// The decoded, normalised path.
    pub(crate) path: &'a [u8],
    pub(crate) query: Option<&'a str>,
    /// The location's prefix (for `proxy_path`).
    pub(crate) prefix: &'a str,
    pub(crate) client: std::net::SocketAddr,
    pub(crate) secure: bool,
    /// The request body (`None`: the request has none).
    pub(crate) body: Option<&'a ramjet_pipeline::RequestBody<'a>>,
}

impl<'a> Asking<'a> {
    pub(crate) fn of(req: &'a Request<'a>) -> Asking<'a> {
        Asking {
            head: req.head,
            path: req.path,
            query: req.query,
            prefix: &req.location.prefix,
            client: req.client,
            secure: req.secure,
            body: Some(req.body),
        }
    }
}

pub(crate) async fn forward(
    shared: &Shared,
    state: Rc<UpstreamState>,
    req: &Asking<'_>,
    opts: &ProxyOptions,
    keep_date: bool,
) -> Outcome {
    let upstream = state.config.clone();
    let labels = &state.labels;
    let u = &*upstream;
    let started = Instant::now();
    let idempotent = matches!(
        req.head.method,
        Method::Get | Method::Head | Method::Options | Method::Trace | Method::Put | Method::Delete
    );
    let may_resend = idempotent || u.retry_non_idempotent;
    let key = match u.balance {
        Balance::HashUri => fnv1a(req.head.path.as_bytes()),
        Balance::HashClient => match req.client.ip() {
            std::net::IpAddr::V4(a) => fnv1a(&a.octets()),
            std::net::IpAddr::V6(a) => fnv1a(&a.octets()),
        },
        _ => 0,
    };
    let target = forward::target(
        req.head.path,
        req.path,
        req.query,
        req.prefix,
        opts.path.as_deref(),
    );
    let mut replay = Replay {
        pieces: Vec::new(),
        kept: 0,
        lost: false,
        complete: false,
    };
    // Servers tried for this request (config allows at most 128 per upstream).
    let mut tried: u128 = 0;
    let mut tries = 0;
    // After the stale keep-alive race: this server again, on a new connection.
    let mut retry_same: Option<usize> = None;
    let mut last: Option<Failure> = None;
    let mut buffers = Buffers::take(shared);
    let mut stale_retries = 0;
    // For the access log: the servers tried, in order (the first few).
    let mut order: [u16; 8] = [0; 8];
    let mut attempts = 0usize;
    let logged = |order: &[u16], status: u16| {
        let mut addr = String::new();
        for (i, &s) in order.iter().enumerate() {
            if i > 0 {
                addr.push_str(", ");
            }
            addr.push_str(&labels[usize::from(s)]);
        }
        Some(UpstreamLog {
            addr,
            status,
            micros: started.elapsed().as_micros() as u64,
            cache: "",
        })
    };
    let fail = |mut f: Failure, order: &[u16]| {
        f.upstream = logged(order, 0);
        Outcome::Fail(f)
    };
    loop {
        let tried_so_far = &order[..attempts.min(order.len())];
        let mut now = if attempts == 0 {
            started
        } else {
            Instant::now()
        };
        let fresh_only = retry_same.is_some();
        let server = match retry_same.take() {
            Some(s) => s,
            None => {
                if tries >= u.tries {
                    return fail(last.unwrap_or_else(|| no_server(u)), tried_so_far);
                }
                let servers = state.servers.borrow();
                let picked = state.balancer.borrow_mut().pick(
                    u,
                    key,
                    |i| tried & (1 << i) == 0 && servers[i].health.is_up(now),
                    |i| servers[i].in_flight,
                );
                match picked {
                    Some(s) => s,
                    None => return fail(last.unwrap_or_else(|| no_server(u)), tried_so_far),
                }
            }
        };
        if !fresh_only {
            tries += 1;
        }
        tried |= 1 << server;
        let addr = &u.servers[server].addr;
        if let Some(o) = order.get_mut(attempts) {
            *o = server as u16;
        }
        attempts += 1;
        let order_now = &order[..attempts.min(order.len())];
        let permit = match &state.limits[server] {
            None => None,
            Some(limit) => match limit.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    let waited =
                        tokio::time::timeout(u.queue_timeout, limit.clone().acquire_owned()).await;
                    match waited {
                        Ok(Ok(p)) => {
                            // The exchange's timeouts count from its turn.
                            now = Instant::now();
                            Some(p)
                        }
                        _ => {
                            let why = format!(
                                "{addr}: {} requests in progress (max_conns) for {:?}",
                                u.max_conns.unwrap_or(0),
                                u.queue_timeout
                            );
                            return fail(
                                Failure::new(Side::Upstream, FailKind::Timeout, why),
                                order_now,
                            );
                        }
                    }
                }
            },
        };
        let flight = InFlight::new(&state, server, permit);
        let pooled = if fresh_only {
            None
        } else {
            state.servers.borrow_mut()[server]
                .pool
                .take(now, u.keepalive_timeout)
        };
        let reused = pooled.is_some();
        let attempt = async {
            let mut io = match pooled {
                Some(io) => io,
                None => Io::connect(addr, u.connect_timeout).await.map_err(|e| {
                    let kind = if e.kind() == std::io::ErrorKind::TimedOut {
                        FailKind::Timeout
                    } else {
                        FailKind::Unreachable
                    };
                    AttemptError::Connect(format!("connect: {e}"), kind)
                })?,
            };
            let head = &mut buffers.head;
            head.clear();
            let host = match addr {
                ramjet_config::UpstreamAddr::Tcp(_) => labels[server].as_str(),
                ramjet_config::UpstreamAddr::Unix(_) => "localhost",
            };
            let fwd = forward::head(head, req.head, &target, opts, req.client, req.secure, host);
            send(&io, head, fwd.chunked, req, &mut replay, u, reused).await?;
            // The response head is due within header_timeout of the request being sent
            // (of the attempt's start when there was no body to send: one clock read less).
            let sent = if has_body(req) { Instant::now() } else { now };
            let to_head = req.head.method == Method::Head;
            let read = &mut buffers.read;
            read.clear();
            let (parsed, at, interim) = read_head(
                &mut io,
                u,
                read,
                sent + u.header_timeout,
                to_head,
                fwd.upgrade,
                reused,
            )
            .await?;
            Ok::<_, AttemptError>((io, parsed, at, interim))
        };
        let failure = match attempt.await {
            Ok((io, parsed, at, interim)) => {
                mark(&state, server, true);
                if let Some(c) = crate::handler::counts(&state, server) {
                    c.header_micros.add(now.elapsed().as_micros() as u64);
                }
                let status = parsed.status;
                let date = parsed.date.filter(|_| keep_date);
                let rest = &buffers.read[at..];
                let mut response = answer(io, parsed, rest, &upstream, flight, now);
                if let Some((d, n)) = date {
                    // For the cache, which reads and removes it.
                    response.headers.extend_from_slice(b"Date: ");
                    response.headers.extend_from_slice(&d[..usize::from(n)]);
                    response.headers.extend_from_slice(b"\r\n");
                }
                response.extras = Some(Box::new(Extras {
                    interim,
                    upstream: logged(order_now, status),
                    ..Default::default()
                }));
                return Outcome::Respond(response);
            }
            Err(e) => e,
        };
        let resend_ok = may_resend && !replay.lost;
        match failure {
            AttemptError::Connect(why, kind) => {
                mark(&state, server, false);
                last = Some(upstream_failure(u, server, kind, why));
            }
            AttemptError::Closed { reused: true, why } if resend_ok && stale_retries < 2 => {
                // The stale keep-alive race: the backend closed an idle connection as we
                // reused it. Not a failure of the server.
                tracing::debug!(
                    "upstream {} ({addr}): reused connection closed ({why}); retrying on a new one",
                    u.name
                );
                stale_retries += 1;
                retry_same = Some(server);
                continue;
            }
            AttemptError::Closed { why, .. } => {
                mark(&state, server, false);
                let f = upstream_failure(u, server, FailKind::Closed, why);
                if !resend_ok {
                    return fail(f, order_now);
                }
                last = Some(f);
            }
            AttemptError::Final(kind, why) => {
                mark(&state, server, false);
                return fail(upstream_failure(u, server, kind, why), order_now);
            }
            AttemptError::Downstream(kind, why) => {
                return fail(Failure::new(Side::Downstream, kind, why), order_now);
            }
        }
    }
}

fn no_server(u: &Upstream) -> Failure {
    Failure::new(
        Side::Upstream,
        FailKind::Unreachable,
        format!("upstream {}: no server is up", u.name),
    )
}

fn upstream_failure(u: &Upstream, server: usize, kind: FailKind, why: String) -> Failure {
    Failure::new(
        Side::Upstream,
        kind,
        format!("upstream {} ({}): {why}", u.name, u.servers[server].addr),
    )
}

/// Passive health: count a failure (maybe marking the server down) or a success. An
/// upstream of one server is never marked down by failures (as nginx does): there is no
/// other to send the traffic to, and refusing it would only add 502s.
fn mark(state: &UpstreamState, server: usize, ok: bool) {
    if let Some(c) = crate::handler::counts(state, server) {
        c.requests.add(1);
        c.failures.add(u64::from(!ok));
    }
    let u = &state.config;
    if u.servers.len() == 1 {
        return;
    }
    let mut servers = state.servers.borrow_mut();
    let s = &mut servers[server];
    if ok {
        s.health.succeeded();
    } else if s.health.failed(Instant::now(), u.max_fails, u.fail_timeout) {
        tracing::warn!(
            "upstream {} ({}): {} failure(s) within {:?}; out of service for {:?}",
            u.name,
            u.servers[server].addr,
            u.max_fails,
            u.fail_timeout,
            u.fail_timeout
        );
    }
}

/// Send the head and the request body (replayed first if this is a retry).
async fn send(
    io: &Io,
    head: &[u8],
    chunked: bool,
    req: &Asking<'_>,
    replay: &mut Replay,
    u: &Upstream,
    reused: bool,
) -> Result<(), AttemptError> {
    let closed = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::TimedOut {
            AttemptError::Final(FailKind::Timeout, format!("sending the request: {e}"))
        } else {
            AttemptError::Closed {
                reused,
                why: format!("sending the request: {e}"),
            }
        }
    };
    let t = u.body_timeout;
    if !has_body(req) {
        return io.write_all(&[head], t).await.map_err(closed);
    }
    // Coalesce the head with the first piece (one write for a small POST).
    let mut first = Some(head);
    for piece in &replay.pieces {
        write_piece(io, first.take(), piece, chunked, t)
            .await
            .map_err(closed)?;
    }
    while !replay.complete {
        let Some(body) = req.body else {
            replay.complete = true;
            break;
        };
        let piece = match body.next().await {
            Ok(Some(p)) => p,
            Ok(None) => {
                replay.complete = true;
                break;
            }
            Err(e) => {
                let kind = match e.status() {
                    413 => FailKind::TooLarge,
                    408 => FailKind::Timeout,
                    _ if e == ramjet_pipeline::BodyError::Closed => FailKind::Closed,
                    _ => FailKind::Invalid,
                };
                return Err(AttemptError::Downstream(
                    kind,
                    format!("client {}: request body: {e:?}", req.client),
                ));
            }
        };
        if !replay.lost && replay.kept + piece.len() <= REPLAY_MAX {
            replay.kept += piece.len();
            replay.pieces.push(piece.clone());
        } else {
            replay.lost = true;
            replay.pieces.clear();
        }
        write_piece(io, first.take(), &piece, chunked, t)
            .await
            .map_err(closed)?;
    }
    let end: &[u8] = if chunked { b"0\r\n\r\n" } else { b"" };
    match first.take() {
        Some(h) => io.write_all(&[h, end], t).await.map_err(closed),
        None if !end.is_empty() => io.write_all(&[end], t).await.map_err(closed),
        None => Ok(()),
    }
}

fn has_body(req: &Asking<'_>) -> bool {
    req.head.framing != ramjet_http1::BodyFraming::None
}

async fn write_piece(
    io: &Io,
    head: Option<&[u8]>,
    piece: &[u8],
    chunked: bool,
    t: Duration,
) -> std::io::Result<()> {
    let head = head.unwrap_or(b"");
    if chunked {
        let size = format!("{:x}\r\n", piece.len());
        io.write_all(&[head, size.as_bytes(), piece, b"\r\n"], t)
            .await
    } else {
        io.write_all(&[head, piece], t).await
    }
}

/// Read the response head into `buf` by `deadline`, passing over 100 Continue and
/// collecting other 1xx heads. Returns the head, where the bytes after it start in `buf`,
/// and the interim heads.
async fn read_head(
    io: &mut Io,
    u: &Upstream,
    buf: &mut Vec<u8>,
    deadline: Instant,
    to_head: bool,
    upgrade: bool,
    reused: bool,
) -> Result<(response_head::UpstreamHead, usize, Vec<u8>), AttemptError> {
    let mut interim = Vec::new();
    let mut received_any = false;
    // Where the head being parsed starts (after any 1xx).
    let mut at = 0;
    loop {
        match response_head::parse(&buf[at..], to_head, upgrade) {
            Parsed::Complete(h) if (100..200).contains(&h.status) && h.status != 101 => {
                if h.status != 100 {
                    interim.extend_from_slice(&buf[at..at + h.head_len]);
                }
                at += h.head_len;
                continue;
            }
            Parsed::Complete(h) if h.head_len > u.max_response_head => {
                return Err(AttemptError::Final(
                    FailKind::TooLarge,
                    format!("response head larger than {} bytes", u.max_response_head),
                ))
            }
            Parsed::Complete(h) => {
                let body_at = at + h.head_len;
                return Ok((h, body_at, interim));
            }
            Parsed::Invalid(why) => {
                return Err(AttemptError::Final(
                    FailKind::Invalid,
                    format!("invalid response head: {why}"),
                ))
            }
            Parsed::Partial if buf.len() - at >= u.max_response_head => {
                return Err(AttemptError::Final(
                    FailKind::TooLarge,
                    format!("response head larger than {} bytes", u.max_response_head),
                ))
            }
            Parsed::Partial => {}
        }
        match io.readable_by(deadline).await {
            None => {
                return Err(AttemptError::Final(
                    FailKind::Timeout,
                    format!("no response head within {:?}", u.header_timeout),
                ))
            }
            Some(Err(e)) => {
                return Err(closed_early(reused, received_any, format!("read: {e}")));
            }
            Some(Ok(())) => {}
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(buf.len().max(HEAD_READ));
        }
        match io.try_read_buf(buf) {
            Ok(0) => {
                return Err(closed_early(
                    reused,
                    received_any,
                    "closed the connection before a complete response head".into(),
                ))
            }
            Ok(_) => {
                received_any = true;
                if buf.len() < buf.capacity() {
                    io.clear_read_ready();
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(closed_early(reused, received_any, format!("read: {e}"))),
        }
    }
}

fn closed_early(reused: bool, received_any: bool, why: String) -> AttemptError {
    if received_any {
        AttemptError::Final(FailKind::Invalid, why)
    } else {
        AttemptError::Closed { reused, why }
    }
}

/// The client's response for a valid upstream head.
fn answer(
    io: Io,
    head: response_head::UpstreamHead,
    rest: &[u8],
    upstream: &Rc<Upstream>,
    flight: InFlight,
    now: Instant,
) -> Response {
    let mut response = Response::new(head.status, Body::Empty);
    response.headers = head.fields;
    let state = flight.state.clone();
    let server = flight.server;
    // A chunked body that arrived whole with its head (and nothing after it).
    let whole = match head.framing {
        Framing::Chunked => whole_chunked(rest).filter(|w| w.1 == rest.len()),
        _ => None,
    };
    response.body = match head.framing {
        _ if head.status == 101 => Body::Upgrade(Box::new(Upgraded {
            prefix: Bytes::copy_from_slice(rest),
            io,
            idle: upstream.body_timeout,
            _flight: flight,
        })),
        Framing::None => {
            if head.keep_alive && rest.is_empty() {
                state.put_back(server, io, now);
            }
            match (head.declared_length, head.declared_chunked) {
                (Some(n), _) if n > 0 => Body::Stream(Box::new(Declared(Some(n)))),
                (None, true) => Body::Stream(Box::new(Declared(None))),
                _ => Body::Empty,
            }
        }
        Framing::Length(n) if rest.len() as u64 >= n => {
            // All of it is here already: no streaming, and the connection is free now.
            let n = n as usize;
            if head.keep_alive && rest.len() == n {
                state.put_back(server, io, now);
            }
            Body::Bytes(Bytes::copy_from_slice(&rest[..n]))
        }
        Framing::Chunked if whole.is_some() => {
            let (body, _, trailers) = whole.unwrap_or_default();
            if head.keep_alive {
                state.put_back(server, io, now);
            }
            match trailers.as_deref().and_then(crate::trailers::filter) {
                // Re-framed with a length: the client gets the same content.
                None => Body::Bytes(body),
                // Trailers need chunked framing to be passed on.
                Some(t) => Body::Stream(Box::new(Whole {
                    body: Some(body),
                    trailers: Some(t),
                })),
            }
        }
        _ => Body::Stream(Box::new(UpstreamBody::new(
            io,
            BytesMut::from(rest),
            head.framing,
            head.keep_alive,
            upstream.clone(),
            flight,
        ))),
    };
    response
}

/// The request-head and response-head buffers of one exchange, borrowed from the
/// worker's pool and given back when the exchange ends however it ends.
struct Buffers<'a> {
    shared: &'a Shared,
    head: Vec<u8>,
    read: Vec<u8>,
}

impl<'a> Buffers<'a> {
    fn take(shared: &'a Shared) -> Buffers<'a> {
        let (head, read) = shared
            .buffers
            .take(|| (Vec::with_capacity(1024), Vec::with_capacity(HEAD_READ)));
        Buffers { shared, head, read }
    }
}

impl Drop for Buffers<'_> {
    fn drop(&mut self) {
        // Buffers that grew for a huge head are not kept.
        if self.head.capacity() <= 64 << 10 && self.read.capacity() <= 256 << 10 {
            self.shared.buffers.give((
                std::mem::take(&mut self.head),
                std::mem::take(&mut self.read),
            ));
        }
    }
}

/// A chunked body that arrived whole with its head, decoded at once: the payload, the bytes
/// it took, and its trailer lines.
fn whole_chunked(input: &[u8]) -> Option<(Bytes, usize, Option<Vec<u8>>)> {
    let mut d = BodyDecoder::new(ramjet_http1::BodyFraming::Chunked, u64::MAX).ok()?;
    let mut trailers = Vec::new();
    let mut out = Vec::new();
    let mut at = 0;
    while at < input.len() && !d.is_done() {
        let step = d.decode(&input[at..]).ok()?;
        out.extend_from_slice(&input[at..][step.data]);
        trailers.extend_from_slice(&input[at..][step.trailer]);
        at += step.consumed;
    }
    d.is_done().then(|| {
        (
            Bytes::from(out),
            at,
            (!trailers.is_empty()).then_some(trailers),
        )
    })
}
