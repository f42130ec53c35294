//! A batch of encoded responses and how it reaches the socket: runs of memory segments go
//! out in one `writev`, file segments by `sendfile` in bounded chunks, with a page-cache
//! probe first so a cold file is read on the blocking pool, never on the event loop.

use std::fs::File;
use std::future::Future;
use std::io::{self, IoSlice};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ramjet_runtime::sys;
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::response::{Body, BodySource, Part};

mod paced_size;

/// Most bytes per sendfile call: one download cannot hold its worker longer than this takes
/// (DESIGN.md §1: 256 KiB chunks roughly doubled throughput over unbounded calls here).
const SENDFILE_CHUNK: u64 = 256 * 1024;

/// A body longer than this, to a socket the kernel paces itself (BBR, see [`sys::paced`]),
/// goes in calls of the size the worker chose ([`paced_size`]).
const PACED_CHUNK: u64 = paced_size::SMALL;

/// Bytes a long body may leave unsent in the kernel (`TCP_NOTSENT_LOWAT`) on a paced
/// connection to a client on this host (a loopback peer: a local proxy or TLS terminator in
/// front, a benchmark). Over loopback the sending CPU also runs the receiver's network
/// softirq. With a full send buffer (4 MB), BBR's pacing timer sends most segments from timer
/// softirqs on the server's CPU; the kernel defers those to `ksoftirqd`, which waits behind
/// the worker; segments sent meanwhile from the client's CPU (on its ACKs) arrive first, and
/// every such reordering is resent (1.4-1.8% of the bytes of a 100 MB body, all spurious).
/// With at most 16 KiB unsent, the worker's own `sendfile` sends nearly every segment. Over
/// a real network link a short queue can run dry while the worker serves others (5 Gbit/s
/// through a rate-limited veth with the worker busy: 0.87x by median), so it is used only
/// on this host (bench/results/2026-11-29-unsent/).
const UNSENT_ON_THIS_HOST: u32 = 16 * 1024;

/// When a chunk is not in the page cache, the blocking pool reads this much ahead.
const WARM_WINDOW: u64 = 8 * 1024 * 1024;
/// How far ahead one page-cache probe looks before a file is sent from the event loop.
const RESIDENT_SPAN: u64 = 16 * 1024 * 1024;

/// `most` bytes rounded down to whole segments of `mss` (unchanged when it is unknown or
/// larger than `most`). With TCP_NODELAY, a sendfile that ends in part of a segment sends
/// that part as a segment of its own: a 256 KiB chunk on loopback (segments of 65,483
/// bytes) went out as four full segments and one of 212 bytes.
fn whole_segments(most: u64, mss: Option<usize>) -> u64 {
    match mss {
        Some(m) if m > 0 && m as u64 <= most => most / m as u64 * m as u64,
        _ => most,
    }
}

/// How a body of `len` bytes is cut into sendfile calls. Asks the sink nothing about a body
/// no chunk would cut.
fn cut<S: Sink>(len: u64, sink: &S) -> Cut {
    if len > PACED_CHUNK && sink.paced() {
        Cut::Paced(sink.max_segment())
    } else if len > SENDFILE_CHUNK {
        Cut::Fixed(whole_segments(SENDFILE_CHUNK, sink.max_segment()))
    } else {
        Cut::Fixed(SENDFILE_CHUNK)
    }
}

/// The calls a long body is cut into.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cut {
    /// At most this many bytes each.
    Fixed(u64),
    /// Whole segments (of this size, where known) of the worker's paced call size.
    Paced(Option<usize>),
}

impl Cut {
    /// Most bytes for the next call.
    fn chunk(self) -> u64 {
        match self {
            Cut::Fixed(n) => n,
            Cut::Paced(mss) => whole_segments(paced_size::size(), mss),
        }
    }

    /// A call sent `bytes`.
    fn sent(self, bytes: u64) {
        if let Cut::Paced(_) = self {
            paced_size::sent(bytes);
        }
    }
}

/// Most iovecs per writev.
const MAX_IOV: usize = 64;

