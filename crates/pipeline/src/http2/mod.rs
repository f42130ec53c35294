//! HTTP/2 (RFC 9113): a connection that began with the client preface in cleartext (prior
//! knowledge, "h2c") or chose `h2` by ALPN. ramjet's own frame layer: the protocol state
//! is `machine.rs` (frames, stream states, flow control, without I/O), HPACK `hpack.rs`,
//! request fields `fields.rs`; this file is the connection's loop, which reads what the
//! socket has, runs each new stream through the same stages as an HTTP/1 request
//! (`stream.rs`), frames the queued answers within the client's windows and writes them
//! (`out.rs`: frames in memory, file ranges by sendfile on a plain socket), all in one
//! task. It meters what the client sends for floods (`meter.rs`) and ends the connection
//! with GOAWAY when it has been idle for `timeouts.keepalive`, when the server stops, or
//! on a flood.
//!
//! Why not the h2 crate (which served here first): measured with h2load against one
//! worker, it spent 27% of the worker's time in its own code and 15% more copying inside
//! it, wrote one `sendto` per 16 KiB DATA frame, copied file bodies, and held 20.7 KB per
//! idle connection (`bench/results/2026-11-25-h2/analysis.md`).

mod body;
mod fields;
mod flood_report;
mod frame;
pub mod fuzz;
mod hold;
mod hpack;
mod idle;
mod machine;
pub mod meter;
mod out;
mod send;
mod stream;

pub(crate) use body::StreamBody;
pub(crate) use idle::Idle;
pub(crate) use meter::PREFACE;

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use ramjet_observe::Entry;
use tokio::time::Instant;

use crate::content::Content;
use crate::park::PARK_AFTER;
use crate::transport::Transport;
use crate::worker::HttpWorker;
use frame::Code;
use machine::{Machine, Settings};
use out::Wrote;
use stream::LogLine;

/// Streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS; nginx and
/// h2o: 128 and 100).
const MAX_STREAMS: u32 = 128;
/// The window of each stream for request bodies (SETTINGS_INITIAL_WINDOW_SIZE), and the
/// connection's: what a client may send before a handler reads it, so at most 4 MiB held
/// per connection. Measured on 20 MB uploads (`bench/results/2026-11-25-h2/windows.md`):
/// 1.2x the throughput of the protocol's 64 KiB default; 4 MiB/16 MiB were 1.9x, at four
/// times the memory a slow reader can be made to hold.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 4 << 20;
/// After a GOAWAY (or a connection error) with nothing left to send, how long the client
/// has to close before the connection is dropped; also how long a flood's GOAWAY may take.
const GOAWAY_GRACE: Duration = Duration::from_secs(2);
/// Most reads in one turn of the loop, before other connections get theirs.
const READS_PER_TURN: usize = 16;

pub(super) type Shared = Rc<RefCell<Machine<Box<LogLine>>>>;
type Task<'w> = Pin<Box<dyn Future<Output = ()> + 'w>>;
type Warming = Pin<Box<dyn Future<Output = (u32, u64, Option<Bytes>)>>>;

/// How the loop ended.
enum End {
    /// Idle for `park::PARK_AFTER` on a plain socket: the task ends, the state is parked.
    Park,
    /// The client closed or the socket failed: nothing more can be written.
    Gone,
    /// Everything is written: close politely.
    Close,
    /// The client flooded (ENHANCE_YOUR_CALM) and its GOAWAY is written: hold the
    /// connection unread for `FLOOD_HOLD`, then drop it.
    Flooded,
}

