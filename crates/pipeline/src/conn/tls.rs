//! A connection on a TLS listener: its first bytes are looked at (a plaintext HTTP request
//! gets a plain 400 that says so, as nginx does), then the handshake runs within
//! `timeouts.header`, like a request head: a client that opens it and stalls is closed as
//! a slowloris would be.

use super::*;
use crate::transport::tls::TlsStream;
use ramjet_tls::First;

/// What a plaintext request to a TLS port is told.
const PLAIN_TO_TLS: &[u8] = b"The plain HTTP request was sent to HTTPS port\n";

/// A first record longer than TLS allows (16 KiB of plaintext and its expansion) is not
/// waited for: rustls refuses it at once.
const MAX_FIRST_RECORD: usize = 5 + 16_384 + 2_048;

impl Conn {
    /// Start TLS on this plain connection (after any PROXY protocol header): the bytes
    /// already read go to rustls first. `None`: the connection ended (a plaintext request
    /// answered 400, a refused or stalled handshake, a client that left).
    pub(super) async fn into_tls<C: Content>(
        mut self,
        w: &HttpWorker<C>,
        acceptor: ramjet_tls::Acceptor,
    ) -> Option<Conn> {
        let deadline = self.read_at + self.generation.config.timeouts.header;
        // The client's first record (its ClientHello), whole, before any work is done.
        loop {
            let first = &self.buf[self.start..];
            let kind = ramjet_tls::sniff(first);
            let end = ramjet_tls::first_record_end(first);
            // Whole, or longer than TLS allows (not waited for: rustls refuses it at once).
            let whole = end.is_some_and(|e| e > MAX_FIRST_RECORD || first.len() >= e);
            match kind {
                First::PlainHttp => {
                    tracing::debug!("{}: plain HTTP on a TLS port; answered 400", self.peer);
                    let r =
                        Response::new(400, Body::Bytes(bytes::Bytes::from_static(PLAIN_TO_TLS)))
                            .header("Content-Type", b"text/plain; charset=utf-8");
                    self.answer_and_close(w, r).await;
                    return None;
                }
                First::Other => break,
                First::Tls if whole => break,
                First::Tls | First::NeedMore => {}
            }
            // Room for the whole first record, which may be larger than a request head.
            if let Some(end) = end {
                let need = self.start + end.min(MAX_FIRST_RECORD);
                if self.buf.capacity() > 0 && self.buf.capacity() < need {
                    self.buf.reserve(need - self.buf.len());
                }
            }
            if !matches!(self.read_more(w, deadline, false).await, ReadOutcome::Data) {
                self.release(w);
                return None;
            }
        }
        // A turn among the worker's handshakes (within the same deadline), then one yield:
        // at most HANDSHAKES_IN_FLIGHT key exchanges and signatures wait in the event
        // loop's queue, behind the requests of established connections ready before them.
        let Ok(Ok(turn)) = tokio::time::timeout_at(deadline, w.handshakes.acquire()).await else {
            self.release(w);
            return None;
        };
        tokio::task::yield_now().await;
        w.stats.tls_handshakes.add(1);
        let session = match acceptor.accept() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("{}: TLS session: {e}", self.peer);
                self.release(w);
                return None;
            }
        };
        let Transport::Plain(tcp) = self.stream else {
            return None;
        };
        let early = std::mem::take(&mut self.buf);
        let stream = TlsStream::new(tcp, session);
        let fed = stream.feed(&early[self.start..]);
        w.give_buffer(early);
        let conn = Conn {
            stream: Transport::Tls(Box::new(stream)),
            start: 0,
            ..self
        };
        // The costly part (key exchange, signature) was the ClientHello's: the turn goes to
        // the next handshake while this one waits for the client's answer.
        if let Transport::Tls(t) = &conn.stream {
            let _ = t.try_send_held();
        }
        drop(turn);
        let done = match fed {
            Ok(()) => match conn.stream {
                Transport::Tls(ref t) => t.handshake(deadline).await,
                Transport::Plain(_) => Ok(()),
            },
            Err(e) => Err(e),
        };
        match done {
            // An ACME CA proving a name (TLS-ALPN-01): the handshake was the answer.
            Ok(()) if matches!(&conn.stream, Transport::Tls(t) if t.is_acme_challenge()) => {
                tracing::info!("{}: answered an ACME tls-alpn-01 challenge", conn.peer);
                let mut conn = conn;
                conn.stream.shutdown().await;
                conn.release(w);
                None
            }
            Ok(()) => {
                w.stats.tls_handshakes_done.add(1);
                if matches!(&conn.stream, Transport::Tls(t) if t.resumed()) {
                    w.stats.tls_handshakes_resumed.add(1);
                }
                Some(conn)
            }
            Err(e) => {
                tracing::debug!("{}: TLS handshake: {e}", conn.peer);
                let mut conn = conn;
                conn.release(w);
                None
            }
        }
    }
}
