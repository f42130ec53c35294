//! One connection: read all, parse all pipelined requests, produce all, write the batch in
//! one writev/sendfile run, log, then wait — the loop in [`Conn::serve`].

use std::cell::RefCell;
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;

use ramjet_http1::status::reason;
use ramjet_http1::{
    parse_proxy_header, parse_request_head, BodyDecoder, Method, Parse, ProxyParse, RequestHead,
    Version,
};
use ramjet_observe::stats::{Download, Entered, Waiting, DOWNLOAD_BYTES};
use ramjet_observe::Entry;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use ramjet_config::ResponseHeaders;

use crate::content::Content;
use crate::error_page::{customise, error_response};
use crate::outbox::Outbox;
use crate::park::PARK_AFTER;
use crate::request_body::{Finished, RequestBody};
use crate::response::{Body, Response, Tunnel};
use crate::stage;
use crate::throttle::{Throttle, Throttled};
use crate::worker::{Generation, HttpWorker, READ_BUFFER};

/// Pipelined responses are written once this many are queued...
const MAX_BATCH: u32 = 32;
/// ...or once this many bytes of them are held in memory.
const MAX_BATCH_BYTES: usize = 256 * 1024;
/// After an error response, unread input is drained this long before closing, so the
/// client sees the response instead of a reset (nginx lingering_close).
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);
/// Most bytes drained while lingering.
const LINGER_BYTES: usize = 256 * 1024;

/// What a request left for the access log; ranges index the read buffer, which is not
/// compacted until the batch is written and logged.
pub(crate) struct Pending {
    status: u16,
    line: Range<usize>,
    host: Option<Range<usize>>,
    referer: Option<Range<usize>>,
    user_agent: Option<Range<usize>>,
    started: Instant,
    unix_secs: u64,
    upstream: Option<Box<ramjet_observe::UpstreamLog>>,
    /// The location's counters slot (0: none was found).
    slot: u16,
}

/// What the pipeline still has to do after a request's response is queued.
struct Answered {
    head_len: usize,
    expect_continue: bool,
    keep: bool,
    /// How far the producer read the body (`None`: there is none), or why the body cannot
    /// be accepted (413).
    body: Result<Option<Finished>, ramjet_http1::ErrorKind>,
    /// The connection switched protocols (101): it is a tunnel from now on.
    tunnel: Option<Box<dyn Tunnel>>,
    /// The connection goes to the backend at this socket, this request included; the
    /// request's access-log record, logged once the hand-off's outcome is known.
    handoff: Option<(std::sync::Arc<std::path::PathBuf>, Box<Pending>)>,
}

enum ReadOutcome {
    Data,
    /// Idle between requests for `PARK_AFTER`, with nothing buffered: park it.
    Park,
    Eof,
    Timeout,
    Shutdown,
    Failed,
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    /// Index of the listener the connection came in on (`HttpWorker::listener`).
    listener: u16,
    buf: Vec<u8>,
    /// Start of unparsed input in `buf`.
    start: usize,
    /// Responses being built and written; pooled per worker while the connection is idle.
    out: Outbox,
    /// Log records of `out`'s requests, in order.
    pending: Vec<Pending>,
    generation: Arc<Generation>,
    seen_generation: u64,
    /// When the last bytes were read (one clock read per batch).
    read_at: Instant,
    state: State,
    /// Over `limits.max_connections_per_client`: every request is answered 429.
    refuse: bool,
    /// Send rates of the location last answered from (`None`: none apply).
    throttle: Option<Box<RefCell<Throttle>>>,
}

/// Where a connection stands (DESIGN.md §4.2: an enum, not flags). `Conn::serve` has one
/// wait point for input, `read_more`, whose deadline the state decides; what runs between
/// two waits (parse all, produce all, queue all, write the batch) never waits for the
/// client except to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No request yet: the first must start within `timeouts.header`.
    New,
    /// Between requests: the next must start within `timeouts.keepalive`.
    Idle,
    /// A head has partly arrived: it must be complete by then (else 408).
    ReadingHead(Instant),
    /// Nothing more is read: write what is queued, then close.
    Closing,
    /// Closing after an error answer: unread input is drained for a while first, so the
    /// client reads the answer rather than a reset (nginx lingering_close).
    Lingering,
    /// Idle between requests for `park::PARK_AFTER`: the task ends and the socket waits in
    /// the worker's parking lot until it is readable or this deadline passes.
    Parking(Instant),
    /// Idle while the worker stops for an upgrade: the connection goes to the new process
    /// (`run` sends it, outside `serve`, whose future every connection holds).
    HandingOver,
}

impl State {
    fn is_closing(self) -> bool {
        matches!(self, State::Closing | State::Lingering)
    }
}

/// A connection to serve: new from the listener, or resumed from the parking lot.
pub(crate) struct Start {
    pub(crate) stream: TcpStream,
    pub(crate) peer: SocketAddr,
    pub(crate) listener: u16,
    /// Over `limits.max_connections_per_client`.
    pub(crate) refuse: bool,
    /// Back from the parking lot: idle between requests, its PROXY header long read.
    pub(crate) resumed: bool,
}

