//! Reading: the one wait for input (`read_more`), the read buffer and its pool, the PROXY
//! protocol header, and request bodies nobody read.

use super::*;

impl Conn {
    pub(super) fn take_handed_prefix<C: Content>(&mut self, w: &HttpWorker<C>) {
        self.buf = w.take_handed_prefix(self.stream.socket());
    }

    /// Read the PROXY protocol header a balancer sends first (within the header timeout)
    /// and take the client's address from it. False: no valid header; the connection is
    /// closed without an answer (it is not speaking to us as configured).
    pub(super) async fn proxy_header<C: Content>(&mut self, w: &HttpWorker<C>) -> bool {
        let deadline = self.read_at + self.generation.config.timeouts.header;
        loop {
            match parse_proxy_header(&self.buf[self.start..]) {
                ProxyParse::Complete(h) => {
                    if let Some((client, _)) = h.addresses {
                        self.peer = client;
                    }
                    self.start += h.len;
                    return true;
                }
                ProxyParse::Invalid => {
                    tracing::debug!("{}: no valid PROXY protocol header; closing", self.peer);
                    return false;
                }
                ProxyParse::Partial => {
                    if !matches!(self.read_more(w, deadline, false).await, ReadOutcome::Data) {
                        return false;
                    }
                }
            }
        }
    }

    /// Consume a request body by its framing. False: stop reading this connection.
    pub(super) async fn discard_body<C: Content>(
        &mut self,
        w: &HttpWorker<C>,
        decoder: &mut BodyDecoder,
        expect_continue: bool,
    ) -> bool {
        loop {
            while self.start < self.buf.len() && !decoder.is_done() {
                match decoder.decode(&self.buf[self.start..]) {
                    Ok(step) => self.start += step.consumed,
                    Err(_) => {
                        self.state = State::Lingering;
                        return false;
                    }
                }
            }
            if decoder.is_done() {
                return true;
            }
            if expect_continue {
                // The client waits for 100-continue we never sent: answer and close instead.
                return false;
            }
            if !self.flush(w).await {
                return false;
            }
            let deadline = self.read_at + self.generation.config.timeouts.header;
            if !matches!(self.read_more(w, deadline, false).await, ReadOutcome::Data) {
                return false;
            }
        }
    }

    /// Read more input into the buffer (compacting it first). `idle` means no request is
    /// in progress: the buffer may be returned to the pool while waiting, and shutdown ends
    /// the wait.
    pub(super) async fn read_more<C: Content>(
        &mut self,
        w: &HttpWorker<C>,
        deadline: Instant,
        idle: bool,
    ) -> ReadOutcome {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        if idle && self.buf.is_empty() {
            self.release(w);
        }
        let max = self.generation.config.limits.http1.max_head + READ_BUFFER;
        let _waiting = Entered::new(w.stats.waiting(match self.state {
            State::Idle => Waiting::Idle,
            _ => Waiting::Reading,
        }));
        loop {
            // Between requests, with nothing held: wait only until it is worth parking. A
            // shutdown then reaches the connection through the parking lot within
            // PARK_AFTER, so this wait needs no shutdown notification (registering one per
            // request is a lock and a list insertion on the hottest path).
            let park_at = self.read_at + PARK_AFTER;
            let held = self.stream.has_buffered();
            // A TLS session stays with its task: its state is in this process.
            let park = idle
                && self.state == State::Idle
                && self.buf.capacity() == 0
                && park_at < deadline
                && self.stream.parkable();
            if held {
                // Decrypted bytes (or the client's close) already held (TLS): read them.
            } else if park {
                if w.stopping.get() {
                    return ReadOutcome::Shutdown;
                }
                tokio::select! {
                    biased;
                    r = self.stream.socket().readable() => if r.is_err() { return ReadOutcome::Failed },
                    _ = self.timer.until(park_at) => return ReadOutcome::Park,
                }
            } else if idle {
                let notified = w.shutdown.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if w.stopping.get() {
                    return ReadOutcome::Shutdown;
                }
                tokio::select! {
                    biased;
                    r = self.stream.socket().readable() => if r.is_err() { return ReadOutcome::Failed },
                    _ = self.timer.until(deadline) => return ReadOutcome::Timeout,
                    _ = notified => return ReadOutcome::Shutdown,
                }
            } else {
                tokio::select! {
                    biased;
                    r = self.stream.socket().readable() => if r.is_err() { return ReadOutcome::Failed },
                    _ = self.timer.until(deadline) => return ReadOutcome::Timeout,
                }
            }
            if self.buf.capacity() == 0 {
                self.buf = w.take_buffer();
                (self.out, self.pending) = w.take_batch();
            }
            if self.buf.capacity() - self.buf.len() < 512 && self.buf.len() < max {
                self.buf.reserve(self.buf.len().max(READ_BUFFER));
            }
            match self.stream.try_read_buf(&mut self.buf) {
                Ok(0) => return ReadOutcome::Eof,
                Ok(_) => {
                    if self.buf.len() < self.buf.capacity() {
                        // A short read drained the socket. try_read leaves tokio's readiness
                        // set, which would cost an EAGAIN recv on the next wait; clear it here
                        // (a WouldBlock from try_io clears readiness without a syscall).
                        self.stream.clear_read_readiness();
                    }
                    self.read_at = Instant::now();
                    return ReadOutcome::Data;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    // Readiness can be reported with nothing to read (a fresh socket is): do
                    // not hold a buffer through the next wait.
                    if idle && self.buf.is_empty() {
                        self.release(w);
                    }
                }
                Err(_) => return ReadOutcome::Failed,
            }
        }
    }

    /// Hand the read buffer and the batch storage back to the worker's pools, so an idle
    /// connection holds no heap memory of its own.
    pub(super) fn release<C: Content>(&mut self, w: &HttpWorker<C>) {
        if self.buf.capacity() > 0 {
            w.give_buffer(std::mem::take(&mut self.buf));
        }
        if self.out.is_empty() && self.pending.is_empty() {
            w.give_batch(
                std::mem::take(&mut self.out),
                std::mem::take(&mut self.pending),
            );
        }
    }
}
