//! What a USR2 upgrade passes from the old process to the new one across `exec`: its
//! listening sockets and the write end of a readiness pipe, by descriptor number in
//! environment variables (the numbers are not fixed, unlike socket activation's 3..).

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Descriptor numbers of the listening sockets, comma-separated, grouped by address.
pub const LISTENERS_VAR: &str = "RAMJET_UPGRADE_LISTENERS";
/// Descriptor number of the readiness pipe's write end.
pub const READY_VAR: &str = "RAMJET_UPGRADE_READY";
/// Path of the hand-off socket the new process binds for the old one's connections.
pub const SOCKET_VAR: &str = "RAMJET_UPGRADE_SOCKET";

/// A pipe (read end, write end), both close-on-exec.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Whether `fd` survives `exec` (clears or sets close-on-exec).
pub fn set_inheritable(fd: BorrowedFd<'_>, yes: bool) -> io::Result<()> {
    use rustix::io::{fcntl_getfd, fcntl_setfd, FdFlags};
    let flags = fcntl_getfd(fd)?;
    let flags = if yes {
        flags - FdFlags::CLOEXEC
    } else {
        flags | FdFlags::CLOEXEC
    };
    Ok(fcntl_setfd(fd, flags)?)
}

/// The raw number, for the variables above.
pub fn raw(fd: BorrowedFd<'_>) -> RawFd {
    use std::os::fd::AsRawFd;
    fd.as_raw_fd()
}

/// What the old process passed, taken once at start (the variables are removed).
#[derive(Debug)]
pub struct Inherited {
    pub listeners: Vec<TcpListener>,
    /// Write one byte here when serving; closing it unwritten tells the old process this
    /// one failed.
    pub ready: OwnedFd,
    pub socket: std::path::PathBuf,
}

/// Take what an upgrading old process passed; `None` when this is no upgrade. Every
/// listener must be a listening TCP socket; each is made close-on-exec and non-blocking.
/// Call once, at start, before other threads exist (it changes the environment).
pub fn take_inherited() -> io::Result<Option<Inherited>> {
    let listeners = std::env::var(LISTENERS_VAR).ok();
    let ready = std::env::var(READY_VAR).ok();
    let socket = std::env::var_os(SOCKET_VAR);
    for name in [LISTENERS_VAR, READY_VAR, SOCKET_VAR] {
        std::env::remove_var(name);
    }
    let (Some(listeners), Some(ready), Some(socket)) = (listeners, ready, socket) else {
        return Ok(None);
    };
    let number = |s: &str| -> io::Result<RawFd> {
        s.trim()
            .parse::<RawFd>()
            .ok()
            .filter(|&n| n > 2)
            .ok_or_else(|| io::Error::other(format!("{s:?} is not a descriptor number")))
    };
    let ready_fd = number(&ready)?;
    // SAFETY: the old process cleared close-on-exec on this descriptor for this process
    // and named it in READY_VAR, now removed, so this is its only taker, wrapped once.
    let ready = unsafe { OwnedFd::from_raw_fd(ready_fd) };
    set_inheritable(ready.as_fd(), false)?;
    let mut out = Vec::new();
    for part in listeners.split(',').filter(|p| !p.is_empty()) {
        let fd = number(part)?;
        // SAFETY: as above: passed for this process, named once in LISTENERS_VAR (a
        // repeated number would be a second owner: refused below before wrapping).
        if out.iter().any(|l: &TcpListener| raw(l.as_fd()) == fd) {
            return Err(io::Error::other(format!("descriptor {fd} passed twice")));
        }
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        super::activation::check(&owned).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("descriptor {fd} passed by the old process: {e}"),
            )
        })?;
        let l = TcpListener::from(owned);
        l.set_nonblocking(true)?;
        out.push(l);
    }
    Ok(Some(Inherited {
        listeners: out,
        ready,
        socket: socket.into(),
    }))
}

/// What the new process said on its readiness pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// It wrote its byte: it serves.
    Ready,
    /// It closed the pipe without writing (it ended, or gave up).
    Ended,
    /// Neither within the time given.
    TimedOut,
}

/// Wait up to `timeout` for the new process's byte on the read end of its pipe.
pub fn wait_ready(read: &OwnedFd, timeout: std::time::Duration) -> io::Result<Readiness> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ts = Timespec::try_from(left).map_err(|_| io::Error::other("timeout too long"))?;
        let mut fds = [PollFd::new(read, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(0) => return Ok(Readiness::TimedOut),
            Ok(_) => break,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let mut byte = [0u8; 1];
    loop {
        match rustix::io::read(read, &mut byte) {
            Ok(1) => return Ok(Readiness::Ready),
            Ok(_) => return Ok(Readiness::Ended),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}