/// What a connection that went idle for a while leaves to be parked: its socket, the
/// client, the listener, and when its keep-alive time ends.
pub(crate) type Rest = (TcpStream, SocketAddr, u16, Instant);

/// Serve a connection until it closes (`None`) or has been idle long enough to be parked.
pub(crate) async fn run<C: Content>(w: &HttpWorker<C>, start: Start) -> Option<Rest> {
    let Start {
        stream,
        peer,
        listener,
        refuse,
        resumed,
    } = start;
    let mut conn = Conn {
        buf: Vec::new(),
        stream,
        peer,
        listener,
        start: 0,
        out: Outbox::default(),
        pending: Vec::new(),
        generation: w.current(),
        seen_generation: w.generation.get(),
        read_at: Instant::now(),
        state: if resumed { State::Idle } else { State::New },
        refuse,
        throttle: None,
    };
    if resumed {
        // Bytes another process read before handing the connection over (an upgrade):
        // kept by the worker, not in `Start`, which every connection's future holds.
        conn.take_handed_prefix(w);
    }
    if !resumed
        && w.listen_entry(listener)
            .is_some_and(|e| conn.generation.config.expects_proxy_header(e))
        && !Box::pin(conn.proxy_header(w)).await
    {
        conn.release(w);
        return None;
    }
    conn.serve(w).await;
    if conn.state == State::HandingOver {
        // An upgrade: this idle connection goes to the new process, with whatever was
        // read and not answered. Not a request of its own: no log line. If the new
        // process cannot take it, it is closed (as an idle keep-alive connection may be
        // at any time; the client sends its next request again).
        if let Some(to) = w.hand_to() {
            let _ = Box::pin(conn.send_to(w, to, false)).await;
        }
    }
    conn.release(w);
    match conn.state {
        State::Parking(deadline) => Some((conn.stream, conn.peer, conn.listener, deadline)),
        _ => None,
    }
}

impl Conn {
    fn take_handed_prefix<C: Content>(&mut self, w: &HttpWorker<C>) {
        self.buf = w.take_handed_prefix(&self.stream);
    }

