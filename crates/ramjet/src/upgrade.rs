//! USR2, a binary upgrade without dropping anything. The old process starts the program
//! at its path again (the new binary, once it is installed there), passing it every
//! listening socket it accepts on, and waits until the new process says it serves. Then
//! the old one stops accepting and hands each of its connections, as soon as it is idle
//! (at once for idle keep-alive connections, after the response for busy ones), to the
//! new process over a hand-off socket (`docs/HANDOFF.md`), unread bytes included; it
//! exits when it has none left. A new process that fails to start, or does not say it
//! is ready in time, changes nothing: the old one goes on serving.

use std::fs::File;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::Context;
use ramjet_runtime::sys::upgrade::{self as sys, Inherited};
use ramjet_runtime::{Injector, Listeners};

/// How long the new process has to start serving.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// In-flight responses finish in the old process however long they take (a large
/// download); this only bounds a stuck one.
pub const HAND_OVER_GRACE: Duration = Duration::from_secs(24 * 3600);

/// A duplicate of every listening socket the workers accept on, grouped by address in
/// the order of `listeners.addrs`: what a new process is passed.
pub fn passable(listeners: &Listeners) -> std::io::Result<Vec<TcpListener>> {
    let mut out = Vec::new();
    for at in 0..listeners.addrs.len() {
        for list in &listeners.per_worker {
            for (a, sock) in list {
                if *a == at {
                    out.push(sock.try_clone()?);
                }
            }
        }
    }
    Ok(out)
}

/// Where the new process receives this one's connections: a fresh path per attempt.
fn socket_path(attempt: u32) -> PathBuf {
    std::env::temp_dir().join(format!(
        "ramjet-upgrade-{}-{attempt}.sock",
        std::process::id()
    ))
}

/// Start `exe` with this process's arguments and `listeners`, and wait until it serves.
/// Returns the hand-off socket it receives connections on. On failure the new process
/// is gone (it exited, or it was killed when it did not get ready in time).
pub fn start_new(exe: &Path, listeners: &[TcpListener], attempt: u32) -> anyhow::Result<PathBuf> {
    let path = socket_path(attempt);
    let _ = std::fs::remove_file(&path);
    let (read, write) = sys::pipe().context("readiness pipe")?;
    for l in listeners {
        sys::set_inheritable(l.as_fd(), true)?;
    }
    sys::set_inheritable(write.as_fd(), true)?;
    let fds: Vec<String> = listeners
        .iter()
        .map(|l| sys::raw(l.as_fd()).to_string())
        .collect();
    let spawned = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(sys::LISTENERS_VAR, fds.join(","))
        .env(sys::READY_VAR, sys::raw(write.as_fd()).to_string())
        .env(sys::SOCKET_VAR, &path)
        .spawn();
    // Not for any other child: close-on-exec again, and this end of the pipe closed, so
    // the pipe reports EOF if the new process ends without writing.
    for l in listeners {
        sys::set_inheritable(l.as_fd(), false)?;
    }
    drop(write);
    let mut child = spawned.with_context(|| format!("starting {}", exe.display()))?;
    tracing::info!(
        "upgrade: started {} as process {}; waiting until it serves",
        exe.display(),
        child.id()
    );
    match wait_ready(read, &mut child) {
        Ok(()) => {
            tracing::info!(
                "upgrade: process {} serves; handing connections over as they go idle",
                child.id()
            );
            Ok(path)
        }
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(&path);
            Err(e)
        }
    }
}

