//! The request body as a handler reads it: decoded by its framing (Content-Length or
//! chunked, within the location's `max_body`) from the bytes already read after the head, then from
//! the socket. What the handler leaves unread the pipeline drains by the same framing
//! before the next request; bytes read past the body's end go back to the connection.

use std::cell::Cell;
use std::time::Duration;

use crate::transport::Transport;
use bytes::Bytes;
use ramjet_http1::{BodyDecoder, ErrorKind};
use tokio::time::Instant;

/// Bytes asked of the socket per read while a body is being read.
const BODY_READ: usize = 64 * 1024;
/// The interim answer to `Expect: 100-continue` (RFC 9110 §10.1.1).
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Why a body could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// Bad chunked framing.
    Invalid,
    /// Longer than the location's `max_body`.
    TooLarge,
    /// Nothing arrived for `timeouts.header` (between two reads, like nginx's
    /// client_body_timeout: a large upload may take as long as it keeps moving).
    Timeout,
    /// The client closed or reset the connection.
    Closed,
    /// `next` was called again while a call was still running.
    Busy,
}

impl BodyError {
    /// The status a handler answers with (or would, if the client were still there).
    pub fn status(self) -> u16 {
        match self {
            BodyError::Invalid | BodyError::Closed => 400,
            BodyError::TooLarge => 413,
            BodyError::Timeout => 408,
            BodyError::Busy => 500,
        }
    }
}

/// A request's body, read on demand. Requests without a body hold no state. (The
/// borrowed parts stay outside the `Cell`, so the type is covariant in `'r`.)
pub struct RequestBody<'r> {
    stream: Option<&'r Transport>,
    /// Bytes after the head that were read with it.
    buffered: &'r [u8],
    has_body: bool,
    state: Cell<Option<Box<State>>>,
    /// An HTTP/2 stream's body (its DATA frames), when the request came as one.
    h2: Cell<Option<Box<crate::http2::StreamBody>>>,
}

impl std::fmt::Debug for RequestBody<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RequestBody")
    }
}

/// Where the reading is: lives in the `Cell` while no `next` runs.
pub(crate) struct State {
    used: usize,
    decoder: BodyDecoder,
    /// Bytes read from the socket once `buffered` was used up, and how many are decoded.
    extra: Vec<u8>,
    extra_at: usize,
    read_socket: bool,
    /// `Expect: 100-continue` still to be answered before the first socket read.
    continue_pending: bool,
    continued: bool,
    /// Longest wait for the next bytes (or for the socket to take 100 Continue).
    idle: Duration,
}

/// What the pipeline takes back after the producer: the reading state, boxed as it was
/// (one pointer in the connection's state; only requests with a body have one).
pub(crate) enum Finished {
    Http1(Box<State>),
    /// An HTTP/2 stream's body, to be read to its end before the answer goes out.
    Http2(Box<crate::http2::StreamBody>),
}

impl Finished {
    /// Put back what the body reading took from the connection's buffer `buf` (unparsed
    /// input from `*start`): advance past the buffered bytes it used, or, if it read the
    /// socket (all buffered bytes used), replace the rest with the bytes it read past the
    /// body's end. Returns the decoder (to drain what is left) and whether 100 Continue
    /// was sent.
    pub(crate) fn give_back(
        self,
        buf: &mut Vec<u8>,
        start: &mut usize,
    ) -> Option<(BodyDecoder, bool)> {
        let Finished::Http1(st) = self else {
            return None;
        };
        let st = *st;
        if st.read_socket {
            buf.truncate(*start);
            buf.extend_from_slice(&st.extra[st.extra_at..]);
        } else {
            *start += st.used;
        }
        Some((st.decoder, st.continued))
    }
}

