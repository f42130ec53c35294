//! One error shape for a request a handler could not answer: which side failed
//! (downstream = the client, upstream = a backend, internal = this server), what kind of
//! failure, and a detail for the log. [`Failure::verdict`] is the one place that maps them
//! to a status and a log level.

use std::borrow::Cow;

/// Which side of the exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Downstream,
    Upstream,
    Internal,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailKind {
    /// Could not connect, or no server is up.
    Unreachable,
    /// Did not answer (or send) in time.
    Timeout,
    /// Sent something that is not valid HTTP, or that we refuse to pass on (bad framing,
    /// header injection, a smuggling attempt).
    Invalid,
    /// Closed or reset the connection early.
    Closed,
    /// Sent more than a limit allows.
    TooLarge,
    /// A bug or a resource failure of our own.
    Bug,
}

/// Log level of a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

/// A request that failed, with the reason for the error log.
#[derive(Debug, Clone)]
pub struct Failure {
    pub side: Side,
    pub kind: FailKind,
    /// For the log: what failed and why, e.g. "upstream app (127.0.0.1:8000): connect:
    /// Connection refused".
    pub detail: Cow<'static, str>,
    /// For the access log, when a backend was involved.
    pub upstream: Option<ramjet_observe::UpstreamLog>,
}

impl Failure {
    pub fn new(side: Side, kind: FailKind, detail: impl Into<Cow<'static, str>>) -> Failure {
        Failure {
            side,
            kind,
            detail: detail.into(),
            upstream: None,
        }
    }

    /// The status answered and the level logged, for every side and kind.
    pub fn verdict(&self) -> (u16, Level) {
        match (self.side, self.kind) {
            (Side::Upstream, FailKind::Timeout) => (504, Level::Error),
            (Side::Upstream, _) => (502, Level::Error),
            (Side::Downstream, FailKind::Timeout) => (408, Level::Info),
            (Side::Downstream, FailKind::TooLarge) => (413, Level::Info),
            // The client went away or sent garbage: its problem, logged quietly.
            (Side::Downstream, FailKind::Closed) => (400, Level::Debug),
            (Side::Downstream, _) => (400, Level::Info),
            (Side::Internal, _) => (500, Level::Error),
        }
    }

    /// Log the failure for the request `line` at its level; returns the status to answer.
    pub fn log(&self, line: &[u8]) -> u16 {
        let (status, level) = self.verdict();
        let line = String::from_utf8_lossy(line);
        match level {
            Level::Error => tracing::error!("{} ({status}, \"{line}\")", self.detail),
            Level::Warn => tracing::warn!("{} ({status}, \"{line}\")", self.detail),
            Level::Info => tracing::info!("{} ({status}, \"{line}\")", self.detail),
            Level::Debug => tracing::debug!("{} ({status}, \"{line}\")", self.detail),
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_map_to_statuses() {
        let f = |side, kind| Failure::new(side, kind, "x").verdict().0;
        assert_eq!(f(Side::Upstream, FailKind::Timeout), 504);
        assert_eq!(f(Side::Upstream, FailKind::Unreachable), 502);
        assert_eq!(f(Side::Upstream, FailKind::Invalid), 502);
        assert_eq!(f(Side::Upstream, FailKind::Closed), 502);
        assert_eq!(f(Side::Downstream, FailKind::TooLarge), 413);
        assert_eq!(f(Side::Downstream, FailKind::Timeout), 408);
        assert_eq!(f(Side::Internal, FailKind::Bug), 500);
    }
}
