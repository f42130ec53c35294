//! What an HTTP/2 connection has to write: frames built in memory, payloads shared with a
//! cache (`Bytes`), file ranges that go out by `sendfile` on a plain socket, and ranges of
//! a mapped file window, written with the frames around them in one `writev`. Written
//! without waiting: each call writes what the socket takes now.

use std::fs::File;
use std::io::{self, IoSlice};
use std::sync::Arc;

use bytes::Bytes;

use ramjet_runtime::sys::Mapping;

use crate::outbox::Sink;

/// Most iovecs per writev.
const MAX_IOV: usize = 64;
/// Written bytes at the front of the buffer before what is left is moved down.
const COMPACT_AFTER: usize = 64 << 10;

enum Seg {
    Mem {
        start: usize,
        end: usize,
    },
    Shared(Bytes),
    File {
        file: Arc<File>,
        offset: u64,
        len: usize,
    },
    /// Bytes `[at, at + len)` of a mapped window: only the kernel reads them.
    Mapped {
        map: Arc<Mapping>,
        at: usize,
        len: usize,
    },
}

impl Seg {
    fn len(&self) -> usize {
        match self {
            Seg::Mem { start, end } => end - start,
            Seg::Shared(b) => b.len(),
            Seg::File { len, .. } | Seg::Mapped { len, .. } => *len,
        }
    }
}

/// The bytes waiting for the socket, in order.
#[derive(Default)]
pub(crate) struct Out {
    mem: Vec<u8>,
    segs: Vec<Seg>,
    /// The first segment not fully written, and bytes of it written.
    seg: usize,
    done: usize,
    /// Bytes queued and not yet written.
    pending: usize,
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Out({} bytes)", self.pending)
    }
}

/// How far a write got.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wrote {
    /// Everything queued is written.
    All,
    /// The socket takes no more now.
    Blocked,
    /// Everything but the last part of a segment is written: it waits to go with what is
    /// framed next ([`Out::write_whole`]).
    Held,
}

