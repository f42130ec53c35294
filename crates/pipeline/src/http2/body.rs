//! A stream's request body: its DATA frames, with the window given back as they are read.

use std::time::Duration;

use bytes::Bytes;
use ramjet_http1::ErrorKind;

use crate::request_body::BodyError;

/// An HTTP/2 request body as `RequestBody` reads it.
pub(crate) struct StreamBody {
    recv: h2::RecvStream,
    /// The declared `content-length` (h2 holds the DATA frames to it).
    declared: Option<u64>,
    max: u64,
    read: u64,
    idle: Duration,
}

impl StreamBody {
    pub(crate) fn new(
        recv: h2::RecvStream,
        declared: Option<u64>,
        max: u64,
        idle: Duration,
    ) -> StreamBody {
        StreamBody {
            recv,
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
                Ok(None) => break,
                // Too long to wait for: answer now (the stream is reset after the answer).
                Err(BodyError::TooLarge) | Err(BodyError::Timeout) => return true,
                Err(_) => return false,
            }
        }
        matches!(
            tokio::time::timeout(self.idle, self.recv.trailers()).await,
            Ok(Ok(_))
        )
    }

    /// The next DATA payload, `None` at the end of the stream. The connection's and the
    /// stream's windows are opened again by what was taken, so the client sends on as
    /// the handler reads (and no faster).
    pub(crate) async fn next(&mut self) -> Result<Option<Bytes>, BodyError> {
        loop {
            let piece = match tokio::time::timeout(self.idle, self.recv.data()).await {
                Err(_) => return Err(BodyError::Timeout),
                Ok(None) => return Ok(None),
                Ok(Some(Err(_))) => return Err(BodyError::Closed),
                Ok(Some(Ok(p))) => p,
            };
            let _ = self.recv.flow_control().release_capacity(piece.len());
            self.read += piece.len() as u64;
            if self.read > self.max {
                return Err(BodyError::TooLarge);
            }
            if !piece.is_empty() {
                return Ok(Some(piece));
            }
        }
    }
}