    async fn serve<C: Content>(&mut self, w: &HttpWorker<C>) {
        // A local handle on the configuration (not `self.generation`), so that borrowing it
        // does not conflict with `&mut self` calls; refreshed only when a reload happened.
        let mut gen = self.generation.clone();
        'requests: loop {
            if self.start == self.buf.len() {
                // Everything read has been answered: write, log, then wait idle.
                if !self.flush(w).await || self.state.is_closing() {
                    return self.close().await;
                }
                let t = &self.generation.config.timeouts;
                let idle = if self.state == State::New {
                    t.header
                } else {
                    t.keepalive
                };
                let deadline = self.read_at + idle;
                match self.read_more(w, deadline, true).await {
                    ReadOutcome::Data => {}
                    ReadOutcome::Park => {
                        self.state = State::Parking(deadline);
                        return;
                    }
                    ReadOutcome::Shutdown => {
                        if w.handing_over() {
                            self.state = State::HandingOver;
                        }
                        return;
                    }
                    // The client is still taking the last response out of the socket's
                    // buffers (megabytes of them, for a slow reader): not idle yet.
                    ReadOutcome::Timeout
                        if self.state == State::Idle
                            && !self.generation.config.timeouts.keepalive.is_zero()
                            && still_sending(&self.stream) =>
                    {
                        self.read_at = Instant::now();
                        continue 'requests;
                    }
                    _ => return,
                }
            }
            if w.generation.get() != self.seen_generation {
                self.generation = w.current();
                self.seen_generation = w.generation.get();
                gen = self.generation.clone();
            }
            let config = &gen.config;
            // The parsed head borrows the read buffer and is large: it lives only inside this
            // match, so the awaits below do not carry it in every connection's future.
            let answered = 'answer: {
                match parse_request_head(&self.buf[self.start..], &config.limits.http1) {
                    Parse::Partial => {
                        let deadline = match self.state {
                            State::ReadingHead(d) => d,
                            _ => self.read_at + config.timeouts.header,
                        };
                        self.state = State::ReadingHead(deadline);
                        if !self.flush(w).await {
                            return;
                        }
                        match self.read_more(w, deadline, false).await {
                            ReadOutcome::Data => {}
                            ReadOutcome::Timeout => {
                                self.fail(w, 408, Version::Http11);
                                let _ = self.flush(w).await;
                                return;
                            }
                            _ => return,
                        }
                        continue 'requests;
                    }
                    Parse::Invalid(kind) => {
                        self.fail(w, kind.status(), Version::Http11);
                        let _ = self.flush(w).await;
                        return self.close().await;
                    }
                    Parse::Complete(head) => {
                        let started = self.read_at;
                        let (response, body, location) =
                            match BodyDecoder::new(head.framing, config.limits.max_body_any) {
                                Ok(_) if self.refuse => (too_many(config), Ok(None), None),
                                Err(kind) => {
                                    let mut r = error_response(kind.status());
                                    customise(&mut r, config.error_pages.as_deref());
                                    (r, Err(kind), None)
                                }
                                Ok(decoder) => {
                                    // 100 Continue only when no earlier response is still queued:
                                    // it must not overtake one.
                                    let reader = RequestBody::new(
                                        &self.stream,
                                        &self.buf[self.start + head.head_len()..],
                                        decoder,
                                        head.expect_continue && self.out.is_empty(),
                                        config.timeouts.header,
                                    );
                                    let addrs = (self.peer, w.listener(self.listener));
                                    match stage::respond(
                                        &w.content, config, &head, started, addrs, reader,
                                    ) {
                                        Ok(answer) => answer,
                                        Err(later) => later.await,
                                    }
                                }
                            };
                        let mut response = response;
                        if let Some(socket) =
                            response.extras.as_mut().and_then(|e| e.handoff.take())
                        {
                            // Nothing is queued for it: the backend answers this request.
                            let unix_secs = w.date.borrow_mut().now().1;
                            let mut logged = self.pending_of(&head, 0, started, unix_secs);
                            logged.slot = location.map_or(0, |l| l.metrics);
                            break 'answer Answered {
                                head_len: head.head_len(),
                                expect_continue: false,
                                keep: false,
                                body: Ok(None),
                                tunnel: None,
                                handoff: Some((socket, Box::new(logged))),
                            };
                        }
                        let keep = head.keep_alive
                            && body.is_ok()
                            && (!w.stopping.get() || w.handing_over())
                            && !self.refuse;
                        let tunnel = upgrade_of(&mut response);
                        let status = response.status;
                        let upstream = response
                            .extras
                            .as_mut()
                            .and_then(|e| e.upstream.take())
                            .map(Box::new);
                        let extra = location.and_then(|l| l.response_headers.as_deref());
                        // Send rates: only when a location or the server has them (one test here
                        // otherwise).
                        if self.throttle.is_some()
                            || config.send_rate.is_some()
                            || location.is_some_and(|l| l.shaping.is_some())
                        {
                            self.throttle = Throttle::of(
                                (location, self.seen_generation),
                                config,
                                self.peer,
                                self.throttle.take(),
                            );
                        }
                        let (unix_secs, keep) =
                            queue(w, &mut self.out, response, &head, keep, extra);
                        let mut pending = self.pending_of(&head, status, started, unix_secs);
                        pending.upstream = upstream;
                        pending.slot = location.map_or(0, |l| l.metrics);
                        self.pending.push(pending);
                        Answered {
                            head_len: head.head_len(),
                            expect_continue: head.expect_continue,
                            keep,
                            body,
                            tunnel,
                            handoff: None,
                        }
                    }
                }
            };
            if let Some((socket, logged)) = answered.handoff {
                return Box::pin(self.hand_off(w, socket, logged)).await;
            }
            self.start += answered.head_len;
            let Answered {
                expect_continue,
                keep,
                body,
                tunnel,
                ..
            } = answered;
            if let Some(t) = tunnel {
                return Box::pin(self.tunnel(w, t)).await;
            }
            // A refused client may have sent a body: drain it a while, so it reads the 429.
            let bad_body = body.is_err() || self.refuse;
            let unread = self.take_back(body, expect_continue);
            if !keep {
                self.stop_reading(bad_body);
                continue;
            }
            if let Some((mut decoder, expect)) = unread {
                // Boxed: request bodies are rare on a static server, and inline this future
                // would grow every connection's state.
                if !Box::pin(self.discard_body(w, &mut decoder, expect)).await {
                    self.stop_reading(false);
                    continue;
                }
            }
            self.state = State::Idle;
            if (self.out.responses() >= MAX_BATCH || self.out.buffered() >= MAX_BATCH_BYTES)
                && !self.flush(w).await
            {
                return;
            }
        }
    }

    /// Stop reading requests: what is queued is written, then the connection closes
    /// (lingering when `linger`, or when an error already asked for it).
    fn stop_reading(&mut self, linger: bool) {
        self.state = if linger || self.state == State::Lingering {
            State::Lingering
        } else {
            State::Closing
        };
        self.start = self.buf.len();
    }

    /// Read the PROXY protocol header a balancer sends first (within the header timeout)
    /// and take the client's address from it. False: no valid header; the connection is
    /// closed without an answer (it is not speaking to us as configured).
    async fn proxy_header<C: Content>(&mut self, w: &HttpWorker<C>) -> bool {
        let deadline = self.read_at + self.generation.config.timeouts.header;
        loop {
            match parse_proxy_header(&self.buf[self.start..]) {
                ProxyParse::Complete(h) => {
                    if let Some((client, _)) = h.addresses {
                        self.peer = client;
                    }
                    self.start += h.len;
                    return true;
                }
                ProxyParse::Invalid => {
                    tracing::debug!("{}: no valid PROXY protocol header; closing", self.peer);
                    return false;
                }
                ProxyParse::Partial => {
                    if !matches!(self.read_more(w, deadline, false).await, ReadOutcome::Data) {
                        return false;
                    }
                }
            }
        }
    }

    /// Take back what the producer read of the body: past the buffered bytes it used, or,
    /// if it read the socket, the bytes it read past the body's end replace the buffer's
    /// rest. Returns the decoder of a body still to drain, and whether its client waits for
    /// a 100 Continue that was never sent.
    #[inline]
    fn take_back(
        &mut self,
        body: Result<Option<Finished>, ramjet_http1::ErrorKind>,
        expect_continue: bool,
    ) -> Option<(BodyDecoder, bool)> {
        let read = body.ok().flatten()?;
        let (decoder, continued) = read.give_back(&mut self.buf, &mut self.start);
        (!decoder.is_done()).then_some((decoder, expect_continue && !continued))
    }

    /// Record where the log fields of `head` sit in the read buffer.
    fn pending_of(
        &self,
        head: &RequestHead<'_>,
        status: u16,
        started: Instant,
        unix_secs: u64,
    ) -> Pending {
        let base = self.buf.as_ptr() as usize;
        let at = |s: &[u8]| {
            let from = s.as_ptr() as usize - base;
            from..from + s.len()
        };
        Pending {
            status,
            line: at(head.request_line()),
            host: head.host.map(at),
            referer: head.referer.map(at),
            user_agent: head.user_agent.map(at),
            started,
            unix_secs,
            upstream: None,
            slot: 0,
        }
    }

    /// Queue an error response for a request that could not be parsed, and close after it.
    fn fail<C: Content>(&mut self, w: &HttpWorker<C>, status: u16, version: Version) {
        let mut response = error_response(status);
        customise(&mut response, self.generation.config.error_pages.as_deref());
        let resp = self.out.begin();
        let framing = framing(&response, version);
        let mut date = w.date.borrow_mut();
        let (date, unix_secs) = date.now();
        self.out.head(resp, |out| {
            encode_head(out, &response, date, version);
            end_head(out, version, false, framing);
        });
        self.out.body(resp, response.body, false);
        self.pending.push(Pending {
            status,
            line: 0..0,
            host: None,
            referer: None,
            user_agent: None,
            started: Instant::now(),
            unix_secs,
            upstream: None,
            slot: 0,
        });
        self.state = State::Lingering;
    }

    /// Consume a request body by its framing. False: stop reading this connection.
    async fn discard_body<C: Content>(
        &mut self,
        w: &HttpWorker<C>,
        decoder: &mut BodyDecoder,
        expect_continue: bool,
    ) -> bool {
        loop {
            while self.start < self.buf.len() && !decoder.is_done() {
                match decoder.decode(&self.buf[self.start..]) {
                    Ok(step) => self.start += step.consumed,
                    Err(_) => {
                        self.state = State::Lingering;
                        return false;
                    }
                }
            }
            if decoder.is_done() {
                return true;
            }
            if expect_continue {
                // The client waits for 100-continue we never sent: answer and close instead.
                return false;
            }
            if !self.flush(w).await {
                return false;
            }
            let deadline = self.read_at + self.generation.config.timeouts.header;
            if !matches!(self.read_more(w, deadline, false).await, ReadOutcome::Data) {
                return false;
            }
        }
    }

    /// Write the outbox, then log its requests. False when the connection is gone.
    async fn flush<C: Content>(&mut self, w: &HttpWorker<C>) -> bool {
        if self.out.is_empty() {
            return true;
        }
        let _writing = Entered::new(w.stats.waiting(Waiting::Writing));
        let result = if self.throttle.is_none() && self.out.file_bytes() < DOWNLOAD_BYTES {
            self.out
                .flush(&self.stream, self.generation.config.timeouts.send, None)
                .await
        } else {
            // Boxed: large downloads and send rates are rare next to small answers, and
            // their state stays out of every connection's future.
            Box::pin(self.flush_tracked(w)).await
        };
        if self.out.waited {
            // Idle time counts from the end of the response, not from the request: a
            // download longer than `timeouts.keepalive` (or `header`, for a body still to
            // come) must not find its connection's time used up when it ends (nginx counts
            // keepalive_timeout from the end of the response as well). A flush that never
            // waited ended when it began, within the clock's resolution here.
            self.read_at = Instant::now();
        }
        self.log(w);
        match result {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!("{}: write: {e}", self.peer);
                false
            }
        }
    }

    /// Write a batch holding a large file (listed among the worker's downloads meanwhile)
    /// or under send rates.
    async fn flush_tracked<C: Content>(
        &mut self,
        w: &HttpWorker<C>,
    ) -> Result<(), crate::outbox::WriteError> {
        let total = self.out.file_bytes();
        let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let listed = (total >= DOWNLOAD_BYTES).then(|| {
            let request = self
                .pending
                .last()
                .map_or(&[][..], |p| &self.buf[p.line.clone()]);
            let request = &request[..request.len().min(200)];
            w.stats.download(Download {
                client: self.peer,
                request: String::from_utf8_lossy(request).into_owned(),
                started: Instant::now().into_std(),
                total,
                sent: sent.clone(),
                socket: std::os::fd::AsRawFd::as_raw_fd(&self.stream),
                marks: Default::default(),
            })
        });
        if listed.is_some() {
            self.shrink_buffer(w);
        }
        let progress = listed.as_ref().map(|_| &*sent);
        let timeout = self.generation.config.timeouts.send;
        match &self.throttle {
            None => self.out.flush(&self.stream, timeout, progress).await,
            Some(t) => {
                t.borrow_mut().begin_flush();
                let sink = Throttled {
                    stream: &self.stream,
                    throttle: t,
                };
                self.out.flush(&sink, timeout, progress).await
            }
        }
    }

    /// Before a long download: keep only what the access log and the next requests need
    /// from the read buffer (the logged fields and any pipelined input) in a buffer of
    /// their size, and give the 4 KiB one back to the worker's pool, so a slow download
    /// does not hold it for minutes.
    fn shrink_buffer<C: Content>(&mut self, w: &HttpWorker<C>) {
        if self.buf.capacity() != READ_BUFFER {
            return;
        }
        let fields = |p: &Pending| {
            [
                Some(&p.line),
                p.host.as_ref(),
                p.referer.as_ref(),
                p.user_agent.as_ref(),
            ]
            .into_iter()
            .flatten()
            .map(|r| r.len())
            .sum::<usize>()
        };
        let rest = self.buf.len() - self.start;
        let need: usize = self.pending.iter().map(fields).sum::<usize>() + rest;
        if need >= READ_BUFFER / 2 {
            return;
        }
        let mut small = Vec::with_capacity(need);
        let keep = |r: &mut Range<usize>, small: &mut Vec<u8>| {
            let at = small.len();
            small.extend_from_slice(&self.buf[r.clone()]);
            *r = at..small.len();
        };
        for p in &mut self.pending {
            keep(&mut p.line, &mut small);
            for r in [&mut p.host, &mut p.referer, &mut p.user_agent]
                .into_iter()
                .flatten()
            {
                keep(r, &mut small);
            }
        }
        let start = small.len();
        small.extend_from_slice(&self.buf[self.start..]);
        self.start = start;
        w.give_buffer(std::mem::replace(&mut self.buf, small));
    }

    fn log<C: Content>(&mut self, w: &HttpWorker<C>) {
        for (i, p) in self.pending.iter().enumerate() {
            let bytes = self.out.body_written.get(i).copied().unwrap_or(0);
            w.stats.request(p.slot, p.status, bytes);
        }
        let mut log = w.log.borrow_mut();
        if !log.enabled() {
            self.pending.clear();
            return;
        }
        let buf = &self.buf;
        let timed = log.wants_duration();
        let field = |r: &Option<Range<usize>>| r.as_ref().map(|r| &buf[r.clone()]);
        for (i, p) in self.pending.drain(..).enumerate() {
            log.record(&Entry {
                remote: self.peer.ip(),
                unix_secs: p.unix_secs,
                request_line: &buf[p.line.clone()],
                host: field(&p.host),
                status: p.status,
                body_bytes: self.out.body_written.get(i).copied().unwrap_or(0),
                referer: field(&p.referer),
                user_agent: field(&p.user_agent),
                micros: if timed {
                    p.started.elapsed().as_micros() as u64
                } else {
                    0
                },
                upstream: p.upstream.as_deref(),
            });
        }
    }

    /// Read more input into the buffer (compacting it first). `idle` means no request is
    /// in progress: the buffer may be returned to the pool while waiting, and shutdown ends
    /// the wait.
    async fn read_more<C: Content>(
        &mut self,
        w: &HttpWorker<C>,
        deadline: Instant,
        idle: bool,
    ) -> ReadOutcome {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        if idle && self.buf.is_empty() {
            self.release(w);
        }
        let max = self.generation.config.limits.http1.max_head + READ_BUFFER;
        let _waiting = Entered::new(w.stats.waiting(match self.state {
            State::Idle => Waiting::Idle,
            _ => Waiting::Reading,
        }));
        loop {
            // Between requests, with nothing held: wait only until it is worth parking. A
            // shutdown then reaches the connection through the parking lot within
            // PARK_AFTER, so this wait needs no shutdown notification (registering one per
            // request is a lock and a list insertion on the hottest path).
            let park_at = self.read_at + PARK_AFTER;
            let park =
                idle && self.state == State::Idle && self.buf.capacity() == 0 && park_at < deadline;
            if park {
                if w.stopping.get() {
                    return ReadOutcome::Shutdown;
                }
                tokio::select! {
                    biased;
                    r = self.stream.readable() => if r.is_err() { return ReadOutcome::Failed },
                    _ = tokio::time::sleep_until(park_at) => return ReadOutcome::Park,
                }
            } else if idle {
                let notified = w.shutdown.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if w.stopping.get() {
                    return ReadOutcome::Shutdown;
                }
                tokio::select! {
                    biased;
                    r = self.stream.readable() => if r.is_err() { return ReadOutcome::Failed },
                    _ = tokio::time::sleep_until(deadline) => return ReadOutcome::Timeout,
                    _ = notified => return ReadOutcome::Shutdown,
                }
            } else {
                tokio::select! {
                    biased;
                    r = self.stream.readable() => if r.is_err() { return ReadOutcome::Failed },
                    _ = tokio::time::sleep_until(deadline) => return ReadOutcome::Timeout,
                }
            }
            if self.buf.capacity() == 0 {
                self.buf = w.take_buffer();
                (self.out, self.pending) = w.take_batch();
            }
            if self.buf.capacity() - self.buf.len() < 512 && self.buf.len() < max {
                self.buf.reserve(self.buf.len().max(READ_BUFFER));
            }
            match self.stream.try_read_buf(&mut self.buf) {
                Ok(0) => return ReadOutcome::Eof,
                Ok(_) => {
                    if self.buf.len() < self.buf.capacity() {
                        // A short read drained the socket. try_read leaves tokio's readiness
                        // set, which would cost an EAGAIN recv on the next wait; clear it here
                        // (a WouldBlock from try_io clears readiness without a syscall).
                        let _ = self.stream.try_io(tokio::io::Interest::READABLE, || {
                            Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
                        });
                    }
                    self.read_at = Instant::now();
                    return ReadOutcome::Data;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    // Readiness can be reported with nothing to read (a fresh socket is): do
                    // not hold a buffer through the next wait.
                    if idle && self.buf.is_empty() {
                        self.release(w);
                    }
                }
                Err(_) => return ReadOutcome::Failed,
            }
        }
    }

    /// Hand the read buffer and the batch storage back to the worker's pools, so an idle
    /// connection holds no heap memory of its own.
    fn release<C: Content>(&mut self, w: &HttpWorker<C>) {
        if self.buf.capacity() > 0 {
            w.give_buffer(std::mem::take(&mut self.buf));
        }
        if self.out.is_empty() && self.pending.is_empty() {
            w.give_batch(
                std::mem::take(&mut self.out),
                std::mem::take(&mut self.pending),
            );
        }
    }

    /// After a 101: write the response, pass on what the client sent after its request,
    /// then copy bytes both ways until either side closes.
    async fn tunnel<C: Content>(&mut self, w: &HttpWorker<C>, t: Box<dyn Tunnel>) {
        if !self.flush(w).await {
            return;
        }
        let early = std::mem::take(&mut self.buf);
        let ended = crate::tunnel::run(&mut self.stream, &early[self.start..], t).await;
        self.start = 0;
        w.give_buffer(early);
        self.release(w);
        match ended {
            crate::tunnel::Ended::Closed(None) => {}
            crate::tunnel::Ended::Closed(Some(e)) => tracing::debug!("{}: tunnel: {e}", self.peer),
            crate::tunnel::Ended::Idle => tracing::debug!("{}: tunnel idle; closed", self.peer),
        }
    }

    /// Hand the connection to the backend at `socket`: earlier responses go out first, then
    /// the connection joins the worker's hand-off queue with every byte read from this
    /// request on (the head, a pipelined request, the start of a body) and the client's
    /// address. After one yield, so that the other connections of this event-loop turn
    /// queue theirs, the queue is sent in batches (whichever task gets there first sends
    /// them all). The connection is the backend's from then on; a backend that cannot take
    /// it answers the client 503 (`handoff::Handoffs::flush`). The access log records the
    /// request with 200 when it went (0 bytes: the backend's answer is in its own log) or
    /// 503, and `handoff:SOCKET` as its upstream.
    async fn hand_off<C: Content>(
        &mut self,
        w: &HttpWorker<C>,
        socket: std::sync::Arc<std::path::PathBuf>,
        mut logged: Box<Pending>,
    ) {
        if !self.flush(w).await {
            return;
        }
        let queued_at = Instant::now();
        let fate = match self.send_to(w, socket.clone(), true).await {
            Ok(fate) => fate,
            Err(e) => {
                tracing::warn!("{}: hand-off: {e}; answered 503", self.peer);
                w.stats.handoff_refused.add(1);
                self.fail(w, 503, Version::Http11);
                let _ = self.flush(w).await;
                return self.close().await;
            }
        };
        logged.status = if fate == crate::handoff::Fate::Went {
            200
        } else {
            503
        };
        logged.upstream = Some(Box::new(ramjet_observe::UpstreamLog {
            addr: format!("handoff:{}", socket.display()),
            status: 0,
            micros: queued_at.elapsed().as_micros() as u64,
        }));
        // No response of this connection is in the outbox: no body bytes to pair with.
        self.out.body_written.clear();
        self.pending.push(*logged);
        self.log(w);
    }

    /// Queue a duplicate of this connection's descriptor for the hand-off socket `socket`,
    /// with every byte read from `self.start` on and the client's address; after one
    /// yield (so the other connections of this event-loop turn queue theirs) send the
    /// queue in batches, and while the backend is full try again every `RETRY` until
    /// `[timeouts] handoff` is up. Whichever task gets there first sends every queued
    /// connection. A connection the backend does not take gets a 503 with `answer`, else
    /// only a close (`handoff::Handoffs::flush`).
    async fn send_to<C: Content>(
        &self,
        w: &HttpWorker<C>,
        socket: Arc<std::path::PathBuf>,
        answer: bool,
    ) -> std::io::Result<crate::handoff::Fate> {
        use std::os::fd::AsFd;
        let fd = ramjet_runtime::sys::duplicate(self.stream.as_fd())?;
        let record = ramjet_handoff::Record {
            id: w.handoffs.next_id(),
            listener: self.listener,
            client: self.peer,
            local: w.listener(self.listener),
            prefix: self.buf[self.start..].to_vec(),
        };
        tracing::debug!(
            "{}: connection {} to {}",
            self.peer,
            record.id,
            socket.display()
        );
        let deadline = Instant::now() + self.generation.config.timeouts.handoff;
        let fate = w
            .handoffs
            .queue(socket, fd, record, deadline.into_std(), answer);
        tokio::task::yield_now().await;
        loop {
            let done = w.handoffs.flush(
                self.generation.config.limits.handoff_batch,
                std::time::Instant::now(),
            );
            w.stats.handoff_connections.add(done.connections as u64);
            w.stats.handoff_messages.add(done.messages as u64);
            w.stats.handoff_refused.add(done.refused as u64);
            if done.messages > 0 {
                tracing::debug!(
                    "handed {} connection(s) in {} message(s)",
                    done.connections,
                    done.messages
                );
            }
            if fate.get() != crate::handoff::Fate::Queued {
                return Ok(fate.get());
            }
            tokio::time::sleep(crate::handoff::RETRY).await;
        }
    }

    /// Close: send FIN, and when unread input may follow an error, drain it for a while so
    /// the client reads our response before any reset.
    async fn close(&mut self) {
        if self.state != State::Lingering {
            // Dropping the socket closes it, which sends the FIN: no shutdown(2) needed.
            return;
        }
        let _ = self.stream.shutdown().await;
        let deadline = Instant::now() + LINGER;
        let mut drained = 0;
        // Reuse the read buffer: a local array here would live in every connection's future.
        self.buf.clear();
        self.start = 0;
        self.buf.reserve(READ_BUFFER);
        while drained < LINGER_BYTES {
            tokio::select! {
                r = self.stream.readable() => if r.is_err() { return },
                _ = tokio::time::sleep_until(deadline) => return,
            }
            self.buf.clear();
            match self.stream.try_read_buf(&mut self.buf) {
                Ok(0) => return,
                Ok(n) => drained += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    }
}

/// The tunnel of a 101 response (the body is left empty in its place).
fn upgrade_of(response: &mut Response) -> Option<Box<dyn Tunnel>> {
    if response.status != 101 {
        return None;
    }
    match std::mem::replace(&mut response.body, Body::Empty) {
        Body::Upgrade(t) => Some(t),
        other => {
            response.body = other;
            None
        }
    }
}

/// How a response body is delimited on the wire (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// 1xx, 204, 304: no body, no length.
    None,
    Length(u64),
    /// A stream to an HTTP/1.1 client.
    Chunked,
    /// A stream to an HTTP/1.0 client: the body ends when the connection closes.
    Close,
}

