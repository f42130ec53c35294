//! A stream's request body: its DATA frames as the connection received them, with the
//! windows opened again as they are read.

use std::future::poll_fn;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use ramjet_http1::ErrorKind;

use super::machine::Read;
use super::Shared;
use crate::request_body::BodyError;

/// An HTTP/2 request body as `RequestBody` reads it.
pub(crate) struct StreamBody {
    m: Shared,
    id: u32,
    /// The declared `content-length` (the connection holds the DATA frames to it).
    declared: Option<u64>,
    max: u64,
    read: u64,
    idle: Duration,
}

impl StreamBody {
    pub(super) fn new(
        m: Shared,
        id: u32,
        declared: Option<u64>,
        max: u64,
        idle: Duration,
    ) -> StreamBody {
        StreamBody {
            m,
            id,
            declared,
            max,
            read: 0,
            idle,
        }
    }

    /// Hold the body to `max` bytes: a declared length over it is refused at once.
    pub(crate) fn limit(&mut self, max: u64) -> Result<(), ErrorKind> {
        self.max = max;
        match self.declared {
            Some(n) if n > max => Err(ErrorKind::PayloadTooLarge),
            _ => Ok(()),
        }
    }

    /// Read what the handler left of the body to the stream's end (trailers included),
    /// within the body limit: `false` if the client broke the stream (a reset, a
    /// malformed trailer section, a length that does not match): it gets no answer.
    pub(crate) async fn drain(&mut self) -> bool {
        loop {
            match self.next().await {
                Ok(Some(_)) => {}
                Ok(None) => return true,
                // Too long to wait for: answer now (the stream is reset after the answer).
                Err(BodyError::TooLarge) | Err(BodyError::Timeout) => return true,
                Err(_) => return false,
            }
        }
    }

    /// The next DATA payload, `None` at the end of the stream (after its trailers, if
    /// any). The connection's and the stream's windows open again by what was taken, so
    /// the client sends on as the handler reads (and no faster). The connection polls
    /// its streams after every read, so no waker is kept.
    pub(crate) async fn next(&mut self) -> Result<Option<Bytes>, BodyError> {
        let (m, id) = (&self.m, self.id);
        let read = poll_fn(|_| match m.borrow_mut().read(id) {
            Read::Wait => Poll::Pending,
            r => Poll::Ready(r),
        });
        let piece = match tokio::time::timeout(self.idle, read).await {
            Err(_) => return Err(BodyError::Timeout),
            Ok(Read::Data(b)) => b,
            Ok(Read::End) => return Ok(None),
            Ok(_) => return Err(BodyError::Closed),
        };
        self.read += piece.len() as u64;
        if self.read > self.max {
            return Err(BodyError::TooLarge);
        }
        Ok(Some(piece))
    }
}
