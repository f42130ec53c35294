//! Closed-loop load: each connection keeps `pipeline` requests in flight and sends the next
//! one as soon as a response completes. One tokio current_thread runtime per thread.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ramjet_http1::{parse_response_head, BodyDecoder, BodyFraming, ResponseParse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::report::Report;
use crate::spec::Spec;

/// Read buffer per connection.
const READ_CHUNK: usize = 64 * 1024;

/// Run `spec` to completion and return the merged report.
pub fn run(spec: &Spec) -> Report {
    let spec = Arc::new(spec.clone());
    let budget = Arc::new(AtomicU64::new(spec.requests.unwrap_or(u64::MAX)));
    let start = Instant::now();
    let stop_at = spec.duration.map(|d| start + d);
    let threads = spec.threads.max(1).min(spec.connections.max(1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let spec = spec.clone();
            let budget = budget.clone();
            // Spread connections evenly: thread t gets connections t, t+threads, ...
            let conns: Vec<usize> = (t..spec.connections).step_by(threads).collect();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("tokio runtime");
                let local = tokio::task::LocalSet::new();
                let report = Rc::new(RefCell::new(Report::default()));
                local.block_on(&rt, async {
                    let tasks: Vec<_> = conns
                        .into_iter()
                        .map(|c| {
                            tokio::task::spawn_local(connection(
                                spec.clone(),
                                c,
                                stop_at,
                                budget.clone(),
                                report.clone(),
                            ))
                        })
                        .collect();
                    for t in tasks {
                        let _ = t.await;
                    }
                });
                Rc::try_unwrap(report)
                    .map(RefCell::into_inner)
                    .unwrap_or_default()
            })
        })
        .collect();
    let mut total = Report::default();
    for h in handles {
        if let Ok(r) = h.join() {
            total.merge(&r);
        }
    }
    total.elapsed = start.elapsed();
    total
}

/// Why one exchange failed.
enum Failure {
    Timeout,
    Reset,
    ShortBody,
    Invalid,
}

async fn connection(
    spec: Arc<Spec>,
    index: usize,
    stop_at: Option<Instant>,
    budget: Arc<AtomicU64>,
    report: Rc<RefCell<Report>>,
) {
    let requests: Vec<Vec<u8>> = spec.targets.iter().map(|t| spec.request(t)).collect();
    let mut next = index % requests.len();
    let depth = if spec.keep_alive {
        spec.pipeline.max(1)
    } else {
        1
    };
    let over = || stop_at.is_some_and(|t| Instant::now() >= t);
    let take = || {
        budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    };
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    // A request is taken from the budget before connecting, so no connection is opened
    // that would have nothing to send.
    let mut ticket = false;
    'connect: while !over() {
        if !ticket && !take() {
            return;
        }
        ticket = true;
        let target = &spec.targets[next];
        let mut stream =
            match tokio::time::timeout(spec.timeout, TcpStream::connect(target.addr)).await {
                Ok(Ok(s)) => s,
                Ok(Err(_)) => {
                    report.borrow_mut().errors.connect += 1;
                    // Do not spin on a refused port.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
                Err(_) => {
                    report.borrow_mut().errors.timeout += 1;
                    continue;
                }
            };
        let _ = stream.set_nodelay(true);
        buf.clear();
        let mut inflight: VecDeque<Instant> = VecDeque::with_capacity(depth);
        loop {
            let mut out = Vec::new();
            while inflight.len() < depth && (std::mem::take(&mut ticket) || (!over() && take())) {
                out.extend_from_slice(&requests[next]);
                inflight.push_back(Instant::now());
                next = (next + 1) % requests.len();
            }
            if inflight.is_empty() {
                return;
            }
            if !out.is_empty() {
                match tokio::time::timeout(spec.timeout, stream.write_all(&out)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => {
                        report.borrow_mut().errors.reset += inflight.len() as u64;
                        continue 'connect;
                    }
                    Err(_) => {
                        report.borrow_mut().errors.timeout += inflight.len() as u64;
                        continue 'connect;
                    }
                }
            }
            let outcome = read_response(&mut stream, &mut buf, &spec).await;
            let sent = inflight.pop_front().expect("a request is in flight");
            let mut r = report.borrow_mut();
            match outcome {
                Ok((status, bytes, body_len, keep_alive)) => {
                    r.responses += 1;
                    r.bytes += bytes;
                    r.record(sent.elapsed().as_micros() as u64);
                    if !(200..400).contains(&status) {
                        r.errors.status += 1;
                    } else if spec.expect_length.is_some_and(|n| n != body_len) {
                        r.errors.short_body += 1;
                    }
                    if !keep_alive || !spec.keep_alive {
                        // Requests pipelined behind a closing response are lost: count them.
                        r.errors.reset += inflight.len() as u64;
                        continue 'connect;
                    }
                }
                Err(f) => {
                    let lost = 1 + inflight.len() as u64;
                    match f {
                        Failure::Timeout => r.errors.timeout += lost,
                        Failure::Reset => r.errors.reset += lost,
                        Failure::ShortBody => r.errors.short_body += lost,
                        Failure::Invalid => r.errors.invalid += lost,
                    }
                    continue 'connect;
                }
            }
        }
    }
}

/// Read one response from `stream` (using and refilling `buf`); returns status, bytes read
/// for it, body length and whether the connection may be reused.
async fn read_response(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    spec: &Spec,
) -> Result<(u16, u64, u64, bool), Failure> {
    let head = loop {
        match parse_response_head(buf, false) {
            ResponseParse::Complete(h) => break h,
            ResponseParse::Invalid => return Err(Failure::Invalid),
            ResponseParse::Partial => {
                if fill(stream, buf, spec).await? == 0 {
                    return Err(Failure::Reset);
                }
            }
        }
    };
    buf.drain(..head.head_len);
    let mut bytes = head.head_len as u64;
    let mut body = 0u64;
    if head.until_close {
        loop {
            body += buf.len() as u64;
            buf.clear();
            if fill(stream, buf, spec).await? == 0 {
                break;
            }
        }
        return Ok((head.status, bytes + body, body, false));
    }
    if head.framing != BodyFraming::None {
        let mut decoder = BodyDecoder::new(head.framing, u64::MAX).map_err(|_| Failure::Invalid)?;
        loop {
            while !buf.is_empty() && !decoder.is_done() {
                let step = decoder.decode(buf).map_err(|_| Failure::Invalid)?;
                body += step.data.len() as u64;
                bytes += step.consumed as u64;
                buf.drain(..step.consumed);
            }
            if decoder.is_done() {
                break;
            }
            if fill(stream, buf, spec).await? == 0 {
                return Err(Failure::ShortBody);
            }
        }
    }
    Ok((head.status, bytes, body, head.keep_alive))
}

async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, spec: &Spec) -> Result<usize, Failure> {
    buf.reserve(READ_CHUNK);
    match tokio::time::timeout(spec.timeout, stream.read_buf(buf)).await {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(_)) => Err(Failure::Reset),
        Err(_) => Err(Failure::Timeout),
    }
}
