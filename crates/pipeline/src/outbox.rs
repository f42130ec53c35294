//! A batch of encoded responses and how it reaches the socket: runs of memory segments go
//! out in one `writev`, file segments by `sendfile` in bounded chunks, with a page-cache
//! probe first so a cold file is read on the blocking pool, never on the event loop.

use std::fs::File;
use std::io::{self, IoSlice};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ramjet_runtime::sys;
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::response::{Body, Part};

/// Most bytes per sendfile call: one download cannot hold its worker longer than this takes
/// (DESIGN.md §1: 256 KiB chunks roughly doubled throughput over unbounded calls here).
const SENDFILE_CHUNK: u64 = 256 * 1024;
/// When a chunk is not in the page cache, the blocking pool reads this much ahead.
const WARM_WINDOW: u64 = 2 * 1024 * 1024;
/// Most iovecs per writev.
const MAX_IOV: usize = 64;

#[derive(Debug)]
enum Seg {
    /// `mem[start..end]`.
    Mem {
        start: usize,
        end: usize,
        resp: u32,
        body: bool,
    },
    Shared {
        bytes: Bytes,
        resp: u32,
    },
    File {
        file: Arc<File>,
        offset: u64,
        len: u64,
        resp: u32,
    },
}

/// Why a flush stopped.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// No progress for the send timeout: the client stopped reading.
    Timeout,
    Io(io::Error),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Timeout => write!(f, "send timeout"),
            WriteError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Encoded responses waiting to be written, in order.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    mem: Vec<u8>,
    segs: Vec<Seg>,
    /// Body bytes written per response of the batch, filled by `flush`.
    pub(crate) body_written: Vec<u64>,
    /// Responses in this batch.
    responses: u32,
    /// Bytes of `Shared` segments (with `mem`, what the batch holds in memory).
    shared: usize,
}

impl Outbox {
    pub(crate) fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Heap bytes held by this outbox's buffers (for pooling decisions).
    pub(crate) fn capacity_bytes(&self) -> usize {
        self.mem.capacity()
            + self.segs.capacity() * std::mem::size_of::<Seg>()
            + self.body_written.capacity() * 8
    }

    /// Responses queued in this batch.
    pub(crate) fn responses(&self) -> u32 {
        self.responses
    }

    /// Bytes held in memory by this batch (to bound pipelining).
    pub(crate) fn buffered(&self) -> usize {
        self.mem.len() + self.shared
    }

    /// Start a new response; returns its index in the batch.
    pub(crate) fn begin(&mut self) -> u32 {
        self.responses += 1;
        self.responses - 1
    }

    /// Append head bytes for response `resp`.
    pub(crate) fn head(&mut self, resp: u32, write: impl FnOnce(&mut Vec<u8>)) {
        let start = self.mem.len();
        write(&mut self.mem);
        self.push_mem(start, resp, false);
    }

    fn push_mem(&mut self, start: usize, resp: u32, body: bool) {
        let end = self.mem.len();
        if let Some(Seg::Mem {
            end: last_end,
            resp: r,
            body: b,
            ..
        }) = self.segs.last_mut()
        {
            if *last_end == start && *r == resp && *b == body {
                *last_end = end;
                return;
            }
        }
        self.segs.push(Seg::Mem {
            start,
            end,
            resp,
            body,
        });
    }

    /// Append the body of response `resp`.
    pub(crate) fn body(&mut self, resp: u32, body: Body) {
        match body {
            Body::Empty => {}
            Body::Bytes(bytes) => self.bytes(resp, bytes),
            Body::File { file, offset, len } => self.segs.push(Seg::File {
                file,
                offset,
                len,
                resp,
            }),
            Body::Parts(parts) => {
                for p in parts {
                    match p {
                        Part::Bytes(bytes) => self.bytes(resp, bytes),
                        Part::File { file, offset, len } => self.segs.push(Seg::File {
                            file,
                            offset,
                            len,
                            resp,
                        }),
                    }
                }
            }
        }
    }

    fn bytes(&mut self, resp: u32, bytes: Bytes) {
        // Small pieces are copied next to the head: one iovec instead of two.
        if bytes.len() <= 512 {
            let start = self.mem.len();
            self.mem.extend_from_slice(&bytes);
            self.push_mem(start, resp, true);
        } else if !bytes.is_empty() {
            self.shared += bytes.len();
            self.segs.push(Seg::Shared { bytes, resp });
        }
    }

