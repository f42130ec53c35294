//! Listening sockets: one per worker per address, all bound with `SO_REUSEPORT` so the
//! kernel spreads connections across workers (and across processes, for a multi-process
//! or upgrade mode later).

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Accept queue length; the kernel caps it at net.core.somaxconn (4096 here).
const BACKLOG: i32 = 4096;
/// `TCP_DEFER_ACCEPT`: how long a connection that has sent nothing waits in the kernel
/// before it is accepted anyway.
const DEFER_ACCEPT_SECS: u32 = 1;

/// Listeners for each worker: `per_worker[w]` holds worker w's sockets, each with the
/// index in `addrs` of the address it listens on (one per address when ramjet binds them;
/// after an upgrade a worker may accept on several sockets of one address).
#[derive(Debug)]
pub struct Listeners {
    pub per_worker: Vec<Vec<(usize, TcpListener)>>,
    /// The bound addresses (port 0 resolved to the real port), in the order of each
    /// worker's list.
    pub addrs: Vec<SocketAddr>,
    /// For each of `addrs`, the index of the `listen` entry it serves (`None`: a socket
    /// passed by socket activation that no entry names). Entries that were not bound (an
    /// IPv6 wildcard on a host without IPv6) have no listener, so indices may skip.
    pub entries: Vec<Option<usize>>,
}

impl Listeners {
    /// Connections to address `at` wait for the server to speak first (FTP's greeting):
    /// its sockets go without `TCP_DEFER_ACCEPT`, which would hold each new connection in
    /// the kernel for the whole deferral, waiting for bytes that never come first.
    pub fn server_speaks_first(&self, at: usize) -> io::Result<()> {
        use std::os::fd::AsFd;
        for (a, listener) in self.per_worker.iter().flatten() {
            if *a == at {
                crate::sys::defer_accept(listener.as_fd(), 0)?;
            }
        }
        Ok(())
    }
}

/// Bind every address once per worker. A port of 0 is resolved by the first bind and the
/// same port is then used by the other workers. An IPv6 wildcard that cannot be bound
/// because the host has no IPv6 is skipped with a warning.
/// `send_buffer` sets SO_SNDBUF on the listeners, which accepted sockets inherit.
/// `shared`: this is one of the processes of `--processes N`, whose parent claimed the
/// addresses for all of them (no probe here: the siblings listen there already).
pub fn bind(
    addrs: &[SocketAddr],
    workers: usize,
    send_buffer: Option<usize>,
    shared: bool,
) -> io::Result<Listeners> {
    let mut per_worker: Vec<Vec<(usize, TcpListener)>> = (0..workers).map(|_| Vec::new()).collect();
    let mut bound = Vec::new();
    let mut entries = Vec::new();
    for (entry, &want) in addrs.iter().enumerate() {
        let claimed = if shared { Ok(()) } else { claim(want) };
        let first = match claimed.and_then(|()| open(want, send_buffer)) {
            Ok(s) => s,
            Err(e) if want.is_ipv6() && want.ip().is_unspecified() && is_no_ipv6(&e) => {
                tracing::warn!("skipping {want}: IPv6 is not available on this host ({e})");
                continue;
            }
            Err(e) => return Err(explain(want, e)),
        };
        let actual = first.local_addr()?;
        let at = bound.len();
        bound.push(actual);
        entries.push(Some(entry));
        per_worker[0].push((at, first));
        for list in per_worker.iter_mut().skip(1) {
            list.push((
                at,
                open(actual, send_buffer).map_err(|e| explain(actual, e))?,
            ));
        }
    }
    if bound.is_empty() {
        return Err(io::Error::other("no address could be bound"));
    }
    Ok(Listeners {
        per_worker,
        addrs: bound,
        entries,
    })
}

