//! The HTTP worker: per-thread state shared by that thread's connections.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use ramjet_observe::stats::WorkerStats;
use ramjet_observe::{AccessLog, LogBuffer};
use ramjet_runtime::Spares;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::conn::Pending;
use crate::content::Content;
use crate::date::DateCache;
use crate::outbox::Outbox;
use crate::park::{Lot, Parked};

/// Read buffers and batch storage kept per worker through idle seconds, and at most
/// (`Spares`: in between, what the load reused in the last second).
const POOL_FLOOR: usize = 256;
const POOL_CAP: usize = 16_384;
/// A read buffer starts at this capacity and grows up to the head limit.
pub(crate) const READ_BUFFER: usize = 4096;

/// What a configuration generation consists of: the resolved config and its access log.
#[derive(Debug)]
pub struct Generation {
    pub config: ramjet_config::Resolved,
    pub access_log: Arc<AccessLog>,
}

/// A socket connections come in on: its address, and the index of the configuration's
/// `listen` entry it serves (`None` for a socket passed by socket activation that no
/// entry names: it takes the defaults, e.g. no PROXY protocol header).
#[derive(Debug, Clone, Copy)]
pub struct BoundListener {
    pub addr: SocketAddr,
    pub entry: Option<usize>,
}

/// One worker thread's HTTP state. Single-threaded: `Cell`/`RefCell`, no atomics.
pub struct HttpWorker<C: Content> {
    pub(crate) content: C,
    /// The sockets connections come in on, by listener index.
    listeners: Arc<[BoundListener]>,
    current: RefCell<Arc<Generation>>,
    /// Bumped on reload; connections compare it per request to pick up the new config.
    pub(crate) generation: Cell<u64>,
    pub(crate) log: RefCell<LogBuffer>,
    pub(crate) date: RefCell<DateCache>,
    open: Cell<usize>,
    pub(crate) stopping: Cell<bool>,
    /// Set with `stopping` for an upgrade: where idle connections go.
    hand_to: RefCell<Option<Arc<std::path::PathBuf>>>,
    /// Bytes read by the process that handed a connection over, by its descriptor, until
    /// its connection takes them (`conn::run`).
    handed_prefixes: RefCell<Vec<(std::os::fd::RawFd, Vec<u8>)>>,
    pub(crate) shutdown: Notify,
    /// TLS handshakes in progress on this worker, at most `HANDSHAKES_IN_FLIGHT`: past it
    /// a new connection waits (its ClientHello stays in the socket) instead of adding its
    /// key exchange and signature to the event loop's turn, so a flood of new TLS
    /// connections cannot starve the established ones.
    pub(crate) handshakes: tokio::sync::Semaphore,
    buffers: Spares<Vec<u8>>,
    batches: Spares<(Outbox, Vec<Pending>)>,
    /// This worker's counters (`/metrics`, the status page).
    pub(crate) stats: &'static WorkerStats,
    /// Keep-alive connections idle for a while, waiting without a task.
    pub(crate) lot: Lot,
    /// Connections being handed to backend processes, and the channels to them.
    pub(crate) handoffs: crate::handoff::Handoffs,
}

impl<C: Content> HttpWorker<C> {
    /// `listeners`: the bound addresses, in the runtime's order (a connection's listener
    /// index points into it).
    /// Call on the worker's own thread: `index` names its counters.
    pub fn new(
        index: usize,
        generation: Arc<Generation>,
        content: C,
        listeners: Arc<[BoundListener]>,
    ) -> HttpWorker<C> {
        HttpWorker {
            stats: ramjet_observe::stats::register_worker(index),
            lot: Lot::default(),
            content,
            listeners,
            log: RefCell::new(LogBuffer::new(generation.access_log.clone())),
            current: RefCell::new(generation),
            generation: Cell::new(0),
            date: RefCell::new(DateCache::new()),
            open: Cell::new(0),
            stopping: Cell::new(false),
            hand_to: RefCell::new(None),
            handed_prefixes: RefCell::new(Vec::new()),
            shutdown: Notify::new(),
            handshakes: tokio::sync::Semaphore::new(HANDSHAKES_IN_FLIGHT),
            buffers: Spares::new(POOL_FLOOR, POOL_CAP),
            batches: Spares::new(POOL_FLOOR, POOL_CAP),
            handoffs: crate::handoff::Handoffs::new(index),
        }
    }

