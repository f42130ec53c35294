//! One request through a module: a fresh instance from the pool, its `handle` export run as
//! a future on the worker's event loop, and a driver that serves what it asks for between
//! polls (request body pieces) and turns what it writes into the reply: whole, with its
//! length and file ranges sent by sendfile, when `handle` returns; as a stream once the
//! module flushes or writes more than the buffer holds.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use ramjet_modules::{ModuleRequest, Piece, Reply};
use ramjet_pipeline::BodySource;
use ramjet_runtime::sys::thread_cpu_time;
use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

use crate::bindings::ramjet::module::http::Request as WasmRequest;
use crate::bindings::ModulePre;
use crate::exchange::{BodyFailure, Cause, Shared};
use crate::grants::Grants;
use crate::host::State;

/// A file range in a streamed answer is read in pieces of this size.
const FILE_PIECE: u64 = 256 << 10;

/// A started module: its component linked and ready to instantiate.
pub struct Mounted {
    pub pre: ModulePre<State>,
    pub grants: Arc<Grants>,
    pub memory: u64,
    /// CPU time one request may use.
    pub cpu: Duration,
}

type Running = Pin<Box<dyn Future<Output = wasmtime::Result<()>> + Send>>;

/// What the module's request looks like to it.
fn record(req: &ModuleRequest<'_>) -> WasmRequest {
    WasmRequest {
        method: req.method().to_string(),
        uri: req.uri().to_string(),
        path: req.path().to_vec(),
        query: req.query().map(str::to_string),
        mount: req.mount().to_string(),
        version: req.version().to_string(),
        headers: req
            .headers()
            .map(|(n, v)| (String::from_utf8_lossy(n).into_owned(), v.to_vec()))
            .collect(),
        client: req.client().to_string(),
        content_length: req.content_length(),
    }
}

/// Answer `req` with module `m`.
pub async fn call(m: Arc<Mounted>, req: &ModuleRequest<'_>) -> Reply {
    let shared = Shared::default();
    let state = State::new(m.grants.clone(), shared.clone(), m.memory);
    let stderr = state.stderr.clone();
    let mut store = Store::new(m.pre.instance_pre().engine(), state);
    store.limiter(|s| s.limiter());
    store.set_epoch_deadline(1);
    let budget = m.cpu;
    store.epoch_deadline_callback(move |ctx| {
        let mut x = ctx.data().shared.lock();
        if x.cpu_time(thread_cpu_time()) > budget {
            x.cause = Some(Cause::Cpu);
            wasmtime::bail!("CPU budget spent");
        }
        // Let the worker's other connections run, then go on. tokio's yield defers the
        // wake-up until the event loop has looked for I/O: a plain wake would put this
        // task straight back in the run queue, and a busy run queue polls for I/O only
        // every few dozen tasks (about 120 ms of a looping module).
        Ok(UpdateDeadline::YieldCustom(
            1,
            Box::pin(tokio::task::yield_now()),
        ))
    });
    let request = record(req);
    let pre = m.pre.clone();
    let mut running: Running = Box::pin(async move {
        let module = pre.instantiate_async(&mut store).await?;
        module.call_handle(&mut store, &request).await
    });
    loop {
        let step = poll_fn(|cx| match poll_guest(&mut running, &shared, cx) {
            Poll::Ready(result) => Poll::Ready(Some(result)),
            Poll::Pending => {
                let x = shared.lock();
                if x.streaming || x.wants_body().is_some() {
                    Poll::Ready(None)
                } else {
                    Poll::Pending
                }
            }
        })
        .await;
        match step {
            Some(Ok(())) => return shared.lock().whole(),
            Some(Err(e)) => return failed(&m, &shared, &e, &stderr),
            None if shared.lock().streaming => {
                return streamed(m, shared, running, stderr);
            }
            None => {
                let piece = req.body_chunk().await.map_err(|_| BodyFailure::Aborted);
                shared.lock().give_body(piece);
            }
        }
    }
}

/// Poll the module, counting the CPU time it uses on this thread (its own code and the
/// host calls it makes; not the time it waits for the client, the body or the disk).
fn poll_guest(
    running: &mut Running,
    shared: &Shared,
    cx: &mut Context<'_>,
) -> Poll<wasmtime::Result<()>> {
    let began = thread_cpu_time();
    shared.lock().poll_began = Some(began);
    let polled = running.as_mut().poll(cx);
    let mut x = shared.lock();
    x.cpu_used += thread_cpu_time().saturating_sub(began);
    x.poll_began = None;
    polled
}

