//! An idle HTTP/2 connection's state while it waits in the worker's parking lot, kept in
//! the worker's store of idle states: chunks of 64, one next to the other.
//!
//! The state was first kept where the connection allocated it, among the memory of its
//! streams, buffers and futures. Once those were freed, each parked state still held a
//! page of that memory resident (7.77 KB per idle connection where HTTP/1.1 holds
//! 0.9); moved here at parking, the pages it came from are wholly free and go back to the
//! kernel at the next heap trim.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tokio::time::Instant;

use super::machine::Machine;
use super::stream::LogLine;

type State = Machine<Box<LogLine>>;

/// States per chunk.
const CHUNK: usize = 64;
/// No place in the store: taken already.
const TAKEN: u32 = u32::MAX;

thread_local! {
    static STORE: RefCell<Store> = RefCell::new(Store::default());
}

#[derive(Default)]
struct Store {
    chunks: Vec<Box<[Option<State>]>>,
    /// States in each chunk.
    live: Vec<u32>,
    /// Free places, lowest first (so the last chunks empty and go).
    free: BinaryHeap<Reverse<u32>>,
}

impl Store {
    fn put(&mut self, state: State) -> u32 {
        let index = match self.free.pop() {
            Some(Reverse(i)) => i,
            None => {
                let first = (self.chunks.len() * CHUNK) as u32;
                self.chunks.push(
                    (0..CHUNK)
                        .map(|_| None)
                        .collect::<Vec<_>>()
                        .into_boxed_slice(),
                );
                self.live.push(0);
                self.free
                    .extend((first + 1..first + CHUNK as u32).map(Reverse));
                first
            }
        };
        let (c, i) = (index as usize / CHUNK, index as usize % CHUNK);
        self.chunks[c][i] = Some(state);
        self.live[c] += 1;
        index
    }

    fn take(&mut self, index: u32) -> Option<State> {
        let (c, i) = (index as usize / CHUNK, index as usize % CHUNK);
        let state = self.chunks.get_mut(c)?[i].take()?;
        self.live[c] -= 1;
        self.free.push(Reverse(index));
        // Empty chunks at the end go, with their free places.
        let before = self.chunks.len();
        while self.live.last() == Some(&0) {
            self.chunks.pop();
            self.live.pop();
        }
        if self.chunks.len() < before {
            let end = (self.chunks.len() * CHUNK) as u32;
            self.free.retain(|&Reverse(i)| i < end);
        }
        Some(state)
    }
}

/// A parked connection's HTTP/2 state (in the worker's store) and when its keep-alive
/// time ends. Dropped, its state is dropped too.
pub(crate) struct Idle {
    index: u32,
    pub(super) deadline: Instant,
}

impl Idle {
    /// Keep `state` (quiet: nothing held for streams) until the connection is resumed.
    pub(super) fn keep(state: State, deadline: Instant) -> Idle {
        let index = STORE.with_borrow_mut(|s| s.put(state));
        Idle { index, deadline }
    }

    /// The state back, out of the store (`None` on another thread than the worker's
    /// that kept it, which does not happen: parked connections stay on their worker).
    pub(super) fn resume(mut self) -> Option<State> {
        let index = std::mem::replace(&mut self.index, TAKEN);
        STORE.with_borrow_mut(|s| s.take(index))
    }
}

impl Drop for Idle {
    fn drop(&mut self) {
        if self.index != TAKEN {
            // Dropped outside the borrow: a state's drop does not reach the store, but
            // keep it out of the `RefCell` anyway.
            let state = STORE.with_borrow_mut(|s| s.take(self.index));
            drop(state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http2::machine::Settings;

    fn state() -> State {
        Machine::new(
            Settings {
                max_streams: 100,
                stream_window: 1 << 16,
                connection_window: 1 << 16,
                max_head: 8192,
            },
            true,
        )
    }

    fn chunks() -> usize {
        STORE.with_borrow(|s| s.chunks.len())
    }

    #[test]
    fn states_come_back_and_empty_chunks_go() {
        let now = Instant::now();
        let mut kept: Vec<Idle> = (0..200).map(|_| Idle::keep(state(), now)).collect();
        assert_eq!(chunks(), 4);
        // Places are reused lowest first.
        let back = kept.remove(10).resume().unwrap();
        drop(back);
        let again = Idle::keep(state(), now);
        assert_eq!(again.index, 10);
        kept.push(again);
        // Resumed or dropped, all go; the chunks with them.
        for (n, idle) in kept.into_iter().enumerate() {
            if n % 2 == 0 {
                drop(idle.resume().unwrap());
            }
        }
        assert_eq!(chunks(), 0);
        assert!(STORE.with_borrow(|s| s.free.is_empty()));
    }

    #[test]
    fn a_state_asked_for_on_another_thread_is_not_there() {
        let idle = Idle::keep(state(), Instant::now());
        let got = std::thread::spawn(move || idle.resume().is_some())
            .join()
            .unwrap();
        assert!(!got);
    }
}
