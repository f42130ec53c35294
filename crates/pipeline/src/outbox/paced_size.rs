//! The size of the `sendfile` calls a long body goes out in where TCP paces the socket,
//! chosen by each worker from what the two candidate sizes cost it.
//!
//! Under BBR without an `fq` qdisc, TCP paces each socket with a timer: a segment handed
//! over before its pacing time waits for a timer interrupt of its own. Whether the segments
//! of a large call come early depends on BBR's pacing rate against how fast this host
//! pushes segments through, which changes with the host and with BBR's estimate:
//! - on 2026-11-27's host, 64 KiB calls (one offload unit) were 4x faster than 256 KiB;
//! - on 2026-11-28's, 2 MiB calls were 1.2-1.3x faster than 64 KiB, and with the pacing
//!   rate capped just under what BBR chose (`SO_MAX_PACING_RATE`), 0.6x
//!   (bench/results/2026-11-28-paced-call/).
//!
//! No per-call signal told the two apart there, so the worker measures the cost instead:
//! its busy time per byte sent in paced calls (`ramjet_runtime::busy`: wall-clock time
//! outside the runtime's park, which takes in the timer interrupts and softirqs whether or
//! not the kernel charges them to the thread), over windows of [`WINDOW`] bytes, with the
//! two sizes alternating for a trial; the cheaper is then kept for [`KEEP`] windows
//! (unmeasured), and the trial repeats, since the pacing rate moves. The large size must
//! be clearly cheaper ([`MARGIN`]), because it also holds the worker longer per call.

use std::cell::RefCell;

/// The small size: about one unit of the kernel's segmentation offload.
pub(super) const SMALL: u64 = 64 * 1024;
/// The large size. nginx's `sendfile_max_chunk` is 2 MiB (a call took 0.5-1 ms to a
/// loopback reader here); 1 MiB halves a call's hold on the worker, which the choice by
/// CPU cost does not weigh: the other connections' wait.
pub(super) const LARGE: u64 = 1024 * 1024;
/// Paced bytes per measurement window: about 8 ms of this host's 4 GB/s.
const WINDOW: u64 = 32 * 1024 * 1024;
/// Windows per size in a trial; the sizes alternate window by window, so that a change in
/// the host's speed during the trial weighs on both alike.
const TRIAL: u32 = 16;
/// Windows the chosen size is kept before the next trial.
const KEEP: u32 = 256;
/// The large size is chosen when it costs at most this share of the small one's busy time
/// per byte.
const MARGIN: f64 = 0.95;

/// What a trial measures its windows with: the worker's busy time in production.
pub(crate) trait Meter {
    /// Start counting, from zero.
    fn start(&self);
    /// Nanoseconds counted since `start`.
    fn read(&self) -> u64;
    /// Stop counting: nothing is measured while a choice is kept.
    fn stop(&self);
}

/// One worker's choice, fed with the bytes its paced calls sent and a [`Meter`].
#[derive(Debug)]
pub(crate) struct Chooser {
    /// The size calls are made in now.
    size: u64,
    /// Paced bytes in the window so far.
    bytes: u64,
    /// The meter's reading when the window started, while a trial measures.
    start: Option<u64>,
    phase: Phase,
}

#[derive(Debug)]
enum Phase {
    /// The sizes alternate, each window measured.
    Trial(Trial),
    /// The chosen size is kept for this many more windows.
    Keep(u32),
}

/// What a trial has measured: its windows so far, and busy nanoseconds and bytes per size.
#[derive(Debug, Default)]
struct Trial {
    windows: u32,
    small: (u64, u64),
    large: (u64, u64),
}

impl Default for Chooser {
    fn default() -> Chooser {
        Chooser {
            size: SMALL,
            bytes: 0,
            start: None,
            phase: Phase::Trial(Trial::default()),
        }
    }
}

