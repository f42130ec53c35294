//! A response on a stream: its head as HTTP/2 fields (from the same encoder as HTTP/1's,
//! so a location's headers and lifetimes are the same), its body as DATA frames within
//! the windows the client opens.

use std::future::poll_fn;
use std::time::Duration;

use bytes::Bytes;
use h2::SendStream;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use ramjet_config::ResponseHeaders;
use ramjet_http1::Version;

use crate::conn::{framing, location_headers, Framing};
use crate::response::{Body, Part, Response};
use crate::throttle::Throttle;

/// Most bytes of a file read for one DATA run (the window may grant less).
const FILE_PIECE: usize = 256 * 1024;

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

/// Parse `Name: value\r\n` lines into `map` (lines that are not fields, and fields HTTP/2
/// forbids, are left out). Values are slices of `block`, not copies.
pub(super) fn fields_into(block: &Bytes, map: &mut HeaderMap) {
    let mut at = 0;
    while at < block.len() {
        let end = block[at..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(block.len(), |n| at + n);
        let line_end = if end > at && block[end - 1] == b'\r' {
            end - 1
        } else {
            end
        };
        let line = &block[at..line_end];
        let from = at;
        at = end + 1;
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = &line[..colon];
        if connection_specific(name) {
            continue;
        }
        let mut v = from + colon + 1;
        let mut w = line_end;
        while v < w && matches!(block[v], b' ' | b'\t') {
            v += 1;
        }
        while w > v && matches!(block[w - 1], b' ' | b'\t') {
            w -= 1;
        }
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name),
            HeaderValue::from_maybe_shared(block.slice(v..w)),
        ) else {
            continue;
        };
        map.append(name, value);
    }
}

thread_local! {
    /// This second's `date` value, made once (a clone shares its bytes).
    static DATE: std::cell::RefCell<(u64, Option<HeaderValue>)> =
        const { std::cell::RefCell::new((0, None)) };
}

/// The `date` field for the second `unix_secs` (whose HTTP-date is `date`).
fn date_value(date: &[u8], unix_secs: u64) -> Option<HeaderValue> {
    DATE.with_borrow_mut(|(secs, value)| {
        if *secs != unix_secs || value.is_none() {
            *value = HeaderValue::from_bytes(date).ok();
            *secs = unix_secs;
        }
        value.clone()
    })
}