impl<'r> RequestBody<'r> {
    /// A body decoded from `buffered`, then from `stream`, each read waiting at most
    /// `idle`. `expect` asks
    /// for 100 Continue before the first socket read (only when no earlier response is
    /// still queued, so it cannot overtake one).
    #[inline]
    pub(crate) fn new(
        stream: &'r Transport,
        buffered: &'r [u8],
        decoder: BodyDecoder,
        expect: bool,
        idle: Duration,
    ) -> RequestBody<'r> {
        let state = (!decoder.is_done()).then(|| {
            Box::new(State {
                used: 0,
                decoder,
                extra: Vec::new(),
                extra_at: 0,
                read_socket: false,
                continue_pending: expect,
                continued: false,
                idle,
            })
        });
        RequestBody {
            stream: Some(stream),
            buffered,
            has_body: state.is_some(),
            state: Cell::new(state),
            h2: Cell::new(None),
        }
    }

    /// The body of an HTTP/2 stream (`None`: the HEADERS frame ended the stream).
    pub(crate) fn http2(body: Option<crate::http2::StreamBody>) -> RequestBody<'r> {
        RequestBody {
            stream: None,
            buffered: &[],
            has_body: body.is_some(),
            state: Cell::new(None),
            h2: Cell::new(body.map(Box::new)),
        }
    }

    /// The next piece of the body, `Ok(None)` at its end (at once for a request without
    /// one). Pieces are as large as what has arrived, up to 64 KiB.
    pub async fn next(&self) -> Result<Option<Bytes>, BodyError> {
        if let Some(mut h2) = self.h2.take() {
            let piece = h2.next().await;
            self.h2.set(Some(h2));
            return piece;
        }
        let (Some(mut state), Some(stream)) = (self.state.take(), self.stream) else {
            // Either there is no body, or another call holds the state.
            return if self.has_body {
                Err(BodyError::Busy)
            } else {
                Ok(None)
            };
        };
        let piece = state.next(stream, self.buffered).await;
        self.state.set(Some(state));
        piece
    }

    /// Hold the body to `max` bytes (the routed location's limit), before it is read.
    pub(crate) fn limit(&self, max: u64) -> Result<(), ramjet_http1::ErrorKind> {
        if let Some(mut h2) = self.h2.take() {
            let r = h2.limit(max);
            self.h2.set(Some(h2));
            return r;
        }
        let Some(mut state) = self.state.take() else {
            return Ok(());
        };
        let r = state.decoder.limit(max);
        self.state.set(Some(state));
        r
    }

    /// Hand the reading state back to the pipeline; `None` for a request without a body.
    #[inline]
    pub(crate) fn finish(self) -> Option<Finished> {
        if let Some(h2) = self.h2.into_inner() {
            return Some(Finished::Http2(h2));
        }
        self.state.into_inner().map(Finished::Http1)
    }
}

impl State {
    async fn next(
        &mut self,
        stream: &Transport,
        buffered: &[u8],
    ) -> Result<Option<Bytes>, BodyError> {
        loop {
            if self.decoder.is_done() {
                return Ok(None);
            }
            let (input, at) = if self.read_socket {
                (&self.extra[..], &mut self.extra_at)
            } else {
                (buffered, &mut self.used)
            };
            if *at < input.len() {
                let step = self.decoder.decode(&input[*at..]).map_err(|k| match k {
                    ErrorKind::PayloadTooLarge => BodyError::TooLarge,
                    _ => BodyError::Invalid,
                })?;
                let piece = &input[*at..][step.data];
                *at += step.consumed;
                if !piece.is_empty() {
                    return Ok(Some(Bytes::copy_from_slice(piece)));
                }
                continue;
            }
            self.read_more(stream).await?;
        }
    }

    /// Everything decoded so far is used: read more from the socket.
    async fn read_more(&mut self, stream: &Transport) -> Result<(), BodyError> {
        let deadline = Instant::now() + self.idle;
        if self.continue_pending {
            self.continue_pending = false;
            let mut sent = 0;
            while sent < CONTINUE.len() {
                tokio::time::timeout_at(deadline, stream.writable())
                    .await
                    .map_err(|_| BodyError::Timeout)?
                    .map_err(|_| BodyError::Closed)?;
                match stream.try_write(&CONTINUE[sent..]) {
                    Ok(0) => return Err(BodyError::Closed),
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => return Err(BodyError::Closed),
                }
            }
            self.continued = true;
        }
        self.read_socket = true;
        self.extra.clear();
        self.extra_at = 0;
        self.extra.reserve(BODY_READ);
        loop {
            tokio::time::timeout_at(deadline, stream.readable())
                .await
                .map_err(|_| BodyError::Timeout)?
                .map_err(|_| BodyError::Closed)?;
            match stream.try_read_buf(&mut self.extra) {
                Ok(0) => return Err(BodyError::Closed),
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return Err(BodyError::Closed),
            }
        }
    }
}
