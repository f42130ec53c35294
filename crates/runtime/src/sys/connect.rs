//! Outgoing TCP connections that learn whether they are up from the kernel, not from the
//! reactor. A non-blocking `connect` always answers `EINPROGRESS`, yet to a backend on the
//! same host (or one answering within the call) the handshake is already done when it
//! returns. Waiting for the reactor to say so costs a turn of the event loop, a timer for
//! the connect timeout and a `getsockopt(SO_ERROR)` on every new upstream connection.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;

use rustix::io::Errno;
use rustix::net::{AddressFamily, SendFlags, SocketFlags, SocketType};

/// A non-blocking, close-on-exec TCP socket with `TCP_NODELAY` (heads and small bodies go
/// out at once, not after the peer's delayed ACK) whose connection to `addr` has begun.
/// The handshake may still be under way: [`connect_outcome`] tells.
pub fn start_connect(addr: &SocketAddr) -> io::Result<std::net::TcpStream> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    };
    let fd = rustix::net::socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::sockopt::set_tcp_nodelay(&fd, true)?;
    match rustix::net::connect(&fd, addr) {
        Ok(()) | Err(Errno::INPROGRESS) => Ok(fd.into()),
        Err(e) => Err(e.into()),
    }
}

/// Whether a connection begun by [`start_connect`] is up, asked with a send of nothing:
/// `true` once the handshake is done, `false` while it is under way, and the connection's
/// error (refused, unreachable, reset) if it failed. Nothing reaches the peer either way.
pub fn connect_outcome(socket: &impl AsFd) -> io::Result<bool> {
    match rustix::net::send(socket, &[], SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
        Ok(_) => Ok(true),
        Err(Errno::AGAIN) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// A listener on loopback whose accept queue holds `backlog` (+1) connections.
    fn listener(backlog: i32) -> (std::net::TcpListener, SocketAddr) {
        let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        rustix::net::bind(&fd, &any).unwrap();
        rustix::net::listen(&fd, backlog).unwrap();
        let l = std::net::TcpListener::from(fd);
        let addr = l.local_addr().unwrap();
        (l, addr)
    }

    #[test]
    fn a_connection_to_a_listener_on_this_host_is_up_when_connect_returns() {
        let (l, addr) = listener(16);
        let c = start_connect(&addr).unwrap();
        assert!(
            connect_outcome(&c).unwrap(),
            "the handshake is done in the call"
        );
        assert!(c.nodelay().unwrap());
        // The empty send put nothing on the wire: the first byte the server reads is ours.
        let mut c = c;
        std::io::Write::write_all(&mut c, b"x").unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"x");
    }

    #[test]
    fn a_refused_connection_reports_its_error() {
        let (l, addr) = listener(16);
        drop(l);
        let e = start_connect(&addr)
            .and_then(|c| connect_outcome(&c))
            .expect_err("nothing listens there");
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
    }

    #[test]
    fn a_handshake_still_under_way_is_not_up() {
        // An accept queue that is full drops new SYNs: the connection stays in SYN_SENT.
        let (_l, addr) = listener(0);
        let mut queued = Vec::new();
        let mut waiting = None;
        for _ in 0..8 {
            let c = start_connect(&addr).unwrap();
            if !connect_outcome(&c).unwrap() {
                waiting = Some(c);
                break;
            }
            queued.push(c);
        }
        assert!(
            !queued.is_empty(),
            "the accept queue took a connection first"
        );
        let c = waiting.expect("a connection beyond the full accept queue waits");
        assert!(
            !connect_outcome(&c).unwrap(),
            "still under way when asked again"
        );
    }
}
