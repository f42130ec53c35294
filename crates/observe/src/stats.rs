//! Counters for `/metrics` and the status page, without per-request locking: each worker
//! thread owns one [`WorkerStats`] and is its only writer (a relaxed load and store, i.e.
//! plain moves); a scrape on any worker reads every worker's and adds them up.
//!
//! What is counted where: requests, status classes and body bytes when a request is logged
//! (`pipeline::conn`), connection states at the connection's waits, file-cache hits in the
//! static handler, blocking jobs around `spawn_blocking`, upstream exchanges in the proxy.
//! Locations and upstream servers are counted in fixed slots ([`location_slot`],
//! [`upstream_slot`]) handed out at configuration load, so a reload keeps the counts of a
//! location that stays and the counters stay monotonic.

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Instant, SystemTime};

/// Location slots (slot 0: requests answered before a location was known).
pub const LOCATION_SLOTS: usize = 256;
/// Upstream server slots.
pub const UPSTREAM_SLOTS: usize = 128;
/// A response with at least this many file bytes is a download the status page lists.
pub const DOWNLOAD_BYTES: u64 = 1024 * 1024;

/// A counter or gauge with one writer (its worker).
#[derive(Default)]
pub struct Count(AtomicU64);

impl Count {
    pub const fn new() -> Count {
        Count(AtomicU64::new(0))
    }
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }
    #[inline]
    pub fn sub(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_sub(n), Relaxed);
    }
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Where a connection is waiting (the status page's "connections by state").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// For (the rest of) a request head.
    Reading,
    /// Idle between keep-alive requests.
    Idle,
    /// For the client to take a response.
    Writing,
}