enum Seg {
    /// `mem[start..end]`.
    Mem {
        start: usize,
        end: usize,
        resp: u32,
        body: bool,
    },
    Shared {
        bytes: Bytes,
        resp: u32,
    },
    File {
        file: Arc<File>,
        offset: u64,
        len: u64,
        resp: u32,
    },
    /// A body pulled from its producer while it is written; `chunked` frames each piece.
    Stream {
        source: Box<dyn BodySource>,
        chunked: bool,
        resp: u32,
    },
}

impl std::fmt::Debug for Seg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Seg::Mem { start, end, .. } => write!(f, "Mem({start}..{end})"),
            Seg::Shared { bytes, .. } => write!(f, "Shared({} bytes)", bytes.len()),
            Seg::File { offset, len, .. } => write!(f, "File({len} bytes at {offset})"),
            Seg::Stream { chunked, .. } => write!(f, "Stream(chunked: {chunked})"),
        }
    }
}

/// Why a flush stopped.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// No progress for the send timeout: the client stopped reading.
    Timeout,
    Io(io::Error),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Timeout => write!(f, "send timeout"),
            WriteError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Encoded responses waiting to be written, in order.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    mem: Vec<u8>,
    segs: Vec<Seg>,
    /// Body bytes written per response of the batch, filled by `flush`.
    pub(crate) body_written: Vec<u64>,
    /// Responses in this batch.
    responses: u32,
    /// Bytes of `Shared` segments (with `mem`, what the batch holds in memory).
    shared: usize,
    /// Bytes of `File` segments.
    files: u64,
    /// The last flush waited for something (the client's window, a stream's producer, a
    /// file's pages, a chunk's turn): its end is later than its start by an unknown time.
    pub(crate) waited: bool,
}

impl Outbox {
    pub(crate) fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Heap bytes held by this outbox's buffers (for pooling decisions).
    pub(crate) fn capacity_bytes(&self) -> usize {
        self.mem.capacity()
            + self.segs.capacity() * std::mem::size_of::<Seg>()
            + self.body_written.capacity() * 8
    }

    /// Responses queued in this batch.
    pub(crate) fn responses(&self) -> u32 {
        self.responses
    }

    /// File bytes queued in this batch (a large total is a download the status page lists).
    #[inline]
    pub(crate) fn file_bytes(&self) -> u64 {
        self.files
    }

    /// Bytes held in memory by this batch (to bound pipelining).
    pub(crate) fn buffered(&self) -> usize {
        self.mem.len() + self.shared
    }

    /// Start a new response; returns its index in the batch.
    pub(crate) fn begin(&mut self) -> u32 {
        self.responses += 1;
        self.responses - 1
    }

    /// Append head bytes for response `resp`.
    pub(crate) fn head(&mut self, resp: u32, write: impl FnOnce(&mut Vec<u8>)) {
        let start = self.mem.len();
        write(&mut self.mem);
        self.push_mem(start, resp, false);
    }

    fn push_mem(&mut self, start: usize, resp: u32, body: bool) {
        let end = self.mem.len();
        if start == end {
            // An empty segment would be an empty write (issue 11: a 0-byte file spun its
            // worker on `writev` returning 0 forever).
            return;
        }
        if let Some(Seg::Mem {
            end: last_end,
            resp: r,
            body: b,
            ..
        }) = self.segs.last_mut()
        {
            if *last_end == start && *r == resp && *b == body {
                *last_end = end;
                return;
            }
        }
        self.segs.push(Seg::Mem {
            start,
            end,
            resp,
            body,
        });
    }

    /// Append the body of response `resp`. Empty pieces add no segment. `chunked` frames a
    /// stream body (HTTP/1.1); the other bodies carry a Content-Length.
    pub(crate) fn body(&mut self, resp: u32, body: Body, chunked: bool) {
        match body {
            // A tunnel is the connection's, not the outbox's (`conn` takes it first).
            Body::Empty | Body::Upgrade(_) => {}
            Body::Stream(source) => self.segs.push(Seg::Stream {
                source,
                chunked,
                resp,
            }),
            Body::Bytes(bytes) => self.bytes(resp, bytes),
            Body::File { file, offset, len } => self.file(resp, file, offset, len),
            Body::Parts(parts) => {
                for p in parts {
                    match p {
                        Part::Bytes(bytes) => self.bytes(resp, bytes),
                        Part::File { file, offset, len } => self.file(resp, file, offset, len),
                    }
                }
            }
        }
    }

