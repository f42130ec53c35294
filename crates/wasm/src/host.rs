//! An instance's store data and the functions the module imports (`wit/module.wit`): each
//! reads or fills the call's [`Exchange`], or a grant of the mount.

use std::fs::File;
use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use ramjet_runtime::sys::FileStat;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, StoreLimits};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::bindings::ramjet::module::{files, host, http, journal, upstream};
use crate::exchange::{self, file_range, BodyFailure, BodyTurn, Cause, Shared};
use crate::grants::{Grants, Refusal};
use crate::journal::{Journal, Refused};
use crate::search;

/// The most a module's `files.read` returns at once.
const READ_MAX: u32 = 1 << 20;

/// What an instance's standard error holds (a failed call's part goes into its log line: a
/// Rust module's panic message). A reused instance is dropped once it is half full.
pub const STDERR_KEPT: usize = 16 << 10;

/// An instance's store data (`begin` makes it the current call's).
pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
    pub shared: Shared,
    pub grants: Arc<Grants>,
    stderr: MemoryOutputPipe,
    /// Where the current call's standard error begins.
    stderr_from: usize,
}

impl State {
    pub fn new(grants: Arc<Grants>, shared: Shared, memory: u64) -> State {
        let stderr = MemoryOutputPipe::new(STDERR_KEPT);
        // Nothing of the host: no files, no environment, no arguments, no network. Clocks
        // and randomness only.
        let wasi = WasiCtx::builder().stderr(stderr.clone()).build();
        State {
            wasi,
            table: ResourceTable::new(),
            limits: wasmtime::StoreLimitsBuilder::new()
                .memory_size(memory as usize)
                .instances(64)
                .build(),
            shared,
            grants,
            stderr,
            stderr_from: 0,
        }
    }

    /// A file of a granted tree, from the mount's open files when it has it.
    async fn open(&mut self, tree: String, path: String) -> Result<(Arc<File>, FileStat), Refusal> {
        let k = self.grants.clone().open_kept(tree, path).await?;
        Ok((k.file.clone(), k.stat))
    }

    /// Begin another call on this instance, with its own exchange.
    pub fn begin(&mut self, shared: Shared) {
        self.shared = shared;
        self.stderr_from = self.stderr.contents().len();
    }

    /// What the current call wrote to standard error.
    pub fn stderr_since(&self) -> Vec<u8> {
        self.stderr
            .contents()
            .get(self.stderr_from..)
            .unwrap_or_default()
            .to_vec()
    }

    /// How much of standard error is used.
    pub fn stderr_len(&self) -> usize {
        self.stderr.contents().len()
    }
}

/// Wait until the connection has taken enough of what was written (when streaming).
pub(crate) async fn drained(shared: Shared) {
    poll_fn(move |_| {
        if !shared.lock().backed_up() {
            Poll::Ready(())
        } else {
            // The driver polls again once it has handed the parts on.
            Poll::Pending
        }
    })
    .await
}