impl Chooser {
    /// The size of the next paced call.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// A paced call sent `bytes`. In a trial, the meter is started by its first call and
    /// read only when a window ends; while a choice is kept it is not touched.
    pub(crate) fn sent(&mut self, bytes: u64, meter: &impl Meter) {
        if bytes == 0 {
            return;
        }
        if matches!(self.phase, Phase::Keep(_)) {
            self.bytes += bytes;
            if self.bytes >= WINDOW {
                self.bytes = 0;
                self.window_done(0, WINDOW);
            }
            return;
        }
        let Some(start) = self.start else {
            meter.start();
            self.start = Some(0);
            self.bytes = bytes;
            return;
        };
        self.bytes += bytes;
        if self.bytes < WINDOW {
            return;
        }
        let now = meter.read();
        self.window_done(now.saturating_sub(start), self.bytes);
        self.bytes = 0;
        self.start = if matches!(self.phase, Phase::Keep(_)) {
            meter.stop();
            None
        } else {
            Some(now)
        };
    }

    /// A window of `bytes` took `busy` nanoseconds at the current size: count it, and pick
    /// the size of the next one.
    fn window_done(&mut self, busy: u64, bytes: u64) {
        let trial = match &mut self.phase {
            Phase::Trial(trial) => trial,
            Phase::Keep(left) => {
                *left = left.saturating_sub(1);
                if *left == 0 {
                    self.phase = Phase::Trial(Trial::default());
                    self.size = SMALL;
                }
                return;
            }
        };
        let tally = if self.size == LARGE {
            &mut trial.large
        } else {
            &mut trial.small
        };
        tally.0 += busy;
        tally.1 += bytes;
        trial.windows += 1;
        if trial.windows < 2 * TRIAL {
            self.size = if self.size == LARGE { SMALL } else { LARGE };
            return;
        }
        let per_byte = |(busy, bytes): (u64, u64)| busy as f64 / bytes.max(1) as f64;
        self.size = if per_byte(trial.large) <= MARGIN * per_byte(trial.small) {
            LARGE
        } else {
            SMALL
        };
        self.phase = Phase::Keep(KEEP);
    }
}

thread_local! {
    /// This worker's choice: a worker is one thread, and its connections share it.
    static CHOOSER: RefCell<Chooser> = RefCell::new(Chooser::default());
}

/// The size of this worker's next paced call.
pub(super) fn size() -> u64 {
    CHOOSER.with(|c| c.borrow().size())
}

/// The worker's busy time (`ramjet_runtime::busy`, kept by its runtime's park hooks).
struct Busy;

impl Meter for Busy {
    fn start(&self) {
        ramjet_runtime::busy::start();
    }
    fn read(&self) -> u64 {
        ramjet_runtime::busy::nanos()
    }
    fn stop(&self) {
        ramjet_runtime::busy::stop();
    }
}

/// This worker's paced call sent `bytes`.
pub(super) fn sent(bytes: u64) {
    CHOOSER.with(|c| c.borrow_mut().sent(bytes, &Busy));
}