    fn file(&mut self, resp: u32, file: Arc<File>, offset: u64, len: u64) {
        if len > 0 {
            self.files += len;
            self.segs.push(Seg::File {
                file,
                offset,
                len,
                resp,
            });
        }
    }

    fn bytes(&mut self, resp: u32, bytes: Bytes) {
        // Small pieces are copied next to the head: one iovec instead of two.
        if bytes.is_empty() {
            return;
        }
        if bytes.len() <= 512 {
            let start = self.mem.len();
            self.mem.extend_from_slice(&bytes);
            self.push_mem(start, resp, true);
        } else {
            self.shared += bytes.len();
            self.segs.push(Seg::Shared { bytes, resp });
        }
    }

    /// Write everything queued. On success the outbox is empty and `body_written` holds
    /// each response's body bytes; on error `body_written` says how far each one got.
    /// `progress`, when given, follows the file bytes sent (for the status page).
    pub(crate) async fn flush<S: Sink>(
        &mut self,
        sink: &S,
        send_timeout: Duration,
        progress: Option<&AtomicU64>,
    ) -> Result<(), WriteError> {
        self.body_written.clear();
        self.body_written.resize(self.responses as usize, 0);
        self.waited = false;
        let mut result = self.write_all(sink, send_timeout, progress).await;
        if result.is_ok() && sink.has_held() {
            self.waited = true;
            result = Box::pin(send_held(sink, send_timeout)).await;
        }
        self.mem.clear();
        self.segs.clear();
        self.files = 0;
        self.responses = 0;
        self.shared = 0;
        result
    }