/// The response head for `r`: status, `server`, `date`, the response's fields (its own
/// are taken from it), the location's (`extra`), and `content-length` when the body's
/// length is known.
pub(super) fn head(
    r: &mut Response,
    date: &[u8],
    unix_secs: u64,
    extra: Option<&ResponseHeaders>,
) -> http::Response<()> {
    let mut out = http::Response::new(());
    *out.status_mut() =
        http::StatusCode::from_u16(r.status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    let map = out.headers_mut();
    map.reserve(12);
    map.insert(http::header::SERVER, HeaderValue::from_static("ramjet"));
    if !r.own_date {
        if let Some(d) = date_value(date, unix_secs) {
            map.insert(http::header::DATE, d);
        }
    }
    let mut located = Vec::new();
    if let Some(h) = extra {
        location_headers(&mut located, r, h, unix_secs);
    }
    fields_into(&r.shared_headers, map);
    fields_into(&Bytes::from(std::mem::take(&mut r.headers)), map);
    if !located.is_empty() {
        fields_into(&Bytes::from(located), map);
    }
    if let Framing::Length(n) = framing(r, Version::Http2) {
        map.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    out
}

/// The 1xx heads in `block` (complete HTTP/1 heads, one after another) as HTTP/2
/// informational responses; 100 Continue is not passed on (the stream's own flow control
/// stands in for it).
pub(super) fn interim_heads(block: &[u8]) -> Vec<http::Response<()>> {
    let block = Bytes::copy_from_slice(block);
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(n) = block[at..].windows(4).position(|w| w == b"\r\n\r\n") {
        let head = block.slice(at..at + n + 2);
        at += n + 4;
        let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
        let status = head[..line_end]
            .split(|&b| b == b' ')
            .nth(1)
            .and_then(|s| std::str::from_utf8(s).ok()?.parse::<u16>().ok());
        let Some(status) = status.filter(|s| (101..200).contains(s) && *s != 101) else {
            continue;
        };
        let mut r = http::Response::new(());
        let Ok(code) = http::StatusCode::from_u16(status) else {
            continue;
        };
        *r.status_mut() = code;
        fields_into(
            &head.slice((line_end + 1).min(head.len())..),
            r.headers_mut(),
        );
        out.push(r);
    }
    out
}

/// Why a body stopped short.
#[derive(Debug)]
pub(super) enum Stopped {
    /// The client reset the stream or the connection ended.
    Gone,
    /// The client opened no window for `timeouts.send`.
    Stalled,
    /// The body's source failed (a backend, a file that shrank).
    Source,
}

/// How a body goes out: the stream, the longest wait for a window, the stream's send
/// rates (`limit_rate` and its kin, per stream as nginx applies them), the bytes sent.
pub(super) struct Out<'a> {
    pub tx: &'a mut SendStream<Bytes>,
    pub idle: Duration,
    pub throttle: Option<&'a mut Throttle>,
    pub sent: u64,
}

/// Send `body`, ending the stream.
pub(super) async fn body(o: &mut Out<'_>, body: Body) -> Result<(), Stopped> {
    if let Some(t) = o.throttle.as_deref_mut() {
        t.begin_flush();
    }
    match body {
        Body::Empty | Body::Upgrade(_) => end(o.tx),
        Body::Bytes(b) => bytes(o, b, true).await,
        Body::File { file, offset, len } => self::file(o, &file, offset, len, true).await,
        Body::Parts(parts) if parts.is_empty() => end(o.tx),
        Body::Parts(parts) => {
            let last = parts.len() - 1;
            for (i, p) in parts.into_iter().enumerate() {
                match p {
                    Part::Bytes(b) => bytes(o, b, i == last).await?,
                    Part::File { file, offset, len } => {
                        self::file(o, &file, offset, len, i == last).await?
                    }
                }
            }
            Ok(())
        }
        Body::Stream(mut source) => {
            let declared = source.length();
            loop {
                match poll_fn(|cx| source.poll_next(cx)).await {
                    None => break,
                    Some(Err(_)) => return Err(Stopped::Source),
                    Some(Ok(piece)) => {
                        if declared.is_some_and(|d| o.sent + piece.len() as u64 > d) {
                            return Err(Stopped::Source);
                        }
                        bytes(o, piece, false).await?;
                    }
                }
            }
            if declared.is_some_and(|d| o.sent != d) {
                return Err(Stopped::Source);
            }
            match source.trailers() {
                Some(block) => {
                    let mut map = HeaderMap::new();
                    fields_into(&block, &mut map);
                    o.tx.send_trailers(map).map_err(|_| Stopped::Gone)
                }
                None => end(o.tx),
            }
        }
    }
}

fn end(tx: &mut SendStream<Bytes>) -> Result<(), Stopped> {
    tx.send_data(Bytes::new(), true).map_err(|_| Stopped::Gone)
}

/// Wait until the stream may send some of `want` bytes (the client's window, then the
/// send rates); how many.
async fn capacity(o: &mut Out<'_>, want: usize) -> Result<usize, Stopped> {
    let tx = &mut *o.tx;
    tx.reserve_capacity(want);
    loop {
        let now = tx.capacity();
        if now > 0 {
            let n = now.min(want);
            return Ok(match o.throttle.as_deref_mut() {
                Some(t) => t.admit(n as u64).await as usize,
                None => n,
            });
        }
        match tokio::time::timeout(o.idle, poll_fn(|cx| tx.poll_capacity(cx))).await {
            Err(_) => return Err(Stopped::Stalled),
            Ok(None) | Ok(Some(Err(_))) => return Err(Stopped::Gone),
            Ok(Some(Ok(_))) => {}
        }
    }
}

async fn bytes(o: &mut Out<'_>, mut b: Bytes, last: bool) -> Result<(), Stopped> {
    if b.is_empty() {
        return if last { end(o.tx) } else { Ok(()) };
    }
    while !b.is_empty() {
        let n = capacity(o, b.len()).await?;
        let piece = b.split_to(n);
        o.sent += n as u64;
        o.tx.send_data(piece, last && b.is_empty())
            .map_err(|_| Stopped::Gone)?;
    }
    Ok(())
}

/// A file range, read as the windows allow: from the page cache on the event loop when
/// it is there, else on the blocking pool (the loop never waits for the disk).
async fn file(
    o: &mut Out<'_>,
    file: &std::sync::Arc<std::fs::File>,
    mut offset: u64,
    len: u64,
    last: bool,
) -> Result<(), Stopped> {
    use std::os::unix::fs::FileExt;
    let end_at = offset + len;
    if len == 0 {
        return if last { end(o.tx) } else { Ok(()) };
    }
    while offset < end_at {
        let want = ((end_at - offset) as usize).min(FILE_PIECE);
        let n = capacity(o, want).await?;
        let piece = if ramjet_runtime::sys::is_resident(file, offset, n as u64) {
            let mut buf = vec![0u8; n];
            let got = file
                .read_at(&mut buf, offset)
                .map_err(|_| Stopped::Source)?;
            buf.truncate(got);
            buf
        } else {
            let f = file.clone();
            ramjet_observe::stats::blocking(move || {
                let mut buf = vec![0u8; n];
                let got = f.read_at(&mut buf, offset)?;
                buf.truncate(got);
                Ok::<_, std::io::Error>(buf)
            })
            .await
            .map_err(|_| Stopped::Source)?
            .map_err(|_| Stopped::Source)?
        };
        if piece.is_empty() {
            // The file shrank under its head: the body cannot be what it promised.
            return Err(Stopped::Source);
        }
        offset += piece.len() as u64;
        o.sent += piece.len() as u64;
        o.tx.send_data(Bytes::from(piece), last && offset == end_at)
            .map_err(|_| Stopped::Gone)?;
    }
    Ok(())
}
