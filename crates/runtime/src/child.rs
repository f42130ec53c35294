//! A program started by [`sys::Spawner`](crate::sys::Spawner), waited for and killed
//! through a pidfd on the worker's event loop (tokio's `process` only knows the children
//! it started itself).

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use rustix::process::{pidfd_send_signal, waitid, Signal, WaitId, WaitIdOptions};
use tokio::io::unix::AsyncFd;

/// A running (or ended, not yet reaped) child of this process. Dropped before it was
/// waited for, it is killed and reaped in the background, like tokio's `kill_on_drop`.
#[derive(Debug)]
pub struct Child {
    pidfd: Option<AsyncFd<OwnedFd>>,
}

impl Child {
    /// Take charge of child `pid`, which nothing else reaps (so its pid cannot be reused
    /// before this opens its pidfd: it stays a zombie until reaped here). Call inside the
    /// runtime.
    pub fn adopt(pid: u32) -> io::Result<Child> {
        Ok(Child {
            pidfd: Some(crate::sys::child_pidfd(pid)?),
        })
    }

    /// Send SIGKILL (nothing if it has been reaped).
    pub fn start_kill(&self) -> io::Result<()> {
        match &self.pidfd {
            Some(fd) => match pidfd_send_signal(fd.get_ref(), Signal::KILL) {
                // Ended already (a zombie can still be signalled; ESRCH once reaped).
                Err(rustix::io::Errno::SRCH) => Ok(()),
                other => other.map_err(io::Error::from),
            },
            None => Ok(()),
        }
    }

    /// Wait for it to end and reap it.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        let Some(fd) = &self.pidfd else {
            return Err(io::Error::other("already reaped"));
        };
        let status = ended(fd).await?;
        self.pidfd = None;
        Ok(status)
    }
}

/// Wait until the child of `fd` has ended, and reap it.
async fn ended(fd: &AsyncFd<OwnedFd>) -> io::Result<ExitStatus> {
    loop {
        let mut ready = fd.readable().await?;
        match reap(fd.get_ref())? {
            Some(status) => return Ok(status),
            None => ready.clear_ready(),
        }
    }
}

/// The exit status, if it has ended (and is now reaped).
fn reap(fd: &OwnedFd) -> io::Result<Option<ExitStatus>> {
    let got = waitid(
        WaitId::PidFd(std::os::fd::AsFd::as_fd(fd)),
        WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
    )?;
    Ok(
        got.map(|s| match (s.exit_status(), s.terminating_signal()) {
            (Some(code), _) => ExitStatus::from_raw((code & 0xff) << 8),
            (None, Some(sig)) => ExitStatus::from_raw(sig & 0x7f),
            (None, None) => ExitStatus::from_raw(0),
        }),
    )
}

impl Drop for Child {
    fn drop(&mut self) {
        let Some(fd) = self.pidfd.take() else {
            return;
        };
        let _ = pidfd_send_signal(fd.get_ref(), Signal::KILL);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = ended(&fd).await;
            });
        } else {
            // No runtime (shutting down): killed, so this returns at once.
            let fd = fd.into_inner();
            let _ = waitid(
                WaitId::PidFd(std::os::fd::AsFd::as_fd(&fd)),
                WaitIdOptions::EXITED,
            );
        }
    }
}
