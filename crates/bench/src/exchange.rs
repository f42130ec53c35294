//! One client connection: send requests, read and validate responses with the server's own
//! `http1` codec. Shared by the closed and open loops.
//!
//! This is the load generator's hot path, written against tokio's readiness API rather than
//! `AsyncRead` so it costs no more per response than wrk: one `read` per response (readiness
//! is cleared after a short read instead of proving it with an `EAGAIN`), no per-read timer
//! (one deadline per connection, pushed back at most four times per timeout), and a read
//! buffer consumed by offset rather than shifted for every response.

use std::pin::Pin;
use std::time::{Duration, Instant};

use ramjet_http1::{parse_response_head, BodyDecoder, BodyFraming, ResponseParse};
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::time::Sleep;

/// Read buffer growth per fill.
pub(crate) const READ_CHUNK: usize = 64 * 1024;

/// Most bytes dropped per `recv(MSG_TRUNC)` when discarding bodies.
const DISCARD_MAX: usize = 4 << 20;

thread_local! {
    /// Address space a discarding recv is given; the kernel never writes it, so its pages
    /// are never touched (never resident). One per load thread.
    static DISCARD_SCRATCH: std::cell::RefCell<Vec<u8>> =
        std::cell::RefCell::new(Vec::with_capacity(DISCARD_MAX));
}

/// Why one exchange failed.
pub(crate) enum Failure {
    Timeout,
    Reset,
    ShortBody,
    Invalid,
}

/// A complete response.
pub(crate) struct Answer {
    pub status: u16,
    /// Bytes read for it (head and body as framed).
    pub bytes: u64,
    pub body_len: u64,
    /// The server lets the connection be reused.
    pub keep_alive: bool,
}

/// An open connection with its read buffer and no-progress deadline.
pub(crate) struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// First byte of `buf` not yet consumed.
    at: usize,
    timeout: Duration,
    /// Drop length-framed bodies in the kernel (see `Spec::discard_body`).
    discard: bool,
    /// Fires when nothing was read or written for between `timeout` and 1.25 x `timeout`.
    deadline: Pin<Box<Sleep>>,
    armed: Instant,
}

impl Conn {
    pub(crate) fn new(stream: TcpStream, timeout: Duration, discard: bool) -> Conn {
        let now = Instant::now();
        Conn {
            stream,
            buf: Vec::with_capacity(READ_CHUNK),
            at: 0,
            timeout,
            discard,
            deadline: Box::pin(tokio::time::sleep_until(
                (now + timeout + timeout / 4).into(),
            )),
            armed: now,
        }
    }

    /// Bytes of a next response are already here.
    pub(crate) fn buffered(&self) -> bool {
        self.at < self.buf.len()
    }

    /// Something moved: push the deadline back (at most every quarter timeout).
    fn progress(&mut self) {
        let now = Instant::now();
        if now - self.armed > self.timeout / 4 {
            self.armed = now;
            let at = now + self.timeout + self.timeout / 4;
            self.deadline.as_mut().reset(at.into());
        }
    }

    pub(crate) async fn send(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        let result = tokio::select! {
            biased;
            r = self.stream.write_all(bytes) => r.map_err(|_| Failure::Reset),
            _ = self.deadline.as_mut() => Err(Failure::Timeout),
        };
        self.progress();
        result
    }

    /// Send one request and read its response.
    pub(crate) async fn exchange(&mut self, request: &[u8]) -> Result<Answer, Failure> {
        self.send(request).await?;
        self.response().await
    }

    /// Read more bytes into the buffer; 0 at end of stream.
    async fn fill(&mut self) -> Result<usize, Failure> {
        if self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
        } else if self.at > 0 && self.buf.capacity() - self.buf.len() < READ_CHUNK / 2 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        self.buf.reserve(READ_CHUNK);
        loop {
            tokio::select! {
                biased;
                r = self.stream.readable() => r.map_err(|_| Failure::Reset)?,
                _ = self.deadline.as_mut() => return Err(Failure::Timeout),
            }
            let spare = self.buf.capacity() - self.buf.len();
            match self.stream.try_read_buf(&mut self.buf) {
                Ok(n) => {
                    if n > 0 && n < spare {
                        // The socket is drained: clear readiness without an EAGAIN syscall
                        // (a WouldBlock from try_io does that), so the next read waits.
                        let _ = self.stream.try_io(Interest::READABLE, || {
                            Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
                        });
                    }
                    if n > 0 {
                        self.progress();
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => return Err(Failure::Reset),
            }
        }
    }

    /// Drop up to `max` body bytes from the socket without reading them; `ShortBody` at end
    /// of stream. The read buffer is empty here (its bytes were consumed first).
    async fn discard_some(&mut self, max: u64) -> Result<u64, Failure> {
        let len = max.min(DISCARD_MAX as u64) as usize;
        loop {
            tokio::select! {
                biased;
                r = self.stream.readable() => r.map_err(|_| Failure::Reset)?,
                _ = self.deadline.as_mut() => return Err(Failure::Timeout),
            }
            let stream = &self.stream;
            let got = DISCARD_SCRATCH.with_borrow_mut(|scratch| {
                stream.try_io(Interest::READABLE, || {
                    ramjet_runtime::sys::recv_discard(
                        stream,
                        &mut scratch.spare_capacity_mut()[..len],
                    )
                })
            });
            match got {
                Ok(0) => return Err(Failure::ShortBody),
                Ok(n) => {
                    self.progress();
                    return Ok(n as u64);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => return Err(Failure::Reset),
            }
        }
    }

    /// Read one response; bytes after it stay buffered for the next one.
    pub(crate) async fn response(&mut self) -> Result<Answer, Failure> {
        let head = loop {
            match parse_response_head(&self.buf[self.at..], false) {
                ResponseParse::Complete(h) => break h,
                ResponseParse::Invalid => return Err(Failure::Invalid),
                ResponseParse::Partial => {
                    if self.fill().await? == 0 {
                        return Err(Failure::Reset);
                    }
                }
            }
        };
        self.at += head.head_len;
        let mut bytes = head.head_len as u64;
        let mut body = 0u64;
        if head.until_close {
            loop {
                body += (self.buf.len() - self.at) as u64;
                self.at = self.buf.len();
                if self.fill().await? == 0 {
                    break;
                }
            }
            return Ok(Answer {
                status: head.status,
                bytes: bytes + body,
                body_len: body,
                keep_alive: false,
            });
        }
        if let (true, BodyFraming::Length(n)) = (self.discard, head.framing) {
            let here = ((self.buf.len() - self.at) as u64).min(n);
            self.at += here as usize;
            let mut left = n - here;
            while left > 0 {
                left -= self.discard_some(left).await?;
            }
            return Ok(Answer {
                status: head.status,
                bytes: bytes + n,
                body_len: n,
                keep_alive: head.keep_alive,
            });
        }
        if head.framing != BodyFraming::None {
            let mut decoder =
                BodyDecoder::new(head.framing, u64::MAX).map_err(|_| Failure::Invalid)?;
            loop {
                while self.buffered() && !decoder.is_done() {
                    let step = decoder
                        .decode(&self.buf[self.at..])
                        .map_err(|_| Failure::Invalid)?;
                    body += step.data.len() as u64;
                    bytes += step.consumed as u64;
                    self.at += step.consumed;
                }
                if decoder.is_done() {
                    break;
                }
                if self.fill().await? == 0 {
                    return Err(Failure::ShortBody);
                }
            }
        }
        Ok(Answer {
            status: head.status,
            bytes,
            body_len: body,
            keep_alive: head.keep_alive,
        })
    }
}
