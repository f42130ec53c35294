//! Slow downloads: hold N concurrent downloads, each read by the client at R bytes/s, for a
//! duration — the mirror scenario (thousands of modem- and DSL-speed clients on one server).
//!
//! Each connection binds to one of the given source addresses (so N can exceed one
//! address's ephemeral ports), uses a small receive buffer (so the server, not the client's
//! kernel, holds the backlog), reads with a token bucket and, when a file ends, asks for it
//! again on the same connection. A connection "kept its rate" if it was still downloading at
//! the end and averaged at least [`KEPT`] of R since its first body byte.

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ramjet_http1::{parse_response_head, BodyFraming, ResponseParse};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

use crate::progress::Counter;
use crate::report::Errors;
use crate::spec::Target;
use crate::threads::on_threads;

/// Share of the target rate a connection must average to count as having kept it.
pub const KEPT: f64 = 0.95;
/// Per-connection rate histogram: bucket k holds connections at k% of the target (last: more).
const BUCKETS: usize = 201;
/// Bytes read per read call at most.
const SCRATCH: usize = 64 * 1024;
/// Bytes read per call while looking for the response head.
const HEAD_READ: usize = 1024;

/// What a slow-download run holds.
#[derive(Debug, Clone)]
pub struct SlowSpec {
    pub target: Target,
    pub connections: usize,
    /// Per-connection read rate, bytes per second.
    pub bytes_per_sec: u64,
    pub duration: Duration,
    /// Source addresses, used round-robin (empty: the kernel picks).
    pub sources: Vec<IpAddr>,
    pub threads: usize,
    pub cpus: Vec<usize>,
    /// Connection attempts in flight at once (per process), so the listen backlog is not
    /// flooded while N connections are opened.
    pub connect_concurrency: usize,
    /// No progress at all for this long is a timeout.
    pub timeout: Duration,
    /// SO_RCVBUF asked for on each connection (the kernel doubles it).
    pub recv_buffer: u32,
    /// How often each connection reads (its token bucket's refill period); longer means
    /// fewer wake-ups for very many connections, and needs a receive buffer that holds
    /// `bytes_per_sec` x this.
    pub read_every: Duration,
}

/// What a slow-download run measured; merges across threads and processes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlowReport {
    /// Connections asked for.
    pub wanted: u64,
    /// Connections that received a response head.
    pub established: u64,
    /// Connections still downloading at the end.
    pub alive_at_end: u64,
    /// Of those, how many averaged at least 95% of the target rate.
    pub kept_rate: u64,
    /// Body bytes received.
    pub bytes: u64,
    pub seconds: f64,
    /// Seconds from the start until the last connection was established.
    pub ramp_seconds: f64,
    pub target_bytes_per_sec: u64,
    pub errors: Errors,
    /// Connections by achieved rate in percent of the target (index 200: 200% or more).
    pub rate_percent: Vec<u64>,
    /// Timeouts by phase: waiting for the TCP connection, for the response head, for body
    /// bytes. They add up to `errors.timeout`.
    #[serde(default)]
    pub timeouts_by_phase: TimeoutPhases,
    /// Seconds from the start of the first and last timeout (none: 0 and 0).
    #[serde(default)]
    pub timeout_span: (f64, f64),
}

/// Where downloads timed out (see [`SlowReport::timeouts_by_phase`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeoutPhases {
    pub connect: u64,
    pub head: u64,
    pub body: u64,
}

impl SlowReport {
    /// Fold another thread's or process's report into this one.
    pub fn merge(&mut self, o: &SlowReport) {
        self.wanted += o.wanted;
        self.established += o.established;
        self.alive_at_end += o.alive_at_end;
        self.kept_rate += o.kept_rate;
        self.bytes += o.bytes;
        self.seconds = self.seconds.max(o.seconds);
        self.ramp_seconds = self.ramp_seconds.max(o.ramp_seconds);
        self.target_bytes_per_sec = self.target_bytes_per_sec.max(o.target_bytes_per_sec);
        if o.errors.timeout > 0 {
            let (a, b) = (self.timeout_span, o.timeout_span);
            self.timeout_span = if self.errors.timeout == 0 {
                b
            } else {
                (a.0.min(b.0), a.1.max(b.1))
            };
        }
        self.errors.add(&o.errors);
        self.timeouts_by_phase.connect += o.timeouts_by_phase.connect;
        self.timeouts_by_phase.head += o.timeouts_by_phase.head;
        self.timeouts_by_phase.body += o.timeouts_by_phase.body;
        self.rate_percent.resize(BUCKETS, 0);
        for (a, b) in self.rate_percent.iter_mut().zip(&o.rate_percent) {
            *a += b;
        }
    }

