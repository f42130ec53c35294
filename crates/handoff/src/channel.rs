//! The two ends: ramjet's [`Sender`], the backend's [`Receiver`] and [`Channel`].

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::net::{
    accept_with, bind, connect, listen, recvmsg, sendmsg, sendmsg_addr, socket_with, sockopt,
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

use crate::wire::{self, Record, MAX_BATCH, MAX_MESSAGE};

/// A new UNIX `SOCK_SEQPACKET` socket, close-on-exec.
fn seqpacket() -> io::Result<OwnedFd> {
    Ok(socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// ramjet's end of a backend's hand-off socket. Non-blocking: a backend that is not
/// receiving makes [`Sender::try_send`] fail with `WouldBlock`, never wait.
#[derive(Debug)]
pub struct Sender {
    sock: OwnedFd,
    /// For a datagram backend: where each message goes (`None`: a connected channel).
    to: Option<SocketAddrUnix>,
}

impl Sender {
    /// Connect to the backend at `path`. A backend of one process listens with a
    /// `SOCK_SEQPACKET` socket and gets a channel per sender. A backend of several
    /// processes (Apache's module) binds a `SOCK_DGRAM` socket that they all read, so
    /// whichever process has room takes the next message: then every message is sent to
    /// the path, and after the backend restarts the next one reaches the new socket.
    pub fn connect(path: &Path) -> io::Result<Sender> {
        let addr = SocketAddrUnix::new(path)?;
        let sock = seqpacket()?;
        match connect(&sock, &addr) {
            Ok(()) => {
                rustix::io::ioctl_fionbio(&sock, true)?;
                Ok(Sender { sock, to: None })
            }
            Err(rustix::io::Errno::PROTOTYPE) => {
                let sock = socket_with(
                    AddressFamily::UNIX,
                    SocketType::DGRAM,
                    SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
                    None,
                )?;
                Ok(Sender {
                    sock,
                    to: Some(addr),
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Hand over as many of `batch` (each connection's descriptor with its record) as fit
    /// in one message, from the first; returns how many went. Those are the backend's
    /// now: the caller closes its own descriptors for them (the backend has duplicates).
    /// `WouldBlock`: the backend's queue is full, nothing was sent. A record too large
    /// for any message is `InvalidInput`.
    pub fn try_send(&self, batch: &[(BorrowedFd<'_>, &Record)]) -> io::Result<usize> {
        if batch.is_empty() {
            return Ok(0);
        }
        let records: Vec<&Record> = batch.iter().map(|(_, r)| *r).collect();
        let n = wire::fits(&records);
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a hand-off record larger than one message",
            ));
        }
        let mut bytes = Vec::with_capacity(
            wire::HEADER + records[..n].iter().map(|r| r.encoded_len()).sum::<usize>(),
        );
        wire::encode(&records[..n], &mut bytes);
        let fds: Vec<BorrowedFd<'_>> = batch[..n].iter().map(|(fd, _)| *fd).collect();
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(n))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(io::Error::other(
                "descriptors do not fit the control buffer",
            ));
        }
        let flags = SendFlags::DONTWAIT | SendFlags::NOSIGNAL;
        let slices = [IoSlice::new(&bytes)];
        match &self.to {
            None => sendmsg(&self.sock, &slices, &mut control, flags)?,
            Some(to) => sendmsg_addr(&self.sock, to, &slices, &mut control, flags)?,
        };
        Ok(n)
    }
}

impl AsFd for Sender {
    /// For waiting until the backend can take more (poll for writable).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

/// A backend's listening hand-off socket. The socket file is removed when it is dropped.
#[derive(Debug)]
pub struct Receiver {
    sock: OwnedFd,
    path: PathBuf,
}

impl Receiver {
    /// Listen at `path` (which must not exist).
    pub fn bind(path: &Path) -> io::Result<Receiver> {
        let sock = seqpacket()?;
        bind(&sock, &SocketAddrUnix::new(path)?)?;
        listen(&sock, 128)?;
        Ok(Receiver {
            sock,
            path: path.to_path_buf(),
        })
    }

    /// Wait for a sender (one per ramjet worker) to connect.
    pub fn accept(&self) -> io::Result<Channel> {
        Ok(Channel {
            sock: accept_with(&self.sock, SocketFlags::CLOEXEC)?,
            buffers: std::cell::RefCell::new((
                vec![0u8; MAX_MESSAGE],
                vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_BATCH))],
            )),
        })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One sender's connection to a backend: a sequence of batches.
#[derive(Debug)]
pub struct Channel {
    sock: OwnedFd,
    /// The message and control buffers, kept from one `recv` to the next (a 128 KiB
    /// allocation per message would be an mmap and a munmap each).
    buffers: std::cell::RefCell<(Vec<u8>, Vec<MaybeUninit<u8>>)>,
}

/// A connection handed over: serve `stream` as if `prefix` had just been read from it.
/// `stream` is in blocking mode, like any new std stream (an event loop sets it
/// non-blocking, e.g. before `tokio::net::TcpStream::from_std`).
#[derive(Debug)]
pub struct Handed {
    pub stream: TcpStream,
    pub id: u64,
    pub listener: u16,
    pub client: SocketAddr,
    pub local: SocketAddr,
    pub prefix: Vec<u8>,
}

impl Channel {
    /// Wait for the next batch; `None` when the sender has closed the channel. A message
    /// that does not parse, whose descriptors do not match its records, or whose
    /// descriptors are not stream sockets is an `InvalidData` error, and every descriptor
    /// that came with it is closed.
    pub fn recv(&self) -> io::Result<Option<Vec<Handed>>> {
        let mut buffers = self.buffers.borrow_mut();
        let (buf, space) = &mut *buffers;
        let mut control = RecvAncillaryBuffer::new(space);
        let msg = recvmsg(
            &self.sock,
            &mut [IoSliceMut::new(buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        let mut fds: Vec<OwnedFd> = Vec::new();
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(r) = m {
                fds.extend(r);
            }
        }
        if msg.bytes == 0 && fds.is_empty() {
            return Ok(None);
        }
        let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
        if msg.flags.contains(ReturnFlags::TRUNC) {
            return Err(bad(format!("a hand-off message over {MAX_MESSAGE} bytes")));
        }
        if msg.flags.contains(ReturnFlags::CTRUNC) {
            return Err(bad(format!(
                "more than {MAX_BATCH} descriptors in a message"
            )));
        }
        let records = wire::decode(&buf[..msg.bytes]).map_err(|e| bad(e.to_string()))?;
        if records.len() != fds.len() {
            return Err(bad(format!(
                "{} records but {} descriptors in a hand-off message",
                records.len(),
                fds.len()
            )));
        }
        for fd in &fds {
            if sockopt::socket_type(fd).ok() != Some(SocketType::STREAM) {
                return Err(bad(
                    "a handed-off descriptor that is not a stream socket".into()
                ));
            }
        }
        let mut out = Vec::with_capacity(records.len());
        for (r, fd) in records.into_iter().zip(fds) {
            let stream = TcpStream::from(fd);
            // The sender's socket was non-blocking, and that flag belongs to the socket,
            // not to a descriptor: a std stream is handed over blocking, as std makes them.
            stream.set_nonblocking(false)?;
            out.push(Handed {
                stream,
                id: r.id,
                listener: r.listener,
                client: r.client,
                local: r.local,
                prefix: r.prefix,
            });
        }
        Ok(Some(out))
    }
}
