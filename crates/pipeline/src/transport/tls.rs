//! A TLS session over the client's socket (rustls): reads drain decrypted bytes first,
//! writes encrypt into rustls' buffer and push it to the socket at once; what the socket
//! did not take is held and sent before anything new (`Sink::has_held`).

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, IoSlice, Read, Write};
use std::os::unix::fs::FileExt;
use std::task::{Context, Poll};

use ramjet_runtime::sys;
use ramjet_tls::rustls::ServerConnection;
use tokio::io::{Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Most plaintext taken per write: four full records, the size rustls holds before it
/// refuses more (its buffer limit).
const MOST_PER_WRITE: usize = 64 * 1024;

/// One client's TLS session.
pub(crate) struct TlsStream {
    tcp: TcpStream,
    tls: RefCell<ServerConnection>,
}

/// Why a handshake did not complete.
#[derive(Debug)]
pub(crate) enum HandshakeError {
    /// Not within the time allowed (`timeouts.header`).
    Timeout,
    /// The client closed, or the socket failed.
    Io(io::Error),
    /// The client sent something rustls refused (an alert went back where possible).
    Tls(ramjet_tls::rustls::Error),
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::Timeout => write!(f, "handshake timed out"),
            HandshakeError::Io(e) => write!(f, "{e}"),
            HandshakeError::Tls(e) => write!(f, "{e}"),
        }
    }
}

/// rustls reads through `std::io::Read`: the socket's non-blocking read.
struct SocketIn<'a>(&'a TcpStream);

impl Read for SocketIn<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

/// rustls writes through `std::io::Write`: the socket's non-blocking `send`/`sendmsg`
/// (`sys::send_now`: cheaper than a `writev`).
struct SocketOut<'a>(&'a TcpStream);

