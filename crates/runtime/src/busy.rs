//! A worker's busy time: the wall-clock time its thread spends outside the runtime's park
//! (the wait in `epoll_wait`), measured only while something asks for it.
//!
//! Busy time counts everything that keeps the worker from its next event: its own work in
//! user space and in system calls, the interrupts and softirqs taken meanwhile, and time
//! other threads held its CPU. Its thread's CPU clock counts only the first two where the
//! kernel is built without `CONFIG_IRQ_TIME_ACCOUNTING`, and only the first where it is
//! built with it (as Ubuntu's kernels are): there, interrupt time is charged to no thread.
//!
//! Off, a park costs one thread-local flag read; on, two reads of the monotonic clock.
//! [`start`] turns it on for the calling thread and [`nanos`] reads it; the park hooks
//! ([`parked`], [`unparked`]) are set on each worker's runtime by [`crate::start`]. On a
//! thread without those hooks (a test's), busy time is the wall time since [`start`].

use std::cell::Cell;
use std::time::Instant;

struct Meter {
    on: Cell<bool>,
    /// Busy nanoseconds of the intervals ended since `start`.
    total: Cell<u64>,
    /// When the current busy interval began (the last unpark, or `start`).
    since: Cell<Option<Instant>>,
}

thread_local! {
    static METER: Meter = const {
        Meter {
            on: Cell::new(false),
            total: Cell::new(0),
            since: Cell::new(None),
        }
    };
}

/// Start measuring this thread's busy time from now (from zero).
pub fn start() {
    METER.with(|m| {
        m.on.set(true);
        m.total.set(0);
        m.since.set(Some(Instant::now()));
    });
}

/// Stop measuring: parks cost a flag read again.
pub fn stop() {
    METER.with(|m| m.on.set(false));
}

/// Busy nanoseconds since [`start`] (0 if it was not called, or after [`stop`]).
pub fn nanos() -> u64 {
    METER.with(|m| {
        if !m.on.get() {
            return 0;
        }
        let current = m.since.get().map_or(0, elapsed_nanos);
        m.total.get().saturating_add(current)
    })
}

/// The runtime's hook before its thread parks: a busy interval ends.
pub fn parked() {
    METER.with(|m| {
        if !m.on.get() {
            return;
        }
        if let Some(s) = m.since.take() {
            m.total.set(m.total.get().saturating_add(elapsed_nanos(s)));
        }
    });
}

/// The runtime's hook after its thread unparks: a busy interval begins.
pub fn unparked() {
    METER.with(|m| {
        if m.on.get() {
            m.since.set(Some(Instant::now()));
        }
    });
}

fn elapsed_nanos(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn parked_time_is_not_busy_time() {
        start();
        std::thread::sleep(Duration::from_millis(20));
        parked();
        // Parked: 200 ms pass without counting.
        std::thread::sleep(Duration::from_millis(200));
        let while_parked = nanos();
        unparked();
        std::thread::sleep(Duration::from_millis(20));
        let busy = nanos();
        assert!(while_parked >= 20_000_000, "{while_parked}");
        assert!(
            busy >= while_parked + 20_000_000,
            "{busy} after {while_parked}"
        );
        // Everything but the 200 ms park, with room for a slow, shared machine.
        assert!(busy < 200_000_000, "{busy}");
        stop();
    }

    #[test]
    fn off_it_counts_nothing_and_a_park_without_an_unpark_is_harmless() {
        assert_eq!(nanos(), 0);
        parked();
        unparked();
        assert_eq!(nanos(), 0);
        start();
        parked();
        parked();
        assert!(nanos() < 100_000_000);
        stop();
        assert_eq!(nanos(), 0);
    }

    #[test]
    fn a_worker_runtime_counts_its_busy_time_without_its_parks() {
        // A runtime built as `crate::start` builds each worker's.
        let rt = crate::worker::worker_runtime(0, 1).unwrap();
        let spin = |ms| {
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(ms) {
                std::hint::spin_loop();
            }
        };
        let (busy, wall) = rt.block_on(async {
            start();
            let t = Instant::now();
            // Busy for 20 ms, parked in the timer for 300, busy for 20 more.
            spin(20);
            tokio::time::sleep(Duration::from_millis(300)).await;
            spin(20);
            (nanos(), t.elapsed())
        });
        stop();
        // Both busy stretches count (without either hook, one would be lost)...
        assert!(busy >= 40_000_000, "{busy}");
        assert!(wall >= Duration::from_millis(340));
        // ...and the park does not: well under the 340 ms of wall time.
        assert!(busy < 240_000_000, "busy {busy} ns of {wall:?}");
    }
}
