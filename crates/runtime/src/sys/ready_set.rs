//! An epoll set of idle sockets, apart from tokio's: the parking lot's sockets wait here
//! without a tokio registration (about 300 bytes each) and without a task.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use rustix::event::epoll;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Most events taken per [`ReadySet::ready`] call.
const BATCH: usize = 256;

/// Sockets waiting to become readable (or to hang up), each once: a socket reported is not
/// reported again until it is added again.
#[derive(Debug)]
pub struct ReadySet {
    epoll: OwnedFd,
}

impl ReadySet {
    /// A new set, registered with the current tokio runtime (its own readiness says some
    /// socket in it is ready).
    pub fn register() -> io::Result<AsyncFd<ReadySet>> {
        let set = ReadySet {
            epoll: epoll::create(epoll::CreateFlags::CLOEXEC)?,
        };
        // SAFETY: the set owns its epoll descriptor for its whole life and never replaces
        // it, so the descriptor stays open and the same while the AsyncFd holds the set.
        unsafe { AsyncFd::register_with_interest(set, Interest::READABLE) }.map_err(|e| e.into())
    }

    /// Watch `socket` until it has input or hangs up; `key` comes back with the event.
    pub fn add(&self, socket: BorrowedFd<'_>, key: u64) -> io::Result<()> {
        epoll::add(
            &self.epoll,
            socket,
            epoll::EventData::new_u64(key),
            epoll::EventFlags::IN | epoll::EventFlags::RDHUP | epoll::EventFlags::ONESHOT,
        )?;
        Ok(())
    }

    /// Stop watching `socket` (before it goes back to tokio, or is closed).
    pub fn remove(&self, socket: BorrowedFd<'_>) -> io::Result<()> {
        epoll::delete(&self.epoll, socket)?;
        Ok(())
    }

    /// The keys of sockets that became ready, without waiting; `out` is cleared first.
    /// Fewer than the batch means none are left.
    pub fn ready(&self, out: &mut Vec<u64>) -> io::Result<usize> {
        out.clear();
        let mut events: Vec<epoll::Event> = Vec::with_capacity(BATCH);
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        epoll::wait(
            &self.epoll,
            rustix::buffer::spare_capacity(&mut events),
            Some(&zero),
        )?;
        out.extend(events.iter().map(|e| e.data.u64()));
        Ok(out.len())
    }

    /// Most keys one `ready` call returns.
    pub const BATCH: usize = BATCH;
}

impl AsRawFd for ReadySet {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}

impl AsFd for ReadySet {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}
