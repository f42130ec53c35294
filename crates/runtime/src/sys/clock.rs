//! The wall clock to the second, read cheaply: the `Date` of every response needs only the
//! second, and the coarse clock (`CLOCK_REALTIME_COARSE`, the kernel's last tick, a few
//! milliseconds behind at most) is read from the vDSO without the time source's
//! arithmetic. Reading `SystemTime::now` and its `duration_since` per response was about
//! 120 instructions of a 4,500-instruction pipelined request.

/// Seconds since the Unix epoch (0 for a clock set before it).
///
/// Through libc's `clock_gettime`, not rustix's: rustix finds the vDSO by reading the
/// auxiliary vector itself, and under valgrind (how this project counts instructions) that
/// read crashed the process.
pub fn unix_seconds() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a live timespec for the call to write; CLOCK_REALTIME_COARSE exists on
    // every Linux this runs on (2.6.32+), and on failure `t` stays zero.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut t) };
    u64::try_from(t.tv_sec).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    #[test]
    fn the_coarse_second_is_the_wall_clocks_within_a_tick() {
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let coarse = unix_seconds();
        let after = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        // The coarse clock may trail by a tick, so across a second's edge it can still read
        // the second before.
        assert!(
            (before.saturating_sub(1)..=after).contains(&coarse),
            "{before} {coarse} {after}"
        );
    }
}