    /// Every call on `sink` either moves the cursor by at least one byte, waits for
    /// writability (bounded by the send timeout), or ends the flush with an error: a write
    /// that makes no progress is an error, never "try again".
    async fn write_all<S: Sink>(
        &mut self,
        sink: &S,
        send_timeout: Duration,
        progress: Option<&AtomicU64>,
    ) -> Result<(), WriteError> {
        let mut at = Cursor::default();
        while let Some(seg) = self.segs.get_mut(at.seg) {
            if let Seg::Stream {
                source,
                chunked,
                resp,
            } = seg
            {
                // Boxed like files: streams are rare next to cache hits.
                self.waited = true;
                Box::pin(pump(
                    sink,
                    &mut **source,
                    *chunked,
                    send_timeout,
                    &mut self.body_written[*resp as usize],
                ))
                .await?;
                at.seg += 1;
                continue;
            }
            if let Seg::File {
                file,
                offset,
                len,
                resp,
            } = seg
            {
                let (file, offset, len, resp) = (file.clone(), *offset, *len, *resp);
                // Boxed: one allocation per file segment; inline, this future would grow
                // every connection's state.
                let waited = Box::pin(send_file(
                    sink,
                    &file,
                    offset,
                    len,
                    send_timeout,
                    &mut self.body_written[resp as usize],
                    progress,
                ))
                .await?;
                self.waited |= waited;
                at.seg += 1;
                continue;
            }
            // The iovec array lives only in this block, never across an await: it would
            // otherwise add 1 KiB to every connection's future.
            let attempt = {
                let mut iov = [IoSlice::new(&[]); MAX_IOV];
                let (n, file_follows) = self.gather(&at, &mut iov);
                // The head goes with MSG_MORE when a file follows, so it shares a segment
                // with the file's first bytes instead of leaving as a small packet. Not
                // before a stream: its first piece may be long in coming.
                sink.try_writev(&iov[..n], file_follows)
            };
            match attempt {
                // Segments are never empty, so a write of 0 means the socket takes nothing.
                Ok(0) => return Err(WriteError::Io(io::ErrorKind::WriteZero.into())),
                Ok(wrote) => self.advance(&mut at, wrote as u64),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Boxed: the timer and readiness futures are a few hundred bytes, and
                    // inline they would sit in every connection's state.
                    self.waited = true;
                    Box::pin(sink.writable(send_timeout)).await?;
                }
                Err(e) => return Err(WriteError::Io(e)),
            }
        }
        Ok(())
    }

    /// The memory segments from `at` up to the next file or stream segment (or `MAX_IOV` of
    /// them) as iovecs; also whether a file segment is what stopped the run.
    fn gather<'a>(&'a self, at: &Cursor, iov: &mut [IoSlice<'a>; MAX_IOV]) -> (usize, bool) {
        let mut n = 0;
        for seg in &self.segs[at.seg..] {
            let slice: &[u8] = match seg {
                Seg::Mem { start, end, .. } => &self.mem[*start..*end],
                Seg::Shared { bytes, .. } => bytes,
                Seg::File { .. } => return (n, true),
                Seg::Stream { .. } => return (n, false),
            };
            iov[n] = IoSlice::new(if n == 0 {
                &slice[at.done as usize..]
            } else {
                slice
            });
            n += 1;
            if n == MAX_IOV {
                break;
            }
        }
        (n, false)
    }

    /// Account `wrote` bytes of a vectored write starting at `at`.
    fn advance(&mut self, at: &mut Cursor, mut wrote: u64) {
        while wrote > 0 {
            let (len, resp, body) = match self.segs.get(at.seg) {
                Some(Seg::Mem {
                    start,
                    end,
                    resp,
                    body,
                }) => ((end - start) as u64, *resp, *body),
                Some(Seg::Shared { bytes, resp }) => (bytes.len() as u64, *resp, true),
                // A write never reports more than it was given.
                Some(Seg::File { .. } | Seg::Stream { .. }) | None => return,
            };
            let take = wrote.min(len - at.done);
            if body {
                self.body_written[resp as usize] += take;
            }
            wrote -= take;
            at.done += take;
            if at.done == len {
                at.seg += 1;
                at.done = 0;
            }
        }
    }
}

/// How far a flush has got: the segment, and bytes of it already written.
#[derive(Debug, Default)]
struct Cursor {
    seg: usize,
    done: u64,
}