    /// A new connection from `peer` is open: counted until the guard drops, and for its
    /// client address when `limits.max_connections_per_client` is set.
    fn enter(&self, peer: SocketAddr) -> (OpenGuard<'_>, Option<ClientConnection>) {
        self.open.set(self.open.get() + 1);
        self.stats.open.add(1);
        let guard = OpenGuard(&self.open, self.stats);
        let per_client = self
            .current
            .borrow()
            .config
            .limits
            .max_connections_per_client;
        (
            guard,
            per_client.map(|max| ClientConnection::enter(peer, max)),
        )
    }

    /// The bytes read before a handed-over connection came here, if any (taken once).
    pub(crate) fn take_handed_prefix(&self, stream: &TcpStream) -> Vec<u8> {
        let mut all = self.handed_prefixes.borrow_mut();
        if all.is_empty() {
            return Vec::new();
        }
        use std::os::fd::AsRawFd;
        let fd = stream.as_raw_fd();
        match all.iter().position(|(f, _)| *f == fd) {
            Some(at) => all.swap_remove(at).1,
            None => Vec::new(),
        }
    }

    /// Stopping for an upgrade: the hand-off socket of the new process.
    pub(crate) fn hand_to(&self) -> Option<Arc<std::path::PathBuf>> {
        self.hand_to.borrow().clone()
    }

    /// Stopping for an upgrade: connections are kept open for the new process.
    pub(crate) fn handing_over(&self) -> bool {
        self.hand_to.borrow().is_some()
    }

    /// The address of listener `at` (unspecified if out of range, which the runtime never
    /// gives).
    pub(crate) fn listener(&self, at: u16) -> SocketAddr {
        self.listeners
            .get(usize::from(at))
            .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |l| l.addr)
    }

    /// The `listen` entry listener `at` serves, if any.
    pub(crate) fn listen_entry(&self, at: u16) -> Option<usize> {
        self.listeners.get(usize::from(at)).and_then(|l| l.entry)
    }

    /// The `listen` entry of listener `at` when it serves FTP.
    fn ftp_entry(&self, at: u16) -> Option<usize> {
        let entry = self.listen_entry(at)?;
        self.current.borrow().config.ftp_of(entry).map(|_| entry)
    }

    /// The configuration in force now.
    pub(crate) fn current(&self) -> Arc<Generation> {
        self.current.borrow().clone()
    }

    pub(crate) fn take_buffer(&self) -> Vec<u8> {
        self.buffers.take(|| Vec::with_capacity(READ_BUFFER))
    }

    pub(crate) fn give_buffer(&self, mut buf: Vec<u8>) {
        // Buffers that grew for a large head are not worth keeping.
        if buf.capacity() == READ_BUFFER {
            buf.clear();
            self.buffers.give(buf);
        }
    }
}

impl<C: Content> HttpWorker<C> {
    /// Outbox and log storage for a connection that has work (capacity kept from reuse).
    pub(crate) fn take_batch(&self) -> (Outbox, Vec<Pending>) {
        self.batches.take(Default::default)
    }

    /// Return empty batch storage; dropped if the pool is full or it has grown large.
    pub(crate) fn give_batch(&self, out: Outbox, pending: Vec<Pending>) {
        if out.capacity_bytes() == 0 && pending.capacity() == 0 {
            return;
        }
        if out.capacity_bytes() <= MAX_POOLED_BATCH {
            self.batches.give((out, pending));
        }
    }
}

