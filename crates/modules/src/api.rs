//! The contract between ramjet and a module (`docs/MODULES.md`).

use std::fs::File;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use ramjet_pipeline::{BodyError, BodySource, Request};

/// A module's shared part: one per mount and configuration, started from the mount's
/// `module_config` table on the main thread (a wrong table is a configuration error), used
/// by every worker. A reload starts a new one; the old one is dropped when no worker
/// needs it any more.
pub trait Module: Send + Sync + 'static {
    /// This worker's state (caches, open files): made on a worker the first time the
    /// module is asked there, and again after a reload. It may be `!Send`.
    fn worker(self: Arc<Self>) -> Box<dyn ModuleWorker>;
}

/// A module's part on one worker thread.
pub trait ModuleWorker: 'static {
    /// Answer `req`: at once (`Ok`) or with work that will (`Err`). Never block the
    /// thread: disk and other slow work goes to [`blocking`] or to an async API.
    fn handle<'r>(&'r self, req: &'r ModuleRequest<'r>) -> Result<Reply, LaterReply<'r>>;

    /// Called about once a second on every worker that has this module's state.
    fn tick(&self) {}
}

/// Work a module could not finish at once.
pub type LaterReply<'r> = Pin<Box<dyn Future<Output = Reply> + 'r>>;

/// Run `f` on the worker's blocking pool (opening or reading files, a database call) and
/// wait for it without blocking the event loop. `None` if the pool could not run it.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    ramjet_observe::stats::blocking(f).await.ok()
}

/// A request as a module sees it. Everything borrows the connection's buffer.
pub struct ModuleRequest<'r> {
    pub(crate) inner: &'r Request<'r>,
}

impl<'r> ModuleRequest<'r> {
    /// Wrap a pipeline request (for the module host and for tests of modules).
    pub fn new(inner: &'r Request<'r>) -> ModuleRequest<'r> {
        ModuleRequest { inner }
    }

    /// The method token, e.g. `GET`.
    pub fn method(&self) -> &'r str {
        self.inner.head.method_token
    }

    /// The path and query as sent, still percent-encoded (CGI's `REQUEST_URI`; an
    /// absolute-form target's scheme and authority removed).
    pub fn uri(&self) -> &'r str {
        self.inner.head.path
    }

    /// The decoded, normalised path.
    pub fn path(&self) -> &'r [u8] {
        self.inner.path
    }

    /// The query without `?`, undecoded.
    pub fn query(&self) -> Option<&'r str> {
        self.inner.query
    }

    /// The mount's path prefix (the location's `path`).
    pub fn mount(&self) -> &'r str {
        &self.inner.location.prefix
    }

    /// The first header field called `name` (any case), trimmed.
    pub fn header(&self, name: &str) -> Option<&'r [u8]> {
        self.inner.head.field(name.as_bytes())
    }

    /// Every header field, in order.
    pub fn headers(&self) -> impl Iterator<Item = (&'r [u8], &'r [u8])> {
        self.inner.head.fields()
    }

    /// The value of cookie `name` from the `Cookie` fields (RFC 6265 §5.4: `a=b; c=d`).
    pub fn cookie(&self, name: &str) -> Option<&'r str> {
        self.headers()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"))
            .filter_map(|(_, v)| std::str::from_utf8(v).ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }

    /// The client's address (from the PROXY protocol header when there was one).
    pub fn client(&self) -> SocketAddr {
        self.inner.client
    }

    /// The address the connection came in on.
    pub fn local(&self) -> SocketAddr {
        self.inner.listener
    }

    /// The request's HTTP version, e.g. `HTTP/1.1`.
    pub fn version(&self) -> &'static str {
        self.inner.head.version.as_str()
    }

    /// The method as the parser classified it (`Other` for a token it does not name).
    pub fn method_kind(&self) -> ramjet_http1::Method {
        self.inner.head.method
    }

    /// The HTTP version as the parser read it.
    pub fn http_version(&self) -> ramjet_http1::Version {
        self.inner.head.version
    }

    /// The declared body length (`Content-Length`), if any.
    pub fn content_length(&self) -> Option<u64> {
        match self.inner.head.framing {
            ramjet_http1::BodyFraming::Length(n) => Some(n),
            _ => None,
        }
    }

    /// The next piece of the request body (`None` at its end, at once when there is none).
    /// What a module leaves unread is drained by the server.
    pub async fn body_chunk(&self) -> Result<Option<Bytes>, BodyError> {
        self.inner.body.next().await
    }

    /// The whole body, refused (`BodyError::TooLarge`) past `limit` bytes.
    pub async fn body(&self, limit: usize) -> Result<Vec<u8>, BodyError> {
        let mut out = Vec::new();
        while let Some(piece) = self.body_chunk().await? {
            if out.len() + piece.len() > limit {
                return Err(BodyError::TooLarge);
            }
            out.extend_from_slice(&piece);
        }
        Ok(out)
    }
}

