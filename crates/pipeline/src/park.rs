//! Parking: a keep-alive connection idle for [`PARK_AFTER`] leaves its task and its tokio
//! registration. Its socket waits in the worker's own epoll set (`sys::ReadySet`) with a
//! record of about 70 bytes; when it becomes readable (or hangs up), the worker's one
//! parking task registers it with tokio again and gives it a new connection task. The
//! keep-alive deadlines of parked connections are one queue, in parking order, served by
//! that task's one timer. An idle connection thus costs its record and the kernel's, not a
//! task, a ~1 KiB future, a timer and tokio's 256-byte registration. Parking and waking
//! cost four `epoll_ctl` calls, paid only by connections idle for a second.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::rc::Rc;
use std::time::Duration;

use ramjet_runtime::sys::{self, ReadySet};
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::content::Content;
use crate::worker::{ClientConnection, HttpWorker};

/// A keep-alive connection idle this long is parked. Its timer is the one the idle wait
/// had anyway; a client sending requests more often than this is never parked. One second,
/// not less: a client reading a reply at modem speed sends its next request only when it
/// has read it all (SPECweb99's 400 kbit/s readers: 0.1 s for a 5 KB file, 1 s for 50 KB),
/// and at 100 ms half the `epoll_ctl` calls under SPECweb99 were such short parkings
/// (189,565 against 98,224 in 10 s at 3,000 connections). Idle connections still park
/// within a second; a shutdown reaches them within it too.
pub(crate) const PARK_AFTER: Duration = Duration::from_millis(1000);
/// After a parking, the freed memory of its task is given back to the kernel (a heap
/// trim, at most once a second, `TRIM_EVERY`): otherwise the allocator keeps it resident.
/// With a trim only after 1,024 parkings, the last of a burst stayed resident: 2,000
/// idle HTTP/2 connections parked in two seconds held 5.4 KB each, 1.1 KB with a trim
/// after them; 400 over two workers, 4.6 KB each with one after 64.
const TRIM_AFTER: usize = 1;
const TRIM_EVERY: Duration = Duration::from_secs(1);

/// A connection the lot could not take, given back to be served on.
pub(crate) type ParkRefused = (
    TcpStream,
    Option<ClientConnection>,
    Option<crate::http2::Idle>,
);

/// A parked connection.
pub(crate) struct Parked {
    pub(crate) stream: std::net::TcpStream,
    pub(crate) peer: SocketAddr,
    pub(crate) listener: u16,
    /// Its place in `limits.max_connections_per_client`, kept while parked.
    pub(crate) client: Option<ClientConnection>,
    /// An HTTP/2 connection's state: its place in the worker's store (about 1 KiB there,
    /// and the client's HPACK table).
    pub(crate) h2: Option<crate::http2::Idle>,
}

struct Slot {
    parked: Option<Parked>,
    /// Bumped on every parking, so a late event or expiry of an earlier one is ignored.
    seq: u32,
}

/// One worker's parked connections.
#[derive(Default)]
pub(crate) struct Lot {
    /// Created at the first parking (`None` inside: it could not be, so nothing parks).
    set: OnceCell<Option<AsyncFd<ReadySet>>>,
    slots: RefCell<Vec<Slot>>,
    free: RefCell<Vec<u32>>,
    /// `(deadline, slot, seq)` in parking order.
    expiry: RefCell<VecDeque<(Instant, u32, u32)>>,
    /// Wakes the parking task to look at its timer again.
    notify: Notify,
    /// The parking task runs (started at the first parking).
    running: Cell<bool>,
    parked: Cell<usize>,
    /// Parkings since the heap was last trimmed, and when that was.
    since_trim: Cell<usize>,
    trimmed: Cell<Option<Instant>>,
}

fn key(slot: u32, seq: u32) -> u64 {
    (u64::from(slot) << 32) | u64::from(seq)
}