#[inline]
fn framing(r: &Response, version: Version) -> Framing {
    if matches!(r.status, 204 | 304) || r.status < 200 {
        return Framing::None;
    }
    match r.body.length() {
        Some(n) => Framing::Length(n),
        None if version == Version::Http11 => Framing::Chunked,
        None => Framing::Close,
    }
}

/// 429 for a client over `limits.max_connections_per_client` (the connection closes).
fn too_many(config: &ramjet_config::Resolved) -> Response {
    let mut r = error_response(429).header("Retry-After", b"1");
    customise(&mut r, config.error_pages.as_deref());
    r
}

/// Encode a response into the outbox (head, then body unless HEAD/304/204); returns the
/// Unix time of its Date header and whether the connection stays open after it (not after
/// a close-delimited body).
fn queue<C: Content>(
    w: &HttpWorker<C>,
    out: &mut Outbox,
    response: Response,
    head: &RequestHead<'_>,
    keep: bool,
    extra: Option<&ResponseHeaders>,
) -> (u64, bool) {
    let resp = out.begin();
    let framing = framing(&response, head.version);
    let keep = keep && framing != Framing::Close;
    let mut date = w.date.borrow_mut();
    let (date, unix_secs) = date.now();
    out.head(resp, |o| {
        encode_head(o, &response, date, head.version);
        if let Some(h) = extra {
            location_headers(o, &response, h, unix_secs);
        }
        end_head(o, head.version, keep, framing);
    });
    if head.method != Method::Head && framing != Framing::None {
        out.body(resp, response.body, framing == Framing::Chunked);
    }
    (unix_secs, keep)
}

