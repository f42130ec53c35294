//! A progress bar on a terminal (indicatif), nothing otherwise.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Counts completed units (responses, connections) for the bar; cheap to bump from any thread.
#[derive(Clone, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A bar drawn on stderr while a run lasts, if stderr is a terminal and `enabled`.
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Show `counter` (called `unit`) against `length` of time; `None` if not shown.
    pub fn start(
        enabled: bool,
        length: Duration,
        unit: &'static str,
        counter: Counter,
    ) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        if !enabled || !std::io::stderr().is_terminal() {
            return Progress { stop, thread: None };
        }
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let bar = ProgressBar::new(length.as_millis().max(1) as u64);
            bar.set_style(
                ProgressStyle::with_template("{bar:40} {elapsed}/{duration} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            let start = Instant::now();
            let (mut last, mut last_at) = (0u64, start);
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(250));
                let now = Instant::now();
                let n = counter.get();
                let rate = (n - last) as f64 / (now - last_at).as_secs_f64().max(1e-3);
                (last, last_at) = (n, now);
                bar.set_position((now - start).as_millis() as u64);
                bar.set_message(format!("{n} {unit}, {rate:.0}/s"));
            }
            bar.finish_and_clear();
        });
        Progress {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