/// Counts one in a gauge until dropped (however the wait ends).
pub struct Entered(&'static Count);

impl Entered {
    #[inline]
    pub fn new(gauge: &'static Count) -> Entered {
        gauge.add(1);
        Entered(gauge)
    }
}

impl Drop for Entered {
    #[inline]
    fn drop(&mut self) {
        self.0.sub(1);
    }
}

/// One upstream server's counters.
#[derive(Default)]
pub struct UpstreamCounts {
    pub requests: Count,
    pub failures: Count,
    pub in_flight: Count,
    /// Sum of response-head times (µs).
    pub header_micros: Count,
}

/// A response being sent that is large enough to list (`DOWNLOAD_BYTES`).
pub struct Download {
    pub client: SocketAddr,
    /// The request line (at most 200 bytes of it).
    pub request: String,
    pub started: Instant,
    pub total: u64,
    pub sent: Arc<AtomicU64>,
    /// The connection's socket, read only by its own worker's tick (on the thread that
    /// owns the connection: while the download is listed, the socket is open).
    pub socket: std::os::fd::RawFd,
    /// (when, bytes the client has taken) at the last ticks (one a second, the last
    /// `RATE_WINDOW`), for a rate over the last seconds. `sent` counts bytes handed to the
    /// kernel: megabytes of socket buffers fill in the first moments of a slow download
    /// and drain in bursts, so neither `sent` over the whole time nor over a window says
    /// how fast the client reads; sent less what is still queued in the socket does.
    pub marks: std::collections::VecDeque<(Instant, u64)>,
}

/// Samples a download's recent rate is taken over (5 s at one a second).
const RATE_WINDOW: usize = 6;

impl Download {
    /// Bytes per second the client took over the last ticks, or sent since the start
    /// while there are too few.
    pub fn rate(&self) -> f64 {
        match (self.marks.front(), self.marks.back()) {
            (Some(&(t0, a)), Some(&(t1, b))) if self.marks.len() >= 3 => {
                let secs = t1.duration_since(t0).as_secs_f64();
                b.saturating_sub(a) as f64 / secs.max(1e-3)
            }
            _ => self.sent.load(Relaxed) as f64 / self.started.elapsed().as_secs_f64().max(1e-3),
        }
    }
}

/// One worker's counters.
pub struct WorkerStats {
    pub worker: usize,
    requests: [[Count; 5]; LOCATION_SLOTS],
    pub body_bytes: Count,
    pub accepted: Count,
    pub open: Count,
    /// Idle connections waiting in the parking lot (also counted idle).
    pub parked: Count,
    waiting: [Count; 3],
    pub cache_hits: Count,
    pub cache_misses: Count,
    pub blocking_now: Count,
    pub blocking_total: Count,
    /// Connections handed to backend processes, the messages that carried them, and the
    /// ones answered 503 because their backend could not take them.
    pub handoff_connections: Count,
    pub handoff_messages: Count,
    pub handoff_refused: Count,
    /// TLS handshakes begun (connections on TLS listeners that sent something) and
    /// completed.
    pub tls_handshakes: Count,
    pub tls_handshakes_done: Count,
    /// Completed handshakes that resumed a session (a ticket or a session id).
    pub tls_handshakes_resumed: Count,
    /// HTTP/2 connections (past the preface and SETTINGS), streams they opened, and
    /// connections closed as floods.
    pub http2_connections: Count,
    pub http2_streams: Count,
    pub http2_floods: Count,
    /// FTP control connections open now, logins, files sent whole, listings sent, data
    /// bytes sent, and data connections refused (from another address than the control
    /// connection's: port theft).
    pub ftp_sessions: Count,
    pub ftp_logins: Count,
    pub ftp_files: Count,
    pub ftp_listings: Count,
    pub ftp_bytes: Count,
    pub ftp_refused: Count,
    upstreams: [UpstreamCounts; UPSTREAM_SLOTS],
    downloads: Mutex<Vec<(u64, Download)>>,
    next_download: Count,
}

impl WorkerStats {
    fn new(worker: usize) -> WorkerStats {
        WorkerStats {
            worker,
            requests: std::array::from_fn(|_| Default::default()),
            body_bytes: Count::new(),
            accepted: Count::new(),
            open: Count::new(),
            parked: Count::new(),
            waiting: Default::default(),
            cache_hits: Count::new(),
            cache_misses: Count::new(),
            blocking_now: Count::new(),
            blocking_total: Count::new(),
            handoff_connections: Count::new(),
            handoff_messages: Count::new(),
            handoff_refused: Count::new(),
            tls_handshakes: Count::new(),
            tls_handshakes_done: Count::new(),
            tls_handshakes_resumed: Count::new(),
            http2_connections: Count::new(),
            http2_streams: Count::new(),
            http2_floods: Count::new(),
            ftp_sessions: Count::new(),
            ftp_logins: Count::new(),
            ftp_files: Count::new(),
            ftp_listings: Count::new(),
            ftp_bytes: Count::new(),
            ftp_refused: Count::new(),
            upstreams: std::array::from_fn(|_| Default::default()),
            downloads: Mutex::new(Vec::new()),
            next_download: Count::new(),
        }
    }

    /// A request answered: its location slot, status and body bytes sent.
    #[inline]
    pub fn request(&self, slot: u16, status: u16, body_bytes: u64) {
        let class = (usize::from(status / 100)).clamp(1, 5) - 1;
        if let Some(row) = self.requests.get(usize::from(slot)) {
            row[class].add(1);
        }
        self.body_bytes.add(body_bytes);
    }

    /// Requests of a location slot by class (1xx..5xx).
    pub fn requests_of(&self, slot: usize) -> [u64; 5] {
        std::array::from_fn(|c| self.requests[slot][c].get())
    }

    /// All requests this worker answered.
    pub fn requests_total(&self) -> u64 {
        self.requests.iter().flatten().map(Count::get).sum()
    }

    #[inline]
    pub fn waiting(&'static self, state: Waiting) -> &'static Count {
        &self.waiting[state as usize]
    }

    pub fn upstream(&self, slot: u16) -> Option<&UpstreamCounts> {
        self.upstreams.get(usize::from(slot))
    }

    /// List a download until the returned guard drops.
    pub fn download(&self, d: Download) -> DownloadGuard<'_> {
        let id = self.next_download.get();
        self.next_download.add(1);
        lock(&self.downloads).push((id, d));
        DownloadGuard { stats: self, id }
    }

    /// The downloads in progress now.
    pub fn downloads<R>(&self, f: impl FnOnce(&[(u64, Download)]) -> R) -> R {
        f(&lock(&self.downloads))
    }

    /// Mark how far each of this worker's downloads has got, for its recent rate: called
    /// by the worker itself once a second, with `unsent` telling the bytes still queued in
    /// a socket (the socket is open: its download is listed, and the connection that would
    /// close it runs on this same thread, not now).
    pub fn mark_downloads(&self, unsent: impl Fn(std::os::fd::RawFd) -> u64) {
        let now = Instant::now();
        for (_, d) in lock(&self.downloads).iter_mut() {
            if d.marks.len() == RATE_WINDOW {
                d.marks.pop_front();
            }
            let taken = d.sent.load(Relaxed).saturating_sub(unsent(d.socket));
            d.marks.push_back((now, taken));
        }
    }

    /// Body bytes the downloads in progress have sent so far (counted in `body_bytes`
    /// only when each ends).
    pub fn bytes_in_progress(&self) -> u64 {
        lock(&self.downloads)
            .iter()
            .map(|(_, d)| d.sent.load(Relaxed))
            .sum()
    }
}

/// Removes a download from the list when dropped (however its response ends).
pub struct DownloadGuard<'a> {
    stats: &'a WorkerStats,
    id: u64,
}

