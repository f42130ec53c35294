//! The per-worker open-file cache: descriptor, metadata, validators, the pre-rendered header
//! block and, for small files, the body. Entries are trusted for `file_cache.valid`, then
//! re-checked on the blocking pool; negative results (404/403) are cached the same way.

use std::cell::Cell;
use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use ramjet_pipeline::filters::Representation;
use ramjet_pipeline::{Body, Part};
use ramjet_runtime::sys::FileStat;
use tokio::sync::Notify;
use tokio::time::Instant;

/// What a cached path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    /// 403 or 404.
    Refused(u16),
}

/// One cached path.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) kind: Kind,
    pub(crate) file: Option<Arc<File>>,
    pub(crate) stat: Option<FileStat>,
    pub(crate) body: Option<Bytes>,
    /// Strong ETag with quotes.
    pub(crate) etag: Box<[u8]>,
    pub(crate) mtime: u64,
    pub(crate) content_type: Box<str>,
    /// `Content-Type` line followed by the validator lines.
    pub(crate) head: Bytes,
    /// `head[validators_at..]`: Last-Modified, ETag, Accept-Ranges (+ encoding lines).
    pub(crate) validators_at: usize,
    pub(crate) checked: Cell<Instant>,
    /// A change was reported (inotify) since the last check: re-check before use.
    pub(crate) invalid: Cell<bool>,
    /// A re-check is in flight; requests that need this entry wait for [`Entry::rechecked`].
    pub(crate) revalidating: Cell<bool>,
    /// Woken when the in-flight re-check has replaced or confirmed this entry.
    pub(crate) rechecked: Notify,
    /// Header lines rendered into `head` besides the validators (encoding, Vary), kept so a
    /// re-check can rebuild the entry without the request that created it.
    pub(crate) extra: Box<str>,
    used: Cell<u64>,
}

impl Entry {
    /// A 403/404 result; `content_type` and `extra` are what a file found here later gets.
    pub(crate) fn refused(code: u16, content_type: String, extra: &str) -> Entry {
        Entry {
            kind: Kind::Refused(code),
            file: None,
            stat: None,
            body: None,
            etag: Box::default(),
            mtime: 0,
            content_type: content_type.into_boxed_str(),
            head: Bytes::new(),
            validators_at: 0,
            checked: Cell::new(Instant::now()),
            invalid: Cell::new(false),
            revalidating: Cell::new(false),
            rechecked: Notify::new(),
            extra: extra.into(),
            used: Cell::new(0),
        }
    }

    /// Build an entry for an opened file or directory; `extra` header lines (encoding,
    /// Vary) are rendered into the shared block.
    pub(crate) fn found(
        file: Arc<File>,
        stat: FileStat,
        body: Option<Vec<u8>>,
        content_type: String,
        extra: &str,
    ) -> Entry {
        let mtime = stat
            .mtime
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let etag = etag(&stat);
        let mut head = format!("Content-Type: {content_type}\r\n");
        let validators_at = head.len();
        head.push_str("Last-Modified: ");
        head.push_str(&httpdate::fmt_http_date(stat.mtime));
        head.push_str("\r\nETag: ");
        head.push_str(&etag);
        head.push_str("\r\nAccept-Ranges: bytes\r\n");
        head.push_str(extra);
        Entry {
            kind: if stat.is_dir { Kind::Dir } else { Kind::File },
            file: Some(file),
            stat: Some(stat),
            body: body.map(Bytes::from),
            etag: etag.into_bytes().into_boxed_slice(),
            mtime,
            content_type: content_type.into_boxed_str(),
            head: Bytes::from(head),
            validators_at,
            checked: Cell::new(Instant::now()),
            invalid: Cell::new(false),
            revalidating: Cell::new(false),
            rechecked: Notify::new(),
            extra: extra.into(),
            used: Cell::new(0),
        }
    }

    pub(crate) fn size(&self) -> u64 {
        self.stat.map_or(0, |s| s.size)
    }

    pub(crate) fn validators(&self) -> Bytes {
        self.head.slice(self.validators_at..)
    }
}

impl Representation for Entry {
    fn etag(&self) -> &[u8] {
        &self.etag
    }

    fn modified(&self) -> u64 {
        self.mtime
    }

    fn length(&self) -> u64 {
        self.size()
    }

    fn content_type(&self) -> &str {
        &self.content_type
    }

    fn headers(&self) -> Bytes {
        self.head.clone()
    }

    fn validators(&self) -> Bytes {
        Entry::validators(self)
    }

    fn slice(&self, start: u64, end: u64) -> Part {
        match (&self.body, &self.file) {
            (Some(b), _) => Part::Bytes(b.slice(start as usize..end as usize)),
            (None, Some(file)) => Part::File {
                file: file.clone(),
                offset: start,
                len: end - start,
            },
            // Only file entries are answered from: they always have one or the other.
            (None, None) => Part::Bytes(Bytes::new()),
        }
    }

    fn body(&self) -> Body {
        match self.slice(0, self.size()) {
            Part::Bytes(b) => Body::Bytes(b),
            Part::File { file, offset, len } => Body::File { file, offset, len },
        }
    }
}