/// Serve an HTTP/2 connection on `transport` until it ends. `prefix`: the bytes already
/// read from it (the preface, and maybe more frames). `refuse`: the client is over
/// `limits.max_connections_per_client`: its streams are answered 429 and the connection
/// is sent GOAWAY at once. `resumed`: the state of a connection back from the parking
/// lot. Returns what is to be parked when the connection went idle.
pub(crate) async fn serve<C: Content>(
    w: &HttpWorker<C>,
    mut transport: Transport,
    prefix: Vec<u8>,
    peer: SocketAddr,
    listener: u16,
    refuse: bool,
    resumed: Option<Idle>,
) -> Option<crate::conn::Rest> {
    let mut gen = w.current();
    let mut seen = w.generation.get();
    let info = stream::ConnInfo {
        peer,
        listener: w.listener(listener),
        secure: transport.is_tls(),
        refuse,
    };
    let timeouts = gen.config.timeouts;
    let mut quiet_since = Instant::now();
    let m: Shared = match resumed {
        Some(idle) => {
            quiet_since = idle
                .deadline
                .checked_sub(timeouts.keepalive)
                .unwrap_or(quiet_since);
            // Not in this worker's store (it always is): the connection ends.
            Rc::new(RefCell::new(idle.resume()?))
        }
        None => {
            w.stats.http2_connections.add(1);
            Rc::new(RefCell::new(Machine::new(
                Settings {
                    max_streams: MAX_STREAMS,
                    stream_window: STREAM_WINDOW,
                    connection_window: CONNECTION_WINDOW,
                    max_head: gen.config.limits.http1.max_head,
                },
                !transport.is_tls(),
            )))
        }
    };
    // Writes of many frames stop at whole segments (0: no such limit, under TLS).
    let segment = crate::outbox::Sink::max_segment(&transport).unwrap_or(0);
    // Quiet since (for parking): a connection back from the lot waits its turn again.
    let mut park_from = Instant::now();
    let mut meter = meter::Meter::new();
    let mut input = Input {
        buf: prefix,
        start: 0,
    };
    let mut tasks: Vec<Task<'_>> = Vec::new();
    let mut warming: Vec<Warming> = Vec::new();
    let mut eof = false;
    let mut flooded = false;
    if let Err(f) = meter.feed(&input.buf, std::time::Instant::now) {
        flood(w, &m, peer, f);
        flooded = true;
    }
    input.consume(&m);
    let mut was_active = false;
    // Streams were opened since the connection was last quiet.
    let mut opened = false;
    // The memory kept for streams was given back since the connection went quiet.
    let mut shrunk = false;
    let mut write_blocked: Option<Instant> = None;
    let mut closing: Option<Instant> = None;
    let mut deadline = Instant::now() + timeouts.header;
    let timer = tokio::time::sleep_until(deadline);
    tokio::pin!(timer);
    let shutdown = w.shutdown.notified();
    tokio::pin!(shutdown);
    shutdown.as_mut().enable();
    let mut ended = Vec::new();

    let end = poll_fn(|cx: &mut Context<'_>| loop {
        let mut progress = false;
        // Read everything the socket has, frame by frame.
        if !eof && !flooded && m.borrow().failed.is_none() {
            for _ in 0..READS_PER_TURN {
                input.make_room(w);
                let before = input.buf.len();
                match transport.try_read_buf(&mut input.buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(_) => {
                        progress = true;
                        if let Err(f) = meter.feed(&input.buf[before..], std::time::Instant::now) {
                            flood(w, &m, peer, f);
                            flooded = true;
                            break;
                        }
                        input.consume(&m);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        match transport.poll_read_ready(cx) {
                            Poll::Ready(Ok(())) => continue,
                            Poll::Ready(Err(_)) => eof = true,
                            Poll::Pending => {}
                        }
                        break;
                    }
                    Err(_) => {
                        eof = true;
                        break;
                    }
                }
            }
        }
        // New streams: each runs at once; most are answered before this returns. The
        // clock is read once for the streams of a turn (their start, the answers' date).
        let mut clock: Option<Instant> = None;
        let mut read_clock = || {
            *clock.get_or_insert_with(|| {
                w.date.borrow_mut().now();
                Instant::now()
            })
        };
        loop {
            let Some(new) = m.borrow_mut().new.pop_front() else {
                break;
            };
            let started = read_clock();
            progress = true;
            if w.generation.get() != seen {
                gen = w.current();
                seen = w.generation.get();
            }
            w.stats.http2_streams.add(1);
            opened = true;
            let mut t: Task<'_> =
                Box::pin(stream::serve(w, gen.clone(), m.clone(), new, info, started));
            if t.as_mut().poll(cx).is_pending() {
                tasks.push(t);
            }
            if refuse {
                m.borrow_mut().go_away();
            }
        }
        if !tasks.is_empty() {
            read_clock();
        }
        let mut i = 0;
        while i < tasks.len() {
            if tasks[i].as_mut().poll(cx).is_ready() {
                drop(tasks.swap_remove(i));
                progress = true;
            } else {
                i += 1;
            }
        }
        // File ranges not in the page cache are read on the blocking pool.
        for job in std::mem::take(&mut m.borrow_mut().warm) {
            warming.push(Box::pin(async move {
                let (file, offset, len) = (job.file, job.offset, job.len);
                let data = ramjet_observe::stats::blocking(move || {
                    use std::os::unix::fs::FileExt;
                    let mut buf = vec![0u8; len];
                    let n = file.read_at(&mut buf, offset)?;
                    buf.truncate(n);
                    Ok::<_, io::Error>(Bytes::from(buf))
                })
                .await;
                (job.id, offset, data.ok().and_then(|r| r.ok()))
            }));
        }
        let mut i = 0;
        while i < warming.len() {
            if let Poll::Ready((id, offset, data)) = warming[i].as_mut().poll(cx) {
                drop(warming.swap_remove(i));
                m.borrow_mut().warmed(id, offset, data);
                progress = true;
            } else {
                i += 1;
            }
        }
        // Streams that ended: counters and the access log.
        std::mem::swap(&mut ended, &mut m.borrow_mut().ended);
        if !ended.is_empty() {
            record(w, peer, &mut ended);
        }
        // Frame what the windows allow and write it.
        {
            let mut mm = m.borrow_mut();
            let before = mm.out.pending();
            mm.schedule(std::time::Instant::now);
            // More framed, or a file range to read ahead (its job starts on the next turn).
            if mm.out.pending() > before || !mm.warm.is_empty() {
                progress = true;
            }
            if !mm.out.is_empty() {
                let unwritten = mm.out.pending();
                let wrote = mm.out.write_whole(&transport, segment);
                if mm.out.pending() < unwritten {
                    // The client reads: `timeouts.send` counts from here.
                    write_blocked = None;
                }
                match wrote {
                    Ok(Wrote::All | Wrote::Held) => progress = true,
                    Ok(Wrote::Blocked) => {
                        if mm.out.pending() < before {
                            progress = true;
                        }
                        match transport.poll_write_ready(cx) {
                            Poll::Ready(Ok(())) => progress = true,
                            Poll::Ready(Err(_)) => return Poll::Ready(End::Gone),
                            Poll::Pending => {
                                write_blocked.get_or_insert_with(Instant::now);
                            }
                        }
                    }
                    Err(_) => return Poll::Ready(End::Gone),
                }
            }
        }
        if progress {
            continue;
        }
        // Nothing more to do now: see whether the connection is over, or wait.
        let (active, out_empty, failed, going_away, client_left, greeted) = {
            let mm = m.borrow();
            (
                mm.open_streams() > 0 || !tasks.is_empty(),
                mm.out.is_empty(),
                mm.failed.is_some(),
                mm.going_away.is_some(),
                mm.client_left,
                mm.greeted(),
            )
        };
        if eof {
            return Poll::Ready(End::Gone);
        }
        if (failed || flooded) && out_empty {
            let calm = m.borrow().failed == Some(Code::ENHANCE_YOUR_CALM);
            return Poll::Ready(if flooded || calm {
                End::Flooded
            } else {
                End::Close
            });
        }
        if (going_away || client_left) && !active && out_empty {
            return Poll::Ready(End::Close);
        }
        if !going_away && (w.stopping.get() || shutdown.as_mut().poll(cx).is_ready()) {
            m.borrow_mut().go_away();
            continue;
        }
        if (was_active || opened) && !active {
            opened = false;
            quiet_since = Instant::now();
            park_from = quiet_since;
            shrunk = false;
            // The read buffer goes back to the worker's pool at once (the next read takes
            // one from it): a connection between requests holds none.
            input.release(w);
        }
        was_active = active;
        // An idle connection on a plain socket leaves its task for the parking lot after
        // a while, as an HTTP/1 one does.
        let parkable = !active
            && greeted
            && out_empty
            && !going_away
            && !failed
            && !flooded
            && !refuse
            && input.is_empty()
            && transport.parkable();
        // The next time something must happen.
        let now = Instant::now();
        let mut next = if active {
            now + timeouts.keepalive.max(timeouts.send) * 4
        } else if greeted {
            quiet_since + timeouts.keepalive
        } else {
            quiet_since + timeouts.header
        };
        if parkable || (!active && !shrunk) {
            next = next.min(park_from + PARK_AFTER);
        }
        if failed || flooded || going_away {
            let at = *closing.get_or_insert(now + GOAWAY_GRACE);
            next = next.min(at);
        }
        let stalled = m.borrow().stalled_since().map(Instant::from_std);
        if let Some(s) = stalled {
            next = next.min(s + timeouts.send);
        }
        if let Some(b) = write_blocked {
            next = next.min(b + timeouts.send);
        }
        if next != deadline {
            deadline = next;
            timer.as_mut().reset(deadline);
        }
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        // A deadline passed.
        if !active && !shrunk && now >= park_from + PARK_AFTER {
            // Quiet for a while (not between the requests of a busy client): what was
            // kept for streams goes back, whether or not the connection can be parked.
            shrunk = true;
            tasks = Vec::new();
            warming = Vec::new();
            ended = Vec::new();
            input.release(w);
            m.borrow_mut().quiet();
        }
        if parkable && now >= park_from + PARK_AFTER && now < quiet_since + timeouts.keepalive {
            return Poll::Ready(End::Park);
        }
        if closing.is_some_and(|c| c <= now) {
            return Poll::Ready(End::Gone);
        }
        if write_blocked.is_some_and(|b| b + timeouts.send <= now) {
            // The client stopped reading.
            return Poll::Ready(End::Gone);
        }
        if let Some(s) = stalled {
            if s + timeouts.send <= now {
                // Streams whose client opened no window for `timeouts.send`.
                m.borrow_mut()
                    .reset_stalled((now - timeouts.send).into_std());
            }
        }
        if !active && now >= deadline {
            if greeted {
                m.borrow_mut().go_away();
            } else {
                return Poll::Ready(End::Gone);
            }
        }
        // Re-arm the timer on the next turn.
        deadline = now;
    })
    .await;
    drop(tasks);
    drop(warming);
    let ended_last = std::mem::take(&mut m.borrow_mut().ended);
    let mut ended_last = ended_last;
    record(w, peer, &mut ended_last);
    match end {
        End::Close => close(&mut transport, &m, timeouts.send).await,
        End::Flooded => {
            drop(m);
            drop(input);
            if !w.stopping.get() {
                tokio::select! {
                    _ = hold::hold(&transport) => {}
                    _ = shutdown.as_mut() => {}
                }
            }
        }
        End::Gone => {}
        End::Park => {
            // A stream's task still holding it (none should): not parked, closed.
            let mut machine = Rc::try_unwrap(m).ok()?.into_inner();
            machine.park();
            let deadline = quiet_since + timeouts.keepalive;
            let stream = transport.into_plain()?;
            return Some((
                stream,
                peer,
                listener,
                deadline,
                Some(Idle::keep(machine, deadline)),
            ));
        }
    }
    None
}

