//! The control connection's bytes: lines in (at most `MAX_LINE`, an overlong one refused
//! once and read past), replies out (bounded by the send timeout), in the clear or, after
//! AUTH TLS, through a TLS session (`start_tls`). An idle session holds no read buffer.

use std::io;
use std::time::Duration;

use ramjet_ftp::command::{Refused, MAX_LINE};
use ramjet_ftp::reply::Reply;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::content::Content;
use crate::transport::{TlsStream, Transport};
use crate::worker::{Generation, HttpWorker};

/// What waiting for the next line came to.
pub(super) enum Line {
    /// A line (without its LF), or an overlong one refused.
    Got(Result<Vec<u8>, Refused>),
    /// The client closed (or reset) the connection.
    Closed,
    /// No command within the idle timeout.
    Idle,
    /// The server is stopping.
    Stopping,
}

pub(super) struct Control {
    /// `None` only while it moves into a TLS session (`start_tls`), or after that failed.
    stream: Option<Transport>,
    buf: Vec<u8>,
    /// Inside a line already refused as too long: read past its end.
    discarding: bool,
}

impl Control {
    pub(super) fn new(stream: TcpStream) -> Control {
        Control {
            stream: Some(Transport::Plain(stream)),
            buf: Vec::new(),
            discarding: false,
        }
    }

    /// The address the client reached us at (a data listener's, and an active
    /// connection's source).
    pub(super) fn local_ip(&self) -> io::Result<std::net::IpAddr> {
        let stream = self.stream.as_ref().ok_or(io::ErrorKind::NotConnected)?;
        super::data::local_ip(stream.socket())
    }

    /// A reply, whole, within the send timeout.
    pub(super) async fn send(&mut self, reply: &Reply, gen: &Generation) -> io::Result<()> {
        let timeout = gen.config.timeouts.send;
        let stream = self.stream.as_mut().ok_or(io::ErrorKind::NotConnected)?;
        let write = async move {
            stream.write_all(reply.bytes()).await?;
            stream.flush().await
        };
        match tokio::time::timeout(timeout, write).await {
            Ok(r) => r,
            Err(_) => Err(io::ErrorKind::TimedOut.into()),
        }
    }

    /// AUTH TLS was answered 234: the handshake, within `timeout`; the connection is to
    /// close when it fails.
    pub(super) async fn start_tls(
        &mut self,
        acceptor: &ramjet_tls::Acceptor,
        timeout: Duration,
    ) -> io::Result<()> {
        let session = acceptor.accept().map_err(io::Error::other)?;
        let tcp = match self.stream.take() {
            Some(Transport::Plain(tcp)) => tcp,
            other => {
                self.stream = other;
                return Err(io::Error::other("already under TLS"));
            }
        };
        let tls = TlsStream::new(tcp, session);
        // What the client sent after AUTH TLS, without waiting for 234, is its ClientHello.
        let early = std::mem::take(&mut self.buf);
        let fed = tls
            .feed(&early)
            .map_err(|e| io::Error::other(e.to_string()));
        let deadline = tokio::time::Instant::now() + timeout;
        let done = match fed {
            Ok(()) => tls
                .handshake(deadline)
                .await
                .map_err(|e| io::Error::other(e.to_string())),
            Err(e) => Err(e),
        };
        self.stream = Some(Transport::Tls(Box::new(tls)));
        done
    }

    /// A complete line already read, if any.
    pub(super) fn take_line(&mut self) -> Option<Result<Vec<u8>, Refused>> {
        loop {
            match self.buf.iter().position(|&b| b == b'\n') {
                Some(end) if self.discarding => {
                    self.buf.drain(..=end);
                    self.discarding = false;
                }
                Some(end) => {
                    let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                    line.pop();
                    return Some(if line.len() > MAX_LINE {
                        Err(Refused::TooLong)
                    } else {
                        Ok(line)
                    });
                }
                None if self.discarding => {
                    self.buf.clear();
                    return None;
                }
                None if self.buf.len() > MAX_LINE => {
                    self.buf.clear();
                    self.discarding = true;
                    return Some(Err(Refused::TooLong));
                }
                None => return None,
            }
        }
    }

