//! Worker threads: one tokio `current_thread` runtime + `LocalSet` each, accepting on their
//! own listeners. Nothing is shared between workers on the hot path.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{spawn_local, LocalSet};

use crate::listen::Listeners;
use crate::sys;

/// How often [`Worker::tick`] runs.
const TICK: Duration = Duration::from_secs(1);
/// How often a draining worker checks whether its connections are gone.
const DRAIN_POLL: Duration = Duration::from_millis(20);
/// After the shutdown grace period, workers get this long to close and flush their logs
/// before the main thread stops waiting for them.
const STOP_MARGIN: Duration = Duration::from_secs(1);
/// How often the main thread checks whether the workers have ended.
const STOP_POLL: Duration = Duration::from_millis(10);
/// Pause after accept fails for lack of file descriptors, so the loop does not spin.
const EMFILE_PAUSE: Duration = Duration::from_millis(50);

/// The per-thread service a worker runs. Built on its own thread; never sent elsewhere.
pub trait Worker: 'static {
    /// The configuration type swapped on reload.
    type Config: Send + Sync + 'static;
    /// Serve one accepted connection until it closes. Runs as its own local task.
    /// `listener` is the index of the address it came in on, in [`Listeners::addrs`].
    fn serve(
        self: Rc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        listener: usize,
    ) -> impl Future<Output = ()> + 'static;
    /// Serve a connection another process handed over (a USR2 upgrade): accepted there,
    /// `prefix` is what that process read and did not answer; no PROXY protocol header
    /// is expected (`peer` is already the client's address).
    fn serve_handed(
        self: Rc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        listener: usize,
        prefix: Vec<u8>,
    ) -> impl Future<Output = ()> + 'static;
    /// A new configuration: requests that start from now on must use it.
    fn reload(&self, config: Arc<Self::Config>);
    /// Called about once a second (flush logs, expire caches).
    fn tick(&self);
    /// Shutdown began: idle connections should close; busy ones after their response.
    /// With `hand_to` (an upgrade), idle connections go to the process receiving at that
    /// hand-off socket instead, and busy ones after their response.
    fn begin_shutdown(&self, hand_to: Option<Arc<PathBuf>>);
    /// Connections still open (drain waits for zero).
    fn connections(&self) -> usize;
    /// Last call on the worker thread: flush everything.
    fn finish(&self);
}

/// A connection handed over by another process, for [`Injector::inject`].
#[derive(Debug)]
pub struct Handed {
    pub stream: std::net::TcpStream,
    pub peer: SocketAddr,
    /// Index in [`Listeners::addrs`] of the address it came in on.
    pub listener: usize,
    /// Bytes read from it and not answered.
    pub prefix: Vec<u8>,
}

/// Puts handed-over connections into the workers, in turn. Cheap to clone; usable from
/// any thread.
#[derive(Clone)]
pub struct Injector {
    workers: Arc<[mpsc::UnboundedSender<Handed>]>,
    next: Arc<AtomicUsize>,
}

impl Injector {
    /// Give `conn` to the next worker. Fails (returning it) when the workers are gone.
    pub fn inject(&self, conn: Handed) -> Result<(), Handed> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.workers.len();
        self.workers[i].send(conn).map_err(|e| e.0)
    }
}

/// How the workers stop.
#[derive(Debug, Clone)]
struct Stop {
    grace: Duration,
    hand_to: Option<Arc<PathBuf>>,
}

/// The main thread's handle on the running workers.
pub struct Server<C> {
    config: watch::Sender<Arc<C>>,
    stop: watch::Sender<Option<Stop>>,
    threads: Vec<JoinHandle<()>>,
    injector: Injector,
}

