//! The warning for a flood, at most one a second per worker: an attacker that reconnects
//! as soon as it is told to go away floods thousands of times a second, and a line for
//! each would fill the error log. The next warning says how many went unreported; every
//! flood is counted in the metrics (`http2_floods`) all the same.

use std::cell::Cell;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The least time between two warnings.
const EVERY: Duration = Duration::from_secs(1);

thread_local! {
    static REPORTS: Cell<Reports> = const { Cell::new(Reports { last: None, unreported: 0 }) };
}

/// When the last warning was, and the floods since that were not warned of.
#[derive(Debug, Clone, Copy)]
struct Reports {
    last: Option<Instant>,
    unreported: u32,
}

impl Reports {
    /// Whether a flood at `now` is warned of, and then how many went unreported before
    /// it.
    fn admit(&mut self, now: Instant) -> Option<u32> {
        if self.last.is_some_and(|t| now < t + EVERY) {
            self.unreported = self.unreported.saturating_add(1);
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.unreported))
    }
}

/// Warn of a flood of `what` from `peer`, unless one was warned of within the second.
pub(super) fn warn(peer: SocketAddr, what: &str) {
    let mut r = REPORTS.get();
    let admitted = r.admit(Instant::now());
    REPORTS.set(r);
    match admitted {
        Some(0) => tracing::warn!("{peer}: {what}: closing the connection (GOAWAY)"),
        Some(n) => tracing::warn!(
            "{peer}: {what}: closing the connection (GOAWAY); {n} more floods since the last warning"
        ),
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_a_second_and_then_the_count_of_the_rest() {
        let t = Instant::now();
        let mut r = Reports {
            last: None,
            unreported: 0,
        };
        assert_eq!(r.admit(t), Some(0));
        assert_eq!(r.admit(t + Duration::from_millis(1)), None);
        assert_eq!(r.admit(t + Duration::from_millis(999)), None);
        assert_eq!(r.admit(t + EVERY), Some(2));
        assert_eq!(r.admit(t + EVERY + Duration::from_millis(5)), None);
        assert_eq!(r.admit(t + 3 * EVERY), Some(1));
        assert_eq!(r.admit(t + 5 * EVERY), Some(0));
    }
}