/// Where a flush writes: the client socket, or a scripted fake in tests. Each call is one
/// non-blocking attempt; `WouldBlock` means wait for [`Sink::writable`].
pub(crate) trait Sink {
    /// One vectored write; `more` says a file body follows (MSG_MORE).
    fn try_writev(&self, iov: &[IoSlice<'_>], more: bool) -> io::Result<usize>;
    /// One sendfile of at most `len` bytes of `file` from `offset`.
    fn try_sendfile(&self, file: &File, offset: u64, len: usize) -> io::Result<usize>;
    /// The connection's maximum segment size, where it has one (TCP): sends of a long
    /// body are whole numbers of it, so that none ends in a short segment.
    fn max_segment(&self) -> Option<usize> {
        None
    }
    /// Whether the kernel paces this sink's sends itself ([`sys::paced`]): long bodies then
    /// go in calls of the worker's paced size ([`paced_size`]).
    fn paced(&self) -> bool {
        false
    }
    /// Wait until the sink can take more, at most `timeout`.
    fn writable(&self, timeout: Duration) -> impl Future<Output = Result<(), WriteError>>;
    /// `TCP_CORK` on or off around a long file body: only full segments leave while it is
    /// on. A sink that meters its own writes (a rate limit) or frames them (TLS) leaves
    /// this a no-op: a cork would hold each small piece back.
    fn cork(&self, _on: bool) {}
    /// A long body to a socket the kernel paces goes out with few bytes left unsent in
    /// the kernel, where that costs less than a full send buffer ([`UNSENT_ON_THIS_HOST`]):
    /// whether it now does.
    fn short_unsent(&self) -> bool {
        false
    }
    /// Whether bytes already taken are still held on this side (TLS records the socket
    /// did not take yet): a flush is over only when none are.
    #[inline]
    fn has_held(&self) -> bool {
        false
    }
    /// Send held bytes: `WouldBlock` while the socket cannot take them all.
    fn try_send_held(&self) -> io::Result<()> {
        Ok(())
    }
}

impl Sink for TcpStream {
    fn try_writev(&self, iov: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        if more {
            self.try_io(Interest::WRITABLE, || sys::writev_more(self, iov))
        } else {
            self.try_io(Interest::WRITABLE, || sys::send_now(self, iov))
        }
    }

    fn try_sendfile(&self, file: &File, offset: u64, len: usize) -> io::Result<usize> {
        self.try_io(Interest::WRITABLE, || {
            sys::sendfile(self, file, offset, len)
        })
    }

    fn max_segment(&self) -> Option<usize> {
        sys::max_segment(self).ok()
    }

    fn paced(&self) -> bool {
        sys::paced(self).unwrap_or(false)
    }

    fn cork(&self, on: bool) {
        // Only the segment sizes depend on it: a socket that refuses it is served as before.
        let _ = sys::set_cork(self, on);
    }

    fn short_unsent(&self) -> bool {
        // Only where the client is on this host; a socket that refuses it is served as before.
        sys::peer_on_this_host(self).unwrap_or(false)
            && sys::set_unsent_limit(self, UNSENT_ON_THIS_HOST).is_ok()
    }

    async fn writable(&self, timeout: Duration) -> Result<(), WriteError> {
        match tokio::time::timeout(timeout, TcpStream::writable(self)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(WriteError::Io(e)),
            Err(_) => Err(WriteError::Timeout),
        }
    }
}

/// Send `len` bytes of `file` from `offset`. A sendfile that returns 0 before `len` bytes
/// means the file shrank under us: the head already promised `len`, so the connection
/// must end (an error), never wait for bytes that will not come. `Ok(true)`: it waited
/// (for the client, the disk, or its turn after a chunk), so it may have taken a while.
async fn send_file<S: Sink>(
    sink: &S,
    file: &Arc<File>,
    offset: u64,
    len: u64,
    send_timeout: Duration,
    written: &mut u64,
    progress: Option<&AtomicU64>,
) -> Result<bool, WriteError> {
    let mut waited = false;
    let mut sent = 0u64;
    let cut = cut(len, sink);
    // Longer than one chunk, to a paced client on this host: a short unsent queue, and no
    // cork. Otherwise corked: every segment leaves full, the last at the uncork. sendfile
    // moves 64 KiB of pages into the socket at a time and lets go of the socket between
    // them; in that moment the other CPU, taking the client's ACKs, sends whatever the
    // socket holds, so uncorked a 1 MiB call to a loopback client with a full send buffer
    // (segments of 65,483 bytes) went out in segments of 40 KB on average: 2,450 data
    // segments for a 100 MB body instead of 1,690 (bench/results/2026-11-28-cork/). With the
    // short queue little is left for the other CPU, and the cork turned against it: BBR's
    // pacing timer then sent nearly every segment (190-270 timers per 100 MB body against
    // 0-2 uncorked), and 100 MB to 4 discarding loopback clients went at 49-65 responses a
    // second against 63-78 uncorked; to 4 copying clients, uncorked, 0.97x by the median,
    // in 1,900 segments a body instead of 1,620 (bench/results/2026-11-29-uncorked/).
    // Bodies of 100-200 KB corked came in no fewer segments at c50 and mostly cost more CPU,
    // so shorter ones are not. An error ends the connection, so only success uncorks.
    let long = len > SENDFILE_CHUNK;
    let short = long && matches!(cut, Cut::Paced(_)) && sink.short_unsent();
    let corked = long && !short;
    if corked {
        sink.cork(true);
    }
    // The window being read ahead, which starts at `resident_to`: bytes below it were found
    // in the page cache (or read in) a moment ago.
    let mut ahead: Option<Ahead> = None;
    let mut resident_to = offset;
    // Bytes sent since this task last let the worker's other tasks run.
    let mut since_turn = 0u64;
    while sent < len {
        let pos = offset + sent;
        let n = (len - sent).min(cut.chunk());
        // Past what was last found cached: while no window is being read ahead, probe up to
        // RESIDENT_SPAN, not one probe per 256 KiB chunk (a hot 100 MB file went at 65.1
        // instead of 61.7 responses a second: 4 connections, discarding receiver, median of
        // 6 alternating runs; runs spread 55-75). Pages evicted between the probe and the
        // send cost a short wait in sendfile.
        if pos + n > resident_to && ahead.is_none() {
            let span = (len - sent).min(RESIDENT_SPAN);
            if sys::is_resident(file, pos, span) {
                resident_to = pos + span;
            } else if sys::is_resident(file, pos, n) {
                resident_to = pos + n;
            }
        }
        // A cold file is read on the pool one window ahead of the send: the window the
        // send has reached is awaited (at once when the disk kept up), and the next one is
        // started before its bytes go out, so the disk and the socket work at the same time.
        if pos + n > resident_to {
            let (job, end) = match ahead.take() {
                Some(a) => (a.job, a.end),
                None => {
                    let w = (len - sent).min(WARM_WINDOW);
                    (warm(file, pos, w), pos + w)
                }
            };
            if !job.is_finished() {
                waited = true;
                since_turn = 0;
            }
            match job.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(WriteError::Io(e)),
                Err(e) => return Err(WriteError::Io(io::Error::other(e))),
            }
            resident_to = end;
            if end < offset + len {
                let w = (offset + len - end).min(WARM_WINDOW);
                ahead = Some(Ahead {
                    end: end + w,
                    job: warm(file, end, w),
                });
            }
        }
        match sink.try_sendfile(file, pos, n as usize) {
            Ok(0) => {
                return Err(WriteError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shrank while being sent",
                )))
            }
            Ok(k) => {
                cut.sent(k as u64);
                sent += k as u64;
                since_turn += k as u64;
                *written += k as u64;
                if let Some(p) = progress {
                    p.fetch_add(k as u64, std::sync::atomic::Ordering::Relaxed);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                waited = true;
                since_turn = 0;
                sink.writable(send_timeout).await?;
                continue;
            }
            Err(e) => return Err(WriteError::Io(e)),
        }
        // Yield before the next call would take this task past a chunk (256 KiB) since its
        // last turn: a fast reader must not hold the worker longer than that while its
        // other connections wait. A call of a chunk or more yields after itself, as every
        // call did before; paced calls of 64 KiB yield every fourth. Each followed by a turn
        // of the event loop (an `epoll_wait`), they held one cold 2 GiB download to 5-12
        // Gbit/s in 5 of 11 runs where nginx's plain sendfile did a median 23
        // (bench/results/2026-11-29-cold-turns/).
        if sent < len && since_turn + cut.chunk() > SENDFILE_CHUNK {
            waited = true;
            since_turn = 0;
            tokio::task::yield_now().await;
        }
    }
    if corked {
        sink.cork(false);
    }
    Ok(waited)
}

