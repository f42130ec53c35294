//! What a connection reads from and writes to: the client's socket, in the clear or
//! through TLS. The connection loop, request bodies, tunnels and the outbox all go through
//! [`Transport`]; what only a plain socket can do (park in the worker's lot, be handed to
//! another process, `sendfile` without user-space copies) is asked of it by name.

use std::fs::File;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use crate::outbox::{Sink, WriteError};

pub(crate) mod tls;

pub(crate) use tls::TlsStream;

/// The client connection.
pub(crate) enum Transport {
    Plain(TcpStream),
    /// Boxed: rustls' state is a few KiB, and the plain case stays one pointer wide.
    Tls(Box<TlsStream>),
}

impl Transport {
    /// Wait until a read may return bytes (or the end): decrypted bytes already held count.
    #[inline]
    pub(crate) async fn readable(&self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.readable().await,
            Transport::Tls(t) => t.readable().await,
        }
    }

    /// Bytes (or the client's close) are held on this side already: a read returns them
    /// without the socket being readable.
    #[inline]
    pub(crate) fn has_buffered(&self) -> bool {
        match self {
            Transport::Plain(_) => false,
            Transport::Tls(t) => t.has_plaintext(),
        }
    }

    /// Ready when a read may return bytes (or the end): decrypted bytes already held count.
    #[inline]
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Transport::Plain(s) => s.poll_read_ready(cx),
            Transport::Tls(t) if t.has_plaintext() => Poll::Ready(Ok(())),
            Transport::Tls(t) => t.socket().poll_read_ready(cx),
        }
    }

    /// Ready when the socket takes more.
    #[inline]
    pub(crate) fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.socket().poll_write_ready(cx)
    }

    /// Read what is there into `buf`'s spare capacity: `Ok(0)` at the end of the stream,
    /// `WouldBlock` when nothing is.
    #[inline]
    pub(crate) fn try_read_buf(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.try_read_buf(buf),
            Transport::Tls(t) => t.try_read_buf(buf),
        }
    }

    /// Read and drop what the client sends, through `buf` (emptied each time; a
    /// reserved capacity is what one read takes), until it closes or fails (`true`) or
    /// `limit` bytes were read (`false`). Callers bound the time.
    pub(crate) async fn drain(&self, buf: &mut Vec<u8>, limit: usize) -> bool {
        let mut read = 0;
        while read < limit {
            if self.readable().await.is_err() {
                return true;
            }
            buf.clear();
            match self.try_read_buf(buf) {
                Ok(0) => return true,
                Ok(n) => read += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return true,
            }
        }
        false
    }

    /// After a short read drained the socket: forget tokio's readiness, so the next wait
    /// does not begin with a read that finds nothing (a WouldBlock from `try_io` clears
    /// readiness without a system call).
    #[inline]
    pub(crate) fn clear_read_readiness(&self) {
        // Not under TLS: a short read of decrypted bytes says nothing of the socket, and
        // rustls' own reads clear the readiness when they find it empty.
        let Transport::Plain(s) = self else {
            return;
        };
        let _ = s.try_io(Interest::READABLE, || {
            Err::<(), _>(io::ErrorKind::WouldBlock.into())
        });
    }

    /// Write what can be written now (for small interim answers such as 100 Continue).
    pub(crate) fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        self.try_writev(&[IoSlice::new(bytes)], false)
    }

    /// Wait until the socket takes more.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        self.socket().writable().await
    }

    /// End the sending side: TLS sends its close_notify first. Errors are of no use here
    /// (the connection is closing).
    pub(crate) async fn shutdown(&mut self) {
        match self {
            Transport::Plain(s) => {
                let _ = tokio::io::AsyncWriteExt::shutdown(s).await;
            }
            Transport::Tls(t) => t.shutdown().await,
        }
    }

    /// The TCP socket under it.
    #[inline]
    pub(crate) fn socket(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(t) => t.socket(),
        }
    }

    /// A plain socket can wait in the worker's parking lot, or be handed to another process
    /// (a backend, the next ramjet): its state is all in the kernel. A TLS session's state
    /// is in this process, so it stays with its task.
    #[inline]
    pub(crate) fn parkable(&self) -> bool {
        matches!(self, Transport::Plain(_))
    }

    /// The plain socket, to park or hand over; `None` for TLS.
    pub(crate) fn into_plain(self) -> Option<TcpStream> {
        match self {
            Transport::Plain(s) => Some(s),
            Transport::Tls(_) => None,
        }
    }

    /// The descriptor to hand to another process, if this connection can be handed over.
    pub(crate) fn handoff_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        match self {
            Transport::Plain(s) => Some(s.as_fd()),
            Transport::Tls(_) => None,
        }
    }

    /// Whether the last bytes written could be sent by `sendfile` from the page cache
    /// (a plain socket), or go through user-space encryption.
    /// A TLS session that chose HTTP/2 by ALPN.
    pub(crate) fn is_h2(&self) -> bool {
        matches!(self, Transport::Tls(t) if t.is_h2())
    }

    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, Transport::Tls(_))
    }
}

impl AsRawFd for Transport {
    fn as_raw_fd(&self) -> RawFd {
        self.socket().as_raw_fd()
    }
}

impl Sink for Transport {
    #[inline]
    fn try_writev(&self, iov: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.try_writev(iov, more),
            Transport::Tls(t) => t.try_writev(iov),
        }
    }

    #[inline]
    fn try_sendfile(&self, file: &File, offset: u64, len: usize) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.try_sendfile(file, offset, len),
            Transport::Tls(t) => t.try_send_file(file, offset, len),
        }
    }

    fn max_segment(&self) -> Option<usize> {
        match self {
            Transport::Plain(s) => s.max_segment(),
            // Records, not segments, are what a TLS write is made of.
            Transport::Tls(_) => None,
        }
    }

    fn paced(&self) -> bool {
        match self {
            Transport::Plain(s) => Sink::paced(s),
            // TLS writes records of its own size from a buffer; no sendfile to size.
            Transport::Tls(_) => false,
        }
    }

    async fn writable(&self, timeout: Duration) -> Result<(), WriteError> {
        Sink::writable(self.socket(), timeout).await
    }

    fn cork(&self, on: bool) {
        if let Transport::Plain(s) = self {
            Sink::cork(s, on)
        }
    }

    fn short_unsent(&self) -> bool {
        match self {
            Transport::Plain(s) => Sink::short_unsent(s),
            Transport::Tls(_) => false,
        }
    }

    #[inline]
    fn has_held(&self) -> bool {
        match self {
            Transport::Plain(_) => false,
            Transport::Tls(t) => t.has_held(),
        }
    }

    fn try_send_held(&self) -> io::Result<()> {
        match self {
            Transport::Plain(_) => Ok(()),
            Transport::Tls(t) => t.try_send_held(),
        }
    }
}

/// For tunnels (`tokio::io::copy_bidirectional`).
impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Transport::Tls(t) => t.poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Transport::Tls(t) => t.poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Transport::Tls(t) => t.poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_flush(cx),
            Transport::Tls(t) => t.poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Transport::Tls(t) => t.poll_shutdown(cx),
        }
    }
}