impl Write for SocketOut<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0
            .try_io(Interest::WRITABLE, || sys::send_now(self.0, bufs))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TlsStream {
    pub(crate) fn new(tcp: TcpStream, tls: ServerConnection) -> TlsStream {
        TlsStream {
            tcp,
            tls: RefCell::new(tls),
        }
    }

    pub(crate) fn socket(&self) -> &TcpStream {
        &self.tcp
    }

    /// ALPN agreed on the ACME TLS-ALPN-01 protocol: no HTTP follows.
    pub(crate) fn is_acme_challenge(&self) -> bool {
        self.tls.borrow().alpn_protocol() == Some(ramjet_tls::server::ACME_TLS_ALPN)
    }

    /// The client and the server agreed on HTTP/2 (ALPN `h2`).
    pub(crate) fn is_h2(&self) -> bool {
        self.tls.borrow().alpn_protocol() == Some(b"h2")
    }

    /// The handshake resumed an earlier session.
    pub(crate) fn resumed(&self) -> bool {
        self.tls.borrow().handshake_kind() == Some(ramjet_tls::rustls::HandshakeKind::Resumed)
    }

    /// Give rustls bytes already read from the socket (they were looked at first).
    pub(crate) fn feed(&self, mut bytes: &[u8]) -> Result<(), HandshakeError> {
        let mut tls = self.tls.borrow_mut();
        while !bytes.is_empty() {
            match tls.read_tls(&mut bytes) {
                Ok(_) => {}
                Err(e) => return Err(HandshakeError::Io(e)),
            }
            if let Err(e) = tls.process_new_packets() {
                let _ = send_held(&mut tls, &self.tcp);
                return Err(HandshakeError::Tls(e));
            }
        }
        Ok(())
    }

    /// Complete the handshake by `deadline`. Whatever the client sent after its
    /// handshake (an early request) stays in rustls for the first read.
    pub(crate) async fn handshake(&self, deadline: Instant) -> Result<(), HandshakeError> {
        loop {
            let want_write = {
                let mut tls = self.tls.borrow_mut();
                match send_held(&mut tls, &self.tcp) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(HandshakeError::Io(e)),
                }
                if !tls.is_handshaking() && !tls.wants_write() {
                    return Ok(());
                }
                tls.wants_write()
            };
            let ready = if want_write {
                tokio::time::timeout_at(deadline, self.tcp.writable()).await
            } else {
                tokio::time::timeout_at(deadline, self.tcp.readable()).await
            };
            match ready {
                Err(_) => return Err(HandshakeError::Timeout),
                Ok(Err(e)) => return Err(HandshakeError::Io(e)),
                Ok(Ok(())) => {}
            }
            if want_write {
                continue;
            }
            let mut tls = self.tls.borrow_mut();
            match tls.read_tls(&mut SocketIn(&self.tcp)) {
                Ok(0) => {
                    return Err(HandshakeError::Io(io::ErrorKind::UnexpectedEof.into()));
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(HandshakeError::Io(e)),
            }
            if let Err(e) = tls.process_new_packets() {
                // The alert rustls queued for it, if the socket takes it.
                let _ = send_held(&mut tls, &self.tcp);
                return Err(HandshakeError::Tls(e));
            }
        }
    }

    /// Ready when decrypted bytes (or the client's close) are already held, else when the
    /// socket is.
    pub(crate) async fn readable(&self) -> io::Result<()> {
        if self.has_plaintext() {
            return Ok(());
        }
        self.tcp.readable().await
    }

    pub(crate) fn has_plaintext(&self) -> bool {
        let mut tls = self.tls.borrow_mut();
        match tls.process_new_packets() {
            Ok(state) => state.plaintext_bytes_to_read() > 0 || state.peer_has_closed(),
            // The next read reports it.
            Err(_) => true,
        }
    }

    /// Decrypted bytes into `buf`'s spare capacity, reading records from the socket while
    /// none are held. `Ok(0)`: the client closed.
    pub(crate) fn try_read_buf(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let mut tls = self.tls.borrow_mut();
        if buf.capacity() == buf.len() {
            buf.reserve(4096);
        }
        loop {
            match take_plaintext(&mut tls, buf) {
                Ok(n) => return Ok(n),
                // A close without close_notify: the end all the same (a truncation attack
                // matters to a client reading a length-less body, not to a server reading
                // requests).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if tls.read_tls(&mut SocketIn(&self.tcp))? == 0 {
                return Ok(0);
            }
            if let Err(e) = tls.process_new_packets() {
                let _ = send_held(&mut tls, &self.tcp);
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            // A key update or an alert to answer goes out with the next write.
        }
    }

    /// Encrypt what the socket can take: held bytes go first (`WouldBlock` while they
    /// cannot), then up to `MOST_PER_WRITE` of `iov`, pushed to the socket at once; what it
    /// does not take is held. Returns the plaintext bytes taken.
    pub(crate) fn try_writev(&self, iov: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut tls = self.tls.borrow_mut();
        send_held(&mut tls, &self.tcp)?;
        let mut budget = MOST_PER_WRITE;
        let mut cut = [IoSlice::new(&[]); 16];
        let mut n = 0;
        for s in iov {
            if n == cut.len() || budget == 0 {
                break;
            }
            let take = s.len().min(budget);
            cut[n] = IoSlice::new(&s[..take]);
            budget -= take;
            n += 1;
        }
        let took = tls.writer().write_vectored(&cut[..n])?;
        match send_held(&mut tls, &self.tcp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        Ok(took)
    }

    /// Read up to `MOST_PER_WRITE` of `file` at `offset` and encrypt it (as `try_writev`).
    /// The outbox has made sure the range is in the page cache, so the read does not wait
    /// for the disk on the event loop.
    pub(crate) fn try_send_file(&self, file: &File, offset: u64, len: usize) -> io::Result<usize> {
        {
            let mut tls = self.tls.borrow_mut();
            send_held(&mut tls, &self.tcp)?;
        }
        SCRATCH.with_borrow_mut(|scratch| {
            let want = len.min(MOST_PER_WRITE);
            if scratch.len() < want {
                scratch.resize(MOST_PER_WRITE, 0);
            }
            let got = file.read_at(&mut scratch[..want], offset)?;
            if got == 0 {
                return Ok(0);
            }
            self.try_writev(&[IoSlice::new(&scratch[..got])])
        })
    }

    /// Encrypted bytes are waiting for the socket to take them.
    pub(crate) fn has_held(&self) -> bool {
        self.tls.borrow().wants_write()
    }

    pub(crate) fn try_send_held(&self) -> io::Result<()> {
        send_held(&mut self.tls.borrow_mut(), &self.tcp)
    }

    /// Send close_notify, then the TCP FIN.
    pub(crate) async fn shutdown(&self) {
        self.tls.borrow_mut().send_close_notify();
        let deadline = Instant::now() + std::time::Duration::from_secs(1);
        loop {
            match self.try_send_held() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if tokio::time::timeout_at(deadline, self.tcp.writable())
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
                _ => break,
            }
        }
        let _ = ramjet_runtime::sys::shutdown_write(&self.tcp);
    }

    pub(crate) fn poll_read(
        &self,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.has_plaintext() {
                match self.tcp.poll_read_ready(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Ready(Ok(())) => {}
                }
            }
            let mut tls = self.tls.borrow_mut();
            match tls.reader().read(out.initialize_unfilled()) {
                Ok(n) => {
                    out.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Poll::Ready(Ok(())),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            match tls.read_tls(&mut SocketIn(&self.tcp)) {
                Ok(0) => return Poll::Ready(Ok(())),
                Ok(_) => {}
                // try_read cleared the readiness: the next poll registers the waker.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
            if let Err(e) = tls.process_new_packets() {
                let _ = send_held(&mut tls, &self.tcp);
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
            }
        }
    }

    pub(crate) fn poll_write(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_until_taken(cx, || self.try_writev(&[IoSlice::new(buf)]))
    }

    pub(crate) fn poll_write_vectored(
        &self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_until_taken(cx, || self.try_writev(bufs))
    }

    pub(crate) fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_until_taken(cx, || self.try_send_held())
    }

    /// Try `write` until the socket takes it: on `WouldBlock`, wait for writability.
    fn poll_until_taken<T>(
        &self,
        cx: &mut Context<'_>,
        mut write: impl FnMut() -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        loop {
            match write() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match self.tcp.poll_write_ready(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Ready(Ok(())) => {}
                    }
                }
                r => return Poll::Ready(r),
            }
        }
    }

    pub(crate) fn poll_shutdown(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        {
            let mut tls = self.tls.borrow_mut();
            tls.send_close_notify();
        }
        match self.poll_flush(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(ramjet_runtime::sys::shutdown_write(&self.tcp)),
            other => other,
        }
    }
}

thread_local! {
    /// Where file bytes are read before they are encrypted: one per worker thread.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Move decrypted bytes into `buf`'s spare capacity (copied once, from rustls' own
/// buffer: no zeroing of the spare room first). `Ok(0)`: the client closed cleanly;
/// `WouldBlock`: none are held.
fn take_plaintext(tls: &mut ServerConnection, buf: &mut Vec<u8>) -> io::Result<usize> {
    use std::io::BufRead;
    let mut reader = tls.reader();
    let chunk = reader.fill_buf()?;
    let n = chunk.len().min(buf.capacity() - buf.len());
    buf.extend_from_slice(&chunk[..n]);
    reader.consume(n);
    Ok(n)
}

/// Write rustls' encrypted output to the socket until it is all taken (`Ok`) or the
/// socket is full (`WouldBlock`).
fn send_held(tls: &mut ServerConnection, tcp: &TcpStream) -> io::Result<()> {
    while tls.wants_write() {
        match tls.write_tls(&mut SocketOut(tcp)) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
