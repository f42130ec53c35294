//! An answer being fetched from the origin, shared by every request that wants it, on any
//! worker: the bytes arrive into a list of pieces (all of them for an answer bound for the
//! memory tier; the last [`WINDOW`] bytes for one bound for disk, whose earlier bytes are
//! read back from its file), and each request reads at its own pace with a [`FillReader`].
//! Readers wait on a `watch` channel the filler bumps after every piece, so a reader on
//! another worker wakes on its own loop.

use std::collections::VecDeque;
use std::fs::File;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use ramjet_pipeline::BodySource;
use tokio::sync::watch;

/// Bytes a disk-bound fill keeps in memory behind its newest byte.
pub const WINDOW: u64 = 8 << 20;
/// Largest piece read back from a fill's file at once.
const READ_BACK: u64 = 256 << 10;

#[derive(Default)]
struct State {
    pieces: VecDeque<Bytes>,
    /// Offset of the first kept piece.
    start: u64,
    /// Bytes received so far.
    received: u64,
    /// Bytes written to `file` so far.
    on_disk: u64,
    file: Option<Arc<File>>,
    /// Keep every piece (a memory-bound answer).
    keep_all: bool,
    /// `Some(true)`: complete; `Some(false)`: failed (readers past what they have get an
    /// error, so a client never takes a cut answer for a whole one).
    end: Option<bool>,
}

pub struct Fill {
    state: Mutex<State>,
    tx: watch::Sender<u64>,
    /// The length the origin declared, if it did.
    pub length: Option<u64>,
    /// Bound for the memory tier (every piece kept), not for disk (a window kept).
    pub memory_bound: bool,
}