/// One byte on the pipe: ready. End of file: the new process ended (or gave up) first.
fn wait_ready(read: OwnedFd, child: &mut Child) -> anyhow::Result<()> {
    match sys::wait_ready(&read, READY_TIMEOUT)? {
        sys::Readiness::Ready => Ok(()),
        sys::Readiness::TimedOut => anyhow::bail!(
            "process {} did not start serving within {READY_TIMEOUT:?}",
            child.id()
        ),
        sys::Readiness::Ended => {
            // Give it a moment to be reaped, for its exit status.
            let end = Instant::now() + Duration::from_secs(2);
            while Instant::now() < end {
                if let Ok(Some(status)) = child.try_wait() {
                    anyhow::bail!("the new process ended before it served ({status})");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            anyhow::bail!("the new process closed its readiness pipe without serving")
        }
    }
}

/// The new process: bind the hand-off socket, receive the old process's connections
/// into the workers, then tell the old process this one serves.
pub fn take_over(inherited: Inherited, injector: Injector, addrs: Vec<SocketAddr>) {
    let Inherited { ready, socket, .. } = inherited;
    let receiver = match ramjet_handoff::Receiver::bind(&socket) {
        Ok(r) => r,
        Err(e) => {
            // Not ready: the old process keeps serving, and this one keeps its
            // listeners too (both accept until the operator stops one).
            tracing::error!(
                "upgrade: cannot receive the old process's connections at {}: {e}",
                socket.display()
            );
            return;
        }
    };
    std::thread::Builder::new()
        .name("ramjet-upgrade".into())
        .spawn(move || receive(receiver, injector, addrs))
        .map(|_| ())
        .unwrap_or_else(|e| tracing::error!("upgrade: receiver thread: {e}"));
    if let Err(e) = File::from(ready).write_all(b"R") {
        tracing::error!("upgrade: cannot tell the old process: {e}");
    }
}

/// Each of the old process's workers connects once; its batches go to the workers.
fn receive(receiver: ramjet_handoff::Receiver, injector: Injector, addrs: Vec<SocketAddr>) {
    while let Ok(channel) = receiver.accept() {
        let injector = injector.clone();
        let addrs = addrs.clone();
        let _ = std::thread::Builder::new()
            .name("ramjet-upgrade-ch".into())
            .spawn(move || loop {
                match channel.recv() {
                    Ok(Some(batch)) => {
                        for h in batch {
                            let conn = ramjet_runtime::Handed {
                                stream: h.stream,
                                peer: h.client,
                                listener: listener_for(&addrs, h.local, h.listener),
                                prefix: h.prefix,
                            };
                            if injector.inject(conn).is_err() {
                                return;
                            }
                        }
                    }
                    Ok(None) => return,
                    Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                        tracing::warn!("upgrade: {e}");
                    }
                    Err(_) => return,
                }
            });
    }
}

/// This process's listener for a connection the old one accepted on `local` (its
/// listener `hint`): the same address, else a wildcard of the same port and family.
fn listener_for(addrs: &[SocketAddr], local: SocketAddr, hint: u16) -> usize {
    addrs
        .iter()
        .position(|a| *a == local)
        .or_else(|| {
            addrs.iter().position(|a| {
                a.port() == local.port()
                    && a.is_ipv4() == local.is_ipv4()
                    && a.ip().is_unspecified()
            })
        })
        .unwrap_or_else(|| usize::from(hint).min(addrs.len().saturating_sub(1)))
}

#[cfg(test)]
mod tests {
    use super::listener_for;

    #[test]
    fn a_handed_connection_keeps_its_listener() {
        let a: Vec<std::net::SocketAddr> = ["127.0.0.1:80", "0.0.0.0:81", "[::]:81"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let p = |s: &str| s.parse().unwrap();
        assert_eq!(listener_for(&a, p("127.0.0.1:80"), 2), 0);
        assert_eq!(listener_for(&a, p("10.0.0.1:81"), 0), 1);
        assert_eq!(listener_for(&a, p("[2001:db8::1]:81"), 0), 2);
        // An address this process does not listen on: the old index, within range.
        assert_eq!(listener_for(&a, p("127.0.0.1:82"), 1), 1);
        assert_eq!(listener_for(&a, p("127.0.0.1:82"), 9), 2);
    }
}
