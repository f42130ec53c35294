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

/// Values a TCP-level `getsockopt` may read into: plain integers, or structures and arrays
/// of them, for which any bytes the kernel writes (or leaves zeroed) are a value. Private:
/// implemented here for exactly those types.
trait Integers: Copy {}

impl Integers for libc::c_int {}
impl Integers for [u8; 16] {}
impl Integers for libc::tcp_info {}

/// Read TCP option `option` (`IPPROTO_TCP` level) of `socket` into a zeroed `T`, and how
/// many bytes of it the kernel wrote. For the options rustix does not offer, or offers only
/// by allocating.
fn tcp_option<T: Integers>(
    socket: &impl std::os::fd::AsFd,
    option: libc::c_int,
) -> io::Result<(T, usize)> {
    use std::os::fd::AsRawFd;
    let mut value = std::mem::MaybeUninit::<T>::zeroed();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: the descriptor is borrowed open for the call; `value` is live, zeroed and
    // `len` bytes long, the most the kernel writes into it.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            option,
            value.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zeroed, then written in part by the kernel; `T` is `Integers`: integers, or
    // structures and arrays of them, for which any bytes are a value.
    let value = unsafe { value.assume_init() };
    Ok((value, (len as usize).min(std::mem::size_of::<T>())))
}

/// The connection's maximum segment size (`TCP_MAXSEG`): the payload of one full TCP
/// segment, of which the kernel's send units are multiples.
pub fn max_segment(socket: &impl std::os::fd::AsFd) -> io::Result<usize> {
    match tcp_option::<libc::c_int>(socket, libc::TCP_MAXSEG)? {
        (mss, _) if mss > 0 => Ok(mss as usize),
        _ => Err(io::ErrorKind::InvalidData.into()),
    }
}

/// Whether the kernel paces this TCP connection's sends itself: its congestion control
/// (`TCP_CONGESTION`) is BBR, which asks for pacing. Without an `fq` qdisc on the way out,
/// TCP then paces each socket with a timer: of a burst of segments handed over at once,
/// each that comes early waits for a timer interrupt of its own. (The other algorithms
/// the kernel ships, cubic and reno among them, ask for no pacing.) The name is read onto
/// the stack (16 bytes, the kernel's `TCP_CA_NAME_MAX`): rustix's `tcp_congestion` would
/// allocate a `String` for each long body.
pub fn paced(socket: &impl std::os::fd::AsFd) -> io::Result<bool> {
    let (name, len) = tcp_option::<[u8; 16]>(socket, libc::TCP_CONGESTION)?;
    Ok(paces(&name[..len]))
}

/// Give one TCP connection a congestion control of its own (`TCP_CONGESTION`): an error
/// where the kernel lacks the algorithm, or, without privilege, does not allow it.
pub fn set_congestion_control(socket: &impl std::os::fd::AsFd, name: &str) -> io::Result<()> {
    rustix::net::sockopt::set_tcp_congestion(socket, name).map_err(io::Error::from)
}

/// Whether a congestion control of this name asks the kernel to pace: BBR in each of its
/// versions (`bbr`, `bbr2`, `bbr3`).
fn paces(name: &[u8]) -> bool {
    name.starts_with(b"bbr")
}

/// `TCP_CORK` on: the kernel sends only full segments until it is off again. Off sends
/// what it held at once.
pub fn set_cork(socket: &impl std::os::fd::AsFd, on: bool) -> io::Result<()> {
    rustix::net::sockopt::set_tcp_cork(socket, on).map_err(io::Error::from)
}

/// Let a TCP socket hold at most about `bytes` not yet sent (`TCP_NOTSENT_LOWAT`): a write
/// stops there, and the socket reads as writable again once fewer than half that many are
/// left unsent. Bytes sent and not yet acknowledged do not count.
pub fn set_unsent_limit(socket: &impl std::os::fd::AsFd, bytes: u32) -> io::Result<()> {
    let bytes = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    set_int(
        socket.as_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_NOTSENT_LOWAT,
        bytes,
    )
}

/// The unsent limit of a TCP socket (`TCP_NOTSENT_LOWAT`); the kernel's default,
/// `net.ipv4.tcp_notsent_lowat`, is no limit (`u32::MAX`).
pub fn unsent_limit(socket: &impl std::os::fd::AsFd) -> io::Result<u32> {
    let (v, _) = tcp_option::<libc::c_int>(socket, libc::TCP_NOTSENT_LOWAT)?;
    Ok(v as u32)
}

/// Whether the peer of a connected socket is on this host: at a loopback address, or at
/// this end's own address (which the kernel also delivers through loopback).
pub fn peer_on_this_host(socket: &impl std::os::fd::AsFd) -> io::Result<bool> {
    let ip = |a: rustix::net::SocketAddrAny| -> io::Result<std::net::IpAddr> {
        let a = std::net::SocketAddr::try_from(a).map_err(|_| io::ErrorKind::InvalidInput)?;
        Ok(a.ip().to_canonical())
    };
    let peer = rustix::net::getpeername(socket)?.ok_or(io::ErrorKind::NotConnected)?;
    Ok(on_this_host(
        ip(peer)?,
        ip(rustix::net::getsockname(socket)?)?,
    ))
}