    /// Whether a complete line is waiting.
    #[cfg(test)]
    fn has_line(&self) -> bool {
        self.buf.contains(&b'\n')
    }

    /// Bytes read and not yet taken.
    pub(super) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Remove the first waiting line for which `pick` holds; true if one was.
    pub(super) fn take_first(&mut self, pick: impl Fn(&[u8]) -> bool) -> bool {
        let mut start = 0;
        while let Some(len) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let end = start + len;
            if pick(&self.buf[start..end]) {
                self.buf.drain(start..=end);
                return true;
            }
            start = end + 1;
        }
        false
    }

    /// Read what the client sent: `Ok(0)` at its end.
    pub(super) async fn fill(&mut self) -> io::Result<usize> {
        let stream = self.stream.as_ref().ok_or(io::ErrorKind::NotConnected)?;
        loop {
            if !stream.has_buffered() {
                stream.readable().await?;
            }
            if self.buf.capacity() - self.buf.len() < 256 {
                self.buf.reserve(512);
            }
            match stream.try_read_buf(&mut self.buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The next line: one already read, else wait for one, at most `idle`, or for the
    /// server to stop.
    pub(super) async fn next_line<C: Content>(
        &mut self,
        w: &HttpWorker<C>,
        idle: Duration,
    ) -> Line {
        let deadline = tokio::time::Instant::now() + idle;
        loop {
            if let Some(line) = self.take_line() {
                return Line::Got(line);
            }
            if self.buf.is_empty() {
                // Idle: no buffer held while waiting.
                self.buf = Vec::new();
            }
            let stopping = w.shutdown.notified();
            if w.stopping.get() {
                return Line::Stopping;
            }
            tokio::select! {
                read = tokio::time::timeout_at(deadline, self.fill()) => match read {
                    Err(_) => return Line::Idle,
                    Ok(Ok(0)) | Ok(Err(_)) => return Line::Closed,
                    Ok(Ok(_)) => {}
                },
                () = stopping => return Line::Stopping,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair() -> (Control, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        (Control::new(server), client)
    }

    #[tokio::test]
    async fn lines_split_and_an_overlong_one_is_refused_once() {
        let (mut c, _client) = pair().await;
        c.buf.extend_from_slice(b"USER ftp\r\nPASS x\nNO");
        assert_eq!(c.take_line().unwrap().unwrap(), b"USER ftp\r");
        assert_eq!(c.take_line().unwrap().unwrap(), b"PASS x");
        assert!(c.take_line().is_none());
        assert!(!c.has_line());
        c.buf.clear();
        c.buf.resize(MAX_LINE + 1, b'a');
        assert_eq!(c.take_line(), Some(Err(Refused::TooLong)));
        c.buf.extend_from_slice(b"aaaa\nNOOP\n");
        assert_eq!(
            c.take_line().unwrap().unwrap(),
            b"NOOP",
            "the rest of it is skipped"
        );
        c.buf.resize(MAX_LINE, b'b');
        c.buf.push(b'\n');
        assert!(c.take_line().unwrap().is_ok(), "MAX_LINE bytes are a line");
    }

    #[tokio::test]
    async fn a_waiting_abort_is_taken_out_of_the_input() {
        let (mut c, _client) = pair().await;
        c.buf.extend_from_slice(b"STAT\r\nABOR\r\nNOOP\r\n");
        assert!(c.take_first(|l| l.starts_with(b"ABOR")));
        assert_eq!(c.buf, b"STAT\r\nNOOP\r\n");
        assert!(!c.take_first(|l| l.starts_with(b"ABOR")));
    }
}
