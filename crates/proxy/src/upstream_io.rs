//! A connection to an upstream server: TCP or a UNIX socket, used through readiness
//! (`try_read`/`try_write` after a wait) like the client side, so a read never copies
//! through an intermediate buffer.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use ramjet_config::UpstreamAddr;
use ramjet_runtime::{sys, LazyTimer};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio::time::Instant;

/// Most pieces one `write_all` takes (head, chunk line, data, CRLF).
pub(crate) const MAX_PARTS: usize = 4;

enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    async fn readable(&self) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.readable().await,
            Sock::Unix(s) => s.readable().await,
        }
    }
}

pub struct Io {
    sock: Sock,
    /// The waits for a response head end by this timer, kept with the connection: a
    /// pooled connection enters tokio's timer wheel about once per `header_timeout`, not
    /// once per exchange (a `Sleep` per exchange cost about 560 of a proxied request's
    /// 18,000 instructions).
    head_timer: LazyTimer,
    /// Found connected by the kernel before the reactor reported the socket writable, so
    /// tokio would refuse the first write until a turn of the event loop: that write goes
    /// to the kernel directly.
    unannounced: AtomicBool,
}

impl Io {
    /// Connect within `timeout` (a timeout is `ErrorKind::TimedOut`). A TCP connection the
    /// kernel completes within `connect` (a backend on this host) is asked whether it is up
    /// at once; only one still under way waits for the reactor, and a timer.
    pub async fn connect(addr: &UpstreamAddr, timeout: Duration) -> io::Result<Io> {
        let io = |sock, unannounced| Io {
            sock,
            head_timer: LazyTimer::default(),
            unannounced: AtomicBool::new(unannounced),
        };
        let a = match addr {
            UpstreamAddr::Tcp(a) => a,
            UpstreamAddr::Unix(p) => {
                let s = Box::pin(within(timeout, UnixStream::connect(p))).await?;
                return Ok(io(Sock::Unix(s), false));
            }
        };
        let (s, up) = start_tcp(a)?;
        if up {
            return Ok(io(Sock::Tcp(s), true));
        }
        // Boxed, like the UNIX connect: the waits' timer would otherwise enlarge every
        // exchange's future, pooled ones included.
        Box::pin(within(timeout, async {
            s.writable().await?;
            match s.take_error()? {
                Some(e) => Err(e),
                None => Ok(()),
            }
        }))
        .await?;
        Ok(io(Sock::Tcp(s), false))
    }

    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &self.sock {
            Sock::Tcp(s) => s.poll_read_ready(cx),
            Sock::Unix(s) => s.poll_read_ready(cx),
        }
    }

    pub(crate) async fn readable(&self) -> io::Result<()> {
        self.sock.readable().await
    }

    /// Wait until the connection is readable, by `deadline` (`None`: it passed first).
    pub(crate) async fn readable_by(&mut self, deadline: Instant) -> Option<io::Result<()>> {
        tokio::select! {
            biased;
            r = self.sock.readable() => Some(r),
            _ = self.head_timer.until(deadline) => None,
        }
    }

    pub(crate) fn try_read_buf<B: bytes::BufMut>(&self, buf: &mut B) -> io::Result<usize> {
        match &self.sock {
            Sock::Tcp(s) => s.try_read_buf(buf),
            Sock::Unix(s) => s.try_read_buf(buf),
        }
    }

    async fn writable(&self) -> io::Result<()> {
        match &self.sock {
            Sock::Tcp(s) => s.writable().await,
            Sock::Unix(s) => s.writable().await,
        }
    }

    fn try_write_vectored(&self, b: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match &self.sock {
            // A load, not a swap: a plain read on every pooled write.
            Sock::Tcp(s) if self.unannounced.load(Ordering::Relaxed) => {
                self.unannounced.store(false, Ordering::Relaxed);
                sys::send_now(s, b)
            }
            Sock::Tcp(s) => s.try_io(Interest::WRITABLE, || sys::send_now(s, b)),
            Sock::Unix(s) => s.try_io(Interest::WRITABLE, || sys::send_now(s, b)),
        }
    }

    /// Write all of `parts` (at most [`MAX_PARTS`]; one writev when the socket takes them),
    /// each wait for writability bounded by `timeout`.
    pub(crate) async fn write_all(&self, parts: &[&[u8]], timeout: Duration) -> io::Result<()> {
        debug_assert!(parts.len() <= MAX_PARTS);
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut done = 0;
        while done < total {
            // Skip what is written, then offer the rest in one call (on the stack: this
            // runs for every proxied request).
            let mut skip = done;
            let mut slices = [io::IoSlice::new(&[]); MAX_PARTS];
            let mut n = 0;
            for p in parts.iter().take(MAX_PARTS) {
                if skip >= p.len() {
                    skip -= p.len();
                    continue;
                }
                slices[n] = io::IoSlice::new(&p[skip..]);
                n += 1;
                skip = 0;
            }
            let n = match self.try_write_vectored(&slices[..n]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match tokio::time::timeout(timeout, self.writable()).await {
                        Ok(r) => r?,
                        Err(_) => {
                            return Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                format!("could not send for {timeout:?}"),
                            ))
                        }
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            done += n;
        }
        Ok(())
    }

    /// After a read that left the socket empty (a short read): forget tokio's read
    /// readiness without a syscall (a `WouldBlock` from `try_io` clears it), so the next
    /// wait does not start with a `recv` that fails with EAGAIN, and an idle pooled
    /// connection reports readiness only when the upstream sends something (or closes).
    pub(crate) fn clear_read_ready(&self) {
        let would_block = || Err::<(), _>(io::ErrorKind::WouldBlock.into());
        let _ = match &self.sock {
            Sock::Tcp(s) => s.try_io(tokio::io::Interest::READABLE, would_block),
            Sock::Unix(s) => s.try_io(tokio::io::Interest::READABLE, would_block),
        };
    }

    /// Whether an idle pooled connection can still carry a request: nothing to read (a
    /// closed connection reads EOF, and an idle one must have sent nothing). Asked of the
    /// reactor first: no readiness since the last read means the upstream sent nothing,
    /// FIN included, and costs no syscall; only a connection with readiness is probed.
    pub(crate) fn is_idle_and_open(&self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self.poll_read_ready(&mut cx) {
            Poll::Pending => return true,
            Poll::Ready(Err(_)) => return false,
            Poll::Ready(Ok(())) => {}
        }
        let mut probe = [0u8; 1];
        let r = match &self.sock {
            Sock::Tcp(s) => s.try_read(&mut probe),
            Sock::Unix(s) => s.try_read(&mut probe),
        };
        matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// A TCP connection to `addr`, begun and registered with the reactor, and whether it is
/// up already. Not inlined: kept out of the exchange's future, whose code every exchange
/// on a pooled connection runs.
#[inline(never)]
fn start_tcp(addr: &std::net::SocketAddr) -> io::Result<(TcpStream, bool)> {
    let s = TcpStream::from_std(sys::start_connect(addr)?)?;
    let up = sys::connect_outcome(&s)?;
    Ok((s, up))
}

/// `connect` within `timeout`, its lapse an `ErrorKind::TimedOut` error.
async fn within<T>(
    timeout: Duration,
    connect: impl std::future::Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match tokio::time::timeout(timeout, connect).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no connection within {timeout:?}"),
        )),
    }
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().sock {
            Sock::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Sock::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let io = self.get_mut();
        if let Sock::Tcp(s) = &io.sock {
            if io.unannounced.load(Ordering::Relaxed) {
                io.unannounced.store(false, Ordering::Relaxed);
                match sys::send_now(s, &[io::IoSlice::new(buf)]) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    r => return Poll::Ready(r),
                }
            }
        }
        match &mut io.sock {
            Sock::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Sock::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().sock {
            Sock::Tcp(s) => Pin::new(s).poll_flush(cx),
            Sock::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().sock {
            Sock::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Sock::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::io::Read;

    /// Poll `f` once, as the worker would before any turn of its event loop.
    fn poll_once<F: Future>(f: F) -> Poll<F::Output> {
        let mut f = std::pin::pin!(f);
        f.as_mut()
            .poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn a_backend_on_this_host_is_connected_and_written_to_without_a_turn_of_the_event_loop() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = UpstreamAddr::Tcp(l.local_addr().unwrap());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let Poll::Ready(io) = poll_once(Io::connect(&addr, Duration::from_secs(5))) else {
                panic!("connect waited for the reactor");
            };
            let io = io.unwrap();
            let Poll::Ready(sent) =
                poll_once(io.write_all(&[b"GET ", b"/"], Duration::from_secs(5)))
            else {
                panic!("the first write waited for the reactor");
            };
            sent.unwrap();
            // Later writes go through the reactor's readiness as before.
            io.write_all(&[b" HTTP/1.1"], Duration::from_secs(5))
                .await
                .unwrap();
        });
        let (mut s, _) = l.accept().unwrap();
        let mut got = [0u8; 14];
        s.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"GET / HTTP/1.1");
    }

    #[test]
    fn a_refused_connection_is_an_error_of_connect() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = UpstreamAddr::Tcp(l.local_addr().unwrap());
        drop(l);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let e = rt
            .block_on(Io::connect(&addr, Duration::from_secs(5)))
            .err()
            .expect("nothing listens there");
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
    }
}