impl Drop for DownloadGuard<'_> {
    fn drop(&mut self) {
        lock(&self.stats.downloads).retain(|(id, _)| *id != self.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Process-wide: every worker's counters and the slot names.
pub struct Registry {
    pub started: Instant,
    pub started_at: SystemTime,
    workers: Mutex<Vec<&'static WorkerStats>>,
    /// (host, location prefix) by slot.
    locations: Mutex<Vec<(String, String)>>,
    /// (upstream, server) by slot.
    upstreams: Mutex<Vec<(String, String)>>,
    /// One a second, the last `HISTORY`: recent rates and the status page's plot.
    samples: Mutex<std::collections::VecDeque<Sample>>,
    /// A graceful stop has begun and `timeouts.drain` runs: the `health` handler answers
    /// 503 so a balancer moves traffic off before the listeners close.
    draining: std::sync::atomic::AtomicBool,
}

/// The totals at one moment (`Registry::sample`).
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub at: Instant,
    pub requests: u64,
    /// Body bytes of finished responses and of the downloads in progress so far.
    pub bytes: u64,
    pub connections: u64,
}

/// Samples kept: ten minutes at one a second.
pub const HISTORY: usize = 601;
/// Samples the recent rates are taken over (10 s).
const RECENT: usize = 11;

/// The registry (created on first use).
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Registry {
        started: Instant::now(),
        started_at: SystemTime::now(),
        workers: Mutex::new(Vec::new()),
        locations: Mutex::new(vec![(String::new(), String::new())]),
        upstreams: Mutex::new(Vec::new()),
        samples: Mutex::new(std::collections::VecDeque::new()),
        draining: std::sync::atomic::AtomicBool::new(false),
    })
}

impl Registry {
    /// The graceful stop has begun (see `draining`).
    pub fn begin_draining(&self) {
        self.draining.store(true, Relaxed);
    }

    /// Whether the process is draining before it stops.
    pub fn draining(&self) -> bool {
        self.draining.load(Relaxed)
    }

