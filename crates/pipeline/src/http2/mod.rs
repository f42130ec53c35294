//! HTTP/2 (RFC 9113): a connection that began with the client preface in cleartext (prior
//! knowledge, "h2c") or chose `h2` by ALPN. The frames, HPACK, flow control and stream
//! states are the h2 crate's; this module runs each stream through the same stages as an
//! HTTP/1 request (`stream.rs`), sends responses within the client's windows (`send.rs`),
//! reads request bodies (`body.rs`), meters what the client sends for floods (`meter.rs`,
//! on the bytes `io.rs` passes to h2), and ends the connection with GOAWAY when it has
//! been idle for `timeouts.keepalive`, when the server stops, or on a flood.

mod body;
mod io;
pub mod meter;
mod send;
mod stream;

pub(crate) use body::StreamBody;
pub(crate) use meter::PREFACE;

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::Poll;

use futures_util::stream::{FuturesUnordered, StreamExt};
use h2::Reason;
use tokio::time::Instant;

use crate::content::Content;
use crate::transport::Transport;
use crate::worker::HttpWorker;

/// Streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS; nginx and
/// h2o: 128 and 100).
const MAX_STREAMS: u32 = 128;
/// The window of each stream for request bodies (SETTINGS_INITIAL_WINDOW_SIZE), and the
/// connection's: what a client may send before a handler reads it, so at most 4 MiB held
/// per connection. Measured on 20 MB uploads (`bench/results/2026-11-25-h2/windows.md`):
/// 1.2x the throughput of the protocol's 64 KiB default; 4 MiB/16 MiB were 1.9x, at four
/// times the memory a slow reader can be made to hold.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 4 << 20;
/// Bytes a stream may have queued in h2 beyond what the socket took.
const SEND_BUFFER: usize = 256 * 1024;
/// After a flood's GOAWAY, how long the connection may take to end.
const FLOOD_LINGER: std::time::Duration = std::time::Duration::from_secs(1);
/// After a GOAWAY with no stream left, how long the client has to answer h2's PING (the
/// second GOAWAY follows it) and close; then the connection is dropped.
const GOAWAY_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The server side of h2 as ramjet runs it: its SETTINGS and limits (`max_head`: the
/// largest header list, decoded, as for an HTTP/1 head). Public for the fuzz target.
pub fn builder(max_head: usize) -> h2::server::Builder {
    let mut b = h2::server::Builder::new();
    b.max_concurrent_streams(MAX_STREAMS)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buffer_size(SEND_BUFFER)
        .max_header_list_size(max_head.min(u32::MAX as usize) as u32);
    b
}

type StreamTask<'w> = Pin<Box<dyn Future<Output = ()> + 'w>>;

/// Serve an HTTP/2 connection on `transport` until it ends. `prefix`: the bytes already
/// read from it (the preface, and maybe more frames). `refuse`: the client is over
/// `limits.max_connections_per_client`: its streams are answered 429 and the connection
/// is sent GOAWAY at once.
pub(crate) async fn serve<C: Content>(
    w: &HttpWorker<C>,
    transport: Transport,
    prefix: Vec<u8>,
    peer: SocketAddr,
    listener: u16,
    refuse: bool,
) {
    let mut gen = w.current();
    let mut seen = w.generation.get();
    let io = io::Io::new(transport, prefix);
    let flood = io.flood.clone();
    let info = stream::ConnInfo {
        peer,
        listener: w.listener(listener),
        secure: io.transport().is_tls(),
        refuse,
    };
    let timeouts = gen.config.timeouts;
    let builder = builder(gen.config.limits.http1.max_head);
    let mut conn = match tokio::time::timeout(timeouts.header, builder.handshake(io)).await {
        Ok(Ok(c)) => c,
        _ => return,
    };
    w.stats.http2_connections.add(1);
    let mut streams: FuturesUnordered<StreamTask<'_>> = FuturesUnordered::new();
    let idle = tokio::time::sleep(timeouts.keepalive);
    tokio::pin!(idle);
    let shutdown = w.shutdown.notified();
    tokio::pin!(shutdown);
    shutdown.as_mut().enable();
    let mut going_away = false;
    if refuse {
        conn.graceful_shutdown();
        going_away = true;
        idle.as_mut().reset(Instant::now() + GOAWAY_GRACE);
    }
    let mut flooded: Option<Instant> = None;
    enum Event {
        /// The connection ended (`None`: closed; an error: h2 sent its GOAWAY).
        Ended(Option<Result<(), h2::Error>>),
        Idle,
        Stop,
        Flood(meter::Flood),
        /// A connection that was told to go away has had its time.
        Over,
    }
    loop {
        if w.stopping.get() && !going_away {
            conn.graceful_shutdown();
            going_away = true;
            idle.as_mut().reset(Instant::now() + GOAWAY_GRACE);
        }
        let event = poll_fn(|cx| {
            // Every frame that has arrived is read before any stream runs: a request's
            // later frames (its trailers, a reset) are known before it is answered, and
            // all the requests of one read are accepted before the first answer is sent.
            let accepted = loop {
                if flooded.is_none() {
                    if let Some(f) = flood.get() {
                        break Some(Event::Flood(f));
                    }
                }
                match conn.poll_accept(cx) {
                    Poll::Ready(Some(Ok((request, respond)))) => {
                        if w.generation.get() != seen {
                            gen = w.current();
                            seen = w.generation.get();
                        }
                        w.stats.http2_streams.add(1);
                        streams.push(Box::pin(stream::serve(
                            w,
                            gen.clone(),
                            request,
                            respond,
                            info,
                        )));
                    }
                    Poll::Ready(other) => break Some(Event::Ended(other.map(|r| r.map(|_| ())))),
                    Poll::Pending => break None,
                }
            };
            let mut finished = false;
            while let Poll::Ready(Some(())) = streams.poll_next_unpin(cx) {
                finished = true;
            }
            if let Some(e) = accepted {
                return Poll::Ready(e);
            }
            if let Some(at) = flooded {
                if at.elapsed() >= FLOOD_LINGER {
                    return Poll::Ready(Event::Over);
                }
            }
            if !going_away && shutdown.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Event::Stop);
            }
            if streams.is_empty() {
                if finished {
                    let wait = if going_away {
                        GOAWAY_GRACE
                    } else {
                        timeouts.keepalive
                    };
                    idle.as_mut().reset(Instant::now() + wait);
                }
                if idle.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(if going_away { Event::Over } else { Event::Idle });
                }
            } else if flooded.is_some() && idle.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Event::Over);
            }
            Poll::Pending
        })
        .await;
        match event {
            Event::Ended(Some(Err(e))) => {
                tracing::debug!("{peer}: HTTP/2 connection ended: {e}");
                break;
            }
            Event::Ended(_) | Event::Over => break,
            Event::Idle | Event::Stop => {
                conn.graceful_shutdown();
                going_away = true;
                idle.as_mut().reset(Instant::now() + GOAWAY_GRACE);
            }
            Event::Flood(f) => {
                tracing::warn!("{peer}: {}: closing the connection (GOAWAY)", f.as_str());
                w.stats.http2_floods.add(1);
                conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                going_away = true;
                flooded = Some(Instant::now());
                idle.as_mut().reset(Instant::now() + FLOOD_LINGER);
            }
        }
    }
}