/// Why a call failed, for its log line.
fn cause(m: &Mounted, shared: &Shared, e: &wasmtime::Error, stderr: &MemoryOutputPipe) -> String {
    match shared.lock().cause {
        Some(Cause::Cpu) => return format!("ran past its CPU budget ({} ms)", m.cpu.as_millis()),
        Some(Cause::Memory) => return format!("reached its memory cap ({})", size(m.memory)),
        None => {}
    }
    let what = match e.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => e.to_string(),
    };
    match said(&stderr.contents()) {
        Some(said) => format!("trapped: {what} (it said: {said})"),
        None => format!("trapped: {what}"),
    }
}

/// What a module wrote to standard error, on one line: a Rust module's panic message
/// (without the backtrace hint), at most 300 characters.
fn said(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    let one: String = lines
        .join(" ")
        .chars()
        .filter(|c| !c.is_control())
        .take(300)
        .collect();
    (!one.is_empty()).then_some(one)
}

/// `64 MiB`, `96 KiB`.
fn size(bytes: u64) -> String {
    if bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

fn failed(m: &Mounted, shared: &Shared, e: &wasmtime::Error, stderr: &MemoryOutputPipe) -> Reply {
    tracing::warn!("{}: {}", m.grants.name, cause(m, shared, e, stderr));
    Reply::text(500, "500 Internal Server Error: the module failed\n")
}

/// The module flushed or wrote past the buffer: its head now, its body as it comes.
fn streamed(m: Arc<Mounted>, shared: Shared, running: Running, stderr: MemoryOutputPipe) -> Reply {
    let reply = {
        let mut x = shared.lock();
        x.body_gone = true;
        if x.wants_body().is_some() {
            x.give_body(Err(BodyFailure::Gone));
        }
        x.head_reply()
    };
    reply.stream(Streamed {
        m,
        shared,
        running: Some(running),
        stderr,
        reading: None,
    })
}

/// A streamed answer: the parts the module wrote, while it runs on.
struct Streamed {
    m: Arc<Mounted>,
    shared: Shared,
    running: Option<Running>,
    stderr: MemoryOutputPipe,
    /// A file range being read for the stream.
    reading: Option<tokio::task::JoinHandle<io::Result<Bytes>>>,
}

/// Read `len` bytes of `file` at `offset` (a short file is an error: the head may have
/// promised them).
fn read_range(file: &std::fs::File, offset: u64, len: u64) -> io::Result<Bytes> {
    let mut buf = vec![0; len as usize];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut buf, offset)?;
    Ok(Bytes::from(buf))
}

impl BodySource for Streamed {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        loop {
            if let Some(job) = self.reading.as_mut() {
                let done = std::task::ready!(Pin::new(job).poll(cx));
                self.reading = None;
                return Poll::Ready(Some(done.unwrap_or_else(|e| Err(io::Error::other(e)))));
            }
            let part = self.shared.lock().take_part(FILE_PIECE);
            match part {
                Some(Piece::Bytes(b)) => return Poll::Ready(Some(Ok(b))),
                Some(Piece::File { file, offset, len }) => {
                    self.reading = Some(tokio::task::spawn_blocking(move || {
                        read_range(&file, offset, len)
                    }));
                    continue;
                }
                None => {}
            }
            let Some(running) = self.running.as_mut() else {
                return Poll::Ready(None);
            };
            match poll_guest(running, &self.shared, cx) {
                Poll::Ready(Ok(())) => self.running = None,
                Poll::Ready(Err(e)) => {
                    self.running = None;
                    let why = cause(&self.m, &self.shared, &e, &self.stderr);
                    tracing::warn!("{}: {why}, after its answer began", self.m.grants.name);
                    return Poll::Ready(Some(Err(io::Error::other(why))));
                }
                Poll::Pending => {
                    let mut x = self.shared.lock();
                    if x.wants_body().is_some() {
                        x.give_body(Err(BodyFailure::Gone));
                    } else if x.parts.is_empty() {
                        return Poll::Pending;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_message_is_kept_on_one_line() {
        let stderr = b"\nthread '<unnamed>' panicked at src/lib.rs:20:25:\nasked to panic\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            said(stderr).as_deref(),
            Some("thread '<unnamed>' panicked at src/lib.rs:20:25: asked to panic")
        );
        assert_eq!(said(b"\n \n"), None);
        assert_eq!(said(&[b'x'; 1000]).unwrap().len(), 300);
        assert_eq!(said(b"a\x1b[31mb").as_deref(), Some("a[31mb"));
    }

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(size(64 << 20), "64 MiB");
        assert_eq!(size(96 << 10), "96 KiB");
    }
}
