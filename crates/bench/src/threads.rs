//! One OS thread per load thread, each with its own tokio `current_thread` runtime and
//! `LocalSet`, optionally pinned to a CPU.

use std::future::Future;
use std::sync::Arc;

/// Run `make(t)` to completion on thread t for t in 0..threads; thread t is pinned to
/// `cpus[t % cpus.len()]` when `cpus` is not empty. Results come back in thread order.
pub(crate) fn on_threads<R, F, Fut>(threads: usize, cpus: &[usize], make: F) -> Vec<R>
where
    R: Send + 'static,
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + 'static,
{
    let make = Arc::new(make);
    let handles: Vec<_> = (0..threads.max(1))
        .map(|t| {
            let make = make.clone();
            let cpu = (!cpus.is_empty()).then(|| cpus[t % cpus.len()]);
            std::thread::spawn(move || {
                if let Some(cpu) = cpu {
                    if let Err(e) = ramjet_runtime::sys::pin_to_cpu(cpu) {
                        eprintln!("ramjet bench: cannot pin thread {t} to CPU {cpu}: {e}");
                    }
                }
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("tokio runtime");
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, make(t))
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("load thread panicked"))
        .collect()
}
