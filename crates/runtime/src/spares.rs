//! Spare buffers a worker keeps for reuse, as many as its load needs.
//!
//! A fixed cap on a pool makes a load with more users at once than the cap free and
//! allocate again on every turn: at 500 proxied connections the worker's heap top was
//! returned to the kernel (`madvise`) and faulted back in about 100 times a second. A
//! [`Spares`] keeps whatever is given back, up to a generous `cap`, and at each
//! [`Spares::tick`] (about once a second) drops the spares that sat unused since the tick
//! before: a steady load keeps what it reuses, and memory a burst needed is freed within
//! two ticks of its end, down to `floor`.

use std::cell::{Cell, RefCell};

/// A per-worker pool of reusable items (single-threaded).
pub struct Spares<T> {
    free: RefCell<Vec<T>>,
    /// The fewest spares held at any moment since the last tick: that many were not needed.
    unused: Cell<usize>,
    floor: usize,
    cap: usize,
}

impl<T> Spares<T> {
    /// Kept through idle ticks: `floor` spares; held at most: `cap`.
    pub const fn new(floor: usize, cap: usize) -> Spares<T> {
        Spares {
            free: RefCell::new(Vec::new()),
            unused: Cell::new(0),
            floor,
            cap,
        }
    }

    /// A spare, or a new one from `make` when none is left.
    pub fn take(&self, make: impl FnOnce() -> T) -> T {
        let mut free = self.free.borrow_mut();
        let item = free.pop();
        self.unused.set(self.unused.get().min(free.len()));
        drop(free);
        item.unwrap_or_else(make)
    }

    /// Keep `item` for reuse (dropped if `cap` are held already).
    pub fn give(&self, item: T) {
        let mut free = self.free.borrow_mut();
        if free.len() < self.cap {
            free.push(item);
        }
    }

    /// Drop the spares none of the takes since the last tick needed, keeping `floor`.
    pub fn tick(&self) {
        let mut free = self.free.borrow_mut();
        let keep = (free.len() - self.unused.get().min(free.len())).max(self.floor);
        free.truncate(keep);
        self.unused.set(free.len());
    }

    /// Spares held now.
    pub fn len(&self) -> usize {
        self.free.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Take `n` at once, then give them all back.
    fn burst(s: &Spares<Vec<u8>>, n: usize) {
        let out: Vec<_> = (0..n).map(|_| s.take(Vec::new)).collect();
        out.into_iter().for_each(|b| s.give(b));
    }

    #[test]
    fn a_steady_load_reuses_every_spare_it_gave_back_however_many() {
        let s = Spares::new(4, 10_000);
        let mut made = 0;
        for _ in 0..5 {
            // 500 users at once, every tick interval: only the first interval allocates.
            let out: Vec<_> = (0..500)
                .map(|_| {
                    s.take(|| {
                        made += 1;
                        Vec::<u8>::with_capacity(16)
                    })
                })
                .collect();
            out.into_iter().for_each(|b| s.give(b));
            s.tick();
        }
        assert_eq!(made, 500);
        assert_eq!(s.len(), 500);
    }

    #[test]
    fn spares_unused_for_a_whole_tick_interval_are_dropped_down_to_the_floor() {
        let s = Spares::new(4, 10_000);
        burst(&s, 500);
        s.tick(); // the burst's interval: all 500 were taken, none dropped
        assert_eq!(s.len(), 500);
        burst(&s, 100); // the next interval needed 100 of them
        s.tick();
        assert_eq!(s.len(), 100);
        s.tick(); // an idle interval
        assert_eq!(s.len(), 4);
        s.tick();
        assert_eq!(s.len(), 4);
    }

    #[test]
    fn a_tick_right_after_a_burst_keeps_it_and_the_next_idle_one_drops_it() {
        let s = Spares::new(0, 10_000);
        s.tick();
        burst(&s, 3);
        s.tick();
        assert_eq!(s.len(), 3);
        s.tick();
        assert!(s.is_empty());
    }

    #[test]
    fn no_more_than_cap_are_held() {
        let s = Spares::new(0, 8);
        burst(&s, 20);
        assert_eq!(s.len(), 8);
    }
}