/// Wait until the sink has sent every byte it holds.
async fn send_held<S: Sink>(sink: &S, send_timeout: Duration) -> Result<(), WriteError> {
    loop {
        match sink.try_send_held() {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => sink.writable(send_timeout).await?,
            Err(e) => return Err(WriteError::Io(e)),
        }
    }
}

/// A window of a cold file being read on the blocking pool ahead of the send, from where
/// the send last found (or made) the file cached up to `end`.
struct Ahead {
    end: u64,
    job: ramjet_observe::stats::Blocking<io::Result<()>>,
}

/// Start reading `[pos, pos+len)` of `file` into the page cache on the blocking pool.
fn warm(file: &Arc<File>, pos: u64, len: u64) -> ramjet_observe::stats::Blocking<io::Result<()>> {
    let f = file.clone();
    ramjet_observe::stats::spawn_blocking(move || {
        let r = sys::blocking_warm(&f, pos, len);
        #[cfg(test)]
        if r.is_ok() {
            tests::warmed(&f, pos, len);
        }
        r
    })
}

/// Most bytes of a chunk-size line: 16 hex digits and CRLF.
const CHUNK_LINE: usize = 18;

/// Write a stream body as its producer yields it: each piece is written whole before the
/// next is asked for (backpressure), an empty piece is skipped (in chunked framing it
/// would read as the end), and the end is `0\r\n`, the source's trailers and `\r\n` when
/// `chunked`. A producer error
/// ends the flush without that end, so the client sees an incomplete body. Without
/// chunked framing, a source of declared length is held to it: no byte past it is sent,
/// and more or fewer bytes than declared end the connection.
async fn pump<S: Sink>(
    sink: &S,
    source: &mut dyn BodySource,
    chunked: bool,
    send_timeout: Duration,
    written: &mut u64,
) -> Result<(), WriteError> {
    let mut left = if chunked { None } else { source.length() };
    loop {
        let piece = std::future::poll_fn(|cx| source.poll_next(cx)).await;
        let mut bytes = match piece {
            None => break,
            Some(Err(e)) => return Err(WriteError::Io(e)),
            Some(Ok(b)) if b.is_empty() => continue,
            Some(Ok(b)) => b,
        };
        let overrun = left.is_some_and(|l| bytes.len() as u64 > l);
        if let Some(l) = left.as_mut() {
            bytes.truncate(bytes.len().min(*l as usize));
            *l -= bytes.len() as u64;
        }
        if chunked {
            let mut line = [0u8; CHUNK_LINE];
            let n = chunk_line(bytes.len(), &mut line);
            write_fully(sink, &[&line[..n], &bytes, b"\r\n"], send_timeout).await?;
        } else if !bytes.is_empty() {
            write_fully(sink, &[&bytes], send_timeout).await?;
        }
        *written += bytes.len() as u64;
        if overrun {
            return Err(WriteError::Io(io::Error::other(
                "the body source yielded more than its declared length",
            )));
        }
    }
    if left.is_some_and(|l| l > 0) {
        return Err(WriteError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the body source ended before its declared length",
        )));
    }
    if chunked {
        let trailers = source.trailers().unwrap_or_default();
        write_fully(sink, &[b"0\r\n", &trailers, b"\r\n"], send_timeout).await?;
    }
    Ok(())
}

