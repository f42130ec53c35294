//! A response body streamed from the upstream connection as the client takes it: the
//! pipeline polls it only when the socket has taken the previous piece, so a slow client
//! holds back the reads from the upstream (backpressure, at most one 64 KiB read ahead).
//! At the body's end the connection returns to the pool; if the client goes away first,
//! the body is dropped and the connection closed with it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ramjet_config::Upstream;
use ramjet_http1::BodyDecoder;
use ramjet_pipeline::BodySource;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::handler::InFlight;
use crate::response_head::Framing;
use crate::upstream_io::Io;

/// Bytes asked of the upstream socket per read.
const READ_SIZE: usize = 64 * 1024;

pub(crate) struct UpstreamBody {
    io: Option<Io>,
    /// Read but not yet decoded.
    buf: BytesMut,
    /// `None`: the body runs until the upstream closes.
    decoder: Option<BodyDecoder>,
    length: Option<u64>,
    done: bool,
    reusable: bool,
    timeout: Duration,
    sleep: Pin<Box<Sleep>>,
    /// The last poll returned `Pending` (so the timer runs from then, not from when the
    /// client last took a piece).
    waiting: bool,
    upstream: Rc<Upstream>,
    flight: InFlight,
    /// The upstream's trailer lines as they arrive, then, checked, once the body has ended.
    raw_trailers: Vec<u8>,
    trailers: Option<Bytes>,
}

impl UpstreamBody {
    /// The body after a head: `rest` is what was read past the head.
    pub(crate) fn new(
        io: Io,
        rest: BytesMut,
        framing: Framing,
        reusable: bool,
        upstream: Rc<Upstream>,
        flight: InFlight,
    ) -> UpstreamBody {
        let (decoder, length) = match framing {
            Framing::Close => (None, None),
            Framing::Chunked => (BodyDecoder::new(framing.decoder(), u64::MAX).ok(), None),
            Framing::Length(n) => (BodyDecoder::new(framing.decoder(), u64::MAX).ok(), Some(n)),
            Framing::None => (BodyDecoder::new(framing.decoder(), u64::MAX).ok(), Some(0)),
        };
        let timeout = upstream.body_timeout;
        UpstreamBody {
            io: Some(io),
            buf: rest,
            decoder,
            length,
            done: false,
            reusable,
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            waiting: false,
            upstream,
            flight,
            raw_trailers: Vec::new(),
            trailers: None,
        }
    }

    /// The body ended: give the connection back if it can carry another request.
    fn finish(&mut self) {
        self.done = true;
        if !self.raw_trailers.is_empty() {
            self.trailers = crate::trailers::filter(&self.raw_trailers);
        }
        if let Some(io) = self.io.take() {
            if self.reusable && self.buf.is_empty() {
                self.flight
                    .state
                    .put_back(self.flight.server, io, Instant::now());
            }
        }
    }

    fn fail(&mut self, why: String) -> Poll<Option<io::Result<Bytes>>> {
        let addr = &self.upstream.servers[self.flight.server].addr;
        tracing::error!(
            "upstream {} ({addr}): response body: {why}; the client's response is cut short",
            self.upstream.name
        );
        self.io = None;
        self.done = true;
        Poll::Ready(Some(Err(io::Error::other(why))))
    }
}

impl BodySource for UpstreamBody {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        if !self.waiting {
            let deadline = Instant::now() + self.timeout;
            self.sleep.as_mut().reset(deadline);
        }
        self.waiting = false;
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            if !self.buf.is_empty() {
                let Some(decoder) = self.decoder.as_mut() else {
                    return Poll::Ready(Some(Ok(self.buf.split().freeze())));
                };
                let step = match decoder.decode(&self.buf) {
                    Ok(s) => s,
                    Err(_) => return self.fail("invalid chunked framing".into()),
                };
                let taken = self.buf.split_to(step.consumed).freeze();
                self.raw_trailers.extend_from_slice(&taken[step.trailer]);
                let data = taken.slice(step.data);
                if decoder.is_done() {
                    self.finish();
                }
                if !data.is_empty() {
                    return Poll::Ready(Some(Ok(data)));
                }
                continue;
            }
            if self.decoder.as_ref().is_some_and(|d| d.is_done()) {
                self.finish();
                continue;
            }
            let Some(io) = self.io.as_ref() else {
                return Poll::Ready(None);
            };
            match io.poll_read_ready(cx) {
                Poll::Pending => {
                    if self.sleep.as_mut().poll(cx).is_ready() {
                        let t = self.timeout;
                        return self.fail(format!("nothing received for {t:?}"));
                    }
                    self.waiting = true;
                    return Poll::Pending;
                }
                Poll::Ready(Err(e)) => return self.fail(format!("read: {e}")),
                Poll::Ready(Ok(())) => {}
            }
            self.buf.reserve(READ_SIZE);
            match io.try_read_buf(&mut self.buf) {
                Ok(0) if self.decoder.is_none() => {
                    // A close-delimited body ends here.
                    self.io = None;
                    self.done = true;
                }
                Ok(0) => return self.fail("closed before the end of the body".into()),
                Ok(_) => {
                    if self.buf.len() < self.buf.capacity() {
                        io.clear_read_ready();
                    }
                    let deadline = Instant::now() + self.timeout;
                    self.sleep.as_mut().reset(deadline);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return self.fail(format!("read: {e}")),
            }
        }
    }

    fn length(&self) -> Option<u64> {
        self.length
    }

    fn trailers(&mut self) -> Option<Bytes> {
        self.trailers.take()
    }
}

/// A chunked body that arrived whole with trailers: one piece, then the trailers.
pub(crate) struct Whole {
    pub(crate) body: Option<Bytes>,
    pub(crate) trailers: Option<Bytes>,
}

impl BodySource for Whole {
    fn poll_next(&mut self, _cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        Poll::Ready(self.body.take().map(Ok))
    }

    fn trailers(&mut self) -> Option<Bytes> {
        self.trailers.take()
    }
}

/// The framing of a body that is not sent: the answer to HEAD carries the upstream's
/// `Content-Length`, or says chunked when the upstream did (`None`); the pipeline never
/// polls a HEAD response's body.
pub(crate) struct Declared(pub(crate) Option<u64>);

impl BodySource for Declared {
    fn poll_next(&mut self, _cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        Poll::Ready(None)
    }

    fn length(&self) -> Option<u64> {
        self.0
    }
}

/// The upstream side of a tunnel after a 101: first the bytes read past the head.
pub(crate) struct Upgraded {
    pub(crate) prefix: Bytes,
    pub(crate) io: Io,
    /// The upstream's `body_timeout`: an idle tunnel is closed after it.
    pub(crate) idle: Duration,
    pub(crate) _flight: InFlight,
}

impl ramjet_pipeline::Tunnel for Upgraded {
    fn idle_timeout(&self) -> Option<Duration> {
        Some(self.idle)
    }
}

impl AsyncRead for Upgraded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if !me.prefix.is_empty() {
            let n = me.prefix.len().min(buf.remaining());
            buf.put_slice(&me.prefix.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut me.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Upgraded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
