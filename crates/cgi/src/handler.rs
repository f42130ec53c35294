//! The `cgi` handler: a process per request, the body on its stdin, its output streamed
//! back with backpressure, a cap on processes running at once, and a timeout.

use std::future::Future;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use ramjet_pipeline::{
    error_response, Body, BodySource, Content, FailKind, Failure, Later, Outcome, Request,
    Response, Side,
};
use ramjet_runtime::child::Child;
use ramjet_runtime::sys::{self, Program, Spawner};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::net::unix::pipe;
use tokio::time::Sleep;

use crate::env;
use crate::output;

/// CGI programs running now, all workers together.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// A place among the running programs, given back when dropped.
struct Permit;

impl Permit {
    fn take(limit: usize) -> Option<Permit> {
        let before = RUNNING.fetch_add(1, Ordering::AcqRel);
        if before >= limit {
            RUNNING.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Permit)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The `cgi` handler (stateless: every request starts its own process).
#[derive(Default)]
pub struct Cgi;

impl Cgi {
    pub fn new() -> Cgi {
        Cgi
    }
}

impl Content for Cgi {
    fn produce<'r>(&'r self, req: &'r Request<'r>) -> Result<Outcome, Later<'r>> {
        let Some(opts) = req.location.cgi.as_ref() else {
            return Ok(Outcome::Declined);
        };
        let Ok(path) = std::str::from_utf8(req.path) else {
            return Ok(Outcome::Declined);
        };
        let Some((program, path_info)) = env::split_program(path, &req.location.prefix) else {
            return Ok(Outcome::Declined);
        };
        let file = opts.root.join(program);
        Err(req.later(|| run(req, file, program.to_string(), path_info.to_string())))
    }
}

fn bad_gateway(script: &str, why: impl std::fmt::Display) -> Outcome {
    Outcome::Fail(Failure::new(
        Side::Upstream,
        FailKind::Invalid,
        format!("cgi {script}: {why}"),
    ))
}

async fn run(
    req: &Request<'_>,
    file: std::path::PathBuf,
    program: String,
    path_info: String,
) -> Outcome {
    let opts = req.location.cgi.as_ref().expect("checked in produce");
    // Is it there, and a program? Asked on the blocking pool: the event loop never waits
    // for the disk.
    let path = file.clone();
    let meta = ramjet_observe::stats::blocking(move || std::fs::metadata(path)).await;
    let Ok(Ok(meta)) = meta else {
        return Outcome::Declined;
    };
    if !meta.is_file() {
        return Outcome::Declined;
    }
    if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 == 0 {
        return Outcome::Respond(error_response(403));
    }
    let prefix = req.location.prefix.trim_end_matches('/');
    let script_name = format!("{prefix}/{program}");
    let host = req.head.host.and_then(|h| std::str::from_utf8(h).ok());
    // The admit stage checked the credentials of a protected location: only the user's
    // name is passed on (RFC 3875 §4.1.11), never the password.
    let mut decoded = [0u8; ramjet_auth::MAX_DECODED];
    let remote_user = req
        .location
        .auth
        .as_ref()
        .and_then(|_| req.head.field(b"authorization"))
        .and_then(|v| ramjet_auth::Credentials::parse(v, &mut decoded))
        .map(|c| String::from_utf8_lossy(c.user).into_owned());
    let content_length = match req.head.framing {
        ramjet_http1::BodyFraming::Length(n) => Some(n),
        _ => None,
    };
    let chunked = matches!(req.head.framing, ramjet_http1::BodyFraming::Chunked);
    // The whole body first (the location's max_body bounds it): a program reads stdin as
    // fast as it likes, and a client that stalls holds no process.
    let mut body = Vec::new();
    loop {
        match req.body.next().await {
            Ok(Some(piece)) => body.extend_from_slice(&piece),
            Ok(None) => break,
            Err(e) => {
                let kind = match e.status() {
                    408 => FailKind::Timeout,
                    413 => FailKind::TooLarge,
                    _ => FailKind::Closed,
                };
                return Outcome::Fail(Failure::new(
                    Side::Downstream,
                    kind,
                    format!("cgi {script_name}: request body: {e:?}"),
                ));
            }
        }
    }
    let content_length = if chunked {
        Some(body.len() as u64)
    } else {
        content_length
    };
    let Some(permit) = Permit::take(req.config.limits.cgi_processes) else {
        return Outcome::Respond(error_response(503).header("Retry-After", b"1"));
    };
    let file_s = file.display().to_string();
    let env = env::environment(
        &env::Request {
            method: req.head.method_token,
            protocol: req.head.version.as_str(),
            script_name: &script_name,
            script_filename: &file_s,
            path_info: &path_info,
            query: req.query.unwrap_or(""),
            request_uri: req.head.path,
            host,
            server_addr: req.listener,
            remote_addr: req.client,
            secure: req.secure,
            content_length,
            document_root: &opts.document_root.display().to_string(),
            remote_user: remote_user.as_deref(),
            pass_auth: opts.pass_auth,
            underscores: opts.underscores,
            fields: req.head.fields().collect(),
        },
        &opts.env,
    );
    let has_body = !body.is_empty();
    // Started by the process's spawner thread (its own, nearly empty descriptor table), on
    // the blocking pool: the event loop neither copies its table nor waits for the start.
    let user = opts.user.as_ref().map(|u| (u.uid, u.gid));
    let started = match start(&file, &opts.root, env, has_body, user).await {
        Ok(s) => s,
        Err(e) => return bad_gateway(&script_name, format!("could not start: {e}")),
    };
    let Started {
        mut child,
        stdin,
        mut stdout,
        stderr,
    } = started;
    {
        let name = script_name.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::warn!("cgi {name}: {line}");
            }
        });
    }
    let timeout = req.config.timeouts.cgi;
    // The body goes to stdin from a task of its own, so a program that writes before it
    // has read all of it blocks neither itself nor this connection.
    if let Some(mut stdin) = stdin {
        tokio::spawn(async move {
            let _ = stdin.write_all(&body).await;
        });
    }
    let got = tokio::time::timeout(timeout, read_head(&mut stdout))
        .await
        .ok();
    let (buf, end) = match got {
        None => {
            let _ = child.start_kill();
            return Outcome::Fail(Failure::new(
                Side::Upstream,
                FailKind::Timeout,
                format!("cgi {script_name}: no header within {timeout:?}; killed"),
            ));
        }
        Some(Err(e)) => return bad_gateway(&script_name, format!("reading its output: {e}")),
        Some(Ok((buf, None))) => {
            let status = tokio::time::timeout(Duration::from_secs(1), child.wait()).await;
            let why = match status {
                Ok(Ok(s)) if !s.success() => format!("ended ({s}) before its header"),
                _ if buf.len() >= output::MAX_HEAD => {
                    format!("header over {} bytes", output::MAX_HEAD)
                }
                _ => "output ended before its header".to_string(),
            };
            return bad_gateway(&script_name, why);
        }
        Some(Ok((buf, Some(end)))) => (buf, end),
    };
    let head = match output::parse(&buf, end) {
        Ok(h) => h,
        Err(e) => return bad_gateway(&script_name, e),
    };
    let first = Bytes::copy_from_slice(&buf[head.end..]);
    let source = CgiBody {
        first: (!first.is_empty()).then_some(first),
        stdout,
        scratch: vec![0u8; 64 * 1024].into_boxed_slice(),
        _child: child,
        _permit: permit,
        idle: timeout,
        sleep: Box::pin(tokio::time::sleep(timeout)),
        length: head.length,
        script: script_name,
    };
    let mut r = Response::new(head.status, Body::Stream(Box::new(source)));
    r.headers = head.lines;
    Outcome::Respond(r)
}

