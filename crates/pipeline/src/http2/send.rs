//! A response on a stream: its head as an HPACK block (from the same encoder as HTTP/1's,
//! so a location's headers and lifetimes are the same), its body queued on the stream for
//! the connection to frame within the client's windows.

use std::future::poll_fn;
use std::task::Poll;

use bytes::Bytes;
use ramjet_config::ResponseHeaders;
use ramjet_http1::Version;

use super::hpack;
use super::machine::Chunk;
use super::Shared;
use crate::conn::{framing, location_headers, Framing};
use crate::response::{Body, Part, Response};
use crate::throttle::Throttle;

/// Bytes of a produced body (a backend's, a module's) queued beyond what was framed, before
/// the producer waits.
const SEND_BUFFER: u64 = 256 * 1024;
/// Most bytes admitted at once under a send rate.
const PACED_PIECE: u64 = 16 * 1024;

/// Fields that belong to one HTTP/1 connection and have no place in HTTP/2 (RFC 9113
/// §8.2.2).
fn connection_specific(name: &[u8]) -> bool {
    [
        &b"connection"[..],
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
    ]
    .iter()
    .any(|n| n.eq_ignore_ascii_case(name))
}

/// Each `Name: value\r\n` line of `block` HTTP/2 allows, as HPACK fields into `out`.
pub(super) fn fields_into(block: &[u8], out: &mut Vec<u8>) {
    for line in block.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = &line[..colon];
        if name.is_empty() || connection_specific(name) {
            continue;
        }
        let value = line[colon + 1..].trim_ascii();
        hpack::field_any_case(out, name, value);
    }
}

/// Slots of the per-worker memory of encoded shared header blocks.
const ENCODED_SLOTS: usize = 256;

/// A shared header block and its HPACK encoding.
type Encoded = Option<(Bytes, Vec<u8>)>;

thread_local! {
    /// Shared header blocks (a cached file's fields, the same for every answer from it)
    /// already encoded: each slot holds the block itself (so its address cannot be
    /// reused while it is here) and its HPACK encoding.
    static ENCODED: std::cell::RefCell<Vec<Encoded>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// `block`'s fields as HPACK into `out`, from the memory of encoded blocks when the same
/// block was encoded before.
fn shared_fields_into(block: &Bytes, out: &mut Vec<u8>) {
    if block.is_empty() {
        return;
    }
    ENCODED.with_borrow_mut(|slots| {
        if slots.is_empty() {
            slots.resize_with(ENCODED_SLOTS, || None);
        }
        let slot = &mut slots[(block.as_ptr() as usize >> 4) % ENCODED_SLOTS];
        if let Some((b, encoded)) = slot {
            if b.as_ptr() == block.as_ptr() && b.len() == block.len() {
                out.extend_from_slice(encoded);
                return;
            }
        }
        let start = out.len();
        fields_into(block, out);
        *slot = Some((block.clone(), out[start..].to_vec()));
    })
}

/// The response head for `r` as an HPACK block: status, `server`, `date`, the response's
/// fields (its own are taken from it), the location's (`extra`), and `content-length`
/// when the body's length is known.
pub(super) fn head(
    r: &mut Response,
    date: &[u8],
    extra: Option<&ResponseHeaders>,
    unix_secs: u64,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + r.shared_headers.len() + r.headers.len());
    hpack::status(&mut out, r.status);
    hpack::field(&mut out, b"server", b"ramjet");
    if !r.own_date {
        hpack::field(&mut out, b"date", date);
    }
    shared_fields_into(&r.shared_headers, &mut out);
    fields_into(&std::mem::take(&mut r.headers), &mut out);
    if let Some(h) = extra {
        let mut located = Vec::new();
        location_headers(&mut located, r, h, unix_secs);
        fields_into(&located, &mut out);
    }
    if let Framing::Length(n) = framing(r, Version::Http2) {
        let mut digits = itoa::Buffer::new();
        hpack::field(&mut out, b"content-length", digits.format(n).as_bytes());
    }
    out
}

/// The 1xx heads in `block` (complete HTTP/1 heads, one after another) as HPACK blocks;
/// 100 Continue is not passed on (the stream's own flow control stands in for it).
pub(super) fn interim_heads(block: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(n) = block[at..].windows(4).position(|w| w == b"\r\n\r\n") {
        let head = &block[at..at + n + 2];
        at += n + 4;
        let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
        let status = head[..line_end]
            .split(|&b| b == b' ')
            .nth(1)
            .and_then(|s| std::str::from_utf8(s).ok()?.parse::<u16>().ok());
        let Some(status) = status.filter(|s| (102..200).contains(s)) else {
            continue;
        };
        let mut h = Vec::new();
        hpack::status(&mut h, status);
        fields_into(&head[(line_end + 1).min(head.len())..], &mut h);
        out.push(h);
    }
    out
}

/// Why a body stopped short.
#[derive(Debug)]
pub(super) enum Stopped {
    /// The client reset the stream or the connection ended.
    Gone,
    /// The body's source failed (a backend, a file that shrank).
    Source,
}