impl Lot {
    /// Connections parked now.
    pub(crate) fn len(&self) -> usize {
        self.parked.get()
    }

    fn set(&self) -> Option<&AsyncFd<ReadySet>> {
        self.set
            .get_or_init(|| match ReadySet::register() {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!("idle connections cannot be parked: {e}");
                    None
                }
            })
            .as_ref()
    }

    /// Park an idle connection until it is readable or its deadline passes. `Err` gives
    /// it back when it cannot be parked (serve it on in a task).
    pub(crate) fn park<C: Content>(
        &self,
        w: &Rc<HttpWorker<C>>,
        rest: crate::conn::Rest,
        client: Option<ClientConnection>,
    ) -> Result<(), ParkRefused> {
        let (stream, peer, listener, deadline, h2) = rest;
        let Some(set) = self.set() else {
            return Err((stream, client, h2));
        };
        // Leaves tokio's epoll set (the socket stays non-blocking).
        let Ok(std) = stream.into_std() else {
            // The socket is gone with the error: nothing to park or serve.
            return Ok(());
        };
        let mut slots = self.slots.borrow_mut();
        let index = match self.free.borrow_mut().pop() {
            Some(i) => i,
            None => {
                slots.push(Slot {
                    parked: None,
                    seq: 0,
                });
                slots.len() as u32 - 1
            }
        };
        let slot = &mut slots[index as usize];
        slot.seq = slot.seq.wrapping_add(1);
        // Level-triggered: input that came in meanwhile is reported at once.
        if set
            .get_ref()
            .add(std.as_fd(), key(index, slot.seq))
            .is_err()
        {
            self.free.borrow_mut().push(index);
            return match TcpStream::from_std(std) {
                Ok(s) => Err((s, client, h2)),
                Err(_) => Ok(()),
            };
        }
        self.expiry
            .borrow_mut()
            .push_back((deadline, index, slot.seq));
        slot.parked = Some(Parked {
            stream: std,
            peer,
            listener,
            client,
            h2,
        });
        drop(slots);
        self.parked.set(self.parked.get() + 1);
        self.since_trim.set(self.since_trim.get() + 1);
        if self.since_trim.get() == TRIM_AFTER {
            // Let the parking task schedule a trim.
            self.notify.notify_one();
        }
        w.count_parked(1);
        if !self.running.replace(true) {
            tokio::task::spawn_local(run(w.clone()));
        }
        Ok(())
    }

    /// Whether the connection of `key` is still parked and still receiving its last
    /// response (bytes unacknowledged in its socket).
    fn still_sending(&self, key: u64) -> bool {
        let (index, seq) = ((key >> 32) as u32, key as u32);
        self.slots
            .borrow()
            .get(index as usize)
            .filter(|s| s.seq == seq)
            .and_then(|s| s.parked.as_ref())
            .is_some_and(|p| crate::conn::still_sending(&p.stream))
    }

    /// Take the connection of `key` out of the set, if it is still that one.
    fn take(&self, key: u64) -> Option<Parked> {
        let (index, seq) = ((key >> 32) as u32, key as u32);
        let mut slots = self.slots.borrow_mut();
        let slot = slots.get_mut(index as usize)?;
        if slot.seq != seq {
            return None;
        }
        let p = slot.parked.take()?;
        self.free.borrow_mut().push(index);
        self.parked.set(self.parked.get() - 1);
        if let Some(set) = self.set.get().and_then(Option::as_ref) {
            let _ = set.get_ref().remove(p.stream.as_fd());
        }
        Some(p)
    }

    /// Take every parked connection out of the lot (at shutdown); dropping them closes
    /// them.
    fn take_all(&self) -> Vec<Parked> {
        let keys: Vec<u64> = self
            .slots
            .borrow()
            .iter()
            .enumerate()
            .filter(|(_, s)| s.parked.is_some())
            .map(|(i, s)| key(i as u32, s.seq))
            .collect();
        let taken = keys.iter().filter_map(|&k| self.take(k)).collect();
        self.expiry.borrow_mut().clear();
        taken
    }
}