/// Open connections per client address, across workers (`limits.max_connections_per_client`).
fn client_connections() -> &'static ramjet_shaping::ClientTable<u32> {
    static TABLE: std::sync::OnceLock<ramjet_shaping::ClientTable<u32>> =
        std::sync::OnceLock::new();
    TABLE.get_or_init(ramjet_shaping::ClientTable::new)
}

/// One connection counted for its client address while it is open.
pub(crate) struct ClientConnection {
    ip: std::net::IpAddr,
    /// The client had its limit open already: this one is answered 429.
    over: bool,
}

impl ClientConnection {
    fn enter(peer: SocketAddr, max: u32) -> ClientConnection {
        let ip = ramjet_shaping::canonical(peer.ip());
        let mut shard = client_connections().shard(ip);
        let n = shard.entry(ip).or_insert(0);
        *n += 1;
        ClientConnection { ip, over: *n > max }
    }
}

impl Drop for ClientConnection {
    fn drop(&mut self) {
        let mut shard = client_connections().shard(self.ip);
        if let Some(n) = shard.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                shard.remove(&self.ip);
            }
        }
    }
}

impl<C: Content> HttpWorker<C> {
    /// Count connections entering (`+`) or leaving (`-`) the parking lot: they stay open
    /// and idle while parked.
    pub(crate) fn count_parked(&self, delta: isize) {
        self.open.set(self.open.get().wrapping_add_signed(delta));
        let n = delta.unsigned_abs() as u64;
        let idle = self.stats.waiting(ramjet_observe::stats::Waiting::Idle);
        if delta >= 0 {
            self.stats.open.add(n);
            self.stats.parked.add(n);
            idle.add(n);
        } else {
            self.stats.open.sub(n);
            self.stats.parked.sub(n);
            idle.sub(n);
        }
    }

    /// Park a connection that went idle (or go on serving it if it cannot be parked).
    fn park(self: &Rc<Self>, rest: crate::conn::Rest, client: Option<ClientConnection>) {
        let (peer, listener) = (rest.1, rest.2);
        if self.stopping.get() {
            // Shutting down: an idle connection is closed, not parked; in an upgrade its
            // task goes on, to hand it over. An HTTP/2 one is told to go away.
            let (stream, h2) = (rest.0, rest.4);
            if self.handing_over() || h2.is_some() {
                tokio::task::spawn_local(self.clone().serve_on(stream, peer, listener, client, h2));
            }
            return;
        }
        if let Err((stream, client, h2)) = self.lot.park(self, rest, client) {
            tokio::task::spawn_local(self.clone().serve_on(stream, peer, listener, client, h2));
        }
    }

    /// A parked connection became readable: serve it in a task again.
    pub(crate) async fn resume(self: Rc<Self>, p: Parked) {
        let Parked {
            stream,
            peer,
            listener,
            client,
            h2,
        } = p;
        // Back into tokio's set; the socket is non-blocking still.
        let Ok(stream) = TcpStream::from_std(stream) else {
            return;
        };
        self.serve_on(stream, peer, listener, client, h2).await;
    }

    /// Serve an idle keep-alive connection from its next request on.
    async fn serve_on(
        self: Rc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        listener: u16,
        client: Option<ClientConnection>,
        h2: Option<crate::http2::Idle>,
    ) {
        self.open.set(self.open.get() + 1);
        self.stats.open.add(1);
        let _guard = OpenGuard(&self.open, self.stats);
        let start = crate::conn::Start {
            stream,
            peer,
            listener,
            refuse: client.as_ref().is_some_and(|c| c.over),
            resumed: true,
        };
        let rest = match h2 {
            // An HTTP/2 connection back from the lot goes on with its state. (Boxed: the
            // HTTP/1 connection's future does not carry HTTP/2's.)
            Some(idle) => {
                Box::pin(crate::http2::serve(
                    &self,
                    crate::transport::Transport::Plain(start.stream),
                    Vec::new(),
                    peer,
                    listener,
                    start.refuse,
                    Some(idle),
                ))
                .await
            }
            None => crate::conn::run(&self, start).await,
        };
        if let Some(rest) = rest {
            self.park(rest, client);
        }
    }
}

