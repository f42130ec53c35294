use std::io;
use std::os::fd::AsFd;

/// One `sendfile(2)` from `file` at `offset` to a non-blocking socket; returns bytes sent.
/// `WouldBlock` means the socket buffer is full. Blocks on disk if the pages are not
/// cached, so callers check [`super::is_resident`] first.
pub fn sendfile(
    socket: &impl AsFd,
    file: &impl AsFd,
    offset: u64,
    count: usize,
) -> io::Result<usize> {
    let mut off = offset;
    Ok(rustix::fs::sendfile(socket, file, Some(&mut off), count)?)
}

/// `sendmsg(bufs, MSG_MORE)` on a non-blocking socket: the kernel holds the bytes back to
/// coalesce them with what follows (a sendfile of the body), like TCP_CORK for one call.
pub fn writev_more(socket: &impl AsFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendFlags};
    Ok(sendmsg(
        socket,
        bufs,
        &mut SendAncillaryBuffer::default(),
        SendFlags::MORE | SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
    )?)
}

/// Bytes to a non-blocking socket, the call made whatever the reactor last reported (for a
/// connection [`super::connect_outcome`] found up before the reactor has seen it
/// writable, and for every write of a response): `send(2)` for one slice, `sendmsg(2)` for
/// more. Not `writev(2)`: on a socket it goes through the file layer (`vfs_writev`,
/// `fdget_pos`, the write notification hooks) first; on loopback here a `writev` of one
/// slice took 170-200 ns more than a `send` of it, of two slices 40-80 ns more than
/// a `sendmsg` (`bench/results/2026-11-29-send/`).
pub fn send_now(socket: &impl AsFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    use rustix::net::{send, sendmsg, SendAncillaryBuffer, SendFlags};
    let flags = SendFlags::NOSIGNAL | SendFlags::DONTWAIT;
    if let [one] = bufs {
        return Ok(send(socket, one, flags)?);
    }
    Ok(sendmsg(
        socket,
        bufs,
        &mut SendAncillaryBuffer::default(),
        flags,
    )?)
}