/// A program started, with the worker's ends of its pipes.
struct Started {
    child: Child,
    stdin: Option<pipe::Sender>,
    stdout: pipe::Receiver,
    stderr: pipe::Receiver,
}

/// Start `file` in `dir` with environment `env`, stdin a pipe when `with_stdin` (else
/// `/dev/null`), stdout and stderr pipes.
async fn start(
    file: &Path,
    dir: &Path,
    env: Vec<(String, String)>,
    with_stdin: bool,
    user: Option<(u32, u32)>,
) -> io::Result<Started> {
    let (stdin_r, stdin_w) = if with_stdin { Some(sys::pipe()?) } else { None }.unzip();
    let (out_r, out_w) = sys::pipe()?;
    let (err_r, err_w) = sys::pipe()?;
    let (file, dir) = (file.to_path_buf(), dir.to_path_buf());
    let pid = ramjet_observe::stats::blocking(move || {
        let program = Program {
            path: &file,
            dir: &dir,
            env: &env,
            stdin: stdin_r.as_ref().map(|r| r.as_fd()),
            stdout: out_w.as_fd(),
            stderr: err_w.as_fd(),
            user,
        };
        // The program's ends are closed here when this returns: it holds its own copies.
        Spawner::shared()?.blocking_spawn(&program)
    })
    .await
    .map_err(io::Error::other)??;
    Ok(Started {
        child: Child::adopt(pid)?,
        stdin: stdin_w.map(pipe::Sender::from_owned_fd).transpose()?,
        stdout: pipe::Receiver::from_owned_fd(out_r)?,
        stderr: pipe::Receiver::from_owned_fd(err_r)?,
    })
}

/// Read until the header section's end (or EOF, or too much): the bytes read and where
/// the head ends.
async fn read_head(stdout: &mut pipe::Receiver) -> io::Result<(Vec<u8>, Option<usize>)> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = output::head_end(&buf) {
            return Ok((buf, Some(end)));
        }
        if buf.len() >= output::MAX_HEAD {
            return Ok((buf, None));
        }
        let n = stdout.read(&mut chunk).await?;
        if n == 0 {
            return Ok((buf, None));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The program's output after its head, as the socket takes it; the process is killed if
/// the client goes away first (the body is dropped) or the program stays silent too long.
struct CgiBody {
    first: Option<Bytes>,
    stdout: pipe::Receiver,
    /// What each read lands in, made once: a piece is a copy of what was read, so a
    /// short read neither allocates nor keeps a whole buffer alive.
    scratch: Box<[u8]>,
    _child: Child,
    _permit: Permit,
    idle: Duration,
    sleep: Pin<Box<Sleep>>,
    length: Option<u64>,
    script: String,
}

impl BodySource for CgiBody {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        let this = &mut *self;
        let mut rb = ReadBuf::new(&mut this.scratch);
        match Pin::new(&mut this.stdout).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => {
                let piece = Bytes::copy_from_slice(rb.filled());
                if piece.is_empty() {
                    return Poll::Ready(None);
                }
                let deadline = tokio::time::Instant::now() + self.idle;
                self.sleep.as_mut().reset(deadline);
                Poll::Ready(Some(Ok(piece)))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Pending => match self.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    tracing::error!(
                        "cgi {}: silent for {:?} in its body; killed",
                        self.script,
                        self.idle
                    );
                    Poll::Ready(Some(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "cgi timeout",
                    ))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn length(&self) -> Option<u64> {
        self.length
    }
}
