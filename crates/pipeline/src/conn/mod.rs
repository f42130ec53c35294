//! One connection: read all, parse all pipelined requests, produce all, write the batch in
//! one writev/sendfile run, log, then wait — the loop in [`Conn::serve`].
//!
//! By job: the request loop (`requests`), reading and the read buffer (`reading`),
//! writing the batch and logging it (`writing`), HTTP/1 response encoding (`encode`),
//! passing the connection on (`handoff`: tunnels, hand-off to a backend or the next
//! process), closing (`closing`), and TLS's start (`tls`). All of them read and write
//! through one [`Transport`].

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
use ramjet_runtime::LazyTimer;
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
use crate::transport::Transport;
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
    stream: Transport,
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
    /// The HTTP/2 connection preface may still come: no request yet, on a listener that
    /// serves HTTP/2.
    h2c: bool,
    /// The waits for input end by this one timer ([`LazyTimer`]).
    timer: LazyTimer,
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
/// client, the listener, when its keep-alive time ends, and for HTTP/2 the connection's
/// state (settings, windows, the client's HPACK table).
pub(crate) type Rest = (
    TcpStream,
    SocketAddr,
    u16,
    Instant,
    Option<crate::http2::Idle>,
);

/// How [`Conn::serve`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Closed (or passed on for good: a tunnel, a hand-off to a backend).
    Closed,
    /// Idle between requests for `park::PARK_AFTER`: the task ends and the socket waits
    /// in the worker's parking lot until it is readable or this deadline passes.
    Park(Instant),
    /// Idle while the worker stops for an upgrade: the connection goes to the new process
    /// (`run` sends it, outside `serve`, whose future every connection holds).
    HandOver,
    /// The client sent the HTTP/2 connection preface: `run` serves it as HTTP/2.
    Http2,
}

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
        stream: Transport::Plain(stream),
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
        h2c: false,
        timer: LazyTimer::default(),
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
    if !resumed {
        if let Some(acceptor) = w
            .listen_entry(listener)
            .and_then(|e| conn.generation.config.tls_of(e))
            .cloned()
        {
            conn = Box::pin(conn.into_tls(w, acceptor)).await?;
            if conn.stream.is_h2() {
                conn.release(w);
                return Box::pin(crate::http2::serve(
                    w,
                    conn.stream,
                    Vec::new(),
                    conn.peer,
                    conn.listener,
                    conn.refuse,
                    None,
                ))
                .await;
            }
        }
        conn.h2c = w
            .listen_entry(conn.listener)
            .is_none_or(|e| conn.generation.config.http2_of(e));
    }
    // Matched at once: no `Ended` lives across the hand-over's await (every connection's
    // future would carry it).
    match conn.serve(w).await {
        Ended::Park(deadline) => {
            conn.release(w);
            Some((
                conn.stream.into_plain()?,
                conn.peer,
                conn.listener,
                deadline,
                None,
            ))
        }
        Ended::HandOver => {
            // An upgrade: this idle connection goes to the new process, with whatever was
            // read and not answered. Not a request of its own: no log line. If the new
            // process cannot take it, it is closed (as an idle keep-alive connection may
            // be at any time; the client sends its next request again). A TLS session
            // cannot go: it is closed.
            if conn.stream.parkable() {
                if let Some(to) = w.hand_to() {
                    let _ = Box::pin(conn.send_to(w, to, false)).await;
                }
            }
            conn.release(w);
            None
        }
        Ended::Closed => {
            conn.release(w);
            None
        }
        Ended::Http2 => {
            let prefix = conn.buf[conn.start..].to_vec();
            conn.release(w);
            Box::pin(crate::http2::serve(
                w,
                conn.stream,
                prefix,
                conn.peer,
                conn.listener,
                conn.refuse,
                None,
            ))
            .await
        }
    }
}

mod closing;
mod encode;
use encode::{encode_head, end_head, queue, upgrade_of};
pub(crate) use encode::{framing, location_headers, too_many, Framing};
mod handoff;
mod reading;
mod requests;
mod tls;
mod writing;

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
