//! Open-loop load (httperf/wrk2 style): request i is due at `start + i / rate` whatever the
//! server does, so overload shows as latency, errors and unfinished requests, never as a
//! client that quietly slows down.
//!
//! With keep-alive the schedule is dealt round-robin to the connections; a connection still
//! waiting for an answer when its next request is due sends it late, and that wait counts in
//! the latency (no coordinated omission) while the client's own timer slack does not. Without keep-alive every due request opens
//! its own connection, with at most `connections` open at once; an arrival over that cap is
//! an `overflow` error. Whatever is still in flight at the end is `unfinished`, not waited for.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::timeout_at;

use crate::closed::connect;
use crate::exchange::Conn;
use crate::progress::Counter;
use crate::report::Report;
use crate::spec::Spec;
use crate::threads::on_threads;

/// Time for the threads to start before the first request is due.
const LEAD_IN: Duration = Duration::from_millis(50);

pub(crate) fn run(spec: &Spec, done: &Counter) -> Report {
    let rate = spec.rate.unwrap_or(1.0).max(1e-3);
    let duration = spec.duration.unwrap_or(Duration::from_secs(10));
    let spec = Arc::new(spec.clone());
    let start = Instant::now() + LEAD_IN;
    let end = start + duration;
    // Requests due in [start, end): i / rate < duration.
    let due_total = (rate * duration.as_secs_f64()).ceil() as u64;
    let done = done.clone();
    let threads = if spec.keep_alive {
        spec.threads.max(1).min(spec.connections.max(1))
    } else {
        spec.threads.max(1)
    };
    let cpus = spec.cpus.clone();
    let reports = on_threads(threads, &cpus, move |t| {
        let spec = spec.clone();
        let done = done.clone();
        async move {
            let report = Rc::new(RefCell::new(Report::default()));
            let clock = Clock {
                start: start.into(),
                end: end.into(),
                rate,
            };
            if spec.keep_alive {
                let n = spec.connections.max(1);
                let tasks: Vec<_> = (t..n)
                    .step_by(threads)
                    .map(|c| {
                        tokio::task::spawn_local(persistent(
                            spec.clone(),
                            clock,
                            c as u64,
                            n as u64,
                            report.clone(),
                            done.clone(),
                        ))
                    })
                    .collect();
                for task in tasks {
                    let _ = task.await;
                }
            } else {
                arrivals(spec, clock, t as u64, threads as u64, report.clone(), done).await;
            }
            report.take()
        }
    });
    let mut total = Report::default();
    for r in &reports {
        total.merge(r);
    }
    total.offered = Some(due_total);
    total.elapsed = duration;
    total
}

/// The schedule.
#[derive(Clone, Copy)]
struct Clock {
    start: tokio::time::Instant,
    end: tokio::time::Instant,
    rate: f64,
}

impl Clock {
    /// When request `i` is due, or `None` if that is not before the end.
    fn due(&self, i: u64) -> Option<tokio::time::Instant> {
        let at = self.start + Duration::from_secs_f64(i as f64 / self.rate);
        (at < self.end).then_some(at)
    }
}

/// One keep-alive connection sending requests c, c+n, c+2n, ... of the schedule.
async fn persistent(
    spec: Arc<Spec>,
    clock: Clock,
    c: u64,
    n: u64,
    report: Rc<RefCell<Report>>,
    done: Counter,
) {
    let requests: Vec<Vec<u8>> = spec.targets.iter().map(|t| spec.request(t)).collect();
    let mut stream: Option<Conn> = None;
    let mut i = c;
    // When the previous exchange would have ended had the client sent every request exactly
    // when due (the real sends are late by up to the timer's 1 ms resolution).
    let mut ideal_free = clock.start.into_std();
    while let Some(due) = clock.due(i) {
        tokio::time::sleep_until(due).await;
        let target = (i / n) as usize % requests.len();
        i += n;
        let exchange = async {
            if stream.is_none() {
                stream = connect(&spec, spec.targets[target].addr, &report).await;
            }
            let Some(s) = stream.as_mut() else {
                return;
            };
            let sent = Instant::now();
            let outcome = s.exchange(&requests[target]).await;
            let mut r = report.borrow_mut();
            match outcome {
                Ok(answer) => {
                    done.add(1);
                    // Latency = waiting for the previous answer (if the server still owed
                    // it when this one fell due) + this exchange's own time: queueing the
                    // server causes counts (no coordinated omission), timer slack does not.
                    let due = due.into_std();
                    let start_at = due.max(ideal_free);
                    ideal_free = start_at + sent.elapsed();
                    r.answered(&answer, ideal_free - due, spec.expect_length);
                    if !answer.keep_alive {
                        stream = None;
                    }
                }
                Err(f) => {
                    r.fail(f, 1);
                    stream = None;
                }
            }
        };
        if timeout_at(clock.end, exchange).await.is_err() {
            return; // unfinished at the end
        }
    }
}

/// Thread `t` of `threads`: start a new connection for arrivals t, t+threads, ...
async fn arrivals(
    spec: Arc<Spec>,
    clock: Clock,
    t: u64,
    threads: u64,
    report: Rc<RefCell<Report>>,
    done: Counter,
) {
    let cap = spec.connections.max(1).div_ceil(threads as usize);
    let open = Rc::new(Cell::new(0usize));
    let requests: Rc<Vec<Vec<u8>>> =
        Rc::new(spec.targets.iter().map(|t| spec.request(t)).collect());
    let mut i = t;
    while let Some(due) = clock.due(i) {
        tokio::time::sleep_until(due).await;
        let target = (i / threads) as usize % requests.len();
        i += threads;
        if open.get() >= cap {
            report.borrow_mut().errors.overflow += 1;
            continue;
        }
        open.set(open.get() + 1);
        let (spec, report, done, open, requests) = (
            spec.clone(),
            report.clone(),
            done.clone(),
            open.clone(),
            requests.clone(),
        );
        tokio::task::spawn_local(async move {
            let session = async {
                let from = Instant::now();
                let Some(mut s) = connect(&spec, spec.targets[target].addr, &report).await else {
                    return;
                };
                let outcome = s.exchange(&requests[target]).await;
                let mut r = report.borrow_mut();
                match outcome {
                    Ok(answer) => {
                        done.add(1);
                        r.answered(&answer, from.elapsed(), spec.expect_length);
                    }
                    Err(f) => r.fail(f, 1),
                }
            };
            let _ = timeout_at(clock.end, session).await;
            open.set(open.get() - 1);
        });
    }
    // Sessions end by themselves at the latest at the end of the run.
    while open.get() > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
