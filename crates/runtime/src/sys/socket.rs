use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `setsockopt` of an integer option.
fn set_int(
    socket: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `socket` is a live descriptor for the duration of the call, and the option
    // value points to a c_int whose size is passed alongside it.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Let a socket bound to an address with port 0 pick its port at `connect` time
/// (`IP_BIND_ADDRESS_NO_PORT`): the port then only has to be unique per destination, so
/// tens of thousands of client connections from one source address bind in constant time
/// instead of the kernel searching for a port no other socket uses at all.
pub fn bind_address_no_port(socket: BorrowedFd<'_>) -> io::Result<()> {
    set_int(socket, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, 1)
}

/// Hand a listener's connections to `accept` only once their first bytes have arrived
/// (`TCP_DEFER_ACCEPT`, nginx's `deferred`): the request is then read in the same wake-up as
/// the accept, instead of the worker waking once for the connection and once more for its
/// request. A client that sends nothing is still accepted after about `seconds` (the kernel
/// then completes it on the next ACK), so header timeouts apply to it as before.
pub fn defer_accept(listener: BorrowedFd<'_>, seconds: u32) -> io::Result<()> {
    let seconds = libc::c_int::try_from(seconds).unwrap_or(libc::c_int::MAX);
    set_int(listener, libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT, seconds)
}

/// A second descriptor for the same socket (close-on-exec): it keeps the connection open
/// after the first is closed, e.g. while the connection waits to be handed to another
/// process.
pub fn duplicate(socket: BorrowedFd<'_>) -> io::Result<std::os::fd::OwnedFd> {
    Ok(rustix::io::fcntl_dupfd_cloexec(socket, 0)?)
}

/// Bytes queued in a TCP socket's send buffer, not yet acknowledged by the peer
/// (`SIOCOUTQ`). `fd` must be an open socket: the status page's per-download rate asks it
/// from the thread that owns the connection, while the connection is listed.
pub fn unsent_bytes(fd: std::os::fd::RawFd) -> io::Result<u64> {
    let mut n: libc::c_int = 0;
    // SAFETY: the caller passes an open descriptor (a closed one is EBADF, not undefined
    // behaviour); `n` is a c_int the ioctl writes, as SIOCOUTQ (TIOCOUTQ) is specified.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n as *mut libc::c_int) };
    if rc == 0 {
        Ok(n.max(0) as u64)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The connection's maximum segment size (`TCP_MAXSEG`): the payload of one full TCP
/// segment, of which the kernel's send units are multiples.
pub fn max_segment(socket: &impl std::os::fd::AsFd) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let mut mss: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the descriptor is borrowed open for the call; `mss` and `len` are live and
    // describe a c_int, the size TCP_MAXSEG reads into.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MAXSEG,
            &mut mss as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    if rc == 0 && mss > 0 {
        Ok(mss as usize)
    } else if rc == 0 {
        Err(io::ErrorKind::InvalidData.into())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `shutdown(SHUT_WR)`: send the FIN now, keep reading.
pub fn shutdown_write(socket: &impl std::os::fd::AsFd) -> io::Result<()> {
    rustix::net::shutdown(socket, rustix::net::Shutdown::Write).map_err(io::Error::from)
}