    /// Count a connection still downloading at the end: `got` bytes between its first body
    /// byte and its last read, `times` = (first to last read, last read to the end).
    fn held(&mut self, spec: &SlowSpec, got: u64, times: Option<(Duration, Duration)>) {
        self.alive_at_end += 1;
        let Some((active, idle)) = times else {
            self.rate_percent[0] += 1;
            return;
        };
        // The client reads once per `read_interval`, so the rate is measured up to the last
        // read, unless the connection then stalled for longer than two intervals.
        let interval = read_interval(spec);
        let secs = if idle.as_secs_f64() > 2.0 * interval {
            (active + idle).as_secs_f64()
        } else {
            active.as_secs_f64().max(interval)
        };
        let rate = got as f64 / secs / spec.bytes_per_sec.max(1) as f64;
        if rate >= KEPT {
            self.kept_rate += 1;
        }
        self.rate_percent[((rate * 100.0) as usize).min(BUCKETS - 1)] += 1;
    }

    /// Count a timeout in `phase`, `at` seconds from the start.
    fn timed_out(&mut self, phase: Phase, at: f64) {
        let first = self.errors.timeout == 0;
        self.errors.timeout += 1;
        let p = &mut self.timeouts_by_phase;
        match phase {
            Phase::Connect => p.connect += 1,
            Phase::Head => p.head += 1,
            Phase::Body => p.body += 1,
        }
        self.timeout_span = if first {
            (at, at)
        } else {
            (self.timeout_span.0.min(at), self.timeout_span.1.max(at))
        };
    }

    /// The per-connection rate (percent of target) at quantile `q` of connections alive at
    /// the end.
    pub fn rate_percentile(&self, q: f64) -> Option<usize> {
        let total: u64 = self.rate_percent.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (k, n) in self.rate_percent.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(k);
            }
        }
        None
    }

    pub fn text(&self) -> String {
        let pct = |q| {
            self.rate_percentile(q)
                .map_or("-".to_string(), |p| format!("{p}%"))
        };
        let e = &self.errors;
        let p = &self.timeouts_by_phase;
        let timeouts = if e.timeout > 0 {
            format!(
                "Timeouts: {} waiting to connect, {} for the response head, {} for body bytes; between {:.1}s and {:.1}s\n",
                p.connect, p.head, p.body, self.timeout_span.0, self.timeout_span.1
            )
        } else {
            String::new()
        };
        let text = format!(
            "  {} of {} connections established (last after {:.1}s), {} still downloading at the end\n  {} kept at least {:.0}% of {} B/s; per-connection rate: min {} p1 {} p50 {}\n  {:.2} MB received in {:.1}s: {:.2} MB/s ({:.1} Mbit/s)\nErrors: connect {}, timeout {}, reset {}, status {}, short body {}, invalid {}\n",
            self.established,
            self.wanted,
            self.ramp_seconds,
            self.alive_at_end,
            self.kept_rate,
            KEPT * 100.0,
            self.target_bytes_per_sec,
            pct(0.0),
            pct(0.01),
            pct(0.5),
            self.bytes as f64 / 1e6,
            self.seconds,
            self.bytes as f64 / 1e6 / self.seconds.max(1e-9),
            self.bytes as f64 * 8.0 / 1e6 / self.seconds.max(1e-9),
            e.connect,
            e.timeout,
            e.reset,
            e.status,
            e.short_body,
            e.invalid,
        );
        text + &timeouts
    }
}

/// Hold the downloads `spec` asks for in this process; `established` counts connections
/// as they get their first response (for a progress bar).
pub fn run_slow(spec: &SlowSpec, established: &Counter) -> SlowReport {
    let spec = Arc::new(spec.clone());
    let start = Instant::now();
    let end = start + spec.duration;
    let threads = spec.threads.max(1).min(spec.connections.max(1));
    let counter = established.clone();
    let cpus = spec.cpus.clone();
    let reports = on_threads(threads, &cpus, move |t| {
        let spec = spec.clone();
        let counter = counter.clone();
        async move {
            let report = Rc::new(RefCell::new(SlowReport {
                rate_percent: vec![0; BUCKETS],
                target_bytes_per_sec: spec.bytes_per_sec,
                ..SlowReport::default()
            }));
            let gate = Rc::new(tokio::sync::Semaphore::new(
                spec.connect_concurrency.div_ceil(threads).max(1),
            ));
            let scratch = Rc::new(RefCell::new(vec![0u8; SCRATCH]));
            let tasks: Vec<_> = (t..spec.connections)
                .step_by(threads)
                .map(|c| {
                    tokio::task::spawn_local(download(
                        spec.clone(),
                        c,
                        (start, end),
                        report.clone(),
                        gate.clone(),
                        scratch.clone(),
                        counter.clone(),
                    ))
                })
                .collect();
            for task in tasks {
                let _ = task.await;
            }
            report.take()
        }
    });
    let mut total = SlowReport {
        rate_percent: vec![0; BUCKETS],
        ..SlowReport::default()
    };
    for r in &reports {
        total.merge(r);
    }
    total.seconds = (end - start).as_secs_f64();
    total
}

