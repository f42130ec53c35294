//! Closed-loop load: each connection keeps `pipeline` requests in flight and sends the next
//! one as soon as a response completes.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::exchange::Conn;
use crate::progress::Counter;
use crate::report::Report;
use crate::spec::Spec;
use crate::threads::on_threads;

/// Run `spec` (closed loop, or open loop when it has a rate) and return the merged report.
pub fn run(spec: &Spec) -> Report {
    run_counted(spec, &Counter::default())
}

/// As [`run`], bumping `done` for every response (for a progress bar).
pub fn run_counted(spec: &Spec, done: &Counter) -> Report {
    if spec.rate.is_some() {
        return crate::open::run(spec, done);
    }
    let spec = Arc::new(spec.clone());
    let start = Instant::now();
    let limits = Limits {
        stop_at: spec.duration.map(|d| start + d),
        budget: Arc::new(AtomicU64::new(spec.requests.unwrap_or(u64::MAX))),
    };
    let threads = spec.threads.max(1).min(spec.connections.max(1));
    let done = done.clone();
    let cpus = spec.cpus.clone();
    let reports = on_threads(threads, &cpus, move |t| {
        let spec = spec.clone();
        let limits = limits.clone();
        let done = done.clone();
        async move {
            let report = Rc::new(RefCell::new(Report::default()));
            // Spread connections evenly: thread t gets connections t, t+threads, ...
            let tasks: Vec<_> = (t..spec.connections)
                .step_by(threads)
                .map(|c| {
                    tokio::task::spawn_local(connection(
                        spec.clone(),
                        c,
                        limits.clone(),
                        report.clone(),
                        done.clone(),
                    ))
                })
                .collect();
            for t in tasks {
                let _ = t.await;
            }
            report.take()
        }
    });
    let mut total = Report::default();
    for r in &reports {
        total.merge(r);
    }
    total.elapsed = start.elapsed();
    total
}

/// When a closed-loop run ends: at its deadline, or once its requests are all taken.
#[derive(Clone)]
pub(crate) struct Limits {
    stop_at: Option<Instant>,
    /// Requests left to send, shared by every connection.
    budget: Arc<AtomicU64>,
}

impl Limits {
    pub(crate) fn over(&self) -> bool {
        self.stop_at.is_some_and(|t| Instant::now() >= t)
    }

    /// Take one request from the budget; `false` when none is left.
    pub(crate) fn take(&self) -> bool {
        self.budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }
}

async fn connection(
    spec: Arc<Spec>,
    index: usize,
    limits: Limits,
    report: Rc<RefCell<Report>>,
    done: Counter,
) {
    if spec.http2 {
        return crate::http2::connection(spec, index, limits, report, done).await;
    }
    let requests: Vec<Vec<u8>> = spec.targets.iter().map(|t| spec.request(t)).collect();
    // A connection of `per_connection` requests ends with one that asks to close.
    let per_connection = spec
        .per_connection
        .filter(|_| spec.keep_alive)
        .map(|n| n.max(1));
    let closing: Vec<Vec<u8>> = match per_connection {
        Some(_) => spec
            .targets
            .iter()
            .map(|t| spec.request_keeping(t, false))
            .collect(),
        None => Vec::new(),
    };
    let mut next = index % requests.len();
    let depth = if spec.keep_alive {
        spec.pipeline.max(1)
    } else {
        1
    };
    let over = || limits.over();
    let take = || limits.take();
    let mut out: Vec<u8> =
        Vec::with_capacity(requests.iter().map(Vec::len).max().unwrap_or(0) * depth);
    // A request is taken from the budget before connecting, so no connection is opened
    // that would have nothing to send.
    let mut ticket = false;
    'connect: while !over() {
        if !ticket && !take() {
            return;
        }
        ticket = true;
        let Some(mut conn) = connect(&spec, spec.targets[next].addr, &report).await else {
            continue;
        };
        // With `per_connection`, this connection's URL; the next connection takes the next.
        let own = next;
        if per_connection.is_some() {
            next = (next + 1) % requests.len();
        }
        let mut sent_here = 0u64;
        let mut inflight: VecDeque<Instant> = VecDeque::with_capacity(depth);
        loop {
            // Refill the pipeline only when no answer is already buffered: one write tops it
            // up (as wrk's pipelining does), instead of one write per answer.
            if inflight.is_empty() || !conn.buffered() {
                out.clear();
                while inflight.len() < depth
                    && per_connection.is_none_or(|n| sent_here < n)
                    && (std::mem::take(&mut ticket) || (!over() && take()))
                {
                    sent_here += 1;
                    match per_connection {
                        Some(n) if sent_here == n => out.extend_from_slice(&closing[own]),
                        Some(_) => out.extend_from_slice(&requests[own]),
                        None => {
                            out.extend_from_slice(&requests[next]);
                            next = (next + 1) % requests.len();
                        }
                    }
                    inflight.push_back(Instant::now());
                }
                if inflight.is_empty() {
                    if per_connection.is_some_and(|n| sent_here >= n) {
                        continue 'connect;
                    }
                    return;
                }
                if !out.is_empty() {
                    if let Err(f) = conn.send(&out).await {
                        report.borrow_mut().fail(f, inflight.len() as u64);
                        continue 'connect;
                    }
                }
            }
            let outcome = conn.response().await;
            let sent = inflight.pop_front().expect("a request is in flight");
            let mut r = report.borrow_mut();
            match outcome {
                Ok(answer) => {
                    done.add(1);
                    r.answered(&answer, sent.elapsed(), spec.expect_length);
                    if !answer.keep_alive || !spec.keep_alive {
                        // Requests pipelined behind a closing response are lost: count them.
                        r.errors.reset += inflight.len() as u64;
                        continue 'connect;
                    }
                }
                Err(f) => {
                    r.fail(f, 1 + inflight.len() as u64);
                    continue 'connect;
                }
            }
        }
    }
}

/// Connect with the spec's timeout; failures are counted (and a refused port is not spun on).
pub(crate) async fn connect(
    spec: &Spec,
    addr: std::net::SocketAddr,
    report: &RefCell<Report>,
) -> Option<Conn> {
    match tokio::time::timeout(spec.timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Some(Conn::new(s, spec.timeout, spec.discard_body))
        }
        Ok(Err(_)) => {
            report.borrow_mut().errors.connect += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
            None
        }
        Err(_) => {
            report.borrow_mut().errors.timeout += 1;
            None
        }
    }
}