/// Queue `body` on stream `id` and end it. Bodies in memory or in files are queued at
/// once (the connection frames them as windows open); a produced body is pulled while
/// less than `SEND_BUFFER` of it waits; a send rate admits each piece in turn.
pub(super) async fn body(
    m: &Shared,
    id: u32,
    body: Body,
    mut throttle: Option<&mut Throttle>,
) -> Result<(), Stopped> {
    if let Some(t) = throttle.as_deref_mut() {
        t.begin_flush();
    }
    let mut pieces: Vec<Chunk> = Vec::new();
    match body {
        Body::Empty | Body::Upgrade(_) => {}
        Body::Bytes(b) => pieces.push(Chunk::Bytes(b)),
        Body::File { file, offset, len } => pieces.push(Chunk::File { file, offset, len }),
        Body::Parts(parts) => {
            for p in parts {
                pieces.push(match p {
                    Part::Bytes(b) => Chunk::Bytes(b),
                    Part::File { file, offset, len } => Chunk::File { file, offset, len },
                });
            }
        }
        Body::Stream(mut source) => {
            let declared = source.length();
            let mut sent = 0u64;
            loop {
                room(m, id).await?;
                match poll_fn(|cx| source.poll_next(cx)).await {
                    None => break,
                    Some(Err(_)) => return Err(Stopped::Source),
                    Some(Ok(piece)) => {
                        sent += piece.len() as u64;
                        if declared.is_some_and(|d| sent > d) {
                            return Err(Stopped::Source);
                        }
                        queue(m, id, Chunk::Bytes(piece), throttle.as_deref_mut()).await?;
                    }
                }
            }
            if declared.is_some_and(|d| sent != d) {
                return Err(Stopped::Source);
            }
            let trailers = source.trailers().map(|block| {
                let mut h = Vec::new();
                fields_into(&block, &mut h);
                h
            });
            return end(m, id, trailers);
        }
    }
    for p in pieces {
        queue(m, id, p, throttle.as_deref_mut()).await?;
    }
    end(m, id, None)
}

fn end(m: &Shared, id: u32, trailers: Option<Vec<u8>>) -> Result<(), Stopped> {
    if m.borrow_mut().finish(id, trailers) {
        Ok(())
    } else {
        Err(Stopped::Gone)
    }
}

/// Wait until less than `SEND_BUFFER` of stream `id`'s body waits to be framed. (The
/// connection polls its streams whenever it has written or read, so no waker is kept.)
async fn room(m: &Shared, id: u32) -> Result<(), Stopped> {
    poll_fn(|_| match m.borrow().queued(id) {
        None => Poll::Ready(Err(Stopped::Gone)),
        Some(q) if q < SEND_BUFFER => Poll::Ready(Ok(())),
        Some(_) => Poll::Pending,
    })
    .await
}

/// Queue one piece, in steps a send rate admits.
async fn queue(
    m: &Shared,
    id: u32,
    piece: Chunk,
    throttle: Option<&mut Throttle>,
) -> Result<(), Stopped> {
    let Some(t) = throttle else {
        return if m.borrow_mut().push(id, piece) {
            Ok(())
        } else {
            Err(Stopped::Gone)
        };
    };
    let mut piece = piece;
    loop {
        let left = match &piece {
            Chunk::Bytes(b) => b.len() as u64,
            Chunk::File { len, .. } => *len,
        };
        if left == 0 {
            return Ok(());
        }
        room(m, id).await?;
        let n = t.admit(left.min(PACED_PIECE)).await.max(1).min(left);
        let now = match &mut piece {
            Chunk::Bytes(b) => Chunk::Bytes(b.split_to(n as usize)),
            Chunk::File { file, offset, len } => {
                let c = Chunk::File {
                    file: file.clone(),
                    offset: *offset,
                    len: n,
                };
                *offset += n;
                *len -= n;
                c
            }
        };
        if !m.borrow_mut().push(id, now) {
            return Err(Stopped::Gone);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hpack::decoded;

    #[test]
    fn http1_fields_become_lower_case_and_connection_fields_are_dropped() {
        let mut out = Vec::new();
        fields_into(
            b"Content-Type: text/plain\r\nConnection: close\r\nX-A:  b \r\nnot a field\r\nTransfer-Encoding: chunked\r\n",
            &mut out,
        );
        assert_eq!(
            decoded(&out),
            [
                ("content-type".to_string(), "text/plain".to_string()),
                ("x-a".to_string(), "b".to_string())
            ]
        );
    }

    #[test]
    fn a_shared_block_is_encoded_once_and_a_different_one_is_not_mistaken_for_it() {
        let a = Bytes::from_static(b"Content-Type: text/plain\r\nETag: \"1\"\r\n");
        let mut first = Vec::new();
        shared_fields_into(&a, &mut first);
        let mut again = Vec::new();
        shared_fields_into(&a.clone(), &mut again);
        assert_eq!(first, again);
        let mut plain = Vec::new();
        fields_into(&a, &mut plain);
        assert_eq!(first, plain);
        // Same length, other bytes, other address.
        let b = Bytes::from(b"Content-Type: text/plain\r\nETag: \"2\"\r\n".to_vec());
        let mut other = Vec::new();
        shared_fields_into(&b, &mut other);
        assert_eq!(decoded(&other)[1].1, "\"2\"");
    }

    #[test]
    fn interim_heads_keep_their_fields_but_not_100_continue() {
        let blocks = interim_heads(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n",
        );
        assert_eq!(blocks.len(), 1);
        assert_eq!(
            decoded(&blocks[0]),
            [
                (":status".to_string(), "103".to_string()),
                ("link".to_string(), "</a.css>; rel=preload".to_string())
            ]
        );
    }
}
