//! The process's one WebAssembly engine: Cranelift code compiled ahead of time and kept
//! in an on-disk cache, instances from a pooling allocator (a request's instance costs no
//! mapping from scratch), and an epoch clock that ticks every [`TICK`] while guests run (parked
//! once none has for [`IDLE_TICKS`]), so a guest yields to the event loop and its CPU time is counted.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use wasmtime::{
    Cache, CacheConfig, Config, Enabled, Engine, InstanceAllocationStrategy,
    PoolingAllocationConfig,
};

use crate::options::MAX_MEMORY;

/// How often the epoch advances: a running guest yields to the worker's other
/// connections at least this often, and its CPU budget is counted in these.
pub const TICK: Duration = Duration::from_millis(2);

/// Instances alive at once in the whole process by default (requests in progress in
/// modules, and the ones workers keep idle); `RAMJET_WASM_INSTANCES` sets it. A request
/// past them waits for one to be let go ([`admit`]).
pub const DEFAULT_INSTANCES: u32 = 1000;

/// The instances the process may have alive at once.
pub fn instances() -> u32 {
    static N: OnceLock<u32> = OnceLock::new();
    *N.get_or_init(|| {
        let Some(v) = std::env::var_os("RAMJET_WASM_INSTANCES") else {
            return DEFAULT_INSTANCES;
        };
        match v.to_str().and_then(|v| v.parse::<u32>().ok()) {
            Some(n) if (1..=100_000).contains(&n) => n,
            _ => {
                note(format!(
                    "wasm: RAMJET_WASM_INSTANCES={v:?} is not a number from 1 to 100000; \
                     {DEFAULT_INSTANCES} instances"
                ));
                DEFAULT_INSTANCES
            }
        }
    })
}

/// Core instances (and tables) the pool has room for per component instance: a component
/// is several core modules (the program and the canonical ABI's shims).
const CORE_PER_COMPONENT: u32 = 8;

/// How long a request waits for room for an instance before it is answered 503.
pub const ADMIT_WAIT: Duration = Duration::from_secs(10);

/// Room for one live instance: held by the instance, given back when it is dropped.
pub type Room = tokio::sync::OwnedSemaphorePermit;

/// The process's room for instances.
fn rooms() -> &'static Arc<tokio::sync::Semaphore> {
    static ROOM: OnceLock<Arc<tokio::sync::Semaphore>> = OnceLock::new();
    ROOM.get_or_init(|| Arc::new(tokio::sync::Semaphore::new(instances() as usize)))
}

/// Room for a new instance now, if one of [`instances`] is free.
pub fn try_admit() -> Option<Room> {
    rooms().clone().try_acquire_owned().ok()
}

/// Room for a new instance, waiting (parked, holding nothing) while every one of
/// [`instances`] is alive; the caller bounds the wait ([`ADMIT_WAIT`]). A burst of
/// requests larger than the pool queues here instead of failing in the allocator.
pub async fn admit() -> Option<Room> {
    rooms().clone().acquire_owned().await.ok()
}

static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();

/// A module was polled since the clock's last tick (set by workers, taken by the clock).
static BUSY: AtomicBool = AtomicBool::new(false);

/// The clock is parked (or about to be): the next module to run must wake it.
static ASLEEP: AtomicBool = AtomicBool::new(false);

/// Ticks with no module polled after which the clock parks: a server between requests
/// keeps it ticking, an idle one is not woken 500 times a second.
pub const IDLE_TICKS: u32 = 100;

/// The epoch clock's thread, to wake it.
static CLOCK: OnceLock<std::thread::Thread> = OnceLock::new();

/// A module is about to run on this thread: the epoch clock must tick (its deadline
/// checks and yields need it). Costs a load when the clock is already ticking, and a
/// store at most once per tick; a system call only to wake a parked clock. (Waking it
/// for every request and letting it park again cost two futex calls per request: 23,416
/// in 12,351 SPECweb99 dynamic GETs.)
pub fn running() {
    if !BUSY.load(Ordering::Relaxed) {
        BUSY.store(true, Ordering::SeqCst);
    }
    // Paired with the clock's store of ASLEEP then load of BUSY (both SeqCst): either it
    // sees BUSY and stays up, or this sees ASLEEP and wakes it.
    if ASLEEP.load(Ordering::SeqCst) {
        if let Some(clock) = CLOCK.get() {
            clock.unpark();
        }
    }
}