impl<C: Send + Sync + 'static> Server<C> {
    /// Hand a new configuration to every worker.
    pub fn reload(&self, config: Arc<C>) {
        self.config.send_replace(config);
    }

    /// Stop accepting, let in-flight responses finish for up to `grace`, then return.
    /// Returns within `grace + STOP_MARGIN` even when a worker never gets back to its event
    /// loop (a handler stuck in a loop): the count of workers still running is returned,
    /// and the caller exits the process regardless of them.
    pub fn stop(self, grace: Duration) -> usize {
        self.stop_with(Stop {
            grace,
            hand_to: None,
        })
    }

    /// Stop accepting and hand every connection, once idle, to the process receiving at
    /// the hand-off socket `to` (a USR2 upgrade); in-flight responses finish here first.
    /// Returns as [`Server::stop`] does, when the connections are gone or `grace` is up.
    pub fn hand_over(self, grace: Duration, to: PathBuf) -> usize {
        self.stop_with(Stop {
            grace,
            hand_to: Some(Arc::new(to)),
        })
    }

    /// For another thread to put handed-over connections into the workers.
    pub fn injector(&self) -> Injector {
        self.injector.clone()
    }

    fn stop_with(self, stop: Stop) -> usize {
        let grace = stop.grace;
        self.stop.send_replace(Some(stop));
        let deadline = std::time::Instant::now() + grace + STOP_MARGIN;
        let mut threads = self.threads;
        while !threads.is_empty() && std::time::Instant::now() < deadline {
            let (done, running): (Vec<_>, Vec<_>) =
                threads.into_iter().partition(|t| t.is_finished());
            for t in done {
                let _ = t.join();
            }
            threads = running;
            if !threads.is_empty() {
                std::thread::sleep(STOP_POLL);
            }
        }
        threads.len()
    }
}

/// Start one worker thread per entry of `listeners.per_worker`.
///
/// `make(index, config)` builds each worker on its own thread. `pin` pins worker i to CPU
/// i (mod the CPU count). `blocking_threads` bounds each worker's blocking pool (disk work).
pub fn start<W, F>(
    listeners: Listeners,
    pin: bool,
    blocking_threads: usize,
    config: Arc<W::Config>,
    make: F,
) -> io::Result<Server<W::Config>>
where
    W: Worker,
    F: Fn(usize, Arc<W::Config>) -> W + Send + Sync + 'static,
{
    let (config_tx, _) = watch::channel(config);
    let (stop_tx, _) = watch::channel(None);
    let make = Arc::new(make);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut threads = Vec::new();
    let mut injectors = Vec::new();
    for (index, socks) in listeners.per_worker.into_iter().enumerate() {
        let config_rx = config_tx.subscribe();
        let stop_rx = stop_tx.subscribe();
        let (inject_tx, inject_rx) = mpsc::unbounded_channel();
        injectors.push(inject_tx);
        let make = make.clone();
        let runtime = worker_runtime(index, blocking_threads)?;
        let thread = std::thread::Builder::new()
            .name(format!("ramjet-w{index}"))
            .spawn(move || {
                if pin {
                    if let Err(e) = sys::pin_to_cpu(index % cpus) {
                        tracing::warn!("worker {index}: cannot pin to CPU {}: {e}", index % cpus);
                    }
                }
                let local = LocalSet::new();
                local.block_on(
                    &runtime,
                    run_worker(index, socks, config_rx, stop_rx, inject_rx, make),
                );
            })?;
        threads.push(thread);
    }
    Ok(Server {
        config: config_tx,
        stop: stop_tx,
        threads,
        injector: Injector {
            workers: injectors.into(),
            next: Arc::new(AtomicUsize::new(0)),
        },
    })
}

/// Worker `index`'s runtime: one thread, its blocking pool, and the park hooks that keep
/// its busy time (`crate::busy`).
pub(crate) fn worker_runtime(
    index: usize,
    blocking_threads: usize,
) -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(blocking_threads.max(1))
        .thread_name(format!("ramjet-blk{index}"))
        .on_thread_park(crate::busy::parked)
        .on_thread_unpark(crate::busy::unparked)
        .build()
}

