//! The request loop: parse every request read, answer each through the stages, queue the
//! answers, and decide what the connection does next.

use super::*;

impl Conn {
    pub(super) async fn serve<C: Content>(&mut self, w: &HttpWorker<C>) -> Ended {
        // A local handle on the configuration (not `self.generation`), so that borrowing it
        // does not conflict with `&mut self` calls; refreshed only when a reload happened.
        let mut gen = self.generation.clone();
        'requests: loop {
            if self.start == self.buf.len() {
                // Everything read has been answered: write, log, then wait idle.
                if !self.flush(w).await || self.state.is_closing() {
                    self.close().await;
                    return Ended::Closed;
                }
                let t = &self.generation.config.timeouts;
                let idle = if self.state == State::New {
                    t.header
                } else {
                    t.keepalive
                };
                let deadline = self.read_at + idle;
                match self.read_more(w, deadline, true).await {
                    ReadOutcome::Data => {}
                    ReadOutcome::Park => return Ended::Park(deadline),
                    ReadOutcome::Shutdown if w.handing_over() => return Ended::HandOver,
                    // The client is still taking the last response out of the socket's
                    // buffers (megabytes of them, for a slow reader): not idle yet.
                    ReadOutcome::Timeout
                        if self.state == State::Idle
                            && !self.generation.config.timeouts.keepalive.is_zero()
                            && still_sending(&self.stream) =>
                    {
                        self.read_at = Instant::now();
                        continue 'requests;
                    }
                    _ => return Ended::Closed,
                }
            }
            if w.generation.get() != self.seen_generation {
                self.generation = w.current();
                self.seen_generation = w.generation.get();
                gen = self.generation.clone();
            }
            let config = &gen.config;
            // The parsed head borrows the read buffer and is large: it lives only inside this
            // match, so the awaits below do not carry it in every connection's future.
            let answered = 'answer: {
                match parse_request_head(&self.buf[self.start..], &config.limits.http1) {
                    Parse::Partial => {
                        let deadline = match self.state {
                            State::ReadingHead(d) => d,
                            _ => self.read_at + config.timeouts.header,
                        };
                        self.state = State::ReadingHead(deadline);
                        if !self.flush(w).await {
                            return Ended::Closed;
                        }
                        match self.read_more(w, deadline, false).await {
                            ReadOutcome::Data => {}
                            ReadOutcome::Timeout => {
                                self.fail(w, 408, Version::Http11);
                                let _ = self.flush(w).await;
                                return Ended::Closed;
                            }
                            _ => return Ended::Closed,
                        }
                        continue 'requests;
                    }
                    Parse::Invalid(_)
                        if self.h2c
                            && self.buf[self.start..].starts_with(&crate::http2::PREFACE[..16]) =>
                    {
                        // "PRI * HTTP/2.0": HTTP/2 by prior knowledge.
                        return Ended::Http2;
                    }
                    Parse::Invalid(_) if self.h2c && not_http(&self.buf[self.start..]) => {
                        // The first line names no HTTP version at all: neither an HTTP/1
                        // request nor the HTTP/2 preface. Nothing is answered in a
                        // protocol the client does not speak (RFC 9113 §3.4: an invalid
                        // preface ends the connection).
                        tracing::debug!("{}: not HTTP; closed", self.peer);
                        return Ended::Closed;
                    }
                    Parse::Invalid(kind) => {
                        self.fail(w, kind.status(), Version::Http11);
                        let _ = self.flush(w).await;
                        self.close().await;
                        return Ended::Closed;
                    }
                    Parse::Complete(head) => {
                        self.h2c = false;
                        let started = self.read_at;
                        let (response, body, location) =
                            match BodyDecoder::new(head.framing, config.limits.max_body_any) {
                                Ok(_) if self.refuse => (too_many(config), Ok(None), None),
                                Err(kind) => {
                                    let mut r = error_response(kind.status());
                                    customise(&mut r, config.error_pages.as_deref());
                                    (r, Err(kind), None)
                                }
                                Ok(decoder) => {
                                    // 100 Continue only when no earlier response is still queued:
                                    // it must not overtake one.
                                    let reader = RequestBody::new(
                                        &self.stream,
                                        &self.buf[self.start + head.head_len()..],
                                        decoder,
                                        head.expect_continue && self.out.is_empty(),
                                        config.timeouts.header,
                                    );
                                    let addrs = (
                                        self.peer,
                                        w.listener(self.listener),
                                        self.stream.is_tls(),
                                    );
                                    match stage::respond(
                                        &w.content, config, &head, started, addrs, reader,
                                    ) {
                                        Ok(answer) => answer,
                                        Err(later) => later.await,
                                    }
                                }
                            };
                        let mut response = response;
                        if let Some(socket) =
                            response.extras.as_mut().and_then(|e| e.handoff.take())
                        {
                            // Nothing is queued for it: the backend answers this request.
                            let unix_secs = w.date.borrow_mut().now().1;
                            let mut logged = self.pending_of(&head, 0, started, unix_secs);
                            logged.slot = location.map_or(0, |l| l.metrics);
                            break 'answer Answered {
                                head_len: head.head_len(),
                                expect_continue: false,
                                keep: false,
                                body: Ok(None),
                                tunnel: None,
                                handoff: Some((socket, Box::new(logged))),
                            };
                        }
                        let keep = head.keep_alive
                            && body.is_ok()
                            && (!w.stopping.get() || w.handing_over())
                            && !self.refuse;
                        let tunnel = upgrade_of(&mut response);
                        let status = response.status;
                        let upstream = response
                            .extras
                            .as_mut()
                            .and_then(|e| e.upstream.take())
                            .map(Box::new);
                        let extra = location.and_then(|l| l.response_headers.as_deref());
                        // Send rates: only when a location or the server has them (one test here
                        // otherwise).
                        if self.throttle.is_some()
                            || config.send_rate.is_some()
                            || location.is_some_and(|l| l.shaping.is_some())
                        {
                            self.throttle = Throttle::of(
                                (location, self.seen_generation),
                                config,
                                self.peer,
                                self.throttle.take(),
                            );
                        }
                        let (unix_secs, keep) =
                            queue(w, &mut self.out, response, &head, keep, extra);
                        let mut pending = self.pending_of(&head, status, started, unix_secs);
                        pending.upstream = upstream;
                        pending.slot = location.map_or(0, |l| l.metrics);
                        self.pending.push(pending);
                        Answered {
                            head_len: head.head_len(),
                            expect_continue: head.expect_continue,
                            keep,
                            body,
                            tunnel,
                            handoff: None,
                        }
                    }
                }
            };
            if let Some((socket, logged)) = answered.handoff {
                Box::pin(self.hand_off(w, socket, logged)).await;
                return Ended::Closed;
            }
            self.start += answered.head_len;
            let Answered {
                expect_continue,
                keep,
                body,
                tunnel,
                ..
            } = answered;
            if let Some(t) = tunnel {
                Box::pin(self.tunnel(w, t)).await;
                return Ended::Closed;
            }
            // A refused client may have sent a body: drain it a while, so it reads the 429.
            let bad_body = body.is_err() || self.refuse;
            let unread = self.take_back(body, expect_continue);
            if !keep {
                self.stop_reading(bad_body);
                continue;
            }
            if let Some((mut decoder, expect)) = unread {
                // Boxed: request bodies are rare on a static server, and inline this future
                // would grow every connection's state.
                if !Box::pin(self.discard_body(w, &mut decoder, expect)).await {
                    self.stop_reading(false);
                    continue;
                }
            }
            self.state = State::Idle;
            if (self.out.responses() >= MAX_BATCH || self.out.buffered() >= MAX_BATCH_BYTES)
                && !self.flush(w).await
            {
                return Ended::Closed;
            }
        }
    }

    /// Take back what the producer read of the body: past the buffered bytes it used, or,
    /// if it read the socket, the bytes it read past the body's end replace the buffer's
    /// rest. Returns the decoder of a body still to drain, and whether its client waits for
    /// a 100 Continue that was never sent.
    #[inline]
    pub(super) fn take_back(
        &mut self,
        body: Result<Option<Finished>, ramjet_http1::ErrorKind>,
        expect_continue: bool,
    ) -> Option<(BodyDecoder, bool)> {
        let read = body.ok().flatten()?;
        let (decoder, continued) = read.give_back(&mut self.buf, &mut self.start)?;
        (!decoder.is_done()).then_some((decoder, expect_continue && !continued))
    }

    /// Record where the log fields of `head` sit in the read buffer.
    pub(super) fn pending_of(
        &self,
        head: &RequestHead<'_>,
        status: u16,
        started: Instant,
        unix_secs: u64,
    ) -> Pending {
        let base = self.buf.as_ptr() as usize;
        let at = |s: &[u8]| {
            let from = s.as_ptr() as usize - base;
            from..from + s.len()
        };
        Pending {
            status,
            line: at(head.request_line()),
            host: head.host.map(at),
            referer: head.referer.map(at),
            user_agent: head.user_agent.map(at),
            started,
            unix_secs,
            upstream: None,
            slot: 0,
        }
    }
}

/// A complete first line that names no HTTP version anywhere: not an HTTP/1 request line,
/// even a malformed one (those get their 400).
fn not_http(input: &[u8]) -> bool {
    let Some(end) = input.iter().position(|&b| b == b'\n') else {
        return false;
    };
    !input[..end].windows(5).any(|w| w == b"HTTP/")
}

#[cfg(test)]
mod tests {
    use super::not_http;

    #[test]
    fn what_is_not_http() {
        assert!(not_http(b"INVALID CONNECTION PREFACE\r\n\r\n"));
        assert!(!not_http(b"GET / HTTP/1.1\r\n"));
        assert!(!not_http(b"GET / HTTP/3.0\r\n"));
        assert!(!not_http(b"INVALID CONNECTION"));
        assert!(!not_http(b"GET / HTTP/1.1 x\r\n"));
    }
}
