//! A stored answer: its [`Meta`], its body (in memory, in a disk file, or still arriving),
//! and what the response filters need from it, worked out once when it is stored.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use ramjet_pipeline::filters::Representation;
use ramjet_pipeline::{Body, Part};

use crate::fill::Fill;
use crate::meta::Meta;
use crate::policy::{http_date, value};

/// Where a stored answer's body is.
#[derive(Clone)]
pub enum Stored {
    Memory(Bytes),
    /// A committed disk body (sent with sendfile).
    Disk(Arc<File>),
    /// Still arriving from the origin.
    Filling(Arc<Fill>),
}

pub struct Object {
    /// Unique in its store (the size manager's queues name objects by it).
    pub id: u64,
    /// Names its disk files.
    pub hash: u128,
    pub meta: Meta,
    pub body: Stored,
    /// Its committed disk copy, when it has one (a memory object written through).
    pub disk: Option<Arc<File>>,
    /// Entity tag as sent (`W/` kept), empty when there is none.
    pub etag: Bytes,
    /// `Last-Modified` in Unix seconds, `u64::MAX` when there is none (so
    /// `If-Modified-Since` never matches it).
    pub modified: u64,
    pub content_type: String,
    /// The fields a 304 carries (RFC 9110 §15.4.5).
    pub validators: Bytes,
    /// Its fields carry the origin's `Date`.
    pub has_date: bool,
    /// Used since the size manager last passed it (a clock's reference bit).
    pub referenced: AtomicBool,
}

/// Field lines of `fields` named in `names`.
fn lines_named(fields: &Bytes, names: &[&[u8]]) -> Bytes {
    let mut out = Vec::new();
    for line in fields.split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or(b"");
        if names.iter().any(|n| name.eq_ignore_ascii_case(n)) {
            out.extend_from_slice(line);
        }
    }
    Bytes::from(out)
}

impl Object {
    pub fn new(id: u64, hash: u128, meta: Meta, body: Stored, disk: Option<Arc<File>>) -> Object {
        let etag = value(&meta.fields, b"etag")
            .map(Bytes::copy_from_slice)
            .unwrap_or_default();
        let modified = value(&meta.fields, b"last-modified")
            .and_then(http_date)
            .unwrap_or(u64::MAX);
        let content_type = value(&meta.fields, b"content-type")
            .and_then(|v| std::str::from_utf8(v).ok())
            .unwrap_or("application/octet-stream")
            .to_string();
        let validators = lines_named(
            &meta.fields,
            &[
                b"etag",
                b"last-modified",
                b"cache-control",
                b"expires",
                b"vary",
                b"content-location",
            ],
        );
        let has_date = value(&meta.fields, b"date").is_some();
        Object {
            id,
            hash,
            has_date,
            meta,
            body,
            disk,
            etag,
            modified,
            content_type,
            validators,
            referenced: AtomicBool::new(false),
        }
    }

    /// The same answer under another body or meta (after a fill, a 304, an eviction from
    /// memory).
    pub fn with(&self, id: u64, meta: Meta, body: Stored, disk: Option<Arc<File>>) -> Object {
        Object::new(id, self.hash, meta, body, disk)
    }

    pub fn touch(&self) {
        if !self.referenced.load(Ordering::Relaxed) {
            self.referenced.store(true, Ordering::Relaxed);
        }
    }

    /// Bytes it holds in memory (body, fields, key, and a fixed overhead).
    pub fn memory_size(&self) -> u64 {
        let body = match &self.body {
            Stored::Memory(b) => b.len() as u64,
            // What a fill holds: all of a memory-bound answer, a window of a disk-bound one.
            Stored::Filling(f) if f.memory_bound => self.meta.length,
            Stored::Filling(_) => self.meta.length.min(crate::fill::WINDOW),
            Stored::Disk(_) => 0,
        };
        body + (self.meta.fields.len() + self.meta.key.len()) as u64 + 256
    }

    /// Bytes its disk files take.
    pub fn disk_size(&self) -> u64 {
        self.meta.length + (self.meta.fields.len() + self.meta.key.len()) as u64 + 64
    }
}

/// A body at least this large is sent from the object's disk copy when it has one
/// (sendfile) rather than from memory: 1 MiB hits went from 3,021 to 6,735 responses per
/// CPU-second (`bench/cache.py`, one round of 3 s).
pub const SENDFILE_MIN: u64 = 256 << 10;

/// A complete stored answer as the response filters see it.
pub struct Hit<'a>(pub &'a Object);

impl Hit<'_> {
    /// The disk copy to send from, for a body large enough to be worth sendfile.
    fn file(&self) -> Option<&Arc<File>> {
        match &self.0.body {
            Stored::Disk(f) => Some(f),
            Stored::Memory(_) if self.0.meta.length >= SENDFILE_MIN => self.0.disk.as_ref(),
            _ => None,
        }
    }
}

impl Representation for Hit<'_> {
    fn etag(&self) -> &[u8] {
        &self.0.etag
    }
    fn modified(&self) -> u64 {
        self.0.modified
    }
    fn length(&self) -> u64 {
        self.0.meta.length
    }
    fn content_type(&self) -> &str {
        &self.0.content_type
    }
    fn headers(&self) -> Bytes {
        self.0.meta.fields.clone()
    }
    fn validators(&self) -> Bytes {
        self.0.validators.clone()
    }
    fn slice(&self, start: u64, end: u64) -> Part {
        // `file` is the disk body, or a large memory body's disk copy.
        match (self.file(), &self.0.body) {
            (Some(f), _) => Part::File {
                file: f.clone(),
                offset: start,
                len: end - start,
            },
            (None, Stored::Memory(b)) => Part::Bytes(b.slice(start as usize..end as usize)),
            (None, _) => Part::Bytes(Bytes::new()),
        }
    }
    fn body(&self) -> Body {
        match (self.file(), &self.0.body) {
            (_, Stored::Filling(fill)) => Body::Stream(Box::new(fill.reader(0, None))),
            _ if self.0.meta.length == 0 => Body::Empty,
            (Some(f), _) => Body::File {
                file: f.clone(),
                offset: 0,
                len: self.0.meta.length,
            },
            (None, Stored::Memory(b)) => Body::Bytes(b.clone()),
            (None, _) => Body::Empty,
        }
    }
}
