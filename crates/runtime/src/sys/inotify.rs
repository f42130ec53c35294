//! Directory change notification (inotify): the open-file cache drops what changed at once
//! instead of trusting it until `file_cache.valid` runs out (lighttpd's stat cache does the
//! same). One instance per worker; watches are per directory inode.

use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::task::{Context, Poll};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Bytes read per `read(2)` of the event queue (events are 16 bytes plus the name).
const EVENT_BUFFER: usize = 4096;

/// What happened in a watched directory.
#[derive(Debug)]
pub enum Change<'a> {
    /// An entry of directory `wd` was written, truncated, had its attributes changed, was
    /// created, deleted or renamed from or to; `is_dir` when the entry is a directory.
    Entry {
        wd: i32,
        name: &'a [u8],
        is_dir: bool,
    },
    /// Directory `wd` itself was deleted or moved, or its watch ended (`ended`: the
    /// descriptor will not be reported again).
    Dir { wd: i32, ended: bool },
    /// The kernel's queue overflowed: events were lost, anything may have changed.
    Overflow,
}

/// An inotify instance (non-blocking, close-on-exec), registered with the tokio reactor of
/// the thread that created it.
#[derive(Debug)]
pub struct DirWatch {
    fd: AsyncFd<OwnedFd>,
}

impl DirWatch {
    /// Must run inside a tokio runtime.
    pub fn new() -> io::Result<DirWatch> {
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
        // SAFETY: the OwnedFd is moved into the AsyncFd and owned by it until it is dropped,
        // so the descriptor stays open and `as_raw_fd` always returns the same one.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(io::Error::from)?;
        Ok(DirWatch { fd })
    }

    /// Watch directory `rel_dir` (relative, may be empty) beneath the open directory `root`;
    /// returns the watch descriptor (the same one again for a directory already watched).
    /// Resolves a path, so it may block on disk: call it from the blocking pool.
    pub fn blocking_watch(&self, root: &File, rel_dir: &[u8]) -> io::Result<i32> {
        // inotify takes a path, not a descriptor: name the root through /proc/self/fd.
        let mut path = format!("/proc/self/fd/{}/", root.as_raw_fd()).into_bytes();
        path.extend_from_slice(rel_dir);
        let flags = WatchFlags::MODIFY
            | WatchFlags::ATTRIB
            | WatchFlags::CLOSE_WRITE
            | WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::MOVED_FROM
            | WatchFlags::MOVED_TO
            | WatchFlags::DELETE_SELF
            | WatchFlags::MOVE_SELF
            | WatchFlags::ONLYDIR;
        Ok(inotify::add_watch(
            self.fd.get_ref(),
            std::ffi::OsStr::from_bytes(&path),
            flags,
        )?)
    }

    /// Poll for changes: when the reactor has seen the queue become readable, hand every
    /// queued change to `f` (see [`DirWatch::drain`]) and clear the readiness; otherwise
    /// `cx`'s waker is woken by the reactor when changes arrive.
    pub fn poll_changes(
        &self,
        cx: &mut Context<'_>,
        f: impl FnMut(Change<'_>),
    ) -> Poll<io::Result<()>> {
        match self.fd.poll_read_ready(cx) {
            Poll::Ready(Ok(mut ready)) => {
                let drained = self.drain(f);
                ready.clear_ready();
                Poll::Ready(drained)
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Hand every queued change to `f`, without blocking; returns when the queue is empty.
    /// Reads the queue directly: callable at any time, also between the reactor's wake-up
    /// and [`DirWatch::poll_changes`] (which then finds the queue empty).
    pub fn drain(&self, mut f: impl FnMut(Change<'_>)) -> io::Result<()> {
        let mut buf = [MaybeUninit::<u8>::uninit(); EVENT_BUFFER];
        let mut reader = inotify::Reader::new(self.fd.get_ref(), &mut buf);
        loop {
            let event = match reader.next() {
                Ok(event) => event,
                Err(rustix::io::Errno::AGAIN) => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            let mask = event.events();
            if mask.contains(ReadFlags::QUEUE_OVERFLOW) {
                f(Change::Overflow);
            } else if mask.intersects(
                ReadFlags::DELETE_SELF
                    | ReadFlags::MOVE_SELF
                    | ReadFlags::IGNORED
                    | ReadFlags::UNMOUNT,
            ) {
                f(Change::Dir {
                    wd: event.wd(),
                    ended: mask.contains(ReadFlags::IGNORED),
                });
            } else if let Some(name) = event.file_name() {
                f(Change::Entry {
                    wd: event.wd(),
                    name: name.to_bytes(),
                    is_dir: mask.contains(ReadFlags::ISDIR),
                });
            }
        }
    }
}
