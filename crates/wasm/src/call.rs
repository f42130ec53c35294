//! One request through a module: an instance (one this worker kept from an earlier request,
//! or a new one from the engine's pool), its `handle` export run as a future on the
//! worker's event loop, and a driver that serves what it asks for between
//! polls (request body pieces) and turns what it writes into the reply: whole, with its
//! length and file ranges sent by sendfile, when `handle` returns; as a stream once the
//! module flushes or writes more than the buffer holds.

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ramjet_http1::Method;
use ramjet_modules::{ModuleRequest, Piece, Reply};
use ramjet_pipeline::BodySource;
use wasmtime::{Store, Trap, UpdateDeadline};

use crate::bindings::ramjet::module::http::{
    Method as WasmMethod, Request as WasmRequest, Version,
};
use crate::bindings::{Module, ModulePre};
use crate::engine;
use crate::exchange::{BodyFailure, Cause, Shared};
use crate::grants::Grants;
use crate::host::{State, STDERR_KEPT};

/// A file range in a streamed answer is read in pieces of this size.
const FILE_PIECE: u64 = 256 << 10;

/// A started module: its component linked and ready to instantiate.
pub struct Mounted {
    pub pre: ModulePre<State>,
    pub grants: Arc<Grants>,
    pub memory: u64,
    /// Time one request may run.
    pub cpu: Duration,
    /// Instances serve request after request on their worker (else one per request).
    pub reuse: bool,
    /// Requests refused for want of an instance, logged once a second.
    pub overload: Overload,
}

/// Requests answered 503 for want of an instance since the last log line about them.
#[derive(Default)]
pub struct Overload {
    /// Seconds since this mount started when the last line was logged, and the count since.
    state: std::sync::Mutex<(u64, u64)>,
    started: std::sync::OnceLock<Instant>,
}

impl Overload {
    /// Count one more; `Some(count)` when a line is due (the first, then at most one a
    /// second).
    fn note(&self) -> Option<u64> {
        let now = self.started.get_or_init(Instant::now).elapsed().as_secs() + 1;
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.1 += 1;
        if s.0 == now {
            return None;
        }
        let count = s.1;
        *s = (now, 0);
        Some(count)
    }
}

/// Instances kept ready per worker and mount, when they are reused: as many as a burst of
/// requests that wait (for the disk, a journal's flush, an upstream) keeps busy at once, so
/// the next burst finds them instead of making new ones, each with empty caches. (With
/// four, SPECweb99 at 4,400 connections made 250 to 600 new instances a second; with 32,
/// about 100; with 256, a burst in the first seconds and then about 10.) An idle instance costs
/// no more memory than its slot in the pool keeps resident anyway.
const IDLE_MAX: usize = 256;

/// Idle instances in the whole process: at most half of [`engine::instances`], so idle
/// ones never hold the room a busy request needs.
static IDLE_TOTAL: AtomicUsize = AtomicUsize::new(0);

/// An instance kept idle, counted in [`IDLE_TOTAL`] until it is taken or dropped.
pub struct Resting(Option<Instance>);

impl Resting {
    /// Keep `inst` if the process has room for one more idle instance.
    fn keep(inst: Instance) -> Option<Resting> {
        let most = engine::instances() as usize / 2;
        IDLE_TOTAL
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < most).then_some(n + 1)
            })
            .ok()?;
        Some(Resting(Some(inst)))
    }

    fn take(mut self) -> Option<Instance> {
        self.0.take()
    }
}