/// A module's answer: a status, header lines, and a body made of pieces, each bytes or a
/// range of an open file (sent with `sendfile`, never copied through memory), or a body
/// produced over time ([`Reply::stream`]). The server adds `Date`, `Server`,
/// `Connection`, and `Content-Length` or chunked framing.
pub struct Reply {
    pub status: u16,
    pub(crate) headers: Vec<u8>,
    pub(crate) body: Vec<Piece>,
    pub(crate) stream: Option<Box<dyn BodySource>>,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("status", &self.status)
            .field("headers", &String::from_utf8_lossy(&self.headers))
            .field("body", &self.body)
            .field("stream", &self.stream.is_some())
            .finish()
    }
}

/// A reply's status and header lines without a body, built apart from it (it can be
/// shared between threads, which a [`Reply`] with a stream cannot).
#[derive(Debug, Clone)]
pub struct Head {
    pub status: u16,
    headers: Vec<u8>,
}

impl Head {
    pub fn new(status: u16) -> Head {
        Head {
            status,
            headers: Vec::new(),
        }
    }

    /// As [`Reply::add_header`].
    pub fn add_header(&mut self, name: &str, value: &[u8]) {
        push_header(&mut self.headers, name, value);
    }

    /// The header lines, `Name: value\r\n` each.
    pub fn header_lines(&self) -> &[u8] {
        &self.headers
    }
}

impl From<Head> for Reply {
    fn from(head: Head) -> Reply {
        Reply {
            status: head.status,
            headers: head.headers,
            body: Vec::new(),
            stream: None,
        }
    }
}

/// Append the line `name: value` to `headers`. A name or value with CR or LF is dropped (no
/// response splitting), and a name that is empty or holds `:`.
fn push_header(headers: &mut Vec<u8>, name: &str, value: &[u8]) {
    let bad = |b: &u8| *b == b'\r' || *b == b'\n';
    if name.is_empty() || name.bytes().any(|b| bad(&b) || b == b':') || value.iter().any(bad) {
        return;
    }
    // One allocation for a typical reply's few fields, not one per doubling.
    let line = name.len() + value.len() + 4;
    headers.reserve(if headers.capacity() == 0 {
        line.max(128)
    } else {
        line
    });
    headers.extend_from_slice(name.as_bytes());
    headers.extend_from_slice(b": ");
    headers.extend_from_slice(value);
    headers.extend_from_slice(b"\r\n");
}

/// A piece of a [`Reply`]'s body.
#[derive(Debug, Clone)]
pub enum Piece {
    Bytes(Bytes),
    File {
        file: Arc<File>,
        offset: u64,
        len: u64,
    },
}

impl Reply {
    /// An empty reply with `status`.
    pub fn new(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            stream: None,
        }
    }

    /// A plain-text reply, e.g. for an error.
    pub fn text(status: u16, text: impl Into<Bytes>) -> Reply {
        Reply::new(status)
            .header("Content-Type", "text/plain; charset=utf-8")
            .bytes(text)
    }

    /// Add a header line. A name or value with CR or LF is dropped (no response splitting).
    pub fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Reply {
        self.add_header(name, value.as_ref());
        self
    }

    /// As [`Reply::header`], in place.
    pub fn add_header(&mut self, name: &str, value: &[u8]) {
        push_header(&mut self.headers, name, value);
    }

    /// Append bytes to the body (after a [`Reply::stream`], pieces replace the stream).
    pub fn bytes(mut self, b: impl Into<Bytes>) -> Reply {
        self.push_bytes(b);
        self
    }

    /// As [`Reply::bytes`], in place (empty pieces are skipped).
    pub fn push_bytes(&mut self, b: impl Into<Bytes>) {
        let b = b.into();
        if !b.is_empty() {
            self.stream = None;
            self.body.push(Piece::Bytes(b));
        }
    }

    /// Append `len` bytes of `file` from `offset` to the body, sent zero-copy.
    pub fn file(mut self, file: Arc<File>, offset: u64, len: u64) -> Reply {
        self.push_file(file, offset, len);
        self
    }

    /// As [`Reply::file`], in place (an empty range is skipped).
    pub fn push_file(&mut self, file: Arc<File>, offset: u64, len: u64) {
        if len > 0 {
            self.stream = None;
            self.body.push(Piece::File { file, offset, len });
        }
    }

    /// Make the body `source`, produced over time, in place of any pieces: a long report,
    /// a feed, server-sent events. [`crate::produce`] turns an async writer into one. The
    /// connection polls it only when the client has taken the previous piece
    /// (backpressure). Its length is unknown unless the source says it
    /// ([`BodySource::length`]): HTTP/1.1 clients get chunked framing.
    pub fn stream(mut self, source: impl BodySource + 'static) -> Reply {
        self.body.clear();
        self.stream = Some(Box::new(source));
        self
    }

    /// Whether the body is a stream.
    pub fn is_stream(&self) -> bool {
        self.stream.is_some()
    }

    /// The length in bytes of the body's pieces (a stream's bytes are not known ahead).
    pub fn len(&self) -> u64 {
        self.body
            .iter()
            .map(|p| match p {
                Piece::Bytes(b) => b.len() as u64,
                Piece::File { len, .. } => *len,
            })
            .sum()
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The header lines added so far (`Name: value\r\n` each).
    pub fn header_lines(&self) -> &[u8] {
        &self.headers
    }

    /// The body's pieces.
    pub fn pieces(&self) -> &[Piece] {
        &self.body
    }
}