/// Status line and fixed headers, then the response's own (RFC 9112 §6); `end_head` ends it.
fn encode_head(out: &mut Vec<u8>, r: &Response, date: &[u8], version: Version) {
    if version == Version::Http11 {
        // A 1.0 client does not expect informational responses (RFC 9110 §15.2).
        if let Some(e) = &r.extras {
            out.extend_from_slice(&e.interim);
        }
    }
    // The statuses of the static fast path, written whole; the rest from the registry.
    let line: &[u8] = match r.status {
        200 => b"HTTP/1.1 200 OK\r\nServer: ramjet\r\nDate: ",
        206 => b"HTTP/1.1 206 Partial Content\r\nServer: ramjet\r\nDate: ",
        304 => b"HTTP/1.1 304 Not Modified\r\nServer: ramjet\r\nDate: ",
        404 => b"HTTP/1.1 404 Not Found\r\nServer: ramjet\r\nDate: ",
        _ => b"",
    };
    if line.is_empty() {
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(itoa::Buffer::new().format(r.status).as_bytes());
        out.push(b' ');
        out.extend_from_slice(reason(r.status).as_bytes());
        out.extend_from_slice(b"\r\nServer: ramjet\r\nDate: ");
    } else {
        out.extend_from_slice(line);
    }
    out.extend_from_slice(date);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&r.shared_headers);
    out.extend_from_slice(&r.headers);
}