impl Drop for Resting {
    fn drop(&mut self) {
        IDLE_TOTAL.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A reused instance is dropped once its standard error holds this much.
const STDERR_RECYCLE: usize = STDERR_KEPT / 2;

/// An instance of the module with its store.
pub struct Instance {
    store: Store<State>,
    module: Module,
    /// Its place among the process's live instances.
    _room: engine::Room,
}

/// A worker's idle instances of one mount.
pub type Idle = Rc<IdlePool>;

/// Idle instances, and the requests of this worker and mount waiting for one: an instance
/// let go while a request waits for room goes to it, not back to the list.
#[derive(Default)]
pub struct IdlePool {
    list: RefCell<Vec<Resting>>,
    returned: tokio::sync::Notify,
    /// The mount's path prefix, copied once.
    mount: std::cell::OnceCell<Arc<str>>,
}

impl IdlePool {
    fn pop(&self) -> Option<Instance> {
        self.list.borrow_mut().pop().and_then(Resting::take)
    }
}

/// How a call gets its instance.
enum Start {
    /// One the worker kept.
    Kept(Instance),
    /// Room for a new one.
    New(engine::Room),
}

/// An instance for the next call: one the worker kept, else room for a new one; while every
/// room is taken, whichever comes first, one of this mount's instances let go on this
/// worker or a room. `None` after [`engine::ADMIT_WAIT`].
async fn start(idle: &IdlePool) -> Option<Start> {
    if let Some(inst) = idle.pop() {
        return Some(Start::Kept(inst));
    }
    if let Some(room) = engine::try_admit() {
        return Some(Start::New(room));
    }
    let waiting = async {
        loop {
            tokio::select! {
                room = engine::admit() => return room.map(Start::New),
                () = idle.returned.notified() => {
                    if let Some(inst) = idle.pop() {
                        return Some(Start::Kept(inst));
                    }
                }
            }
        }
    };
    tokio::time::timeout(engine::ADMIT_WAIT, waiting)
        .await
        .ok()
        .flatten()
}

impl Instance {
    /// A fresh instance from the engine's pool.
    async fn new(m: &Mounted, shared: Shared, room: engine::Room) -> wasmtime::Result<Instance> {
        let state = State::new(m.grants.clone(), shared, m.memory);
        let mut store = Store::new(m.pre.instance_pre().engine(), state);
        store.limiter(|s| s);
        let budget = m.cpu;
        store.epoch_deadline_callback(move |ctx| {
            let mut x = ctx.data().shared.lock();
            if x.run_time(Instant::now()) > budget {
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
        store.set_epoch_deadline(1);
        let module = m.pre.instantiate_async(&mut store).await?;
        Ok(Instance {
            store,
            module,
            _room: room,
        })
    }
}

/// A call in progress: it gives the instance back (unless it could not make one) and how
/// the call ended.
type Running = Pin<Box<dyn Future<Output = (Option<Instance>, wasmtime::Result<()>)> + Send>>;

/// Start the call of `handle` on an idle instance, or on a new one.
fn run(m: &Arc<Mounted>, start: Start, shared: Shared, req: Copied) -> Running {
    let m = m.clone();
    Box::pin(async move {
        let mut inst = match start {
            Start::Kept(mut inst) => {
                inst.store.data_mut().begin(shared);
                inst.store.set_epoch_deadline(1);
                inst
            }
            Start::New(room) => match Instance::new(&m, shared, room).await {
                Ok(inst) => inst,
                Err(e) => return (None, Err(e)),
            },
        };
        let result = inst.module.call_handle(&mut inst.store, req.view()).await;
        (Some(inst), result)
    })
}

/// A call ended well: keep its instance for the next request, if instances are reused and
/// it has room.
fn recycle(m: &Mounted, idle: &Idle, inst: Option<Instance>) {
    let Some(inst) = inst else { return };
    let mut list = idle.list.borrow_mut();
    if m.reuse && list.len() < IDLE_MAX && inst.store.data().stderr_len() < STDERR_RECYCLE {
        if let Some(resting) = Resting::keep(inst) {
            list.push(resting);
            // A request of this mount waiting for room takes it.
            idle.returned.notify_one();
        }
    }
}

/// The request's fields the module is handed, copied out of the connection's buffer in
/// two allocations (the call outlives the buffer when the answer streams).
struct Copied {
    /// The method (when it has no name of its own in the world), target and client
    /// address, one after another.
    text: String,
    /// Where each ends in `text`.
    ends: [usize; 3],
    method: Method,
    version: Version,
    path: Vec<u8>,
    content_length: Option<u64>,
}

impl Copied {
    fn new(req: &ModuleRequest<'_>) -> Copied {
        use std::fmt::Write;
        let method = req.method_kind();
        let mut text = String::with_capacity(req.uri().len() + 64);
        let mut ends = [0; 3];
        if named(method).is_none() {
            text.push_str(req.method());
        }
        ends[0] = text.len();
        text.push_str(req.uri());
        ends[1] = text.len();
        match req.client() {
            std::net::SocketAddr::V4(a) => push_v4(&mut text, a),
            a => {
                let _ = write!(text, "{a}");
            }
        }
        ends[2] = text.len();
        let version = match req.http_version() {
            ramjet_http1::Version::Http10 => Version::Http10,
            ramjet_http1::Version::Http11 => Version::Http11,
            ramjet_http1::Version::Http2 => Version::Http2,
        };
        Copied {
            text,
            ends,
            method,
            version,
            path: req.path().to_vec(),
            content_length: req.content_length(),
        }
    }

    /// What the module's request looks like to it.
    fn view(&self) -> WasmRequest<'_> {
        let e = self.ends;
        let t = &self.text;
        WasmRequest {
            method: named(self.method).unwrap_or(WasmMethod::Other(&t[..e[0]])),
            uri: &t[e[0]..e[1]],
            path: &self.path,
            version: self.version,
            client: &t[e[1]..e[2]],
            content_length: self.content_length,
        }
    }
}

/// The world's name for `method`, if it has one (else the module is handed its token).
fn named(method: Method) -> Option<WasmMethod<'static>> {
    Some(match method {
        Method::Get => WasmMethod::Get,
        Method::Head => WasmMethod::Head,
        Method::Post => WasmMethod::Post,
        Method::Put => WasmMethod::Put,
        Method::Delete => WasmMethod::Delete,
        Method::Options => WasmMethod::Options,
        Method::Patch => WasmMethod::Patch,
        Method::Trace | Method::Connect | Method::Other => return None,
    })
}

/// `a.b.c.d:port`, as `Display` writes it, without the formatting machinery (a tenth of
/// its instructions; every request's client is written).
fn push_v4(text: &mut String, a: std::net::SocketAddrV4) {
    fn push_decimal(text: &mut String, mut n: u32) {
        let mut digits = [0u8; 10];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        text.extend(digits[i..].iter().map(|&d| char::from(d)));
    }
    for (i, octet) in a.ip().octets().into_iter().enumerate() {
        if i > 0 {
            text.push('.');
        }
        push_decimal(text, octet.into());
    }
    text.push(':');
    push_decimal(text, a.port().into());
}

/// Answer `req` with module `m`, on one of this worker's `idle` instances if there is one.
pub async fn call(m: Arc<Mounted>, idle: Idle, req: &ModuleRequest<'_>) -> Reply {
    let mount = idle.mount.get_or_init(|| req.mount().into()).clone();
    let Some(start) = start(&idle).await else {
        let busy = wasmtime::format_err!(
            "all {} instances stayed busy for {} s",
            engine::instances(),
            engine::ADMIT_WAIT.as_secs()
        );
        return failed(&m, &Shared::default(), &busy, None);
    };
    // A kept instance's last exchange, with its buffers, when nothing holds it any more.
    let shared = match &start {
        Start::Kept(inst) => inst.store.data().shared.renewed(),
        Start::New(_) => None,
    }
    .unwrap_or_default();
    {
        let mut x = shared.lock();
        x.headers.refill(req.headers());
        x.mount = mount;
    }
    let mut running = run(&m, start, shared.clone(), Copied::new(req));
    loop {
        let step = poll_fn(|cx| match poll_guest(&mut running, &shared, cx) {
            Poll::Ready(done) => Poll::Ready(Some(done)),
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
            Some((inst, Ok(()))) => {
                recycle(&m, &idle, inst);
                return shared.lock().whole();
            }
            Some((inst, Err(e))) => return failed(&m, &shared, &e, inst.as_ref()),
            None if shared.lock().streaming => return streamed(m, idle, shared, running),
            None => {
                let piece = req.body_chunk().await.map_err(|_| BodyFailure::Aborted);
                shared.lock().give_body(piece);
            }
        }
    }
}

/// Poll the module, counting the time it runs (its own code and the host calls it makes,
/// on this thread; not the time it waits for the client, the body or the disk).
fn poll_guest<T>(
    running: &mut Pin<Box<dyn Future<Output = T> + Send>>,
    shared: &Shared,
    cx: &mut Context<'_>,
) -> Poll<T> {
    let began = Instant::now();
    shared.lock().poll_began = Some(began);
    engine::running();
    let polled = running.as_mut().poll(cx);
    let mut x = shared.lock();
    x.run_used += began.elapsed();
    x.poll_began = None;
    polled
}

/// Why a call failed, for its log line.
fn cause(m: &Mounted, shared: &Shared, e: &wasmtime::Error, inst: Option<&Instance>) -> String {
    match shared.lock().cause {
        Some(Cause::Cpu) => return format!("ran past its CPU budget ({} ms)", m.cpu.as_millis()),
        Some(Cause::Memory) => return format!("reached its memory cap ({})", size(m.memory)),
        None => {}
    }
    let what = match e.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => e.to_string(),
    };
    match inst.and_then(|i| said(&i.store.data().stderr_since())) {
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

fn failed(m: &Mounted, shared: &Shared, e: &wasmtime::Error, inst: Option<&Instance>) -> Reply {
    let module_at_fault = e.downcast_ref::<Trap>().is_some() || shared.lock().cause.is_some();
    if inst.is_none() && !module_at_fault {
        // No instance could be made (the pool is exhausted, or memory is): the server is
        // overloaded, not the module at fault. One line a second at most, with the count.
        if let Some(refused) = m.overload.note() {
            tracing::warn!(
                "{}: no instance could be made: {e:#} ({refused} requests answered 503)",
                m.grants.name
            );
        }
        return Reply::text(503, "503 Service Unavailable: the module has no room now\n")
            .header("Retry-After", "1");
    }
    tracing::warn!("{}: {}", m.grants.name, cause(m, shared, e, inst));
    Reply::text(500, "500 Internal Server Error: the module failed\n")
}

/// The module flushed or wrote past the buffer: its head now, its body as it comes.
fn streamed(m: Arc<Mounted>, idle: Idle, shared: Shared, running: Running) -> Reply {
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
        idle,
        shared,
        running: Some(running),
        reading: None,
    })
}

/// A streamed answer: the parts the module wrote, while it runs on.
struct Streamed {
    m: Arc<Mounted>,
    idle: Idle,
    shared: Shared,
    running: Option<Running>,
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
                Poll::Ready((inst, Ok(()))) => {
                    self.running = None;
                    recycle(&self.m, &self.idle, inst);
                }
                Poll::Ready((inst, Err(e))) => {
                    self.running = None;
                    let why = cause(&self.m, &self.shared, &e, inst.as_ref());
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
    fn an_ipv4_client_reads_as_display_writes_it() {
        for a in [
            "0.0.0.0:0",
            "127.0.0.1:9",
            "255.255.255.255:65535",
            "10.20.3.40:8080",
        ] {
            let a: std::net::SocketAddrV4 = a.parse().unwrap();
            let mut text = String::from("x");
            push_v4(&mut text, a);
            assert_eq!(text, format!("x{a}"));
        }
    }

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(size(64 << 20), "64 MiB");
        assert_eq!(size(96 << 10), "96 KiB");
    }
}

#[cfg(test)]
mod copied_tests {
    use super::{Copied, Method, Version, WasmMethod};

    #[test]
    fn fields_come_back_whole_from_one_block() {
        let c = Copied {
            text: "PROPFIND/a?b=1127.0.0.1:9".to_string(),
            ends: [8, 14, 25],
            method: Method::Other,
            version: Version::Http11,
            path: b"/a".to_vec(),
            content_length: Some(3),
        };
        let v = c.view();
        assert!(matches!(v.method, WasmMethod::Other("PROPFIND")));
        assert_eq!(
            (v.uri, v.client, v.path),
            ("/a?b=1", "127.0.0.1:9", &b"/a"[..])
        );
        assert_eq!(v.content_length, Some(3));
        let get = Copied {
            text: "/a127.0.0.1:9".to_string(),
            ends: [0, 2, 13],
            method: Method::Get,
            ..c
        };
        let v = get.view();
        assert!(matches!(v.method, WasmMethod::Get));
        assert_eq!((v.uri, v.client), ("/a", "127.0.0.1:9"));
    }
}