/// The clock: a tick every [`TICK`] while modules run, parked after [`IDLE_TICKS`]
/// without one.
fn tick(engine: Engine) {
    let mut idle = 0;
    loop {
        std::thread::sleep(TICK);
        engine.increment_epoch();
        if BUSY.swap(false, Ordering::SeqCst) {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle < IDLE_TICKS {
            continue;
        }
        ASLEEP.store(true, Ordering::SeqCst);
        while !BUSY.load(Ordering::SeqCst) {
            std::thread::park();
        }
        ASLEEP.store(false, Ordering::SeqCst);
        idle = 0;
    }
}

/// Warnings from making the engine, which happens while the configuration loads, before
/// the server's log is set up: the binary logs them once it is (`take_notes`).
static NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// A warning about the engine: logged now, and kept for [`take_notes`].
fn note(text: String) {
    tracing::warn!("{text}");
    NOTES.lock().unwrap_or_else(|e| e.into_inner()).push(text);
}

/// The engine's warnings not yet taken (the binary logs them after setting up its log).
pub fn take_notes() -> Vec<String> {
    std::mem::take(&mut *NOTES.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The engine, made on first use (with its epoch clock thread).
pub fn engine() -> Result<&'static Engine, String> {
    ENGINE
        .get_or_init(|| {
            let engine = build().map_err(|e| format!("the WebAssembly engine: {e:#}"))?;
            let clock = engine.clone();
            let thread = std::thread::Builder::new()
                .name("wasm-epoch".into())
                .spawn(move || tick(clock))
                .map_err(|e| format!("the WebAssembly epoch clock: {e}"))?;
            let _ = CLOCK.set(thread.thread().clone());
            Ok(engine)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Where compiled modules are kept: `RAMJET_WASM_CACHE`, else the user's cache directory
/// (`$XDG_CACHE_HOME/ramjet/wasm` or `~/.cache/ramjet/wasm`), as wasmtime's own tool does.
pub fn cache_directory() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("RAMJET_WASM_CACHE") {
        return Some(dir.into());
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("ramjet").join("wasm"))
}

/// The engine with a pooling allocator, or, where the pool's address space cannot be
/// reserved (a `ulimit -v`, a strict overcommit policy), with instances mapped on demand.
fn build() -> wasmtime::Result<Engine> {
    match Engine::new(&config(true)) {
        Ok(engine) => Ok(engine),
        Err(e) => {
            note(format!(
                "wasm: no pooling allocator ({e:#}); instances are mapped on demand, which \
                 costs more per new instance"
            ));
            Engine::new(&config(false))
        }
    }
}

fn config(pooled: bool) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    // Guest stacks: 512 KiB of wasm stack on a 1 MiB host fiber.
    config.max_wasm_stack(512 << 10);
    config.async_stack_size(1 << 20);
    if pooled {
        let mut pool = PoolingAllocationConfig::default();
        let n = instances();
        pool.total_component_instances(n);
        pool.total_core_instances(n * CORE_PER_COMPONENT);
        pool.total_memories(n * 2);
        pool.total_tables(n * CORE_PER_COMPONENT);
        pool.total_stacks(n);
        pool.max_memory_size(MAX_MEMORY as usize);
        // A finished instance's memory is reset for the next one in place: the pages it
        // dirtied (found with PAGEMAP_SCAN where the kernel has it, Linux 6.7+) are copied
        // back or zeroed, up to this much, instead of unmapped with madvise and faulted in
        // again by the next request. Beyond it, madvise.
        pool.linear_memory_keep_resident(16 << 20);
        pool.table_keep_resident(64 << 10);
        pool.async_stack_keep_resident(1 << 20);
        pool.pagemap_scan(Enabled::Auto);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    // `perf` names the modules' functions from /tmp/perf-PID.map (docs/WASM.md, profiling).
    if std::env::var_os("RAMJET_WASM_PERFMAP").is_some_and(|v| v == "1") {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    if let Some(dir) = cache_directory() {
        match Cache::new(cache_config(dir)) {
            Ok(cache) => {
                config.cache(Some(cache));
            }
            Err(e) => note(format!("wasm: compiled modules will not be cached: {e:#}")),
        }
    }
    config
}

/// zstd's level for compiled modules in the cache, written once and never rewritten.
const CACHE_COMPRESSION: i32 = 3;

/// The on-disk cache of compiled modules in `dir`. wasmtime's cache recompresses an entry
/// at zstd level 20 once it has been loaded 256 times, on a thread of the process that
/// loads it: a server that reloads or restarts often would spend, at an unforeseeable
/// start, hundreds of milliseconds of CPU beside its workers (a test's server was seen
/// using 46% of a CPU after its last request while it did). Entries are written at one
/// level and stay so.
fn cache_config(dir: PathBuf) -> CacheConfig {
    let mut cache = CacheConfig::new();
    cache
        .with_directory(dir)
        .with_baseline_compression_level(CACHE_COMPRESSION)
        .with_optimized_compression_level(CACHE_COMPRESSION)
        .with_optimized_compression_usage_counter_threshold(u64::MAX);
    cache
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_modules_are_never_recompressed() {
        let c = cache_config(PathBuf::from("/nonexistent"));
        assert_eq!(c.baseline_compression_level(), CACHE_COMPRESSION);
        assert_eq!(c.optimized_compression_level(), CACHE_COMPRESSION);
        assert_eq!(c.optimized_compression_usage_counter_threshold(), u64::MAX);
    }
}