impl Fill {
    pub fn new(length: Option<u64>, keep_all: bool) -> Arc<Fill> {
        Arc::new(Fill {
            state: Mutex::new(State {
                keep_all,
                ..Default::default()
            }),
            tx: watch::channel(0).0,
            length,
            memory_bound: keep_all,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        self.tx.send_modify(|g| *g += 1);
    }

    /// A piece arrived.
    pub fn push(&self, piece: Bytes) {
        let mut s = self.lock();
        s.received += piece.len() as u64;
        s.pieces.push_back(piece);
        if !s.keep_all {
            // Pieces behind the window go once they are on disk.
            while let Some(front) = s.pieces.front() {
                let end = s.start + front.len() as u64;
                if s.received - end > WINDOW && (s.file.is_none() || end <= s.on_disk) {
                    s.start = end;
                    s.pieces.pop_front();
                } else {
                    break;
                }
            }
        }
        drop(s);
        self.bump();
    }

    /// Stop keeping every piece (the answer is no longer stored in memory).
    pub fn release(&self) {
        self.lock().keep_all = false;
    }

    /// Bytes up to `upto` are in `file`.
    pub fn written(&self, file: &Arc<File>, upto: u64) {
        let mut s = self.lock();
        s.file.get_or_insert_with(|| file.clone());
        s.on_disk = upto;
    }

    pub fn finish(&self, ok: bool) {
        self.lock().end = Some(ok);
        self.bump();
    }

    pub fn received(&self) -> u64 {
        self.lock().received
    }

    /// Every piece, for a complete memory-bound answer.
    pub fn whole(&self) -> Option<Bytes> {
        let s = self.lock();
        if s.end != Some(true) || s.start != 0 {
            return None;
        }
        if s.pieces.len() == 1 {
            return s.pieces.front().cloned();
        }
        let mut out = Vec::with_capacity(s.received as usize);
        for p in &s.pieces {
            out.extend_from_slice(p);
        }
        Some(Bytes::from(out))
    }

    /// A reader of bytes `[from, to)` (`to`: `None` to the end).
    pub fn reader(self: &Arc<Fill>, from: u64, to: Option<u64>) -> FillReader {
        FillReader {
            fill: self.clone(),
            rx: self.tx.subscribe(),
            pos: from,
            to,
            wait: None,
            read: None,
        }
    }
}

type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;
type ReadBack = Pin<Box<dyn Future<Output = io::Result<Bytes>> + Send>>;

/// One request's view of a fill: a body that yields the bytes as they arrive.
pub struct FillReader {
    fill: Arc<Fill>,
    rx: watch::Receiver<u64>,
    pos: u64,
    to: Option<u64>,
    wait: Option<Wait>,
    read: Option<ReadBack>,
}

enum Next {
    Piece(Bytes),
    End,
    Failed,
    ReadBack(Arc<File>, u64, u64),
    Wait,
}

impl FillReader {
    fn next(&mut self) -> Next {
        let s = self.fill.lock();
        let end = match (self.to, s.end) {
            (Some(t), _) => t,
            (None, Some(true)) => s.received,
            (None, _) => u64::MAX,
        };
        if self.pos >= end {
            return Next::End;
        }
        if self.pos >= s.start && self.pos < s.received {
            let mut at = s.start;
            for p in &s.pieces {
                let len = p.len() as u64;
                if self.pos < at + len {
                    let from = (self.pos - at) as usize;
                    let upto = (end.min(at + len) - at) as usize;
                    return Next::Piece(p.slice(from..upto));
                }
                at += len;
            }
        }
        if self.pos < s.start {
            if let Some(f) = &s.file {
                if self.pos < s.on_disk {
                    let n = (s.on_disk.min(end) - self.pos).min(READ_BACK);
                    return Next::ReadBack(f.clone(), self.pos, n);
                }
            }
            return Next::Failed;
        }
        match s.end {
            Some(_) => Next::Failed,
            None => Next::Wait,
        }
    }
}

impl BodySource for FillReader {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        loop {
            if let Some(r) = self.read.as_mut() {
                let got = std::task::ready!(r.as_mut().poll(cx));
                self.read = None;
                return match got {
                    Ok(b) if !b.is_empty() => {
                        self.pos += b.len() as u64;
                        Poll::Ready(Some(Ok(b)))
                    }
                    Ok(_) => Poll::Ready(Some(Err(io::Error::other("cache file shrank")))),
                    Err(e) => Poll::Ready(Some(Err(e))),
                };
            }
            if let Some(w) = self.wait.as_mut() {
                std::task::ready!(w.as_mut().poll(cx));
                self.wait = None;
            }
            // Mark what we have seen before looking, so a bump after the look wakes us.
            self.rx.borrow_and_update();
            match self.next() {
                Next::Piece(b) => {
                    self.pos += b.len() as u64;
                    return Poll::Ready(Some(Ok(b)));
                }
                Next::End => return Poll::Ready(None),
                Next::Failed => {
                    return Poll::Ready(Some(Err(io::Error::other(
                        "the origin's answer ended early",
                    ))))
                }
                Next::ReadBack(file, at, n) => {
                    self.read = Some(Box::pin(read_back(file, at, n)));
                }
                Next::Wait => {
                    let mut rx = self.rx.clone();
                    self.wait = Some(Box::pin(async move {
                        let _ = rx.changed().await;
                    }));
                }
            }
        }
    }

    fn length(&self) -> Option<u64> {
        match self.to {
            Some(t) => Some(t - self.pos),
            None => self.fill.length.map(|l| l.saturating_sub(self.pos)),
        }
    }
}

async fn read_back(file: Arc<File>, at: u64, n: u64) -> io::Result<Bytes> {
    let job = tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; n as usize];
        let got = file.read_at(&mut buf, at)?;
        buf.truncate(got);
        Ok(Bytes::from(buf))
    });
    job.await.map_err(io::Error::other)?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(r: &mut FillReader) -> Vec<u8> {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut out = Vec::new();
        while let Poll::Ready(Some(Ok(b))) = r.poll_next(&mut cx) {
            out.extend_from_slice(&b);
        }
        out
    }

    #[test]
    fn readers_see_the_bytes_as_they_arrive() {
        let f = Fill::new(Some(6), true);
        let mut a = f.reader(0, None);
        let mut b = f.reader(2, Some(5));
        f.push(Bytes::from_static(b"abc"));
        assert_eq!(drain(&mut a), b"abc");
        assert_eq!(drain(&mut b), b"c");
        f.push(Bytes::from_static(b"def"));
        f.finish(true);
        assert_eq!(drain(&mut a), b"def");
        assert_eq!(drain(&mut b), b"de");
        assert_eq!(f.whole().as_deref(), Some(&b"abcdef"[..]));
    }

    #[test]
    fn a_failed_fill_is_an_error_not_an_end() {
        let f = Fill::new(None, true);
        let mut a = f.reader(0, None);
        f.push(Bytes::from_static(b"ab"));
        f.finish(false);
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(matches!(a.poll_next(&mut cx), Poll::Ready(Some(Ok(_)))));
        assert!(matches!(a.poll_next(&mut cx), Poll::Ready(Some(Err(_)))));
        assert!(f.whole().is_none());
    }
}