/// The memory cap, noting in the call's exchange when it refused a growth.
impl ResourceLimiter for State {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum)?;
        if !allowed {
            self.shared.lock().cause = Some(Cause::Memory);
        }
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl http::Host for State {
    async fn read_body(&mut self, max: u32) -> Result<Option<Vec<u8>>, http::BodyError> {
        let max = max.max(1);
        {
            let mut x = self.shared.lock();
            if !x.leftover.is_empty() {
                let n = x.leftover.len().min(max as usize);
                return Ok(Some(x.leftover.split_to(n).to_vec()));
            }
            if x.body_gone {
                return Err(http::BodyError::Gone);
            }
            x.body = BodyTurn::Wanted(max);
        }
        let shared = self.shared.clone();
        let piece = poll_fn(move |_| {
            let mut x = shared.lock();
            match std::mem::take(&mut x.body) {
                BodyTurn::Given(piece) => Poll::Ready(piece),
                other => {
                    // The driver reads from the client and polls again.
                    x.body = other;
                    Poll::Pending
                }
            }
        })
        .await;
        match piece {
            Ok(p) => Ok(p.map(|b| b.to_vec())),
            Err(BodyFailure::Aborted) => Err(http::BodyError::Aborted),
            Err(BodyFailure::Gone) => Err(http::BodyError::Gone),
        }
    }

    fn header(&mut self, name: String) -> Option<Vec<u8>> {
        self.shared.lock().headers.get(&name).map(<[u8]>::to_vec)
    }

    fn headers(&mut self) -> Vec<(String, Vec<u8>)> {
        self.shared.lock().headers.all()
    }

    fn mount(&mut self) -> String {
        self.shared.lock().mount.to_string()
    }

    fn respond(&mut self, status: u16, headers: Vec<(String, Vec<u8>)>) {
        let head = exchange::head(status, headers.iter().map(|(n, v)| (&n[..], &v[..])));
        self.shared.lock().respond(head);
    }

    fn answer(&mut self, status: u16, headers: Vec<(String, Vec<u8>)>, body: Vec<u8>) {
        let head = exchange::head(status, headers.iter().map(|(n, v)| (&n[..], &v[..])));
        let mut x = self.shared.lock();
        x.respond(head);
        // Not streaming (nothing flushed) unless the body is past the buffer: then the
        // driver streams it, and the module returning ends the stream.
        x.write(Bytes::from(body));
    }

    async fn write(&mut self, bytes: Vec<u8>) {
        self.shared.lock().write(Bytes::from(bytes));
        drained(self.shared.clone()).await;
    }

    async fn flush(&mut self) {
        self.shared.lock().start_streaming();
        // Hand control to the driver once, so the head goes out now.
        let mut yielded = false;
        poll_fn(|_| {
            if std::mem::replace(&mut yielded, true) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        drained(self.shared.clone()).await;
    }
}

pub(crate) fn file_error(r: Refusal) -> files::FileError {
    match r {
        Refusal::NoTree => files::FileError::NoTree,
        Refusal::NotFound => files::FileError::NotFound,
        Refusal::Denied => files::FileError::Denied,
        Refusal::Io => files::FileError::Io,
    }
}

impl files::Host for State {
    async fn size(&mut self, tree: String, path: String) -> Result<u64, files::FileError> {
        let (_, stat) = self.open(tree, path).await.map_err(file_error)?;
        Ok(stat.size)
    }

    async fn send(
        &mut self,
        tree: String,
        path: String,
        offset: u64,
        len: Option<u64>,
    ) -> Result<u64, files::FileError> {
        let (file, stat) = self.open(tree, path).await.map_err(file_error)?;
        let len = file_range(offset, len, stat.size).ok_or(files::FileError::InvalidRange)?;
        self.shared.lock().send_file(file, offset, len);
        drained(self.shared.clone()).await;
        Ok(len)
    }

    async fn read(
        &mut self,
        tree: String,
        path: String,
        offset: u64,
        len: u32,
    ) -> Result<Vec<u8>, files::FileError> {
        let (file, stat) = self.open(tree, path).await.map_err(file_error)?;
        if offset > stat.size {
            return Err(files::FileError::InvalidRange);
        }
        let len = (len.min(READ_MAX) as u64).min(stat.size - offset) as usize;
        // From the page cache on the event loop when it has the bytes; else from the disk on
        // the blocking pool, the instance parked meanwhile.
        if let Some(bytes) = ramjet_runtime::sys::read_at_cached(&file, offset, len) {
            return Ok(bytes);
        }
        tokio::task::spawn_blocking(move || ramjet_runtime::sys::read_at(&file, offset, len))
            .await
            .map_err(|_| files::FileError::Io)?
            .map_err(|_| files::FileError::Io)
    }

    async fn find(
        &mut self,
        tree: String,
        path: String,
        needle: Vec<u8>,
        max: u32,
    ) -> Result<Vec<u64>, files::FileError> {
        let kept = self
            .grants
            .clone()
            .open_kept(tree, path)
            .await
            .map_err(file_error)?;
        let max = max.min(search::FIND_MAX);
        if let Some(at) = kept.found(&needle, max) {
            return Ok(at);
        }
        let (file, size) = (kept.file.clone(), kept.stat.size);
        // Searched from the page cache on the event loop when it has the file and the file
        // is small (a search costs about 0.1 ms per MiB); else on the blocking pool, the
        // instance parked meanwhile.
        let cached = (size <= u64::from(READ_MAX))
            .then(|| search::find_cached(&file, size, &needle, max))
            .flatten();
        let (at, needle) = match cached {
            Some(at) => (at, needle),
            None => tokio::task::spawn_blocking(move || {
                search::find_blocking(&file, size, &needle, max).map(|at| (at, needle))
            })
            .await
            .map_err(|_| files::FileError::Io)?
            .map_err(|_| files::FileError::Io)?,
        };
        kept.remember(needle, at.clone(), max);
        Ok(at)
    }
}

impl State {
    fn journal(&self, name: &str) -> Result<Arc<Journal>, journal::JournalError> {
        self.grants
            .journals
            .get(name)
            .cloned()
            .ok_or(journal::JournalError::NoJournal)
    }
}

impl journal::Host for State {
    async fn append(
        &mut self,
        name: String,
        record: Vec<u8>,
        number_at: Option<(u32, u32)>,
    ) -> Result<u64, journal::JournalError> {
        let j = self.journal(&name)?;
        // Checked here, so a bad record costs no trip to the blocking pool.
        crate::journal::check(&record, number_at).map_err(|_| journal::JournalError::BadRecord)?;
        let appended = tokio::task::spawn_blocking(move || j.append(record, number_at))
            .await
            .map_err(|_| journal::JournalError::Io)?;
        appended.map_err(|e| match e {
            Refused::BadRecord => journal::JournalError::BadRecord,
            Refused::Io => journal::JournalError::Io,
        })
    }

    fn size(&mut self, name: String) -> Result<(u64, u64), journal::JournalError> {
        Ok(self.journal(&name)?.size())
    }

    async fn send(
        &mut self,
        name: String,
        offset: u64,
        len: u64,
    ) -> Result<(), journal::JournalError> {
        let (file, bytes) = self.journal(&name)?.file();
        let len =
            file_range(offset, Some(len), bytes).ok_or(journal::JournalError::InvalidRange)?;
        self.shared.lock().send_file(file, offset, len);
        drained(self.shared.clone()).await;
        Ok(())
    }

    async fn clear(&mut self, name: String) -> Result<(), journal::JournalError> {
        let j = self.journal(&name)?;
        tokio::task::spawn_blocking(move || j.clear())
            .await
            .map_err(|_| journal::JournalError::Io)?
            .map_err(|_| journal::JournalError::Io)
    }
}

impl upstream::Host for State {
    async fn request(
        &mut self,
        name: String,
        method: String,
        path: String,
        headers: Vec<(String, Vec<u8>)>,
        body: Vec<u8>,
        max: u32,
    ) -> Result<upstream::Response, upstream::UpstreamError> {
        use crate::upstream::{exchange, request_bytes, Failure};
        use upstream::UpstreamError as E;
        let up = self.grants.upstreams.get(&name).ok_or(E::NoUpstream)?;
        let failure = |f| match f {
            Failure::BadRequest => E::BadRequest,
            Failure::Unreachable => E::Unreachable,
            Failure::Timeout => E::Timeout,
            Failure::BadResponse => E::BadResponse,
            Failure::TooLarge => E::TooLarge,
        };
        let request = request_bytes(up, &method, &path, &headers, &body).map_err(failure)?;
        let up = up.clone();
        let answer = exchange(&up, &method, request, u64::from(max))
            .await
            .map_err(failure)?;
        Ok(upstream::Response {
            status: answer.status,
            headers: answer.fields,
            body: answer.body,
        })
    }
}

impl host::Host for State {
    fn log(&mut self, level: host::Level, message: String) {
        let name = &self.grants.name;
        let message: String = message
            .chars()
            .take(2000)
            .filter(|c| !c.is_control())
            .collect();
        match level {
            host::Level::Error => tracing::error!("{name}: {message}"),
            host::Level::Warn => tracing::warn!("{name}: {message}"),
            host::Level::Info => tracing::info!("{name}: {message}"),
            host::Level::Debug => tracing::debug!("{name}: {message}"),
        }
    }

    fn var(&mut self, name: String) -> Option<String> {
        self.grants.vars.get(&name).cloned()
    }

    fn get(&mut self, key: String) -> Option<Vec<u8>> {
        self.grants.get(&key)
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> bool {
        self.grants.set(&key, value)
    }

    fn delete(&mut self, key: String) {
        self.grants.delete(&key)
    }
}