/// Most TLS handshakes one worker runs at once.
pub(crate) const HANDSHAKES_IN_FLIGHT: usize = 8;

/// Batch storage larger than this (after a big pipelined burst) is freed, not pooled.
const MAX_POOLED_BATCH: usize = 16 * 1024;

/// Decrements the open-connection counts when a connection task ends, however it ends.
struct OpenGuard<'a>(&'a Cell<usize>, &'static WorkerStats);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
        self.1.open.sub(1);
    }
}

impl<C: Content> ramjet_runtime::Worker for HttpWorker<C> {
    type Config = Generation;

    async fn serve(self: Rc<Self>, stream: TcpStream, peer: SocketAddr, listener: usize) {
        let max = self.current.borrow().config.limits.max_connections;
        if self.open.get() >= max || self.stopping.get() {
            return;
        }
        self.stats.accepted.add(1);
        let (_guard, client) = self.enter(peer);
        let refuse = client.as_ref().is_some_and(|c| c.over);
        if let Some(entry) = self.ftp_entry(listener as u16) {
            // Boxed: an HTTP connection's task does not carry the FTP session's size.
            return Box::pin(crate::ftp::serve(self.clone(), stream, peer, entry, refuse)).await;
        }
        let start = crate::conn::Start {
            stream,
            peer,
            listener: listener as u16,
            refuse,
            resumed: false,
        };
        if let Some(rest) = crate::conn::run(&self, start).await {
            self.park(rest, client);
        }
    }

    async fn serve_handed(
        self: Rc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        listener: usize,
        prefix: Vec<u8>,
    ) {
        if self.stopping.get() {
            return;
        }
        let (_guard, client) = self.enter(peer);
        if !prefix.is_empty() {
            use std::os::fd::AsRawFd;
            self.handed_prefixes
                .borrow_mut()
                .push((stream.as_raw_fd(), prefix));
        }
        let start = crate::conn::Start {
            stream,
            peer,
            listener: listener as u16,
            refuse: client.as_ref().is_some_and(|c| c.over),
            // Between requests, as a parked connection is: its PROXY header (if any) was
            // read by the process that accepted it.
            resumed: true,
        };
        if let Some(rest) = crate::conn::run(&self, start).await {
            self.park(rest, client);
        }
    }

    fn reload(&self, generation: Arc<Generation>) {
        if !Arc::ptr_eq(&self.current.borrow().access_log, &generation.access_log) {
            self.log
                .borrow_mut()
                .set_sink(generation.access_log.clone());
        }
        *self.current.borrow_mut() = generation.clone();
        self.generation.set(self.generation.get() + 1);
        self.content.on_reload(&generation.config);
    }

    fn tick(&self) {
        self.log.borrow_mut().flush();
        self.buffers.tick();
        self.batches.tick();
        self.stats.mark_downloads(|fd| {
            // Listed means open (`mark_downloads`), and this runs on the connection's thread.
            ramjet_runtime::sys::unsent_bytes(fd).unwrap_or(0)
        });
        if self.stats.worker == 0 {
            ramjet_observe::stats::registry().sample();
        }
        let current = self.current();
        self.content.on_tick(&current.config);
    }

    fn begin_shutdown(&self, hand_to: Option<Arc<std::path::PathBuf>>) {
        *self.hand_to.borrow_mut() = hand_to;
        self.stopping.set(true);
        self.shutdown.notify_waiters();
    }

    fn connections(&self) -> usize {
        self.open.get()
    }

    fn finish(&self) {
        self.log.borrow_mut().flush();
    }
}
