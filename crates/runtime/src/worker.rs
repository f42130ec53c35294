//! Worker threads: one tokio `current_thread` runtime + `LocalSet` each, accepting on their
//! own listeners. Nothing is shared between workers on the hot path.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
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
    /// A new configuration: requests that start from now on must use it.
    fn reload(&self, config: Arc<Self::Config>);
    /// Called about once a second (flush logs, expire caches).
    fn tick(&self);
    /// Shutdown began: idle connections should close; busy ones after their response.
    fn begin_shutdown(&self);
    /// Connections still open (drain waits for zero).
    fn connections(&self) -> usize;
    /// Last call on the worker thread: flush everything.
    fn finish(&self);
}

/// The main thread's handle on the running workers.
pub struct Server<C> {
    config: watch::Sender<Arc<C>>,
    stop: watch::Sender<Option<Duration>>,
    threads: Vec<JoinHandle<()>>,
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
        self.stop.send_replace(Some(grace));
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
    for (index, socks) in listeners.per_worker.into_iter().enumerate() {
        let config_rx = config_tx.subscribe();
        let stop_rx = stop_tx.subscribe();
        let make = make.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(blocking_threads.max(1))
            .thread_name(format!("ramjet-blk{index}"))
            .build()?;
        let thread = std::thread::Builder::new()
            .name(format!("ramjet-w{index}"))
            .spawn(move || {
                if pin {
                    if let Err(e) = sys::pin_to_cpu(index % cpus) {
                        tracing::warn!("worker {index}: cannot pin to CPU {}: {e}", index % cpus);
                    }
                }
                let local = LocalSet::new();
                local.block_on(&runtime, run_worker(index, socks, config_rx, stop_rx, make));
            })?;
        threads.push(thread);
    }
    Ok(Server {
        config: config_tx,
        stop: stop_tx,
        threads,
    })
}

async fn run_worker<W, F>(
    index: usize,
    socks: Vec<std::net::TcpListener>,
    mut config_rx: watch::Receiver<Arc<W::Config>>,
    mut stop_rx: watch::Receiver<Option<Duration>>,
    make: Arc<F>,
) where
    W: Worker,
    F: Fn(usize, Arc<W::Config>) -> W,
{
    let worker = Rc::new(make(index, config_rx.borrow_and_update().clone()));
    let mut tasks = Vec::new();
    for (at, sock) in socks.into_iter().enumerate() {
        match TcpListener::from_std(sock) {
            Ok(listener) => tasks.push(spawn_local(accept_loop(worker.clone(), listener, at))),
            Err(e) => tracing::error!("worker {index}: listener: {e}"),
        }
    }
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
    let grace = loop {
        if let Some(grace) = *stop_rx.borrow_and_update() {
            break grace;
        }
        if stop_rx.changed().await.is_err() {
            break Duration::ZERO;
        }
    };
    // Aborting the accept loops drops (closes) this worker's listeners.
    for t in &tasks {
        t.abort();
    }
    worker.begin_shutdown();
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