/// `len` in hex followed by CRLF; returns the bytes used of `out`.
fn chunk_line(len: usize, out: &mut [u8; CHUNK_LINE]) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = (usize::BITS - len.leading_zeros()).div_ceil(4).max(1) as usize;
    for (i, d) in out[..digits].iter_mut().enumerate() {
        *d = HEX[(len >> (4 * (digits - 1 - i))) & 0xf];
    }
    out[digits..digits + 2].copy_from_slice(b"\r\n");
    digits + 2
}

/// Most slices [`write_fully`] takes: size line, piece, CRLF.
const MAX_PARTS: usize = 3;

/// Write every byte of `parts` (at most [`MAX_PARTS`]), in order, with the same progress
/// rule as the flush.
async fn write_fully<S: Sink>(
    sink: &S,
    parts: &[&[u8]],
    send_timeout: Duration,
) -> Result<(), WriteError> {
    debug_assert!(parts.len() <= MAX_PARTS);
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut done = 0;
    while done < total {
        let attempt = {
            let mut iov = [IoSlice::new(&[]); MAX_PARTS];
            let mut n = 0;
            let mut skip = done;
            for p in parts {
                if skip >= p.len() {
                    skip -= p.len();
                    continue;
                }
                iov[n] = IoSlice::new(&p[skip..]);
                skip = 0;
                n += 1;
            }
            sink.try_writev(&iov[..n], false)
        };
        match attempt {
            Ok(0) => return Err(WriteError::Io(io::ErrorKind::WriteZero.into())),
            Ok(k) => done += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => sink.writable(send_timeout).await?,
            Err(e) => return Err(WriteError::Io(e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
