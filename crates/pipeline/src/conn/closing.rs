//! Error answers that end the connection, and the close itself (lingering after an error).

use super::*;

impl Conn {
    /// Stop reading requests: what is queued is written, then the connection closes
    /// (lingering when `linger`, or when an error already asked for it).
    pub(super) fn stop_reading(&mut self, linger: bool) {
        self.state = if linger || self.state == State::Lingering {
            State::Lingering
        } else {
            State::Closing
        };
        self.start = self.buf.len();
    }

    /// Queue an error response for a request that could not be parsed, and close after it.
    pub(super) fn fail<C: Content>(&mut self, w: &HttpWorker<C>, status: u16, version: Version) {
        let mut response = error_response(status);
        customise(&mut response, self.generation.config.error_pages.as_deref());
        self.fail_with(w, response, version);
    }

    /// Queue `response` to a request that could not be served, and close after it.
    pub(super) fn fail_with<C: Content>(
        &mut self,
        w: &HttpWorker<C>,
        response: Response,
        version: Version,
    ) {
        let status = response.status;
        let resp = self.out.begin();
        let framing = framing(&response, version);
        let mut date = w.date.borrow_mut();
        let (date, unix_secs) = date.now();
        self.out.head(resp, |out| {
            encode_head(out, &response, date, version);
            end_head(out, version, false, framing);
        });
        self.out.body(resp, response.body, false);
        self.pending.push(Pending {
            status,
            line: 0..0,
            host: None,
            referer: None,
            user_agent: None,
            started: Instant::now(),
            unix_secs,
            upstream: None,
            slot: 0,
        });
        self.state = State::Lingering;
    }

    /// Answer `response` at once (no request was read), then close, lingering.
    pub(super) async fn answer_and_close<C: Content>(
        &mut self,
        w: &HttpWorker<C>,
        response: Response,
    ) {
        self.fail_with(w, response, Version::Http11);
        let _ = self.flush(w).await;
        self.close().await;
        self.release(w);
    }

    /// Close: send FIN, and when unread input may follow an error, drain it for a while so
    /// the client reads our response before any reset.
    pub(super) async fn close(&mut self) {
        if self.state != State::Lingering {
            // Dropping the socket closes it, which sends the FIN: no shutdown(2) needed.
            return;
        }
        let _ = self.stream.shutdown().await;
        // Reuse the read buffer: a local array here would live in every connection's future.
        self.buf.clear();
        self.start = 0;
        self.buf.reserve(READ_BUFFER);
        let _ = tokio::time::timeout(LINGER, self.stream.drain(&mut self.buf, LINGER_BYTES)).await;
    }
}