/// Where the reading is: the buffer and the first byte not yet framed.
struct Input {
    buf: Vec<u8>,
    start: usize,
}

impl Input {
    /// Nothing read is waiting to be framed.
    fn is_empty(&self) -> bool {
        self.start == self.buf.len()
    }

    /// Room for the next read: a buffer from the worker's pool if there is none, what was
    /// framed dropped, and the buffer grown when a frame longer than it is coming.
    fn make_room<C: Content>(&mut self, w: &HttpWorker<C>) {
        if self.buf.capacity() == 0 {
            self.buf = w.take_buffer();
        }
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let want = match frame::Head::parse(&self.buf) {
            Some(h) => (9 + h.len).max(4096),
            None => 4096,
        };
        if self.buf.capacity() < want || self.buf.capacity() - self.buf.len() < 1024 {
            self.buf
                .reserve(want.max(self.buf.len() + 4096) - self.buf.len());
        }
    }

    fn consume(&mut self, m: &Shared) {
        let used = m.borrow_mut().receive(&self.buf[self.start..]);
        self.start += used;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// While the connection is quiet its buffer goes back to the worker.
    fn release<C: Content>(&mut self, w: &HttpWorker<C>) {
        if self.start == self.buf.len() {
            let buf = std::mem::take(&mut self.buf);
            self.start = 0;
            w.give_buffer(buf);
        }
    }
}

fn flood<C: Content>(w: &HttpWorker<C>, m: &Shared, peer: SocketAddr, f: meter::Flood) {
    flood_report::warn(peer, f.as_str());
    w.stats.http2_floods.add(1);
    m.borrow_mut().fail(Code::ENHANCE_YOUR_CALM);
}

/// Count and log streams that ended.
fn record<C: Content>(
    w: &HttpWorker<C>,
    peer: SocketAddr,
    ended: &mut Vec<machine::Ended<Box<LogLine>>>,
) {
    let mut log = w.log.borrow_mut();
    for e in ended.drain(..) {
        w.stats.request(e.slot, e.status, e.sent);
        let Some(l) = e.log else {
            continue;
        };
        if !log.enabled() {
            continue;
        }
        let micros = if log.wants_duration() {
            l.started.elapsed().as_micros() as u64
        } else {
            0
        };
        log.record(&Entry {
            remote: peer.ip(),
            unix_secs: l.unix_secs,
            request_line: &l.bytes[l.line.clone()],
            host: l.field(&l.host),
            status: e.status,
            body_bytes: e.sent,
            referer: l.field(&l.referer),
            user_agent: l.field(&l.user_agent),
            micros,
            upstream: l.upstream.as_ref(),
        });
    }
}

/// End a connection politely: what is queued (the GOAWAY) goes out, the sending side is
/// shut, and what the client still sends is read and dropped until it closes or
/// `GOAWAY_GRACE` passes, so the kernel does not answer it with a reset that could
/// destroy the last frames before the client reads them.
async fn close(transport: &mut Transport, m: &Shared, send_timeout: Duration) {
    let flushed = tokio::time::timeout(send_timeout, async {
        loop {
            let r = m.borrow_mut().out.write(transport);
            match r {
                Ok(Wrote::All) => return true,
                // Not from a plain write; if it were, the next turn writes the rest.
                Ok(Wrote::Held) => {}
                Ok(Wrote::Blocked) => {
                    if transport.writable().await.is_err() {
                        return false;
                    }
                }
                Err(_) => return false,
            }
        }
    })
    .await;
    if !matches!(flushed, Ok(true)) {
        return;
    }
    transport.shutdown().await;
    let mut sink = Vec::with_capacity(4096);
    let _ = tokio::time::timeout(GOAWAY_GRACE, transport.drain(&mut sink, usize::MAX)).await;
}