/// Strong validator from mtime and size, nginx's `"mtime-size"` in hex, with the
/// nanoseconds when the filesystem keeps them: a file rewritten in place within the same
/// second at the same size still gets a new ETag.
fn etag(stat: &FileStat) -> String {
    let since = stat.mtime.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (secs, nanos) = (since.as_secs(), since.subsec_nanos());
    if nanos == 0 {
        format!("\"{secs:x}-{:x}\"", stat.size)
    } else {
        format!("\"{secs:x}.{nanos:x}-{:x}\"", stat.size)
    }
}

/// Cache variants a path can have: identity and one per precompressed encoding.
const VARIANTS: u8 = 4;

/// The cache proper; keys are `location id, variant, path` packed into bytes. Hashed with
/// foldhash, seeded per process, not SipHash: every request looks its file up here, and
/// SipHash cost more than the rest of the lookup (about 160 instructions of a 20-byte key).
#[derive(Debug)]
pub(crate) struct FileCache {
    map: HashMap<Box<[u8]>, std::rc::Rc<Entry>, foldhash::fast::RandomState>,
    memory: u64,
    clock: u64,
    /// Reused buffer for building lookup keys without allocating.
    key: Vec<u8>,
}

impl FileCache {
    pub(crate) fn new() -> FileCache {
        FileCache {
            map: HashMap::default(),
            memory: 0,
            clock: 0,
            key: Vec::new(),
        }
    }

    pub(crate) fn clear(&mut self) {
        self.map.clear();
        self.memory = 0;
    }

    fn build_key(&mut self, location: usize, variant: u8, path: &[u8]) {
        self.key.clear();
        self.key.extend_from_slice(&(location as u32).to_le_bytes());
        self.key.push(variant);
        self.key.extend_from_slice(path);
    }

    /// The entry, if present (fresh or not).
    pub(crate) fn get(
        &mut self,
        location: usize,
        variant: u8,
        path: &[u8],
    ) -> Option<std::rc::Rc<Entry>> {
        self.build_key(location, variant, path);
        self.clock += 1;
        let e = self.map.get(self.key.as_slice())?;
        e.used.set(self.clock);
        Some(e.clone())
    }

    /// Insert (or replace) an entry, evicting the least recently used eighth when over the
    /// entry or memory budget.
    pub(crate) fn insert(
        &mut self,
        location: usize,
        variant: u8,
        path: &[u8],
        entry: Entry,
        max_entries: usize,
        max_memory: u64,
    ) -> std::rc::Rc<Entry> {
        self.build_key(location, variant, path);
        self.clock += 1;
        entry.used.set(self.clock);
        let mut entry = entry;
        if entry
            .body
            .as_ref()
            .is_some_and(|b| b.len() as u64 > max_memory / 4)
        {
            entry.body = None;
        }
        let added = entry.body.as_ref().map_or(0, |b| b.len() as u64);
        let entry = std::rc::Rc::new(entry);
        if let Some(old) = self
            .map
            .insert(self.key.clone().into_boxed_slice(), entry.clone())
        {
            self.memory -= old.body.as_ref().map_or(0, |b| b.len() as u64);
        }
        self.memory += added;
        if self.map.len() > max_entries || self.memory > max_memory {
            self.evict(max_memory);
        }
        entry
    }

    /// A change was reported for `path` of `location`: every variant is re-checked before
    /// its next use. Returns whether any entry was marked.
    pub(crate) fn invalidate(&mut self, location: usize, path: &[u8]) -> bool {
        let mut any = false;
        for variant in 0..VARIANTS {
            self.build_key(location, variant, path);
            if let Some(e) = self.map.get(self.key.as_slice()) {
                e.invalid.set(true);
                any = true;
            }
        }
        any
    }

    /// Mark every entry of `location` under the directory `prefix` (ends with `/`, or is
    /// empty for the root), and the directory's own entry.
    pub(crate) fn invalidate_under(&mut self, location: usize, prefix: &[u8]) {
        let loc = (location as u32).to_le_bytes();
        let bare = prefix.strip_suffix(b"/").unwrap_or(prefix);
        for (key, e) in &self.map {
            let (Some(l), Some(path)) = (key.get(..4), key.get(5..)) else {
                continue;
            };
            if l == loc && (path.starts_with(prefix) || path == bare) {
                e.invalid.set(true);
            }
        }
    }

    /// Events were lost: re-check everything before use.
    pub(crate) fn invalidate_all(&mut self) {
        for e in self.map.values() {
            e.invalid.set(true);
        }
    }

    fn evict(&mut self, max_memory: u64) {
        let mut stamps: Vec<u64> = self.map.values().map(|e| e.used.get()).collect();
        stamps.sort_unstable();
        let mut cut_index = stamps.len() / 8;
        if self.memory > max_memory {
            cut_index = stamps.len() / 2;
        }
        let cut = stamps.get(cut_index).copied().unwrap_or(0);
        let mut freed = 0;
        self.map.retain(|_, e| {
            let keep = e.used.get() > cut;
            if !keep {
                freed += e.body.as_ref().map_or(0, |b| b.len() as u64);
            }
            keep
        });
        self.memory -= freed;
    }
}

/// Whether an entry checked at `checked` must be re-checked at `now` (one checked at or
/// after `now` never is, even with `valid = 0`).
pub(crate) fn stale(checked: Instant, valid: Duration, now: Instant) -> bool {
    now.saturating_duration_since(checked) > valid
}
