//! Streaming replies: a module's body produced over time by a future that writes into a
//! [`Sink`]. The connection polls the producer only when the socket has taken the previous
//! piece, so a slow client holds the module back (backpressure) and nothing piles up.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::Bytes;
use ramjet_pipeline::BodySource;

/// Where a streaming module writes its body (see [`crate::Reply::stream`]).
pub struct Sink {
    slot: Rc<RefCell<Option<Bytes>>>,
}

impl Sink {
    /// Hand `piece` to the client. Resolves once the connection has taken it, so awaiting
    /// each send keeps at most one piece in memory. Empty pieces are skipped.
    pub async fn send(&mut self, piece: impl Into<Bytes>) {
        let piece = piece.into();
        if piece.is_empty() {
            return;
        }
        let mut piece = Some(piece);
        std::future::poll_fn(|_| {
            let mut slot = self.slot.borrow_mut();
            match piece.take() {
                // The producer runs only when the slot is empty (the source took the last
                // piece first); returning Pending hands control back to the source, which
                // sends the piece and polls the producer again when the socket wants more.
                Some(p) => {
                    *slot = Some(p);
                    Poll::Pending
                }
                None if slot.is_some() => Poll::Pending,
                None => Poll::Ready(()),
            }
        })
        .await
    }
}

/// The [`BodySource`] that drives a producer future and yields what it sends.
pub struct Produced {
    slot: Rc<RefCell<Option<Bytes>>>,
    producer: Option<Pin<Box<dyn Future<Output = io::Result<()>>>>>,
}

/// A body written over time by `produce`, which gets the [`Sink`] to write into. An error it
/// returns ends the connection without the body's end (the head has gone out; an
/// incomplete body is the only signal left). It cannot borrow the request: copy what it
/// needs before the reply is returned.
pub fn produce<F, Fut>(produce: F) -> Produced
where
    F: FnOnce(Sink) -> Fut,
    Fut: Future<Output = io::Result<()>> + 'static,
{
    let slot = Rc::new(RefCell::new(None));
    let sink = Sink { slot: slot.clone() };
    Produced {
        slot,
        producer: Some(Box::pin(produce(sink))),
    }
}

impl BodySource for Produced {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        if let Some(piece) = self.slot.borrow_mut().take() {
            return Poll::Ready(Some(Ok(piece)));
        }
        let Some(producer) = self.producer.as_mut() else {
            return Poll::Ready(None);
        };
        let done = producer.as_mut().poll(cx);
        if let Some(piece) = self.slot.borrow_mut().take() {
            // A piece sent: the producer waits in `send` until the next call.
            return Poll::Ready(Some(Ok(piece)));
        }
        match done {
            Poll::Pending => Poll::Pending,
            Poll::Ready(result) => {
                self.producer = None;
                match result {
                    Ok(()) => Poll::Ready(None),
                    Err(e) => Poll::Ready(Some(Err(e))),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn drain(mut source: Produced) -> Vec<io::Result<Bytes>> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut out = Vec::new();
        for _ in 0..100 {
            match source.poll_next(&mut cx) {
                Poll::Ready(Some(piece)) => out.push(piece),
                Poll::Ready(None) => return out,
                Poll::Pending => panic!("a producer with nothing to wait for stalled"),
            }
        }
        panic!("no end");
    }

    #[test]
    fn pieces_come_out_in_order_one_at_a_time() {
        let source = produce(|mut sink| async move {
            sink.send("a").await;
            sink.send("").await;
            sink.send(Bytes::from_static(b"bc")).await;
            sink.send(vec![b'd']).await;
            Ok(())
        });
        let got: Vec<Bytes> = drain(source).into_iter().map(|p| p.unwrap()).collect();
        assert_eq!(got, [&b"a"[..], b"bc", b"d"]);
    }

    #[test]
    fn the_producer_waits_until_its_piece_is_taken() {
        let sent = Rc::new(RefCell::new(0));
        let counter = sent.clone();
        let mut source = produce(move |mut sink| async move {
            for i in 0..3u8 {
                sink.send(vec![i]).await;
                *counter.borrow_mut() += 1;
            }
            Ok(())
        });
        let mut cx = Context::from_waker(Waker::noop());
        assert!(matches!(
            source.poll_next(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
        // One piece out, the producer is parked in its first send.
        assert_eq!(*sent.borrow(), 0);
        assert!(matches!(
            source.poll_next(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
        assert_eq!(*sent.borrow(), 1);
    }

    #[test]
    fn an_error_ends_the_body_after_what_was_sent() {
        let source = produce(|mut sink| async move {
            sink.send("x").await;
            Err(io::Error::other("backend went away"))
        });
        let got = drain(source);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].as_ref().unwrap(), &b"x"[..]);
        assert!(got[1].is_err());
    }

    #[test]
    fn an_empty_producer_is_an_empty_body() {
        assert!(drain(produce(|_sink| async { Ok(()) })).is_empty());
    }
}
