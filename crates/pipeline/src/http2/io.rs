//! The byte stream the h2 crate reads and writes: what the HTTP/1 reader already took from
//! the connection (the preface, maybe more) first, then the transport; every byte read
//! passes the flood meter.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::meter::{Flood, Meter};
use crate::transport::Transport;

pub(super) struct Io {
    prefix: Vec<u8>,
    at: usize,
    inner: Transport,
    meter: Meter,
    /// Set when the meter finds a flood; the connection then goes away.
    pub(super) flood: Rc<Cell<Option<Flood>>>,
}

impl Io {
    pub(super) fn new(inner: Transport, prefix: Vec<u8>) -> Io {
        Io {
            prefix,
            at: 0,
            inner,
            meter: Meter::new(),
            flood: Rc::new(Cell::new(None)),
        }
    }

    pub(super) fn transport(&self) -> &Transport {
        &self.inner
    }
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.flood.get().is_some() {
            // Read nothing more of a flood: the GOAWAY goes out and the connection ends.
            return Poll::Pending;
        }
        let before = buf.filled().len();
        if this.at < this.prefix.len() {
            let n = (this.prefix.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
        } else {
            match Pin::new(&mut this.inner).poll_read(cx, buf) {
                Poll::Ready(Ok(())) => {}
                other => return other,
            }
        }
        if let Err(flood) = this
            .meter
            .feed(&buf.filled()[before..], std::time::Instant::now)
        {
            this.flood.set(Some(flood));
            // The connection's task looks at the verdict on its next turn.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