/// Make this thread's worker send paced calls of `size` until its next window ends.
#[cfg(test)]
pub(super) fn set(size: u64) {
    CHOOSER.with(|c| c.borrow_mut().size = size);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A meter over a clock the test moves, counting how it is used.
    #[derive(Default)]
    struct Fake {
        clock: Cell<u64>,
        on: Cell<bool>,
        from: Cell<u64>,
        starts: Cell<u32>,
        reads: Cell<u32>,
        stops: Cell<u32>,
    }

    impl Meter for Fake {
        fn start(&self) {
            self.on.set(true);
            self.from.set(self.clock.get());
            self.starts.set(self.starts.get() + 1);
        }
        fn read(&self) -> u64 {
            assert!(self.on.get(), "read while stopped");
            self.reads.set(self.reads.get() + 1);
            self.clock.get() - self.from.get()
        }
        fn stop(&self) {
            self.on.set(false);
            self.stops.set(self.stops.get() + 1);
        }
    }

    /// Feeds whole windows that cost `small` and `large` busy nanoseconds per byte, and
    /// returns the sizes of the calls made, window by window.
    fn run(c: &mut Chooser, m: &Fake, windows: u32, small: u64, large: u64) -> Vec<u64> {
        let mut sizes = Vec::new();
        if c.start.is_none() && matches!(c.phase, Phase::Trial(_)) {
            c.sent(1, m);
            c.bytes = 0;
        }
        for _ in 0..windows {
            let size = c.size();
            sizes.push(size);
            let cost = if size == LARGE { large } else { small };
            let mut left = WINDOW;
            while left > 0 {
                let k = left.min(size);
                left -= k;
                m.clock.set(m.clock.get() + k * cost);
                c.sent(k, m);
            }
        }
        sizes
    }

    #[test]
    fn a_trial_alternates_the_sizes_then_keeps_the_cheaper() {
        let (mut c, m) = (Chooser::default(), Fake::default());
        assert_eq!(c.size(), SMALL, "the first calls are the safe size");
        let sizes = run(&mut c, &m, 2 * TRIAL, 10, 5);
        let expected: Vec<u64> = (0..2 * TRIAL)
            .map(|i| if i % 2 == 0 { SMALL } else { LARGE })
            .collect();
        assert_eq!(sizes, expected);
        assert_eq!(c.size(), LARGE);
        // Kept for KEEP windows, then a new trial starts with the small size.
        assert!(run(&mut c, &m, KEEP, 10, 5).iter().all(|&s| s == LARGE));
        assert_eq!(c.size(), SMALL);
    }

    #[test]
    fn where_large_calls_cost_more_the_small_size_is_kept() {
        let (mut c, m) = (Chooser::default(), Fake::default());
        run(&mut c, &m, 2 * TRIAL, 10, 16);
        assert_eq!(c.size(), SMALL);
        assert!(run(&mut c, &m, KEEP, 10, 16).iter().all(|&s| s == SMALL));
        // The next trial tries the large size again: the host may have changed.
        let sizes = run(&mut c, &m, 2, 10, 16);
        assert_eq!(sizes, vec![SMALL, LARGE]);
    }

    #[test]
    fn the_large_size_must_be_clearly_cheaper() {
        // 0.9x the small size's cost is chosen; 0.975x (within the margin) is not.
        let (mut c, m) = (Chooser::default(), Fake::default());
        run(&mut c, &m, 2 * TRIAL, 40, 36);
        assert_eq!(c.size(), LARGE);
        let (mut c, m) = (Chooser::default(), Fake::default());
        run(&mut c, &m, 2 * TRIAL, 40, 39);
        assert_eq!(c.size(), SMALL);
    }

    #[test]
    fn the_meter_runs_during_a_trial_only_and_is_read_once_a_window() {
        let (mut c, m) = (Chooser::default(), Fake::default());
        for _ in 0..(3 * WINDOW / SMALL) {
            m.clock.set(m.clock.get() + 1_000);
            c.sent(SMALL, &m);
        }
        // The first call starts the meter; each of the three windows ends with one read.
        assert_eq!((m.starts.get(), m.reads.get()), (1, 3));
        // An empty call counts nothing.
        c.sent(0, &m);
        // The rest of the trial; its last window stops the meter.
        run(&mut c, &m, 2 * TRIAL - 3, 10, 5);
        assert_eq!((m.reads.get(), m.stops.get()), (2 * TRIAL, 1));
        assert!(!m.on.get());
        // While the choice is kept, the meter is neither started nor read.
        run(&mut c, &m, KEEP, 10, 5);
        assert_eq!((m.starts.get(), m.reads.get()), (1, 2 * TRIAL));
        // The next trial starts it again with its first call.
        c.sent(SMALL, &m);
        assert_eq!(m.starts.get(), 2);
        assert!(m.on.get());
    }

    #[test]
    fn a_stopped_clock_or_a_window_with_no_cost_does_not_panic() {
        let (mut c, m) = (Chooser::default(), Fake::default());
        for _ in 0..(4 * TRIAL as u64 * WINDOW / LARGE) {
            c.sent(LARGE, &m);
        }
        assert!(c.size() == SMALL || c.size() == LARGE);
    }
}