/// Framing and connection fields, then the blank line that ends the head.
fn end_head(out: &mut Vec<u8>, version: Version, keep: bool, framing: Framing) {
    match framing {
        Framing::Length(len) => {
            out.extend_from_slice(b"Content-Length: ");
            out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        Framing::None | Framing::Close => {}
    }
    if !keep {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if version == Version::Http10 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// A location's own header fields and cache lifetime (nginx `add_header` and `expires`),
/// for the statuses nginx adds them to; a response with its own `Cache-Control` keeps it.
/// Written straight into the head: no allocation.
fn location_headers(out: &mut Vec<u8>, r: &Response, h: &ResponseHeaders, unix_secs: u64) {
    if !matches!(
        r.status,
        200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308
    ) {
        return;
    }
    out.extend_from_slice(&h.block);
    let field =
        |name: &[u8]| field_of(&r.shared_headers, name).or_else(|| field_of(&r.headers, name));
    if field(b"cache-control").is_some() {
        return;
    }
    let Some(d) = h.lifetime(field(b"content-type")) else {
        return;
    };
    let secs = d.as_secs();
    if secs == 0 {
        out.extend_from_slice(b"Cache-Control: no-cache\r\n");
    } else {
        out.extend_from_slice(b"Cache-Control: max-age=");
        out.extend_from_slice(itoa::Buffer::new().format(secs).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix_secs + secs);
    use std::io::Write;
    let _ = write!(out, "Expires: {}\r\n", httpdate::HttpDate::from(at));
}

/// The value of field `name` (lower case) in a block of `Name: value\r\n` lines.
fn field_of<'a>(block: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    block.split(|&b| b == b'\n').find_map(|line| {
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon]
            .eq_ignore_ascii_case(name)
            .then(|| line[colon + 1..].trim_ascii())
    })
}

