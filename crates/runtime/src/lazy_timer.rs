//! A connection's one timer for its waits, armed lazily: a wait that ends later than the
//! timer stands leaves it alone, and the timer, firing early, is armed again for the wait
//! in progress. A busy keep-alive connection so enters tokio's timer wheel about once per
//! wait that outlasts the last deadline, not once per request (a new `Sleep` per wait was
//! registered, woken and unregistered every time: about 600 instructions of a
//! 7,300-instruction request). Client connections wait for input by one; an upstream
//! connection waits for each response head by its own.

use std::pin::Pin;

use tokio::time::{Instant, Sleep};

#[derive(Default)]
pub struct LazyTimer(Option<Pin<Box<Sleep>>>);

impl LazyTimer {
    /// Wait until `at`.
    pub async fn until(&mut self, at: Instant) {
        let t = self
            .0
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if t.deadline() > at {
            t.as_mut().reset(at);
        }
        loop {
            t.as_mut().await;
            if Instant::now() >= at {
                return;
            }
            t.as_mut().reset(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_later_wait_outlasts_an_earlier_deadline_and_an_earlier_one_is_kept() {
        let start = Instant::now();
        let mut t = LazyTimer::default();
        // First wait: 10 ms.
        t.until(start + Duration::from_millis(10)).await;
        assert_eq!(Instant::now(), start + Duration::from_millis(10));
        // A later deadline: the spent timer is armed again, not taken as fired.
        t.until(start + Duration::from_millis(50)).await;
        assert_eq!(Instant::now(), start + Duration::from_millis(50));
        // A wait abandoned before its end leaves the timer at 1 s; the next, shorter one
        // still ends on time.
        let abandoned = tokio::time::timeout(
            Duration::from_millis(5),
            t.until(start + Duration::from_secs(1)),
        );
        assert!(abandoned.await.is_err());
        t.until(start + Duration::from_millis(70)).await;
        assert_eq!(Instant::now(), start + Duration::from_millis(70));
        // A deadline already past returns at once.
        t.until(start).await;
        assert_eq!(Instant::now(), start + Duration::from_millis(70));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_past_an_earlier_armed_deadline_does_not_end_early() {
        let start = Instant::now();
        let mut t = LazyTimer::default();
        let first = tokio::time::timeout(
            Duration::from_millis(1),
            t.until(start + Duration::from_millis(20)),
        );
        assert!(first.await.is_err());
        // The timer stands at 20 ms; this wait is to 100 ms: it fires at 20 and waits on.
        t.until(start + Duration::from_millis(100)).await;
        assert_eq!(Instant::now(), start + Duration::from_millis(100));
    }
}