impl Out {
    /// Bytes still to write.
    #[inline]
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pending == 0
    }

    /// Append in memory: `write` extends the buffer.
    #[inline]
    pub(crate) fn put(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let start = self.mem.len();
        write(&mut self.mem);
        let end = self.mem.len();
        if end == start {
            return;
        }
        self.pending += end - start;
        if let Some(Seg::Mem { end: e, .. }) = self.segs.last_mut() {
            if *e == start {
                *e = end;
                return;
            }
        }
        self.segs.push(Seg::Mem { start, end });
    }

    /// Append shared bytes (not copied when large).
    pub(crate) fn shared(&mut self, b: Bytes) {
        if b.len() <= 1024 {
            return self.put(|m| m.extend_from_slice(&b));
        }
        self.pending += b.len();
        self.segs.push(Seg::Shared(b));
    }

    /// Append a file range (sent by `sendfile`, or read and encrypted under TLS).
    pub(crate) fn file(&mut self, file: Arc<File>, offset: u64, len: usize) {
        if len == 0 {
            return;
        }
        self.pending += len;
        self.segs.push(Seg::File { file, offset, len });
    }

    /// Append a range of a mapped file window (written by `writev` with the frames around
    /// it, on a plain socket).
    pub(crate) fn mapped(&mut self, map: Arc<Mapping>, at: usize, len: usize) {
        if len == 0 {
            return;
        }
        self.pending += len;
        self.segs.push(Seg::Mapped { map, at, len });
    }

    /// How many file ranges wait to go out by sendfile, and how many from a mapping.
    #[cfg(test)]
    pub(crate) fn file_segments(&self) -> (usize, usize) {
        let rest = &self.segs[self.seg..];
        let sent = rest
            .iter()
            .filter(|s| matches!(s, Seg::File { .. }))
            .count();
        let mapped = rest
            .iter()
            .filter(|s| matches!(s, Seg::Mapped { .. }))
            .count();
        (sent, mapped)
    }

    /// Give back the memory of an empty buffer (an idle connection holds none).
    pub(crate) fn release(&mut self) {
        if self.is_empty() {
            self.mem = Vec::new();
            self.segs = Vec::new();
        }
    }

    /// Everything queued, as bytes, and the buffer emptied (for tests).
    #[cfg(test)]
    pub(crate) fn take_all(&mut self) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let mut all = Vec::new();
        for (i, s) in self.segs.iter().enumerate() {
            let skip = if i == self.seg { self.done } else { 0 };
            if i < self.seg {
                continue;
            }
            match s {
                Seg::Mem { start, end } => all.extend_from_slice(&self.mem[start + skip..*end]),
                Seg::Shared(b) => all.extend_from_slice(&b[skip..]),
                Seg::File { file, offset, len } => {
                    let mut buf = vec![0; len - skip];
                    file.read_exact_at(&mut buf, offset + skip as u64).unwrap();
                    all.extend_from_slice(&buf);
                }
                Seg::Mapped { map, at, len } => {
                    // Through a pipe, as the kernel reads it: never read here.
                    let (r, w) = std::os::unix::net::UnixStream::pair().unwrap();
                    let iov = [map.io_slice(at + skip, len - skip)];
                    let n = std::io::Write::write_vectored(&mut &w, &iov).unwrap();
                    drop(w);
                    let mut buf = Vec::with_capacity(n);
                    std::io::Read::read_to_end(&mut &r, &mut buf).unwrap();
                    all.extend_from_slice(&buf);
                }
            }
        }
        *self = Out::default();
        all
    }

    /// Write what the socket takes now.
    pub(crate) fn write<S: Sink>(&mut self, sink: &S) -> io::Result<Wrote> {
        self.write_in(sink, 0)
    }

    /// [`Out::write`], but a `writev` longer than one `segment` (the connection's maximum
    /// segment size) stops at a whole number of them: with TCP_NODELAY, the last part of a
    /// segment would go out as a short segment of its own. The part held back returns
    /// `Held`, and goes out with the next frames (or alone on the next call, when it is
    /// all there is).
    pub(crate) fn write_whole<S: Sink>(&mut self, sink: &S, segment: usize) -> io::Result<Wrote> {
        self.write_in(sink, segment)
    }

    fn write_in<S: Sink>(&mut self, sink: &S, segment: usize) -> io::Result<Wrote> {
        loop {
            if self.seg == self.segs.len() {
                self.mem.clear();
                self.segs.clear();
                self.seg = 0;
                self.done = 0;
                if sink.has_held() {
                    return match sink.try_send_held() {
                        Ok(()) => Ok(Wrote::All),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Wrote::Blocked),
                        Err(e) => Err(e),
                    };
                }
                return Ok(Wrote::All);
            }
            let mut held = false;
            let attempt = if let Seg::File { file, offset, len } = &self.segs[self.seg] {
                sink.try_sendfile(file, offset + self.done as u64, len - self.done)
            } else {
                // The pieces of one writev: (segment, from, to) within each.
                let mut parts = [(0usize, 0usize, 0usize); MAX_IOV];
                let mut n = 0;
                let mut total = 0;
                let mut file_follows = false;
                let mut to_end = true;
                for (i, s) in self.segs[self.seg..].iter().enumerate() {
                    if matches!(s, Seg::File { .. }) {
                        file_follows = true;
                        to_end = false;
                        break;
                    }
                    if n == MAX_IOV {
                        to_end = false;
                        break;
                    }
                    let skip = if i == 0 { self.done } else { 0 };
                    parts[n] = (self.seg + i, skip, s.len());
                    total += s.len() - skip;
                    n += 1;
                }
                if segment > 0 && !file_follows && total > segment && total % segment != 0 {
                    // Cut the last part of a segment off the end.
                    let mut cut = total % segment;
                    held = to_end;
                    while cut > 0 {
                        let (_, from, to) = &mut parts[n - 1];
                        let take = cut.min(*to - *from);
                        *to -= take;
                        cut -= take;
                        if *to == *from {
                            n -= 1;
                        }
                    }
                }
                let mut iov = [IoSlice::new(&[]); MAX_IOV];
                for (slot, &(k, from, to)) in iov.iter_mut().zip(&parts[..n]) {
                    *slot = match &self.segs[k] {
                        Seg::Mem { start, .. } => IoSlice::new(&self.mem[start + from..start + to]),
                        Seg::Shared(b) => IoSlice::new(&b[from..to]),
                        Seg::Mapped { map, at, .. } => map.io_slice(at + from, to - from),
                        Seg::File { .. } => unreachable!("a file range is not in a writev"),
                    };
                }
                sink.try_writev(&iov[..n], file_follows)
            };
            match attempt {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(mut wrote) => {
                    self.pending -= wrote;
                    while wrote > 0 {
                        let left = self.segs[self.seg].len() - self.done;
                        if wrote >= left {
                            wrote -= left;
                            self.seg += 1;
                            self.done = 0;
                        } else {
                            self.done += wrote;
                            wrote = 0;
                        }
                    }
                    if held && self.pending < segment {
                        self.compact();
                        return Ok(Wrote::Held);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.compact();
                    return Ok(Wrote::Blocked);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Forget the segments written, and when the written bytes are most of the buffer,
    /// move what is left to its front: a socket that never empties (a client reading
    /// as fast as the connection frames) keeps the buffer at what waits, not at all that
    /// was ever sent.
    fn compact(&mut self) {
        self.segs.drain(..self.seg);
        self.seg = 0;
        if let Some(Seg::Mem { start, .. }) = self.segs.first_mut() {
            *start += std::mem::take(&mut self.done);
        }
        let first = self.segs.iter().find_map(|s| match s {
            Seg::Mem { start, .. } => Some(*start),
            _ => None,
        });
        let Some(from) = first else {
            self.mem.clear();
            return;
        };
        if from >= COMPACT_AFTER && from * 2 >= self.mem.len() {
            self.mem.copy_within(from.., 0);
            self.mem.truncate(self.mem.len() - from);
            for s in &mut self.segs {
                if let Seg::Mem { start, end } = s {
                    *start -= from;
                    *end -= from;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::io::Read;

    /// A socket that takes at most `step` bytes per call and records them.
    struct Taker {
        step: usize,
        got: RefCell<Vec<u8>>,
        calls: RefCell<usize>,
        block_after: usize,
    }

    impl Sink for Taker {
        fn try_writev(&self, iov: &[IoSlice<'_>], _more: bool) -> io::Result<usize> {
            if *self.calls.borrow() >= self.block_after {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            *self.calls.borrow_mut() += 1;
            let mut n = 0;
            for s in iov {
                let take = s.len().min(self.step - n);
                self.got.borrow_mut().extend_from_slice(&s[..take]);
                n += take;
                if n == self.step {
                    break;
                }
            }
            Ok(n)
        }
        fn try_sendfile(&self, file: &File, offset: u64, len: usize) -> io::Result<usize> {
            use std::os::unix::fs::FileExt;
            if *self.calls.borrow() >= self.block_after {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            *self.calls.borrow_mut() += 1;
            let mut buf = vec![0; len.min(self.step)];
            let n = file.read_at(&mut buf, offset)?;
            self.got.borrow_mut().extend_from_slice(&buf[..n]);
            Ok(n)
        }
        async fn writable(&self, _: std::time::Duration) -> Result<(), crate::outbox::WriteError> {
            Ok(())
        }
    }

    #[test]
    fn every_byte_goes_out_in_order_however_the_socket_takes_them() {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, &(0..=255u8).cycle().take(5000).collect::<Vec<_>>())
            .unwrap();
        let mut all = Vec::new();
        f.read_to_end(&mut all).unwrap();
        let file = Arc::new(f);
        for step in [1, 7, 100, 4096, 1 << 20] {
            let mut out = Out::default();
            let mut want = Vec::new();
            out.put(|m| m.extend_from_slice(b"head"));
            out.put(|m| m.extend_from_slice(b"+more"));
            want.extend_from_slice(b"head+more");
            let big = Bytes::from(vec![9u8; 3000]);
            out.shared(big.clone());
            want.extend_from_slice(&big);
            out.file(file.clone(), 10, 2000);
            want.extend_from_slice(&(0..=255u8).cycle().skip(10).take(2000).collect::<Vec<_>>());
            out.put(|m| m.extend_from_slice(b"tail"));
            want.extend_from_slice(b"tail");
            out.file(file.clone(), 0, 0);
            assert_eq!(out.pending(), want.len());
            let sink = Taker {
                step,
                got: RefCell::new(Vec::new()),
                calls: RefCell::new(0),
                block_after: usize::MAX,
            };
            assert_eq!(out.write(&sink).unwrap(), Wrote::All);
            assert_eq!(*sink.got.borrow(), want, "step {step}");
            assert!(out.is_empty());
        }
        let _ = all;
    }

    #[test]
    fn a_socket_that_never_empties_does_not_grow_the_buffer() {
        // Each turn frames 100 KiB more and the socket takes 100 KiB, never all.
        let mut out = Out::default();
        let mut got = Vec::new();
        out.put(|m| m.extend_from_slice(&[0u8; 50 << 10]));
        for turn in 0..200u32 {
            out.put(|m| m.extend_from_slice(&[(turn % 251) as u8; 100 << 10]));
            let sink = Taker {
                step: 100 << 10,
                got: RefCell::new(Vec::new()),
                calls: RefCell::new(0),
                block_after: 1,
            };
            assert_eq!(out.write(&sink).unwrap(), Wrote::Blocked);
            assert_eq!(out.pending(), 50 << 10);
            assert!(out.mem.len() <= 400 << 10, "turn {turn}: {}", out.mem.len());
            got.extend_from_slice(&sink.got.take());
        }
        // What was written is every byte in order.
        assert_eq!(got.len(), 200 * (100 << 10));
        assert!(got[..150 << 10].iter().all(|&b| b == 0));
        assert!(got[150 << 10..250 << 10].iter().all(|&b| b == 1));
        assert!(got[got.len() - (50 << 10)..].iter().all(|&b| b == 199));
    }

    #[test]
    fn a_blocked_socket_keeps_the_rest_for_the_next_write() {
        let mut out = Out::default();
        out.put(|m| m.extend_from_slice(&[1u8; 100]));
        let sink = Taker {
            step: 30,
            got: RefCell::new(Vec::new()),
            calls: RefCell::new(0),
            block_after: 2,
        };
        assert_eq!(out.write(&sink).unwrap(), Wrote::Blocked);
        assert_eq!(out.pending(), 40);
        // More queued meanwhile goes after what is left.
        out.put(|m| m.extend_from_slice(&[2u8; 5]));
        let sink2 = Taker {
            step: 1000,
            got: RefCell::new(Vec::new()),
            calls: RefCell::new(0),
            block_after: usize::MAX,
        };
        assert_eq!(out.write(&sink2).unwrap(), Wrote::All);
        let mut want = vec![1u8; 40];
        want.extend_from_slice(&[2u8; 5]);
        assert_eq!(*sink2.got.borrow(), want);
    }

    /// A sink that records the length of every writev it takes whole.
    struct Lengths {
        got: RefCell<Vec<u8>>,
        writes: RefCell<Vec<usize>>,
    }

    impl Sink for Lengths {
        fn try_writev(&self, iov: &[IoSlice<'_>], _more: bool) -> io::Result<usize> {
            let mut n = 0;
            for s in iov {
                self.got.borrow_mut().extend_from_slice(s);
                n += s.len();
            }
            self.writes.borrow_mut().push(n);
            Ok(n)
        }
        fn try_sendfile(&self, _: &File, _: u64, _: usize) -> io::Result<usize> {
            unreachable!()
        }
        async fn writable(&self, _: std::time::Duration) -> Result<(), crate::outbox::WriteError> {
            Ok(())
        }
    }

    /// Frames as the scheduler queues them: a 9-byte header, then a shared payload.
    fn frames(out: &mut Out, want: &mut Vec<u8>, count: usize, byte: u8) {
        for k in 0..count {
            let head = [byte, k as u8, 0, 0, 0, 0, 0, 0, 1];
            out.put(|m| m.extend_from_slice(&head));
            want.extend_from_slice(&head);
            let payload = Bytes::from(vec![byte; 16_384]);
            want.extend_from_slice(&payload);
            out.shared(payload);
        }
    }

    #[test]
    fn writes_of_many_frames_stop_at_whole_segments_and_the_rest_goes_with_the_next() {
        const SEG: usize = 10_000;
        let sink = Lengths {
            got: RefCell::new(Vec::new()),
            writes: RefCell::new(Vec::new()),
        };
        let mut out = Out::default();
        let mut want = Vec::new();
        // 49,179 bytes: 40,000 go, 9,179 wait for the next frames.
        frames(&mut out, &mut want, 3, 1);
        assert_eq!(out.write_whole(&sink, SEG).unwrap(), Wrote::Held);
        assert_eq!(out.pending(), 9_179);
        // With three more frames: 58,358 bytes, 50,000 go.
        frames(&mut out, &mut want, 3, 2);
        assert_eq!(out.write_whole(&sink, SEG).unwrap(), Wrote::Held);
        assert_eq!(out.pending(), 8_358);
        // Nothing more framed: what waits is less than a segment, and goes.
        assert_eq!(out.write_whole(&sink, SEG).unwrap(), Wrote::All);
        assert_eq!(*sink.writes.borrow(), [40_000, 50_000, 8_358]);
        assert!(*sink.got.borrow() == want);
        // Exactly whole segments, one byte over a segment, one byte under: as they are,
        // but for the byte over; and a plain write holds nothing back.
        for (len, writes) in [
            (20_000, vec![20_000]),
            (10_001, vec![10_000, 1]),
            (9_999, vec![9_999]),
        ] {
            let sink = Lengths {
                got: RefCell::new(Vec::new()),
                writes: RefCell::new(Vec::new()),
            };
            let mut out = Out::default();
            out.shared(Bytes::from(vec![3u8; len]));
            let mut wrote = out.write_whole(&sink, SEG).unwrap();
            if wrote == Wrote::Held {
                wrote = out.write_whole(&sink, SEG).unwrap();
            }
            assert_eq!(wrote, Wrote::All);
            assert_eq!(*sink.writes.borrow(), writes, "{len}");
            let mut out = Out::default();
            out.shared(Bytes::from(vec![3u8; len]));
            assert_eq!(out.write(&sink).unwrap(), Wrote::All);
        }
    }
}