/// Every connection's task holds its future; this budget is what keeps an idle keep-alive
/// connection near 1.5 KB of user-space memory (the target is "no more than nginx").
#[cfg(test)]
const CONNECTION_STATE_BUDGET: usize = 1024;

/// Bytes of an earlier response are still queued in the socket, unacknowledged: the
/// client is still receiving, however long ago the server handed them to the kernel. A
/// keep-alive timeout that ran out then is counted again from now (for a slow reader,
/// the socket buffers hold seconds to minutes of its download).
pub(crate) fn still_sending(socket: &impl std::os::fd::AsRawFd) -> bool {
    ramjet_runtime::sys::unsent_bytes(socket.as_raw_fd()).is_ok_and(|n| n > 0)
}

#[cfg(test)]
mod state_size {
    use super::CONNECTION_STATE_BUDGET;

    struct Nothing;

    impl crate::Content for Nothing {
        fn produce<'r>(
            &'r self,
            _req: &'r crate::Request<'r>,
        ) -> Result<crate::Outcome, crate::Later<'r>> {
            Ok(crate::Outcome::Declined)
        }
    }

    #[test]
    fn connection_state_stays_small() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let config = ramjet_config::for_directory(&std::env::temp_dir(), &[], false).unwrap();
            let access_log = ramjet_observe::AccessLog::open(&config.access_log).unwrap();
            let generation = std::sync::Arc::new(crate::Generation { config, access_log });
            let worker = crate::HttpWorker::new(
                0,
                generation,
                Nothing,
                std::sync::Arc::from([crate::BoundListener {
                    addr,
                    entry: Some(0),
                }]),
            );
            let start = super::Start {
                stream,
                peer: addr,
                listener: 0,
                refuse: false,
                resumed: false,
            };
            let future = super::run(&worker, start);
            let size = std::mem::size_of_val(&future);
            assert!(
                size <= CONNECTION_STATE_BUDGET,
                "connection future grew to {size} bytes"
            );
        });
    }
}
