//! HTTP/2 load (`--h2`): cleartext connections by prior knowledge, each with `pipeline`
//! streams in flight (h2load's `-m`). Each stream sends its next request as soon as its
//! response has ended; latency runs from sending the request to the end of the response.
//! The protocol is the h2 crate's client.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::net::TcpStream;

use crate::closed::Limits;
use crate::exchange::Answer;
use crate::exchange::Failure;
use crate::progress::Counter;
use crate::report::Report;
use crate::spec::Spec;
use crate::tls;

/// What every stream of a connection shares.
struct Shared {
    spec: Arc<Spec>,
    limits: Limits,
    report: Rc<RefCell<Report>>,
    done: Counter,
}

/// One connection (connection `index` of the run): reconnects after an error until the
/// run ends.
pub(crate) async fn connection(
    spec: Arc<Spec>,
    index: usize,
    limits: Limits,
    report: Rc<RefCell<Report>>,
    done: Counter,
) {
    let shared = Rc::new(Shared {
        spec,
        limits,
        report,
        done,
    });
    let spec = &shared.spec;
    while !shared.limits.over() {
        let addr = spec.targets[index % spec.targets.len()].addr;
        let tcp = match tokio::time::timeout(spec.timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(_)) => {
                shared.report.borrow_mut().errors.connect += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            Err(_) => {
                shared.report.borrow_mut().errors.timeout += 1;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let driver = if spec.tls {
            let host = spec.targets[index % spec.targets.len()].host.clone();
            let tls = match tokio::time::timeout(spec.timeout, tls::connect(tcp, &host)).await {
                Ok(Ok(s)) => s,
                _ => {
                    shared.report.borrow_mut().errors.reset += 1;
                    continue;
                }
            };
            handshake(spec, tls).await
        } else {
            handshake(spec, tcp).await
        };
        let Some((client, driver)) = driver else {
            shared.report.borrow_mut().errors.reset += 1;
            continue;
        };
        let streams: Vec<_> = (0..spec.pipeline.max(1))
            .map(|s| {
                tokio::task::spawn_local(stream(
                    client.clone(),
                    shared.clone(),
                    index + s * spec.connections,
                ))
            })
            .collect();
        drop(client);
        let mut broken = false;
        for s in streams {
            broken |= !s.await.unwrap_or(false);
        }
        driver.abort();
        if !broken {
            return;
        }
    }
}

/// The HTTP/2 handshake on `io`; the client handle and the task that drives the
/// connection.
async fn handshake<T>(
    spec: &Spec,
    io: T,
) -> Option<(SendRequest<Bytes>, tokio::task::JoinHandle<()>)>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'static,
{
    let handshake = h2::client::Builder::new()
        .initial_window_size(16 << 20)
        .initial_connection_window_size(64 << 20)
        .handshake::<_, Bytes>(io);
    let (client, conn) = tokio::time::timeout(spec.timeout, handshake)
        .await
        .ok()?
        .ok()?;
    let driver = tokio::task::spawn_local(async move {
        let _ = conn.await;
    });
    Some((client, driver))
}

/// Requests one after another on a stream slot; `false` if the connection broke.
async fn stream(mut client: SendRequest<Bytes>, shared: Rc<Shared>, first: usize) -> bool {
    let spec = &shared.spec;
    let mut next = first % spec.targets.len();
    loop {
        if shared.limits.over() || !shared.limits.take() {
            return true;
        }
        let t = &spec.targets[next];
        next = (next + 1) % spec.targets.len();
        let mut req = http::Request::builder()
            .uri(format!(
                "{}://{}{}",
                if spec.tls { "https" } else { "http" },
                t.host,
                t.path
            ))
            .body(())
            .expect("a valid request");
        for (name, value) in &spec.headers {
            if let (Ok(n), Ok(v)) = (
                http::header::HeaderName::from_bytes(name.as_bytes()),
                http::header::HeaderValue::from_str(value),
            ) {
                req.headers_mut().append(n, v);
            }
        }
        let started = Instant::now();
        let outcome = tokio::time::timeout(spec.timeout, exchange(&mut client, req)).await;
        let mut r = shared.report.borrow_mut();
        match outcome {
            Ok(Ok(answer)) => {
                shared.done.add(1);
                r.answered(&answer, started.elapsed(), spec.expect_length);
            }
            Ok(Err(f)) => {
                r.fail(f, 1);
                return false;
            }
            Err(_) => {
                r.fail(Failure::Timeout, 1);
                return false;
            }
        }
    }
}

async fn exchange(
    client: &mut SendRequest<Bytes>,
    req: http::Request<()>,
) -> Result<Answer, Failure> {
    let ready = std::future::poll_fn(|cx| client.poll_ready(cx)).await;
    ready.map_err(|_| Failure::Reset)?;
    let (response, _) = client.send_request(req, true).map_err(|_| Failure::Reset)?;
    let response = response.await.map_err(|_| Failure::Reset)?;
    let status = response.status().as_u16();
    let declared = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let mut body = response.into_body();
    let mut len = 0u64;
    while let Some(piece) = body.data().await {
        let piece = piece.map_err(|_| Failure::ShortBody)?;
        len += piece.len() as u64;
        let _ = body.flow_control().release_capacity(piece.len());
    }
    if declared.is_some_and(|d| d != len) {
        return Err(Failure::ShortBody);
    }
    Ok(Answer {
        status,
        bytes: len,
        body_len: len,
        keep_alive: true,
    })
}