/// Serve on sockets passed in instead of binding: by socket activation, or by the process
/// this one replaces (a USR2 upgrade, which passes every socket it accepts on: several per
/// address, one per old worker, `SO_REUSEPORT`). Each socket keeps the options of the
/// `listen` entry with its address (`wanted`), if any; `listen` entries that were not
/// passed are not bound (the socket unit, or the old process, decides where the server
/// listens). Sockets are grouped by address in the order given. Each keeps accepting
/// here, its queued connections included: every socket goes to at least one worker (a
/// duplicate descriptor each), and every worker gets at least one socket of each
/// address. The listener options ramjet sets on its own sockets are set on these too.
pub fn adopt(
    passed: Vec<TcpListener>,
    wanted: &[SocketAddr],
    workers: usize,
    send_buffer: Option<usize>,
) -> io::Result<Listeners> {
    let workers = workers.max(1);
    let mut per_worker: Vec<Vec<(usize, TcpListener)>> = (0..workers).map(|_| Vec::new()).collect();
    let mut addrs: Vec<SocketAddr> = Vec::new();
    let mut groups: Vec<Vec<TcpListener>> = Vec::new();
    for listener in passed {
        let addr = listener.local_addr()?;
        configure(&listener, send_buffer).map_err(|e| explain(addr, e))?;
        match addrs.iter().position(|a| *a == addr) {
            Some(at) => groups[at].push(listener),
            None => {
                addrs.push(addr);
                groups.push(vec![listener]);
            }
        }
    }
    for (at, group) in groups.into_iter().enumerate() {
        let k = group.len();
        for (j, sock) in group.iter().enumerate() {
            // Socket j to worker j mod workers; workers beyond the sockets share them.
            let mut w = j % workers;
            loop {
                per_worker[w].push((at, sock.try_clone()?));
                w += k;
                if w >= workers {
                    break;
                }
            }
        }
    }
    let entries = addrs
        .iter()
        .map(|a| wanted.iter().position(|w| w == a))
        .collect();
    Ok(Listeners {
        per_worker,
        addrs,
        entries,
    })
}

/// The options of every listener, ours ([`open`]) or passed ([`adopt`]); accepted sockets
/// inherit `TCP_NODELAY` and the send buffer.
fn configure(listener: &TcpListener, send_buffer: Option<usize>) -> io::Result<()> {
    let socket = socket2::SockRef::from(listener);
    socket.set_tcp_nodelay(true)?;
    if let Some(size) = send_buffer {
        socket.set_send_buffer_size(size)?;
    }
    socket.set_nonblocking(true)?;
    // One wake-up per new connection instead of two (accept, then its request). Not
    // essential: a kernel without it still serves.
    use std::os::fd::AsFd;
    if let Err(e) = crate::sys::defer_accept(listener.as_fd(), DEFER_ACCEPT_SECS) {
        tracing::debug!("TCP_DEFER_ACCEPT: {e}");
    }
    Ok(())
}

/// Check that no other process listens on any of `addrs` (what [`bind`] checks first), for
/// a parent that starts the processes which will listen there. An IPv6 wildcard on a host
/// without IPv6 is passed over, as `bind` skips it.
pub fn claim_all(addrs: &[SocketAddr]) -> io::Result<()> {
    for &a in addrs {
        match claim(a) {
            Ok(()) => {}
            Err(e) if a.is_ipv6() && a.ip().is_unspecified() && is_no_ipv6(&e) => {}
            Err(e) => return Err(explain(a, e)),
        }
    }
    Ok(())
}

/// Refuse an address that another process already listens on, a second ramjet included.
///
/// Our listeners set `SO_REUSEPORT` so that this process's workers (and a USR2 successor,
/// which receives them rather than binding) share a port; but any other process of the same
/// user doing the same would silently split the traffic with us. A probe socket without
/// `SO_REUSEPORT` conflicts with every listener already on the address, so its bind fails
/// with `EADDRINUSE` exactly as another program's would. With `SO_REUSEADDR` and never
/// listening, the probe conflicts neither with TIME_WAIT leftovers nor with the listeners
/// bound after it; it is closed at once. Port 0 asks the kernel for a free port: no probe.
fn claim(addr: SocketAddr) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        probe.set_only_v6(true)?;
    }
    probe.set_reuse_address(true)?;
    probe.bind(&addr.into())
}

fn open(addr: SocketAddr, send_buffer: Option<usize>) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        // Separate v4 and v6 sockets, so "[::]:8080" never collides with "0.0.0.0:8080".
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    let listener: TcpListener = socket.into();
    configure(&listener, send_buffer)?;
    Ok(listener)
}

fn is_no_ipv6(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAFNOSUPPORT) | Some(libc::EADDRNOTAVAIL) | Some(libc::EPROTONOSUPPORT)
    )
}

/// Turn bind errors into something a person can act on.
fn explain(addr: SocketAddr, e: io::Error) -> io::Error {
    let hint = match e.kind() {
        io::ErrorKind::AddrInUse => "another process is listening there; stop it or choose another port (--listen / listen = [...])",
        io::ErrorKind::PermissionDenied => "ports below 1024 need root or CAP_NET_BIND_SERVICE",
        io::ErrorKind::AddrNotAvailable => "that address is not configured on this host",
        _ => "",
    };
    io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}. {hint}"))
}
