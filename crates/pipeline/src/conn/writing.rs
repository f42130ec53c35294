//! Writing the batch of queued responses, and logging its requests once written.

use super::*;

impl Conn {
    /// Write the outbox, then log its requests. False when the connection is gone.
    pub(super) async fn flush<C: Content>(&mut self, w: &HttpWorker<C>) -> bool {
        if self.out.is_empty() {
            return true;
        }
        let _writing = Entered::new(w.stats.waiting(Waiting::Writing));
        let result = if self.throttle.is_none() && self.out.file_bytes() < DOWNLOAD_BYTES {
            self.out
                .flush(&self.stream, self.generation.config.timeouts.send, None)
                .await
        } else {
            // Boxed: large downloads and send rates are rare next to small answers, and
            // their state stays out of every connection's future.
            Box::pin(self.flush_tracked(w)).await
        };
        if self.out.waited {
            // Idle time counts from the end of the response, not from the request: a
            // download longer than `timeouts.keepalive` (or `header`, for a body still to
            // come) must not find its connection's time used up when it ends (nginx counts
            // keepalive_timeout from the end of the response as well). A flush that never
            // waited ended when it began, within the clock's resolution here.
            self.read_at = Instant::now();
        }
        self.log(w);
        match result {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!("{}: write: {e}", self.peer);
                false
            }
        }
    }

    /// Write a batch holding a large file (listed among the worker's downloads meanwhile)
    /// or under send rates.
    pub(super) async fn flush_tracked<C: Content>(
        &mut self,
        w: &HttpWorker<C>,
    ) -> Result<(), crate::outbox::WriteError> {
        let total = self.out.file_bytes();
        let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let listed = (total >= DOWNLOAD_BYTES).then(|| {
            let request = self
                .pending
                .last()
                .map_or(&[][..], |p| &self.buf[p.line.clone()]);
            let request = &request[..request.len().min(200)];
            w.stats.download(Download {
                client: self.peer,
                request: String::from_utf8_lossy(request).into_owned(),
                started: Instant::now().into_std(),
                total,
                sent: sent.clone(),
                socket: std::os::fd::AsRawFd::as_raw_fd(&self.stream),
                marks: Default::default(),
            })
        });
        if listed.is_some() {
            self.shrink_buffer(w);
        }
        let progress = listed.as_ref().map(|_| &*sent);
        let timeout = self.generation.config.timeouts.send;
        match &self.throttle {
            None => self.out.flush(&self.stream, timeout, progress).await,
            Some(t) => {
                t.borrow_mut().begin_flush();
                let sink = Throttled {
                    stream: &self.stream,
                    throttle: t,
                };
                self.out.flush(&sink, timeout, progress).await
            }
        }
    }

    /// Before a long download: keep only what the access log and the next requests need
    /// from the read buffer (the logged fields and any pipelined input) in a buffer of
    /// their size, and give the 4 KiB one back to the worker's pool, so a slow download
    /// does not hold it for minutes.
    pub(super) fn shrink_buffer<C: Content>(&mut self, w: &HttpWorker<C>) {
        if self.buf.capacity() != READ_BUFFER {
            return;
        }
        let fields = |p: &Pending| {
            [
                Some(&p.line),
                p.host.as_ref(),
                p.referer.as_ref(),
                p.user_agent.as_ref(),
            ]
            .into_iter()
            .flatten()
            .map(|r| r.len())
            .sum::<usize>()
        };
        let rest = self.buf.len() - self.start;
        let need: usize = self.pending.iter().map(fields).sum::<usize>() + rest;
        if need >= READ_BUFFER / 2 {
            return;
        }
        let mut small = Vec::with_capacity(need);
        let keep = |r: &mut Range<usize>, small: &mut Vec<u8>| {
            let at = small.len();
            small.extend_from_slice(&self.buf[r.clone()]);
            *r = at..small.len();
        };
        for p in &mut self.pending {
            keep(&mut p.line, &mut small);
            for r in [&mut p.host, &mut p.referer, &mut p.user_agent]
                .into_iter()
                .flatten()
            {
                keep(r, &mut small);
            }
        }
        let start = small.len();
        small.extend_from_slice(&self.buf[self.start..]);
        self.start = start;
        w.give_buffer(std::mem::replace(&mut self.buf, small));
    }

    pub(super) fn log<C: Content>(&mut self, w: &HttpWorker<C>) {
        for (i, p) in self.pending.iter().enumerate() {
            let bytes = self.out.body_written.get(i).copied().unwrap_or(0);
            w.stats.request(p.slot, p.status, bytes);
        }
        let mut log = w.log.borrow_mut();
        if !log.enabled() {
            self.pending.clear();
            return;
        }
        let buf = &self.buf;
        let timed = log.wants_duration();
        let field = |r: &Option<Range<usize>>| r.as_ref().map(|r| &buf[r.clone()]);
        for (i, p) in self.pending.drain(..).enumerate() {
            log.record(&Entry {
                remote: self.peer.ip(),
                unix_secs: p.unix_secs,
                request_line: &buf[p.line.clone()],
                host: field(&p.host),
                status: p.status,
                body_bytes: self.out.body_written.get(i).copied().unwrap_or(0),
                referer: field(&p.referer),
                user_agent: field(&p.user_agent),
                micros: if timed {
                    p.started.elapsed().as_micros() as u64
                } else {
                    0
                },
                upstream: p.upstream.as_deref(),
            });
        }
    }
}
