use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;

/// Drop up to `scratch.len()` received bytes of a non-blocking TCP socket without copying
/// them to user space (`recv(MSG_TRUNC)`, which TCP implements as "discard"); returns how
/// many were dropped, 0 at end of stream. `scratch` is never written, so it may be
/// uninitialised memory that was never touched (it need not even be resident). For a
/// load generator that must not spend its CPU copying bodies it does not look at.
pub fn recv_discard(socket: &impl AsFd, scratch: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
    use rustix::net::{recv, RecvFlags};
    let (_, n) = recv(socket, scratch, RecvFlags::TRUNC | RecvFlags::DONTWAIT)?;
    Ok(n)
}