    /// Every worker's counters, by worker index.
    pub fn workers(&self) -> Vec<&'static WorkerStats> {
        let mut w = lock(&self.workers).clone();
        w.sort_by_key(|s| s.worker);
        w
    }

    /// (host, location) of each location slot.
    pub fn locations(&self) -> Vec<(String, String)> {
        lock(&self.locations).clone()
    }

    /// Record the totals now (worker 0 does, once a second).
    pub fn sample(&self) {
        let now = Instant::now();
        let (mut requests, mut bytes, mut connections) = (0, 0, 0);
        for w in self.workers() {
            requests += w.requests_total();
            bytes += w.body_bytes.get() + w.bytes_in_progress();
            connections += w.open.get();
        }
        let mut s = lock(&self.samples);
        if s.len() == HISTORY {
            s.pop_front();
        }
        s.push_back(Sample {
            at: now,
            requests,
            bytes,
            connections,
        });
    }

    /// Requests and body bytes per second over the last samples (`None`: fewer than two).
    pub fn recent_rates(&self) -> Option<(f64, f64, f64)> {
        let s = lock(&self.samples);
        let last = s.back()?;
        let first = s.get(s.len().saturating_sub(RECENT))?;
        let secs = last.at.duration_since(first.at).as_secs_f64();
        (secs > 0.0).then(|| {
            (
                last.requests.saturating_sub(first.requests) as f64 / secs,
                last.bytes.saturating_sub(first.bytes) as f64 / secs,
                secs,
            )
        })
    }

    /// The samples kept, oldest first.
    pub fn history(&self) -> Vec<Sample> {
        lock(&self.samples).iter().copied().collect()
    }

    /// (upstream, server) of each upstream slot.
    pub fn upstreams(&self) -> Vec<(String, String)> {
        lock(&self.upstreams).clone()
    }
}

fn intern(table: &Mutex<Vec<(String, String)>>, a: &str, b: &str, max: usize) -> u16 {
    let mut t = lock(table);
    if let Some(i) = t.iter().position(|(x, y)| x == a && y == b) {
        return i as u16;
    }
    if t.len() >= max {
        // Past the slots: counted with the last one (named for the first that took it).
        return (max - 1) as u16;
    }
    t.push((a.to_string(), b.to_string()));
    (t.len() - 1) as u16
}

/// The slot of a location (its host's first name and its prefix); the same pair keeps its
/// slot across reloads.
pub fn location_slot(host: &str, prefix: &str) -> u16 {
    intern(&registry().locations, host, prefix, LOCATION_SLOTS)
}

/// The slot of an upstream server.
pub fn upstream_slot(upstream: &str, server: &str) -> u16 {
    intern(&registry().upstreams, upstream, server, UPSTREAM_SLOTS)
}

thread_local! {
    static LOCAL: Cell<Option<&'static WorkerStats>> = const { Cell::new(None) };
}

/// Make this thread worker `index`: its counters are created and listed (they live as
/// long as the process, as its workers do).
pub fn register_worker(index: usize) -> &'static WorkerStats {
    let stats: &'static WorkerStats = Box::leak(Box::new(WorkerStats::new(index)));
    lock(&registry().workers).push(stats);
    LOCAL.set(Some(stats));
    stats
}

/// This worker's counters; on a thread that is not a worker (tests, tools), counters
/// that are counted nowhere.
#[inline]
pub fn local() -> &'static WorkerStats {
    LOCAL.get().unwrap_or_else(unlisted)
}

#[cold]
fn unlisted() -> &'static WorkerStats {
    static NOWHERE: OnceLock<WorkerStats> = OnceLock::new();
    NOWHERE.get_or_init(|| WorkerStats::new(usize::MAX))
}

/// Run `f` on the blocking pool, counted (jobs in flight and in total).
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    spawn_blocking(f).await
}

/// Start `f` on the blocking pool, counted (jobs in flight and in total), and return a
/// handle to await later: a caller can go on with other work while the job runs (the
/// outbox sends one window of a cold file while the next is read). Counted in flight
/// until the handle is dropped (awaiting it consumes it; a job whose handle is dropped
/// first runs on, uncounted).
pub fn spawn_blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Blocking<T> {
    let s = local();
    s.blocking_now.add(1);
    s.blocking_total.add(1);
    Blocking {
        job: tokio::task::spawn_blocking(f),
        stats: s,
    }
}

/// A job on the blocking pool ([`spawn_blocking`]); resolves to its result.
pub struct Blocking<T> {
    job: tokio::task::JoinHandle<T>,
    stats: &'static WorkerStats,
}

impl<T> Blocking<T> {
    /// Whether the job has finished (awaiting it then does not wait).
    pub fn is_finished(&self) -> bool {
        self.job.is_finished()
    }
}

impl<T> std::future::Future for Blocking<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.job).poll(cx)
    }
}

impl<T> Drop for Blocking<T> {
    fn drop(&mut self) {
        self.stats.blocking_now.sub(1);
    }
}
