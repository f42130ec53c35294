//! The calling thread's CPU clock.

use std::time::Duration;

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`): what a piece of work
/// run between two readings on this thread cost, whatever else the machine did meanwhile.
pub fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_clock_counts_work_not_sleep() {
        let a = thread_cpu_time();
        std::thread::sleep(Duration::from_millis(30));
        let b = thread_cpu_time();
        assert!(
            b - a < Duration::from_millis(25),
            "{:?} while asleep",
            b - a
        );
        let mut x = 0u64;
        while thread_cpu_time() - b < Duration::from_millis(5) {
            x = std::hint::black_box(x + 1);
        }
        assert!(thread_cpu_time() >= b + Duration::from_millis(5));
    }
}