/// Where a download was when it timed out.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Connect,
    Head,
    Body,
}

/// Why a download stopped before the end.
enum Stop {
    Timeout(Phase),
    Reset,
    Status,
    ShortBody,
    Invalid,
}

/// One download connection, reconnecting after a failure until the end.
async fn download(
    spec: Arc<SlowSpec>,
    index: usize,
    (start, end): (Instant, Instant),
    report: Rc<RefCell<SlowReport>>,
    gate: Rc<tokio::sync::Semaphore>,
    scratch: Rc<RefCell<Vec<u8>>>,
    established: Counter,
) {
    report.borrow_mut().wanted += 1;
    let source = (!spec.sources.is_empty()).then(|| spec.sources[index % spec.sources.len()]);
    let deadline = tokio::time::Instant::from_std(end);
    let mut counted = false;
    while Instant::now() < end {
        let stream = {
            let permit = gate.acquire().await;
            let limit = deadline.min(tokio::time::Instant::now() + spec.timeout);
            match tokio::time::timeout_at(limit, open(&spec, source)).await {
                Ok(Ok(s)) => s,
                Ok(Err(_)) => {
                    report.borrow_mut().errors.connect += 1;
                    drop(permit);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
                Err(_) => {
                    if Instant::now() < end {
                        let at = start.elapsed().as_secs_f64();
                        report.borrow_mut().timed_out(Phase::Connect, at);
                    }
                    continue;
                }
            }
        };
        let mut got = 0u64;
        let mut first: Option<Instant> = None;
        let mut last = Instant::now();
        let result = tokio::time::timeout_at(
            deadline,
            transfer(
                &spec,
                stream,
                &scratch,
                &mut got,
                (&mut first, &mut last),
                &mut || {
                    if !counted {
                        counted = true;
                        established.add(1);
                        let mut r = report.borrow_mut();
                        r.established += 1;
                        r.ramp_seconds = r.ramp_seconds.max(start.elapsed().as_secs_f64());
                    }
                },
            ),
        )
        .await;
        let held = {
            let mut r = report.borrow_mut();
            r.bytes += got;
            match result {
                // Still downloading at the end: this connection held.
                Err(_) => {
                    r.held(&spec, got, first.map(|f| (last - f, end - last)));
                    true
                }
                Ok(stop) => {
                    match stop {
                        Stop::Timeout(phase) => r.timed_out(phase, start.elapsed().as_secs_f64()),
                        Stop::Reset => r.errors.reset += 1,
                        Stop::Status => r.errors.status += 1,
                        Stop::ShortBody => r.errors.short_body += 1,
                        Stop::Invalid => r.errors.invalid += 1,
                    }
                    false
                }
            }
        };
        if held {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn open(spec: &SlowSpec, source: Option<IpAddr>) -> std::io::Result<TcpStream> {
    connect_from(spec.target.addr, source, Some(spec.recv_buffer)).await
}

/// Connect to `addr` from `source` (any port of it; on IPv4 the port is picked at connect,
/// so one source address holds a connection per port to each server), with a receive
/// buffer of `recv_buffer` bytes if given.
pub(crate) async fn connect_from(
    addr: SocketAddr,
    source: Option<IpAddr>,
    recv_buffer: Option<u32>,
) -> std::io::Result<TcpStream> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(size) = recv_buffer {
        socket.set_recv_buffer_size(size)?;
    }
    if let Some(ip) = source {
        if ip.is_ipv4() {
            use std::os::fd::AsFd;
            ramjet_runtime::sys::bind_address_no_port(socket.as_fd())?;
        }
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    socket.connect(addr).await
}

/// Request the file again and again, reading at the spec's rate; returns why it stopped
/// (the caller's deadline ends it otherwise). `got` counts body bytes, `first` is the first
/// body byte's time and `last` the last read's; `on_head` runs at every response head.
async fn transfer(
    spec: &SlowSpec,
    mut stream: TcpStream,
    scratch: &RefCell<Vec<u8>>,
    got: &mut u64,
    (first, last): (&mut Option<Instant>, &mut Instant),
    on_head: &mut impl FnMut(),
) -> Stop {
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\n\r\n",
        spec.target.path, spec.target.host
    );
    let rate = spec.bytes_per_sec.max(1) as f64;
    let chunk = (rate * read_interval(spec)) as u64;
    let mut head = Vec::new();
    loop {
        if stream.write_all(request.as_bytes()).await.is_err() {
            return Stop::Reset;
        }
        // The head (and whatever body bytes came with it).
        head.clear();
        let (mut remaining, body_start) = loop {
            // Small reads, so little body arrives with the head ahead of the rate.
            match read_some(
                &mut stream,
                scratch,
                HEAD_READ,
                spec.timeout,
                Phase::Head,
                |b| head.extend_from_slice(b),
            )
            .await
            {
                Err(stop) => return stop,
                Ok(0) => return Stop::Reset,
                Ok(_) => {}
            }
            match parse_response_head(&head, false) {
                ResponseParse::Partial if head.len() < 64 * 1024 => continue,
                ResponseParse::Complete(h) => {
                    if !(200..300).contains(&h.status) {
                        return Stop::Status;
                    }
                    let BodyFraming::Length(n) = h.framing else {
                        return Stop::Invalid;
                    };
                    break (n, h.head_len);
                }
                _ => return Stop::Invalid,
            }
        };
        on_head();
        let t0 = *first.get_or_insert_with(Instant::now);
        *last = Instant::now();
        let extra = (head.len() - body_start) as u64;
        if extra > remaining {
            return Stop::Invalid;
        }
        remaining -= extra;
        *got += extra;
        while remaining > 0 {
            let allowed = rate * t0.elapsed().as_secs_f64();
            let tokens = allowed - *got as f64;
            if tokens < 512f64.min(remaining as f64) {
                let wait = (*got + chunk.min(remaining)) as f64 / rate;
                tokio::time::sleep_until((t0 + Duration::from_secs_f64(wait)).into()).await;
                continue;
            }
            let want = (tokens as u64).min(remaining).min(SCRATCH as u64) as usize;
            match read_some(
                &mut stream,
                scratch,
                want,
                spec.timeout,
                Phase::Body,
                |_| {},
            )
            .await
            {
                Err(stop) => return stop,
                Ok(0) => return Stop::ShortBody,
                Ok(n) => {
                    remaining -= n as u64;
                    *got += n as u64;
                    *last = Instant::now();
                }
            }
        }
    }
}

/// Seconds between a connection's reads: the spec's period, but never under 512 bytes at
/// a time.
fn read_interval(spec: &SlowSpec) -> f64 {
    let rate = spec.bytes_per_sec.max(1) as f64;
    (rate * spec.read_every.as_secs_f64()).max(512.0) / rate
}

/// Read at most `max` bytes into the shared scratch buffer and hand them to `take`.
async fn read_some(
    stream: &mut TcpStream,
    scratch: &RefCell<Vec<u8>>,
    max: usize,
    timeout: Duration,
    phase: Phase,
    mut take: impl FnMut(&[u8]),
) -> Result<usize, Stop> {
    loop {
        match tokio::time::timeout(timeout, stream.readable()).await {
            Err(_) => return Err(Stop::Timeout(phase)),
            Ok(Err(_)) => return Err(Stop::Reset),
            Ok(Ok(())) => {}
        }
        let mut buf = scratch.borrow_mut();
        match stream.try_read(&mut buf[..max]) {
            Ok(n) => {
                take(&buf[..n]);
                return Ok(n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return Err(Stop::Reset),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_merge_by_phase_and_span() {
        let mut a = SlowReport::default();
        a.timed_out(Phase::Connect, 12.0);
        a.timed_out(Phase::Head, 30.0);
        let mut b = SlowReport::default();
        b.timed_out(Phase::Body, 5.0);
        let mut total = SlowReport::default();
        total.merge(&SlowReport::default());
        total.merge(&a);
        total.merge(&b);
        assert_eq!(total.errors.timeout, 3);
        assert_eq!(
            total.timeouts_by_phase,
            TimeoutPhases {
                connect: 1,
                head: 1,
                body: 1
            }
        );
        assert_eq!(total.timeout_span, (5.0, 30.0));
        assert!(total
            .text()
            .contains("1 waiting to connect, 1 for the response head"));
        assert!(!SlowReport::default().text().contains("Timeouts:"));
    }
}
