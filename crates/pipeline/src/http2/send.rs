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

/// Each `Name: value\r\n` line of `block` HTTP/2 allows, to `f` with its name in lower
/// case.
fn each_field(block: &[u8], mut f: impl FnMut(&[u8], &[u8])) {
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
        hpack::lower(name, |name| f(name, value));
    }
}

/// Each field of `block` HTTP/2 allows, as HPACK literals that are not indexed.
pub(super) fn fields_into(block: &[u8], out: &mut Vec<u8>) {
    each_field(block, |name, value| hpack::field(out, name, value));
}

/// Slots of the per-worker memory of shared header blocks taken apart.
const PREPARED_SLOTS: usize = 256;

/// A shared header block's fields as HTTP/2 takes them: names in lower case, each
/// field `text[at..name_end]` and `text[name_end..end]`.
#[derive(Debug, Default)]
struct Prepared {
    text: Vec<u8>,
    fields: Vec<(u32, u32, u32)>,
}

/// A shared header block and its fields.
type Slot = Option<(Bytes, Prepared)>;

thread_local! {
    /// Shared header blocks (a cached file's fields, the same for every answer from it)
    /// already taken apart: each slot holds the block itself (so its address cannot be
    /// reused while it is here) and its fields.
    static PREPARED: std::cell::RefCell<Vec<Slot>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// `block`'s fields to `f`, from the memory of blocks taken apart when the same block
/// was seen before.
fn shared_fields(block: &Bytes, mut f: impl FnMut(&[u8], &[u8])) {
    if block.is_empty() {
        return;
    }
    PREPARED.with_borrow_mut(|slots| {
        if slots.is_empty() {
            slots.resize_with(PREPARED_SLOTS, || None);
        }
        let slot = &mut slots[(block.as_ptr() as usize >> 4) % PREPARED_SLOTS];
        let hit = slot
            .as_ref()
            .is_some_and(|(b, _)| b.as_ptr() == block.as_ptr() && b.len() == block.len());
        if !hit {
            let mut p = Prepared::default();
            each_field(block, |name, value| {
                let at = p.text.len() as u32;
                p.text.extend_from_slice(name);
                let name_end = p.text.len() as u32;
                p.text.extend_from_slice(value);
                p.fields.push((at, name_end, p.text.len() as u32));
            });
            *slot = Some((block.clone(), p));
        }
        let Some((_, p)) = slot else { return };
        for &(at, name_end, end) in &p.fields {
            let (at, name_end, end) = (at as usize, name_end as usize, end as usize);
            f(&p.text[at..name_end], &p.text[name_end..end]);
        }
    })
}

/// The response head for `r` as an HPACK block by the connection's encoder, into `out`:
/// status, `server`, `date`, the response's fields (its own are taken from it), the
/// location's (`extra`), and `content-length` when the body's length is known. A head
/// made of the same parts as the connection's last one (the same shared block, second and
/// length: a client fetching small files) is the same bytes while the table stays.
pub(super) fn head(
    r: &mut Response,
    date: &[u8],
    extra: Option<&ResponseHeaders>,
    unix_secs: u64,
    enc: &mut hpack::Encoder,
    out: &mut Vec<u8>,
) {
    let length = match framing(r, Version::Http2) {
        Framing::Length(n) => Some(n),
        _ => None,
    };
    let plain = r.headers.is_empty() && extra.is_none();
    let key = [
        r.status as u64 | (r.own_date as u64) << 16 | (length.is_some() as u64) << 17,
        r.shared_headers.as_ptr() as u64,
        r.shared_headers.len() as u64,
        unix_secs,
        length.unwrap_or(0),
    ];
    if plain && enc.repeat(&key, out) {
        return;
    }
    let (start, changes) = (out.len(), enc.changes());
    enc.status(out, r.status);
    enc.field(out, b"server", b"ramjet");
    if !r.own_date {
        enc.field(out, b"date", date);
    }
    shared_fields(&r.shared_headers, |n, v| enc.field(out, n, v));
    each_field(&std::mem::take(&mut r.headers), |n, v| enc.field(out, n, v));
    if let Some(h) = extra {
        let mut located = Vec::new();
        location_headers(&mut located, r, h, unix_secs);
        each_field(&located, |n, v| enc.field(out, n, v));
    }
    if let Some(n) = length {
        let mut digits = itoa::Buffer::new();
        enc.field(out, b"content-length", digits.format(n).as_bytes());
    }
    if plain {
        enc.remember(key, &r.shared_headers, &out[start..], changes);
    }
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

impl From<Part> for Chunk {
    fn from(p: Part) -> Chunk {
        match p {
            Part::Bytes(b) => Chunk::Bytes(b),
            Part::File { file, offset, len } => Chunk::File { file, offset, len },
        }
    }
}

/// Queue `body` on stream `id` and end it now, when it is in memory or in files (no
/// send rate applies); a produced body is given back, to be sent by `body`.
pub(super) fn body_now(m: &Shared, id: u32, body: Body) -> Result<Option<Body>, Stopped> {
    let mut m = m.borrow_mut();
    let queued = match body {
        Body::Stream(_) => return Ok(Some(body)),
        Body::Empty | Body::Upgrade(_) => true,
        Body::Bytes(b) => m.push(id, Chunk::Bytes(b)),
        Body::File { file, offset, len } => m.push(id, Chunk::File { file, offset, len }),
        Body::Parts(parts) => parts.into_iter().all(|p| m.push(id, Chunk::from(p))),
    };
    if queued && m.finish(id, None) {
        Ok(None)
    } else {
        Err(Stopped::Gone)
    }
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
        Body::Parts(parts) => pieces.extend(parts.into_iter().map(Chunk::from)),
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
    fn a_shared_block_is_taken_apart_once_and_a_different_one_is_not_mistaken_for_it() {
        let all = |b: &Bytes| {
            let mut v = Vec::new();
            shared_fields(b, |n, val| v.push((n.to_vec(), val.to_vec())));
            v
        };
        let a = Bytes::from_static(b"Content-Type: text/plain\r\nETag: \"1\"\r\n");
        let first = all(&a);
        assert_eq!(
            first,
            [
                (b"content-type".to_vec(), b"text/plain".to_vec()),
                (b"etag".to_vec(), b"\"1\"".to_vec())
            ]
        );
        assert_eq!(all(&a.clone()), first);
        // Same length, other bytes, other address.
        let b = Bytes::from(b"Content-Type: text/plain\r\nETag: \"2\"\r\n".to_vec());
        assert_eq!(all(&b)[1].1, b"\"2\"");
    }

    #[test]
    fn a_head_decodes_to_its_fields_and_repeats_as_indexes() {
        let mut enc = hpack::Encoder::default();
        // Past a connection's first answer, which indexes nothing.
        enc.begin(&mut Vec::new());
        let mut d = hpack::Decoder::new(hpack::TABLE_SIZE);
        let shared = Bytes::from_static(b"Content-Type: text/plain\r\nETag: \"1\"\r\n");
        let mut sizes = Vec::new();
        for _ in 0..2 {
            let mut r = Response::new(200, Body::Bytes(Bytes::from_static(b"hello\n")));
            r.shared_headers = shared.clone();
            r.headers = b"Connection: keep-alive\r\nX-Own: a\r\n".to_vec();
            let mut out = Vec::new();
            enc.begin(&mut out);
            head(
                &mut r,
                b"Thu, 26 Nov 2026 18:45:20 GMT",
                None,
                0,
                &mut enc,
                &mut out,
            );
            let mut got = Vec::new();
            d.decode(&out, |n, v| {
                got.push(format!(
                    "{}: {}",
                    String::from_utf8_lossy(n),
                    String::from_utf8_lossy(v)
                ))
            })
            .unwrap();
            assert_eq!(
                got,
                [
                    ":status: 200",
                    "server: ramjet",
                    "date: Thu, 26 Nov 2026 18:45:20 GMT",
                    "content-type: text/plain",
                    "etag: \"1\"",
                    "x-own: a",
                    "content-length: 6"
                ]
            );
            sizes.push(out.len());
        }
        assert_eq!(sizes[1], 7, "{sizes:?}");
    }

    #[test]
    fn a_repeated_head_is_written_again_only_while_the_table_is_unchanged() {
        let mut enc = hpack::Encoder::default();
        // Past a connection's first answer, which indexes nothing.
        enc.begin(&mut Vec::new());
        let mut d = hpack::Decoder::new(hpack::TABLE_SIZE);
        let a = Bytes::from_static(b"Content-Type: text/plain\r\nETag: \"a\"\r\n");
        let b = Bytes::from_static(b"Content-Type: text/html\r\nETag: \"b\"\r\n");
        let mut blocks = Vec::new();
        // a, a (remembered), a (written again), b (new entries), a (encoded anew: the
        // indexes moved), a second later (a new date).
        for (shared, secs) in [(&a, 1), (&a, 1), (&a, 1), (&b, 1), (&a, 1), (&a, 2)] {
            let mut r = Response::new(200, Body::Bytes(Bytes::from_static(b"hello\n")));
            r.shared_headers = shared.clone();
            let date: &[u8] = if secs == 1 {
                b"Thu, 01 Jan 1970 00:00:01 GMT"
            } else {
                b"Thu, 01 Jan 1970 00:00:02 GMT"
            };
            let mut out = Vec::new();
            enc.begin(&mut out);
            head(&mut r, date, None, secs, &mut enc, &mut out);
            let mut got = Vec::new();
            d.decode(&out, |n, v| got.push((n.to_vec(), v.to_vec())))
                .unwrap();
            assert_eq!(got[2].1, date);
            assert_eq!(
                got[3].1,
                if shared == &a {
                    &b"text/plain"[..]
                } else {
                    b"text/html"
                }
            );
            assert_eq!(got.len(), 6);
            blocks.push(out);
        }
        assert_eq!(blocks[1], blocks[2]);
        assert_eq!(blocks[1].len(), 6);
        assert_ne!(blocks[4], blocks[1]);
        assert_eq!(blocks[4].len(), 6);
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
