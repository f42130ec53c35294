//! The connection after a `101 Switching Protocols`: bytes copied both ways between the
//! client and the other end (`Tunnel`, e.g. an upstream websocket) until either closes, or
//! until neither side has sent anything for the tunnel's idle timeout (nginx closes an idle
//! websocket after `proxy_read_timeout` the same way).

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::transport::Transport;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;

use crate::response::Tunnel;

/// Why a tunnel ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// One side closed (or failed: the error, for the debug log).
    Closed(Option<io::Error>),
    /// Nothing moved for the idle timeout.
    Idle,
}

/// Copy until the end; `early` is what the client sent after its request, passed on first.
pub(crate) async fn run(client: &mut Transport, early: &[u8], mut other: Box<dyn Tunnel>) -> Ended {
    if !early.is_empty() {
        if let Err(e) = other.write_all(early).await {
            return Ended::Closed(Some(e));
        }
    }
    let idle = other.idle_timeout();
    let last = Cell::new(Instant::now());
    let mut a = Active {
        io: client,
        last: &last,
    };
    let mut b = Active {
        io: &mut *other,
        last: &last,
    };
    let copy = tokio::io::copy_bidirectional(&mut a, &mut b);
    let Some(idle) = idle else {
        return Ended::Closed(copy.await.err());
    };
    tokio::pin!(copy);
    loop {
        tokio::select! {
            r = &mut copy => return Ended::Closed(r.err()),
            _ = tokio::time::sleep_until(last.get() + idle) => {
                // Activity may have moved the deadline while the timer ran.
                if last.get() + idle <= Instant::now() {
                    return Ended::Idle;
                }
            }
        }
    }
}

/// One side of the tunnel, noting when it last delivered bytes.
struct Active<'a, T: ?Sized> {
    io: &'a mut T,
    last: &'a Cell<Instant>,
}

impl<T: AsyncRead + Unpin + ?Sized> AsyncRead for Active<'_, T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut *me.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            me.last.set(Instant::now());
        }
        r
    }
}

impl<T: AsyncWrite + Unpin + ?Sized> AsyncWrite for Active<'_, T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().io).poll_shutdown(cx)
    }
}
