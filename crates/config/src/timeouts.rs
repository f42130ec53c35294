//! `[timeouts]`: how long each wait may last.

use std::time::Duration;

use serde::Deserialize;

use crate::resolved::Timeouts;
use crate::units::Seconds;

/// Slowloris defence: the whole head must arrive within this (nginx client_header_timeout 60s;
/// shorter, because nothing legitimate needs more).
pub(crate) const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(20);
/// nginx keepalive_timeout is 75 s; Apache's KeepAliveTimeout 5 s. Mirrors want the middle.
const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(60);
/// nginx send_timeout.
const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(60);
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_HANDOFF_TIMEOUT: Duration = Duration::from_secs(1);
const DEFAULT_CGI_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTimeouts {
    /// Whole request head must arrive within this (slowloris defence).
    pub header: Option<Seconds>,
    /// Idle keep-alive connection is closed after this.
    pub keepalive: Option<Seconds>,
    /// A write that makes no progress for this long closes the connection.
    pub send: Option<Seconds>,
    /// On TERM/INT, in-flight responses get this long to finish.
    pub shutdown: Option<Seconds>,
    /// On TERM/INT, serve on this long first with the `health` handler answering 503.
    pub drain: Option<Seconds>,
    /// A connection waits this long for a hand-off backend whose queue is full.
    pub handoff: Option<Seconds>,
    /// A CGI program silent this long (no header yet: 504; in its body: cut) is killed.
    pub cgi: Option<Seconds>,
}

/// Every timeout, its default where unset (any duration is valid).
pub(crate) fn resolve(t: RawTimeouts) -> Timeouts {
    Timeouts {
        header: t.header.map_or(DEFAULT_HEADER_TIMEOUT, |s| s.0),
        keepalive: t.keepalive.map_or(DEFAULT_KEEPALIVE_TIMEOUT, |s| s.0),
        send: t.send.map_or(DEFAULT_SEND_TIMEOUT, |s| s.0),
        shutdown: t.shutdown.map_or(DEFAULT_SHUTDOWN_TIMEOUT, |s| s.0),
        drain: t.drain.map_or(Duration::ZERO, |s| s.0),
        handoff: t.handoff.map_or(DEFAULT_HANDOFF_TIMEOUT, |s| s.0),
        cgi: t.cgi.map_or(DEFAULT_CGI_TIMEOUT, |s| s.0),
    }
}
