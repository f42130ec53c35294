//! Idle keep-alive connections to each server of an upstream, per worker (nginx's
//! `keepalive N`): taken newest first (the warmest, least likely to have timed out),
//! dropped when idle longer than `keepalive_timeout` or past `keepalive` per server.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::upstream_io::Io;

struct Idle {
    io: Io,
    since: Instant,
}

/// One server's idle connections.
#[derive(Default)]
pub(crate) struct Pool {
    idle: VecDeque<Idle>,
}

impl Pool {
    /// The newest idle connection that is still open and not too old.
    pub(crate) fn take(&mut self, now: Instant, timeout: Duration) -> Option<Io> {
        while let Some(Idle { io, since }) = self.idle.pop_back() {
            if now.saturating_duration_since(since) < timeout && io.is_idle_and_open() {
                return Some(io);
            }
        }
        None
    }

    /// Keep `io` for reuse; the oldest goes when `limit` are kept.
    pub(crate) fn put(&mut self, io: Io, limit: usize, now: Instant) {
        if limit == 0 {
            return;
        }
        while self.idle.len() >= limit {
            self.idle.pop_front();
        }
        self.idle.push_back(Idle { io, since: now });
    }

    /// Close connections idle longer than `timeout` (called about once a second).
    pub(crate) fn prune(&mut self, now: Instant, timeout: Duration) {
        while self
            .idle
            .front()
            .is_some_and(|i| now.saturating_duration_since(i.since) >= timeout)
        {
            self.idle.pop_front();
        }
    }
}
