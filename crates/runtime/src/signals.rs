//! Unix signals as events for the main thread.

use tokio::signal::unix::{signal, SignalKind};

/// What an operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// TERM or INT: stop accepting, finish in-flight responses, exit.
    Stop,
    /// HUP: reload the configuration.
    Reload,
    /// USR1: reopen log files.
    ReopenLogs,
    /// USR2: binary upgrade (start the new binary, hand it everything, exit).
    Upgrade,
}

/// A stream of signals; create it before starting workers so none is missed.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
}

impl Signals {
    /// Install the handlers (must run inside a tokio runtime).
    pub fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }

    /// Wait for the next signal.
    pub async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::Stop,
            _ = self.int.recv() => Signal::Stop,
            _ = self.hup.recv() => Signal::Reload,
            _ = self.usr1.recv() => Signal::ReopenLogs,
            _ = self.usr2.recv() => Signal::Upgrade,
        }
    }
}
