//! Test-only fault injection (cargo feature `fault-injection`, never in a release build).
//! Paths under `/__ramjet_fault/` make the producer misbehave on purpose:
//! - `spin`: the worker spins forever without returning to its event loop, so a test can
//!   show that TERM still ends the process within `timeouts.shutdown` (issue 11);
//! - `stream/N`: a streamed body (unknown length) of N pieces whose sizes cycle through
//!   [`PIECES`], empty ones included, each second poll `Pending`;
//! - `stream-fail/N`: the same, failing after N pieces;
//! - `stream-len/N`, `stream-short/N`, `stream-long/N`: the same, declaring its length
//!   exactly, one byte more than it yields, one byte less;
//! - `echo`: any method; reads the request body piece by piece and answers with it, with
//!   the number of pieces in `X-Pieces` (what a proxy or module does with a body), and the
//!   client and listener addresses in `X-Client` and `X-Listener`.

use std::io;
use std::task::{Context, Poll};

use bytes::Bytes;
use ramjet_pipeline::{Body, BodySource, Content, Later, Outcome, Request, Response};

/// The path that spins the worker that reads it.
const SPIN: &[u8] = b"/__ramjet_fault/spin";
const STREAM: &[u8] = b"/__ramjet_fault/stream/";
const STREAM_FAIL: &[u8] = b"/__ramjet_fault/stream-fail/";
const ECHO: &[u8] = b"/__ramjet_fault/echo";
const STREAM_LEN: &[u8] = b"/__ramjet_fault/stream-len/";
const STREAM_SHORT: &[u8] = b"/__ramjet_fault/stream-short/";
const STREAM_LONG: &[u8] = b"/__ramjet_fault/stream-long/";
/// Piece sizes of a test stream, in turn: empty, one byte, small, one past a 64 KiB read.
const PIECES: [usize; 4] = [0, 1, 1000, 65_537];

/// Wraps the real producer; every other path goes to it untouched.
pub struct Faults<C>(pub C);

impl<C: Content> Content for Faults<C> {
    fn produce<'r>(&'r self, req: &'r Request<'r>) -> Result<Outcome, Later<'r>> {
        if req.path == SPIN {
            tracing::warn!("fault injection: this worker now spins forever");
            loop {
                std::hint::spin_loop();
            }
        }
        let stream = |prefix: &[u8], fail: bool, declared: Option<i64>| {
            let n = std::str::from_utf8(req.path.strip_prefix(prefix)?)
                .ok()?
                .parse()
                .ok()?;
            let total: usize = (0..n).map(|i| PIECES[i % PIECES.len()]).sum();
            let body = Body::Stream(Box::new(Pieces {
                next: 0,
                count: n,
                fail,
                pending: false,
                declared: declared.map(|d| (total as i64 + d).max(0) as u64),
            }));
            Some(Outcome::Respond(
                Response::new(200, body).header("Content-Type", b"application/octet-stream"),
            ))
        };
        let outcome = stream(STREAM, false, None)
            .or_else(|| stream(STREAM_FAIL, true, None))
            .or_else(|| stream(STREAM_LEN, false, Some(0)))
            .or_else(|| stream(STREAM_SHORT, false, Some(1)))
            .or_else(|| stream(STREAM_LONG, false, Some(-1)));
        if let Some(outcome) = outcome {
            return Ok(outcome);
        }
        if req.path == ECHO {
            return Err(Box::pin(echo(req)));
        }
        self.0.produce(req)
    }

    fn on_reload(&self, config: &ramjet_config::Resolved) {
        self.0.on_reload(config);
    }

    fn on_tick(&self, config: &ramjet_config::Resolved) {
        self.0.on_tick(config);
    }
}

async fn echo(req: &Request<'_>) -> Outcome {
    let mut all = Vec::new();
    let mut pieces = 0usize;
    loop {
        match req.body.next().await {
            Ok(Some(piece)) => {
                pieces += 1;
                all.extend_from_slice(&piece);
            }
            Ok(None) => break,
            Err(e) => return Outcome::Respond(ramjet_pipeline::error_response(e.status())),
        }
    }
    Outcome::Respond(
        Response::new(200, Body::Bytes(Bytes::from(all)))
            .header("X-Pieces", pieces.to_string().as_bytes())
            .header("X-Client", req.client.to_string().as_bytes())
            .header("X-Listener", req.listener.to_string().as_bytes()),
    )
}

/// Piece `i` of a test stream: `PIECES[i % 4]` bytes of `i`'s low byte.
fn piece(i: usize) -> Vec<u8> {
    vec![i as u8; PIECES[i % PIECES.len()]]
}

struct Pieces {
    next: usize,
    count: usize,
    fail: bool,
    pending: bool,
    /// The length it declares (total + 0, + 1 or - 1), if any.
    declared: Option<u64>,
}

impl BodySource for Pieces {
    fn length(&self) -> Option<u64> {
        self.declared
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        self.pending = !self.pending;
        if self.pending {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if self.next == self.count {
            return Poll::Ready(if self.fail {
                Some(Err(io::Error::other("fault injection: stream failed")))
            } else {
                None
            });
        }
        self.next += 1;
        Poll::Ready(Some(Ok(Bytes::from(piece(self.next - 1)))))
    }
}
