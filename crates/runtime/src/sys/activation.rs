use std::io;
use std::net::TcpListener;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The first descriptor of systemd's socket-activation protocol (`SD_LISTEN_FDS_START`).
const FIRST: RawFd = 3;
/// More than any socket unit passes; a larger LISTEN_FDS is refused as malformed.
const MOST: usize = 1024;

/// Take the listening sockets a launcher passed with systemd's socket-activation protocol
/// (`LISTEN_PID` = this process, `LISTEN_FDS` = N: descriptors 3 to 3+N-1; see
/// sd_listen_fds(3)). Empty when none were passed or they were meant for another process.
/// The variables are removed either way, so no child takes the descriptors again. Every
/// descriptor must be a listening TCP socket; it is made close-on-exec and non-blocking.
/// Call once, at start, before other threads exist (it changes the environment).
pub fn take_activated_listeners() -> io::Result<Vec<TcpListener>> {
    let pid = std::env::var("LISTEN_PID").ok();
    let count = std::env::var("LISTEN_FDS").ok();
    for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(name);
    }
    let (Some(pid), Some(count)) = (pid, count) else {
        return Ok(Vec::new());
    };
    if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
        return Ok(Vec::new());
    }
    let n: usize = count
        .trim()
        .parse()
        .ok()
        .filter(|&n| n <= MOST)
        .ok_or_else(|| {
            io::Error::other(format!(
                "LISTEN_FDS={count:?} is not a count of descriptors"
            ))
        })?;
    let mut out = Vec::with_capacity(n);
    for fd in FIRST..FIRST + n as RawFd {
        // SAFETY: the activation protocol hands descriptors 3..3+LISTEN_FDS to the process
        // named by LISTEN_PID, which is this one, and this function is their only taker
        // (the variables are gone now); each is wrapped exactly once. If one is not open
        // the fcntl below fails and the OwnedFd's close of it is harmless (EBADF).
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        check(&owned).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("descriptor {fd} passed by LISTEN_FDS: {e}"),
            )
        })?;
        out.push(TcpListener::from(owned));
    }
    for l in &out {
        l.set_nonblocking(true)?;
    }
    Ok(out)
}

/// A listening TCP socket (IPv4 or IPv6), made close-on-exec.
pub(super) fn check(fd: &OwnedFd) -> io::Result<()> {
    use rustix::io::{fcntl_getfd, fcntl_setfd, FdFlags};
    use rustix::net::{getsockname, sockopt, SocketAddrAny, SocketType};
    let flags = fcntl_getfd(fd)?;
    fcntl_setfd(fd, flags | FdFlags::CLOEXEC)?;
    let kind =
        sockopt::socket_type(fd).map_err(|e| io::Error::other(format!("not a socket ({e})")))?;
    let addr: SocketAddrAny = getsockname(fd)?;
    let inet = matches!(
        addr.address_family(),
        rustix::net::AddressFamily::INET | rustix::net::AddressFamily::INET6
    );
    if kind != SocketType::STREAM || !inet {
        return Err(io::Error::other("not a TCP socket"));
    }
    if !sockopt::socket_acceptconn(fd)? {
        return Err(io::Error::other("a TCP socket that is not listening"));
    }
    Ok(())
}
