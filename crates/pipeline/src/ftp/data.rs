//! Passive data connections: a listener opened for PASV/EPSV on the control connection's
//! own address (a port from `passive_ports`, or the kernel's), and the one connection it
//! takes: from the control connection's client address only (another address is refused
//! and counted: port theft), within the data timeout.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ramjet_observe::stats::WorkerStats;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// How the next data connection is made.
pub(super) enum Data {
    /// The client connects to our listener (PASV, EPSV).
    Passive(Passive),
    /// We connect to the client (PORT, EPRT; its address was checked to be the client's).
    Active(SocketAddr),
}

impl Data {
    /// The data connection: accepted from `client`'s address, or made to the active
    /// address from `local`, within `timeout`.
    pub(super) async fn open(
        self,
        client: IpAddr,
        local: IpAddr,
        timeout: Duration,
        stats: &WorkerStats,
    ) -> io::Result<TcpStream> {
        match self {
            Data::Passive(p) => p.accept(client, timeout, stats).await,
            Data::Active(to) => {
                let socket = match local {
                    IpAddr::V4(_) => TcpSocket::new_v4()?,
                    IpAddr::V6(_) => TcpSocket::new_v6()?,
                };
                socket.bind(SocketAddr::new(local, 0))?;
                let to = match (local, to.ip()) {
                    // A dual-stack socket's IPv4 client, named as IPv4 by PORT.
                    (IpAddr::V6(_), IpAddr::V4(v4)) => {
                        SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), to.port())
                    }
                    _ => to,
                };
                tokio::time::timeout(timeout, socket.connect(to))
                    .await
                    .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
            }
        }
    }
}

/// PROT P: the data connection's TLS handshake (the client is the TLS client whichever
/// side connected, RFC 4217 §7), within `timeout`. The acceptor's session cache and
/// tickets let the client resume its control connection's session.
pub(super) async fn secure(
    tcp: TcpStream,
    acceptor: &ramjet_tls::Acceptor,
    timeout: Duration,
) -> io::Result<crate::transport::Transport> {
    let session = acceptor.accept().map_err(io::Error::other)?;
    let tls = crate::transport::TlsStream::new(tcp, session);
    tls.handshake(tokio::time::Instant::now() + timeout)
        .await
        .map_err(|e| io::Error::other(format!("data connection TLS: {e}")))?;
    Ok(crate::transport::Transport::Tls(Box::new(tls)))
}

/// Whether PORT/EPRT's `to` may be connected to for a client at `client`: its own address
/// (never a third party's: FTP bounce) and an unprivileged port.
pub(super) fn active_allowed(to: SocketAddr, client: IpAddr) -> bool {
    ramjet_shaping::canonical(to.ip()) == ramjet_shaping::canonical(client) && to.port() >= 1024
}

/// An open passive listener, waiting for its data connection.
pub(super) struct Passive {
    listener: TcpListener,
}

impl Passive {
    /// Listen on `local`'s address, on a port of `range` (tried from a varying start, each
    /// once) or the kernel's choice.
    pub(super) fn open(local: IpAddr, range: Option<(u16, u16)>) -> io::Result<Passive> {
        let Some((lo, hi)) = range else {
            return bind(local, 0).map(|listener| Passive { listener });
        };
        let span = u32::from(hi - lo) + 1;
        let start = start_point() % span;
        let mut last = io::Error::from(io::ErrorKind::AddrInUse);
        for i in 0..span {
            let port = lo + ((start + i) % span) as u16;
            match bind(local, port) {
                Ok(listener) => return Ok(Passive { listener }),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    pub(super) fn port(&self) -> u16 {
        self.listener.local_addr().map_or(0, |a| a.port())
    }

    /// The data connection from `client`'s address, within `timeout`; connections from
    /// other addresses are closed at once and counted in `stats.ftp_refused`.
    pub(super) async fn accept(
        self,
        client: IpAddr,
        timeout: Duration,
        stats: &WorkerStats,
    ) -> io::Result<TcpStream> {
        let client = ramjet_shaping::canonical(client);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let (stream, peer) = tokio::time::timeout_at(deadline, self.listener.accept())
                .await
                .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
            if ramjet_shaping::canonical(peer.ip()) == client {
                return Ok(stream);
            }
            stats.ftp_refused.add(1);
            tracing::warn!(
                "ftp: data connection from {peer} refused: the control connection is from {client}"
            );
        }
    }
}

fn bind(ip: IpAddr, port: u16) -> io::Result<TcpListener> {
    let socket = match ip {
        IpAddr::V4(_) => TcpSocket::new_v4()?,
        IpAddr::V6(_) => TcpSocket::new_v6()?,
    };
    // A port whose last data connection is in TIME_WAIT can be listened on again.
    socket.set_reuseaddr(true)?;
    socket.bind(SocketAddr::new(ip, port))?;
    socket.listen(1)
}

/// A start in the port range that differs between calls (sessions do not all try the
/// same ports first).
fn start_point() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    nanos ^ NEXT.fetch_add(0x9e37_79b9, Ordering::Relaxed)
}

/// The control connection's local address as the data listener's: an IPv4 address
/// accepted on a dual-stack socket is its IPv4 form.
pub(super) fn local_ip(control: &TcpStream) -> io::Result<IpAddr> {
    Ok(ramjet_shaping::canonical(control.local_addr()?.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_mode_only_to_the_client_itself() {
        let client: IpAddr = "192.0.2.1".parse().unwrap();
        assert!(active_allowed("192.0.2.1:1024".parse().unwrap(), client));
        assert!(active_allowed(
            "[::ffff:192.0.2.1]:5000".parse().unwrap(),
            client
        ));
        assert!(
            !active_allowed("192.0.2.1:1023".parse().unwrap(), client),
            "privileged"
        );
        assert!(
            !active_allowed("192.0.2.2:2000".parse().unwrap(), client),
            "bounce"
        );
    }

    #[tokio::test]
    async fn ports_come_from_the_range_and_a_full_range_fails() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        // Find two free neighbouring ports.
        let probe = Passive::open(ip, None).unwrap();
        let base = probe.port();
        drop(probe);
        let (lo, hi) = (base.max(1024), base.max(1024));
        let one = Passive::open(ip, Some((lo, hi))).unwrap();
        assert_eq!(one.port(), lo);
        assert!(
            Passive::open(ip, Some((lo, hi))).is_err(),
            "a range whose one port is taken"
        );
    }

    #[tokio::test]
    async fn a_connection_from_another_address_is_refused_and_the_right_one_taken() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let passive = Passive::open(ip, None).unwrap();
        let port = passive.port();
        let stats = ramjet_observe::stats::local();
        let before = stats.ftp_refused.get();
        // The thief connects from 127.0.0.2, the client from 127.0.0.1.
        let thief = TcpSocket::new_v4().unwrap();
        thief.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let thief = thief.connect(SocketAddr::new(ip, port)).await.unwrap();
        let client = TcpStream::connect(SocketAddr::new(ip, port)).await.unwrap();
        let got = passive
            .accept(ip, Duration::from_secs(10), stats)
            .await
            .unwrap();
        assert_eq!(got.peer_addr().unwrap(), client.local_addr().unwrap());
        assert_eq!(stats.ftp_refused.get(), before + 1);
        drop(thief);
    }

    #[tokio::test]
    async fn no_connection_times_out() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let passive = Passive::open(ip, None).unwrap();
        let e = passive
            .accept(
                ip,
                Duration::from_millis(50),
                ramjet_observe::stats::local(),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }
}