    /// Write everything queued. On success the outbox is empty and `body_written` holds
    /// each response's body bytes; on error `body_written` says how far each one got.
    pub(crate) async fn flush(
        &mut self,
        stream: &TcpStream,
        send_timeout: Duration,
    ) -> Result<(), WriteError> {
        self.body_written.clear();
        self.body_written.resize(self.responses as usize, 0);
        let result = self.write_all(stream, send_timeout).await;
        self.mem.clear();
        self.segs.clear();
        self.responses = 0;
        self.shared = 0;
        result
    }

    async fn write_all(
        &mut self,
        stream: &TcpStream,
        send_timeout: Duration,
    ) -> Result<(), WriteError> {
        let mut i = 0;
        let mut done: u64 = 0; // bytes of segs[i] already written
        while i < self.segs.len() {
            if let Seg::File {
                file,
                offset,
                len,
                resp,
            } = &self.segs[i]
            {
                let (file, offset, len, resp) = (file.clone(), *offset, *len, *resp);
                // Boxed: one allocation per file segment; inline, this future would grow
                // every connection's state.
                Box::pin(send_file(
                    stream,
                    &file,
                    offset,
                    len,
                    send_timeout,
                    &mut self.body_written[resp as usize],
                ))
                .await?;
                i += 1;
                continue;
            }
            // The iovec array lives only in this block, never across an await: it would
            // otherwise add 1 KiB to every connection's future.
            let attempt = {
                let mut iov = [IoSlice::new(&[]); MAX_IOV];
                let mut n = 0;
                let mut file_follows = false;
                for seg in &self.segs[i..] {
                    let slice: &[u8] = match seg {
                        Seg::Mem { start, end, .. } => &self.mem[*start..*end],
                        Seg::Shared { bytes, .. } => bytes,
                        Seg::File { .. } => {
                            file_follows = true;
                            break;
                        }
                    };
                    iov[n] = IoSlice::new(if n == 0 {
                        &slice[done as usize..]
                    } else {
                        slice
                    });
                    n += 1;
                    if n == MAX_IOV {
                        break;
                    }
                }
                if file_follows {
                    // The head goes with MSG_MORE so it shares a segment with the file's
                    // first bytes instead of leaving as a small packet of its own.
                    stream.try_io(Interest::WRITABLE, || sys::writev_more(stream, &iov[..n]))
                } else {
                    stream.try_write_vectored(&iov[..n])
                }
            };
            let mut wrote = match attempt {
                Ok(w) => w as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wait_writable(stream, send_timeout).await?;
                    continue;
                }
                Err(e) => return Err(WriteError::Io(e)),
            };
            while wrote > 0 {
                let (len, resp, body) = match &self.segs[i] {
                    Seg::Mem {
                        start,
                        end,
                        resp,
                        body,
                    } => ((end - start) as u64, *resp, *body),
                    Seg::Shared { bytes, resp } => (bytes.len() as u64, *resp, true),
                    Seg::File { .. } => unreachable!("writev stops before file segments"),
                };
                let take = wrote.min(len - done);
                if body {
                    self.body_written[resp as usize] += take;
                }
                wrote -= take;
                done += take;
                if done == len {
                    i += 1;
                    done = 0;
                }
            }
        }
        Ok(())
    }
}

async fn wait_writable(stream: &TcpStream, send_timeout: Duration) -> Result<(), WriteError> {
    match tokio::time::timeout(send_timeout, stream.writable()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(WriteError::Io(e)),
        Err(_) => Err(WriteError::Timeout),
    }
}

async fn send_file(
    stream: &TcpStream,
    file: &Arc<File>,
    offset: u64,
    len: u64,
    send_timeout: Duration,
    written: &mut u64,
) -> Result<(), WriteError> {
    let mut sent = 0u64;
    while sent < len {
        let pos = offset + sent;
        let n = (len - sent).min(SENDFILE_CHUNK);
        if !sys::is_resident(file, pos, n) {
            let f = file.clone();
            let window = (len - sent).min(WARM_WINDOW);
            let warmed =
                tokio::task::spawn_blocking(move || sys::blocking_warm(&f, pos, window)).await;
            match warmed {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(WriteError::Io(e)),
                Err(e) => return Err(WriteError::Io(io::Error::other(e))),
            }
        }
        match stream.try_io(Interest::WRITABLE, || {
            sys::sendfile(stream, &**file, pos, n as usize)
        }) {
            Ok(0) => {
                return Err(WriteError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shrank while being sent",
                )))
            }
            Ok(k) => {
                sent += k as u64;
                *written += k as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_writable(stream, send_timeout).await?;
                continue;
            }
            Err(e) => return Err(WriteError::Io(e)),
        }
        // Yield after every chunk: a fast reader must not hold the worker for more than one
        // chunk (256 KiB) while its other connections wait.
        tokio::task::yield_now().await;
    }
    Ok(())
}
