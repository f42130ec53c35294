//! One transfer on a data connection: the body written through the [`Outbox`] (a file by
//! `sendfile` in bounded chunks, a cold one warmed on the blocking pool; the location's
//! send rates through [`Throttled`]), while the control connection is read for ABOR. A
//! transfer of a large file is listed among the worker's downloads (status page).

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ramjet_config::{Location, Resolved};
use ramjet_observe::stats::{Download, DOWNLOAD_BYTES};

use super::control::Control;
use crate::content::Content;
use crate::outbox::{Outbox, WriteError};
use crate::response::Body;
use crate::throttle::{Throttle, Throttled};
use crate::transport::Transport;
use crate::worker::HttpWorker;

/// How a transfer ended, with the body bytes sent.
pub(super) enum Sent {
    Done(u64),
    /// ABOR on the control connection.
    Aborted(u64),
    /// The data connection failed or stalled past the data timeout.
    Failed(u64, io::Error),
    /// The control connection closed meanwhile (the transfer is dropped with it).
    ControlClosed(u64),
    /// No data connection came.
    NoConnection(io::Error),
}

/// What a transfer needs of its session.
pub(super) struct Job<'a> {
    pub(super) peer: SocketAddr,
    pub(super) location: &'a Location,
    pub(super) config: &'a Resolved,
    pub(super) generation: u64,
    /// A data connection that takes nothing for this long is given up.
    pub(super) timeout: Duration,
    /// The request line and length of a file transfer.
    pub(super) download: Option<(&'a [u8], u64)>,
}

/// Most control bytes read and held during a transfer.
const MAX_WAITING: usize = 16 * 1024;

fn done(r: Result<(), WriteError>, written: u64) -> Sent {
    match r {
        Ok(()) => Sent::Done(written),
        Err(WriteError::Timeout) => Sent::Failed(written, io::ErrorKind::TimedOut.into()),
        Err(WriteError::Io(e)) => Sent::Failed(written, e),
    }
}

/// Whether a control line is ABOR (Telnet IP/Synch before it are the parser's to drop).
fn is_abort(line: &[u8]) -> bool {
    matches!(
        ramjet_ftp::command::parse(line),
        Ok(ramjet_ftp::command::Command::Abor)
    )
}

/// Send `body` on `data`, watching `ctl` for ABOR.
pub(super) async fn send<C: Content>(
    w: &Rc<HttpWorker<C>>,
    ctl: &mut Control,
    transport: Transport,
    body: Body,
    job: Job<'_>,
) -> Sent {
    let mut out = Outbox::default();
    let resp = out.begin();
    out.body(resp, body, false);
    let sent = Arc::new(AtomicU64::new(0));
    let mut transport = transport;
    let _listed = job
        .download
        .filter(|&(_, len)| len >= DOWNLOAD_BYTES)
        .map(|(line, total)| {
            w.stats.download(Download {
                client: job.peer,
                request: String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned(),
                started: std::time::Instant::now(),
                total,
                sent: sent.clone(),
                socket: std::os::fd::AsRawFd::as_raw_fd(transport.socket()),
                marks: Default::default(),
            })
        });
    let throttle = Throttle::of(
        (Some(job.location), job.generation),
        job.config,
        job.peer,
        None,
    );
    let flush = async {
        let r = match &throttle {
            None => out.flush(&transport, job.timeout, Some(&sent)).await,
            Some(t) => {
                t.borrow_mut().begin_flush();
                let sink = Throttled {
                    stream: &transport,
                    throttle: t,
                };
                out.flush(&sink, job.timeout, Some(&sent)).await
            }
        };
        (r, out.body_written.first().copied().unwrap_or(0))
    };
    let flushed = 'watch: {
        tokio::pin!(flush);
        loop {
            if ctl.buffered() > MAX_WAITING {
                // A client that floods the control connection meanwhile is not read further.
                break 'watch (&mut flush).await;
            }
            tokio::select! {
                ended = &mut flush => break 'watch ended,
                read = ctl.fill() => {
                    let so_far = sent.load(Ordering::Relaxed);
                    match read {
                        Ok(0) | Err(_) => return Sent::ControlClosed(so_far),
                        Ok(_) if ctl.take_first(is_abort) => return Sent::Aborted(so_far),
                        // Other commands wait for the transfer's end (the control loop
                        // reads them then).
                        Ok(_) => {}
                    }
                }
            }
        }
    };
    let (r, written) = flushed;
    // A TLS data connection ends with close_notify, so the client knows the file is whole.
    if r.is_ok() {
        transport.shutdown().await;
    }
    done(r, written)
}
