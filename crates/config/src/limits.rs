//! `[limits]`: request sizes, connections, send rates, hand-off batches, CGI processes.

use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use crate::resolve::Resolver;
use crate::resolved::Limits;
use crate::units::Size;

/// A GET body is read and dropped up to this (nginx client_max_body_size is 1 MiB).
pub(crate) const DEFAULT_MAX_BODY: u64 = 1 << 20;
/// Leaves room under the 20,000-fd hard limit of this machine for cache fds and logs.
const DEFAULT_MAX_CONNECTIONS: usize = 100_000;
const DEFAULT_CGI_PROCESSES: u32 = 64;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_target: Option<Size>,
    pub max_head: Option<Spanned<Size>>,
    pub max_body: Option<Size>,
    pub max_connections: Option<usize>,
    /// SO_SNDBUF for client connections (set on the listeners, inherited by accepted
    /// sockets); unset leaves the kernel's autotuning. Small values bound the kernel memory
    /// of many slow downloads.
    pub send_buffer: Option<Spanned<Size>>,
    /// Send rate of all client connections together (bytes per second).
    pub send_rate: Option<Spanned<Size>>,
    /// Open connections per client address; past it, requests get 429.
    pub max_connections_per_client: Option<Spanned<u32>>,
    /// Most connections per hand-off message (1 to 64).
    pub handoff_batch: Option<Spanned<u32>>,
    /// CGI programs running at once, all workers together; past it, 503.
    pub cgi_processes: Option<Spanned<u32>>,
}

impl Resolver<'_> {
    /// The limits, and the server-wide send rate's bucket when there is one.
    pub(crate) fn limits(
        &self,
        l: RawLimits,
    ) -> (Limits, Option<Arc<ramjet_shaping::SharedBucket>>) {
        let defaults = ramjet_http1::Limits::default();
        let value = |v: &Option<Spanned<u32>>| v.as_ref().map(|s| *s.get_ref());
        let limits = Limits {
            http1: ramjet_http1::Limits {
                max_target: l.max_target.map_or(defaults.max_target, |s| s.0 as usize),
                max_head: l
                    .max_head
                    .as_ref()
                    .map_or(defaults.max_head, |s| s.get_ref().0 as usize),
            },
            max_body: l.max_body.map_or(DEFAULT_MAX_BODY, |s| s.0),
            max_body_any: 0,
            max_connections: l.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS),
            send_buffer: l.send_buffer.as_ref().map(|s| s.get_ref().0 as usize),
            max_connections_per_client: value(&l.max_connections_per_client),
            handoff_batch: value(&l.handoff_batch)
                .map_or(ramjet_handoff::MAX_BATCH, |n| n as usize),
            cgi_processes: value(&l.cgi_processes).unwrap_or(DEFAULT_CGI_PROCESSES) as usize,
        };
        let at = |v: &Option<Spanned<u32>>| v.as_ref().map(|s| s.span());
        if value(&l.cgi_processes) == Some(0) {
            self.keep::<()>(Err(self.err(
                at(&l.cgi_processes),
                "limits.cgi_processes",
                "must be at least 1".into(),
            )));
        }
        if !(1..=ramjet_handoff::MAX_BATCH).contains(&limits.handoff_batch) {
            self.keep::<()>(Err(self.err(
                at(&l.handoff_batch),
                "limits.handoff_batch",
                format!("from 1 to {}", ramjet_handoff::MAX_BATCH),
            )));
        }
        if value(&l.max_connections_per_client) == Some(0) {
            self.keep::<()>(Err(self.err(
                at(&l.max_connections_per_client),
                "limits.max_connections_per_client",
                "must be at least 1".into(),
            )));
        }
        let send_rate = match l.send_rate.as_ref().map(|s| (s.get_ref().0, s.span())) {
            Some((r, span)) if r < crate::shaping::MIN_RATE => {
                self.keep::<()>(Err(self.err(
                    Some(span),
                    "limits.send_rate",
                    format!("at least {} bytes per second", crate::shaping::MIN_RATE),
                )));
                None
            }
            r => r.map(|(r, _)| Arc::new(ramjet_shaping::SharedBucket::new(r))),
        };
        if limits
            .send_buffer
            .is_some_and(|b| !(4096..=1 << 30).contains(&b))
        {
            self.keep::<()>(Err(self.err(
                l.send_buffer.as_ref().map(|s| s.span()),
                "limits.send_buffer",
                "must be between 4 KiB and 1 GiB".into(),
            )));
        }
        if limits.http1.max_head < 1024 {
            self.keep::<()>(Err(self.err(
                l.max_head.as_ref().map(|s| s.span()),
                "limits.max_head",
                "must be at least 1k".into(),
            )));
        }
        (limits, send_rate)
    }
}