/// The parking task of a worker: resumes connections that became readable, closes those
/// whose keep-alive time is up, and ends at shutdown (closing the rest).
async fn run<C: Content>(w: Rc<HttpWorker<C>>) {
    let lot = &w.lot;
    let Some(set) = lot.set() else {
        return;
    };
    let mut keys = Vec::with_capacity(ReadySet::BATCH);
    loop {
        if w.stopping.get() {
            let all = lot.take_all();
            w.count_parked(-(all.len() as isize));
            // An upgrade: each goes back to a task, which finds the worker stopping and
            // hands it to the new process. An HTTP/2 connection's task sends it GOAWAY.
            for p in all {
                if w.handing_over() || p.h2.is_some() {
                    tokio::task::spawn_local(w.clone().resume(p));
                }
            }
            lot.running.set(false);
            return;
        }
        let mut next = lot.expiry.borrow().front().map(|e| e.0);
        if lot.since_trim.get() >= TRIM_AFTER {
            let t = lot.trimmed.get().map_or(Instant::now(), |t| t + TRIM_EVERY);
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        let far = Instant::now() + Duration::from_secs(3600);
        let stop = w.shutdown.notified();
        tokio::pin!(stop);
        stop.as_mut().enable();
        if w.stopping.get() {
            continue;
        }
        tokio::select! {
            biased;
            r = set.readable() => {
                let Ok(mut guard) = r else {
                    continue;
                };
                match set.get_ref().ready(&mut keys) {
                    Ok(n) if n < ReadySet::BATCH => guard.clear_ready(),
                    Ok(_) => {}
                    Err(_) => guard.clear_ready(),
                }
                for &k in &keys {
                    if let Some(p) = lot.take(k) {
                        w.count_parked(-1);
                        tokio::task::spawn_local(w.clone().resume(p));
                    }
                }
            }
            _ = lot.notify.notified() => {}
            _ = tokio::time::sleep_until(next.unwrap_or(far)) => {}
            _ = stop => continue,
        }
        let now = Instant::now();
        loop {
            let front = lot.expiry.borrow().front().copied();
            match front {
                Some((deadline, index, seq)) if deadline <= now => {
                    lot.expiry.borrow_mut().pop_front();
                    if lot.still_sending(key(index, seq)) {
                        // Still receiving its last response: its keep-alive time starts
                        // again (the queue stays in deadline order: every entry is now
                        // plus the same timeout).
                        let keepalive = w.current().config.timeouts.keepalive;
                        let again = now + keepalive.max(Duration::from_millis(100));
                        lot.expiry.borrow_mut().push_back((again, index, seq));
                    } else if let Some(p) = lot.take(key(index, seq)) {
                        // Dropping the socket closes it: the keep-alive time is up. An
                        // HTTP/2 connection is told so first (GOAWAY), by its task.
                        w.count_parked(-1);
                        if p.h2.is_some() {
                            tokio::task::spawn_local(w.clone().resume(p));
                        }
                    }
                }
                _ => break,
            }
        }
        if lot.since_trim.get() >= TRIM_AFTER
            && lot.trimmed.get().is_none_or(|t| now >= t + TRIM_EVERY)
        {
            sys::trim_heap();
            lot.trimmed.set(Some(Instant::now()));
            lot.since_trim.set(0);
        }
        // Entries of connections resumed meanwhile are dropped lazily above; keep the
        // queue from holding many of them.
        let mut expiry = lot.expiry.borrow_mut();
        if expiry.len() > 64 && expiry.len() > 4 * lot.len() {
            let slots = lot.slots.borrow();
            expiry.retain(|&(_, i, seq)| {
                slots
                    .get(i as usize)
                    .is_some_and(|s| s.seq == seq && s.parked.is_some())
            });
        }
    }
}
