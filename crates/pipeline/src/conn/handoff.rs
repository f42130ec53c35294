//! The connection passed on: a tunnel after a 101, a hand-off to a backend's socket, or to
//! the next process in an upgrade.

use super::*;

impl Conn {
    /// After a 101: write the response, pass on what the client sent after its request,
    /// then copy bytes both ways until either side closes.
    pub(super) async fn tunnel<C: Content>(&mut self, w: &HttpWorker<C>, t: Box<dyn Tunnel>) {
        if !self.flush(w).await {
            return;
        }
        let early = std::mem::take(&mut self.buf);
        let ended = crate::tunnel::run(&mut self.stream, &early[self.start..], t).await;
        self.start = 0;
        w.give_buffer(early);
        self.release(w);
        match ended {
            crate::tunnel::Ended::Closed(None) => {}
            crate::tunnel::Ended::Closed(Some(e)) => tracing::debug!("{}: tunnel: {e}", self.peer),
            crate::tunnel::Ended::Idle => tracing::debug!("{}: tunnel idle; closed", self.peer),
        }
    }

    /// Hand the connection to the backend at `socket`: earlier responses go out first, then
    /// the connection joins the worker's hand-off queue with every byte read from this
    /// request on (the head, a pipelined request, the start of a body) and the client's
    /// address. After one yield, so that the other connections of this event-loop turn
    /// queue theirs, the queue is sent in batches (whichever task gets there first sends
    /// them all). The connection is the backend's from then on; a backend that cannot take
    /// it answers the client 503 (`handoff::Handoffs::flush`). The access log records the
    /// request with 200 when it went (0 bytes: the backend's answer is in its own log) or
    /// 503, and `handoff:SOCKET` as its upstream.
    pub(super) async fn hand_off<C: Content>(
        &mut self,
        w: &HttpWorker<C>,
        socket: std::sync::Arc<std::path::PathBuf>,
        mut logged: Box<Pending>,
    ) {
        if !self.flush(w).await {
            return;
        }
        let queued_at = Instant::now();
        let fate = match self.send_to(w, socket.clone(), true).await {
            Ok(fate) => fate,
            Err(e) => {
                tracing::warn!("{}: hand-off: {e}; answered 503", self.peer);
                w.stats.handoff_refused.add(1);
                self.fail(w, 503, Version::Http11);
                let _ = self.flush(w).await;
                return self.close().await;
            }
        };
        logged.status = if fate == crate::handoff::Fate::Went {
            200
        } else {
            503
        };
        logged.upstream = Some(Box::new(ramjet_observe::UpstreamLog {
            addr: format!("handoff:{}", socket.display()),
            status: 0,
            micros: queued_at.elapsed().as_micros() as u64,
            cache: "",
        }));
        // No response of this connection is in the outbox: no body bytes to pair with.
        self.out.body_written.clear();
        self.pending.push(*logged);
        self.log(w);
    }

    /// Queue a duplicate of this connection's descriptor for the hand-off socket `socket`,
    /// with every byte read from `self.start` on and the client's address; after one
    /// yield (so the other connections of this event-loop turn queue theirs) send the
    /// queue in batches, and while the backend is full try again every `RETRY` until
    /// `[timeouts] handoff` is up. Whichever task gets there first sends every queued
    /// connection. A connection the backend does not take gets a 503 with `answer`, else
    /// only a close (`handoff::Handoffs::flush`).
    pub(super) async fn send_to<C: Content>(
        &self,
        w: &HttpWorker<C>,
        socket: Arc<std::path::PathBuf>,
        answer: bool,
    ) -> std::io::Result<crate::handoff::Fate> {
        let Some(socket_fd) = self.stream.handoff_fd() else {
            return Err(std::io::Error::other(
                "a TLS session cannot be handed to another process",
            ));
        };
        let fd = ramjet_runtime::sys::duplicate(socket_fd)?;
        let record = ramjet_handoff::Record {
            id: w.handoffs.next_id(),
            listener: self.listener,
            client: self.peer,
            local: w.listener(self.listener),
            prefix: self.buf[self.start..].to_vec(),
        };
        tracing::debug!(
            "{}: connection {} to {}",
            self.peer,
            record.id,
            socket.display()
        );
        let deadline = Instant::now() + self.generation.config.timeouts.handoff;
        let fate = w
            .handoffs
            .queue(socket, fd, record, deadline.into_std(), answer);
        tokio::task::yield_now().await;
        loop {
            let done = w.handoffs.flush(
                self.generation.config.limits.handoff_batch,
                std::time::Instant::now(),
            );
            w.stats.handoff_connections.add(done.connections as u64);
            w.stats.handoff_messages.add(done.messages as u64);
            w.stats.handoff_refused.add(done.refused as u64);
            if done.messages > 0 {
                tracing::debug!(
                    "handed {} connection(s) in {} message(s)",
                    done.connections,
                    done.messages
                );
            }
            if fate.get() != crate::handoff::Fate::Queued {
                return Ok(fate.get());
            }
            tokio::time::sleep(crate::handoff::RETRY).await;
        }
    }
}