/// Whether a peer at `peer` talks to this end at `local` from this host (both canonical:
/// IPv4-mapped IPv6 addresses as IPv4).
fn on_this_host(peer: std::net::IpAddr, local: std::net::IpAddr) -> bool {
    peer.is_loopback() || peer == local
}

/// Whether `TCP_CORK` is on.
pub fn corked(socket: &impl std::os::fd::AsFd) -> io::Result<bool> {
    rustix::net::sockopt::tcp_cork(socket).map_err(io::Error::from)
}

/// A receiver's view of the segments it was sent (`TCP_INFO`): how many carried data
/// (`tcpi_data_segs_in`), and the segment size it estimates the sender uses, from the
/// largest it has seen (`tcpi_rcv_mss`).
pub fn data_segments_in(socket: &impl std::os::fd::AsFd) -> io::Result<(u32, u32)> {
    let (info, _) = tcp_option::<libc::tcp_info>(socket, libc::TCP_INFO)?;
    Ok((info.tcpi_data_segs_in, info.tcpi_rcv_mss))
}

/// `shutdown(SHUT_WR)`: send the FIN now, keep reading.
pub fn shutdown_write(socket: &impl std::os::fd::AsFd) -> io::Result<()> {
    rustix::net::shutdown(socket, rustix::net::Shutdown::Write).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bbr_in_every_version_paces_and_no_other_algorithm_does() {
        for name in [&b"bbr"[..], b"bbr2", b"bbr3\0\0\0"] {
            assert!(paces(name), "{}", String::from_utf8_lossy(name));
        }
        for name in [
            &b"cubic"[..],
            b"reno",
            b"dctcp",
            b"bic",
            b"",
            b"bb",
            b"xbbr",
        ] {
            assert!(!paces(name), "{}", String::from_utf8_lossy(name));
        }
    }

    #[test]
    fn the_unsent_limit_is_set_and_read_back() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        set_unsent_limit(&c, 16 * 1024).unwrap();
        assert_eq!(unsent_limit(&c).unwrap(), 16 * 1024);
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(set_unsent_limit(&u, 1).is_err());
    }

    #[test]
    fn a_peer_is_on_this_host_at_loopback_or_at_this_ends_own_address() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap().to_canonical();
        for (peer, local) in [
            ("127.0.0.1", "127.0.0.1"),
            ("127.0.0.2", "127.0.0.1"),
            ("::1", "::1"),
            ("::ffff:127.0.0.1", "::ffff:127.0.0.1"),
            ("10.9.0.1", "10.9.0.1"),
            ("2001:db8::1", "2001:db8::1"),
        ] {
            assert!(on_this_host(ip(peer), ip(local)), "{peer} to {local}");
        }
        for (peer, local) in [
            ("10.9.0.2", "10.9.0.1"),
            ("192.0.2.1", "127.0.0.1"),
            ("2001:db8::2", "2001:db8::1"),
            ("::ffff:10.9.0.2", "::ffff:10.9.0.1"),
        ] {
            assert!(!on_this_host(ip(peer), ip(local)), "{peer} to {local}");
        }
    }

    #[test]
    fn a_loopback_peer_is_on_this_host() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (a, _) = l.accept().unwrap();
        assert!(peer_on_this_host(&a).unwrap());
        assert!(peer_on_this_host(&c).unwrap());
        // Not connected: an error, not a guess.
        let lone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(peer_on_this_host(&lone).is_err());
    }

    #[test]
    fn a_socket_is_paced_when_its_congestion_control_is_bbr() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        set_congestion_control(&c, "reno").expect("reno is built into every kernel");
        assert!(!paced(&c).unwrap());
        // bbr is a module that may be absent (or not allowed); where it is there, it paces.
        if set_congestion_control(&c, "bbr").is_ok() {
            assert!(paced(&c).unwrap());
        }
        // Not a TCP socket: an error, not a guess.
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(paced(&u).is_err());
    }

    #[test]
    fn a_connected_socket_reads_back_its_segment_size_and_the_segments_it_got() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mss = max_segment(&c).unwrap();
        // Loopback's MTU is 65,536 bytes; whatever the interface, a segment carries data.
        assert!((536..=65_536).contains(&mss), "{mss}");
        assert_eq!(data_segments_in(&s).unwrap().0, 0);
        c.write_all(b"one segment").unwrap();
        let mut got = [0u8; 11];
        s.read_exact(&mut got).unwrap();
        let (segments, rcv_mss) = data_segments_in(&s).unwrap();
        assert_eq!(segments, 1);
        assert!(rcv_mss > 0);
        // Not a TCP socket: each is an error, not a zeroed answer.
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(max_segment(&u).is_err());
        assert!(data_segments_in(&u).is_err());
    }
}