async fn run_worker<W, F>(
    index: usize,
    socks: Vec<(usize, std::net::TcpListener)>,
    mut config_rx: watch::Receiver<Arc<W::Config>>,
    mut stop_rx: watch::Receiver<Option<Stop>>,
    mut inject_rx: mpsc::UnboundedReceiver<Handed>,
    make: Arc<F>,
) where
    W: Worker,
    F: Fn(usize, Arc<W::Config>) -> W,
{
    let worker = Rc::new(make(index, config_rx.borrow_and_update().clone()));
    let mut tasks = Vec::new();
    for (at, sock) in socks {
        match TcpListener::from_std(sock) {
            Ok(listener) => tasks.push(spawn_local(accept_loop(worker.clone(), listener, at))),
            Err(e) => tracing::error!("worker {index}: listener: {e}"),
        }
    }
    let w = worker.clone();
    tasks.push(spawn_local(async move {
        while let Some(h) = inject_rx.recv().await {
            if let Err(e) = h.stream.set_nonblocking(true) {
                tracing::debug!("handed-over connection: {e}");
                continue;
            }
            match TcpStream::from_std(h.stream) {
                Ok(stream) => {
                    spawn_local(w.clone().serve_handed(stream, h.peer, h.listener, h.prefix));
                }
                Err(e) => tracing::debug!("handed-over connection: {e}"),
            }
        }
    }));
    let w = worker.clone();
    tasks.push(spawn_local(async move {
        while config_rx.changed().await.is_ok() {
            let config = config_rx.borrow_and_update().clone();
            w.reload(config);
        }
    }));
    let w = worker.clone();
    tasks.push(spawn_local(async move {
        let mut every = tokio::time::interval(TICK);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            every.tick().await;
            w.tick();
        }
    }));
    let stop = loop {
        if let Some(stop) = stop_rx.borrow_and_update().clone() {
            break stop;
        }
        if stop_rx.changed().await.is_err() {
            break Stop {
                grace: Duration::ZERO,
                hand_to: None,
            };
        }
    };
    let grace = stop.grace;
    // Aborting the accept loops drops (closes) this worker's listeners.
    for t in &tasks {
        t.abort();
    }
    worker.begin_shutdown(stop.hand_to);
    let deadline = tokio::time::Instant::now() + grace;
    while worker.connections() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(DRAIN_POLL).await;
    }
    if worker.connections() > 0 {
        tracing::warn!(
            "worker {index}: {} connection(s) still open after the {grace:?} shutdown timeout; closing",
            worker.connections()
        );
    }
    worker.finish();
}

/// An IPv4 client of a dual-stack IPv6 socket (as systemd's `ListenStream=80` makes) as
/// the IPv4 address it is, so logs, limits and headers never see `::ffff:a.b.c.d`.
fn canonical_peer(peer: SocketAddr) -> SocketAddr {
    match peer {
        SocketAddr::V6(v6) => v6
            .ip()
            .to_ipv4_mapped()
            .map_or(peer, |v4| SocketAddr::new(v4.into(), v6.port())),
        v4 => v4,
    }
}

async fn accept_loop<W: Worker>(worker: Rc<W>, listener: TcpListener, at: usize) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                spawn_local(worker.clone().serve(stream, canonical_peer(peer), at));
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)) => {
                tracing::warn!("accept: out of file descriptors ({e}); pausing accepts");
                tokio::time::sleep(EMFILE_PAUSE).await;
            }
            Err(e) => {
                // ECONNABORTED and friends: the peer gave up before we accepted.
                tracing::debug!("accept: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mapped_ipv4_peers_are_ipv4() {
        let p = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        assert_eq!(
            super::canonical_peer(p("[::ffff:192.0.2.1]:4242")),
            p("192.0.2.1:4242")
        );
        assert_eq!(
            super::canonical_peer(p("[2001:db8::1]:80")),
            p("[2001:db8::1]:80")
        );
        assert_eq!(super::canonical_peer(p("[::1]:80")), p("[::1]:80"));
        assert_eq!(super::canonical_peer(p("192.0.2.1:1")), p("192.0.2.1:1"));
    }
}
