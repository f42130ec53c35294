//! Responses and bodies. A file body is a descriptor and a range, never bytes in memory; a
//! streamed body is pulled from its producer as the socket takes it.

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;

/// A response before encoding. The pipeline adds the status line, `Server`, `Date`,
/// `Content-Length` and `Connection`; producers add everything else.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// The body is the server's own error page: a configured error page may replace it
    /// (a backend's or a module's error body is theirs and is passed on).
    pub server_page: bool,
    /// Its fields carry its own `Date` (a cache serving a stored answer keeps the origin's,
    /// RFC 9110 §6.6.1): the pipeline writes none.
    pub own_date: bool,
    /// Header lines shared with a cache entry (each `Name: value\r\n`), e.g. a pre-rendered
    /// Content-Type/ETag/Last-Modified block.
    pub shared_headers: Bytes,
    /// Header lines for this response only.
    pub headers: Vec<u8>,
    pub body: Body,
    /// What only some responses carry, boxed so every response stays small (responses are
    /// moved through several stages, and a larger one is copied with a `memcpy` call).
    pub extras: Option<Box<Extras>>,
}

/// The rare parts of a response.
#[derive(Debug, Default)]
pub struct Extras {
    /// Complete informational (1xx) heads a backend sent before this response, passed on
    /// to HTTP/1.1 clients in front of it.
    pub interim: Vec<u8>,
    /// For the access log, when a backend was involved.
    pub upstream: Option<ramjet_observe::UpstreamLog>,
    /// Not a response: hand the connection itself to the backend at this socket
    /// (`docs/HANDOFF.md`), with the request's bytes; the connection then ends here.
    pub handoff: Option<Arc<std::path::PathBuf>>,
}

impl Response {
    /// Not an answer: the connection goes to the backend listening at `socket`.
    pub fn handoff(socket: Arc<std::path::PathBuf>) -> Response {
        let mut r = Response::new(200, Body::Empty);
        r.extras = Some(Box::new(Extras {
            handoff: Some(socket),
            ..Default::default()
        }));
        r
    }
}

/// A message body.
pub enum Body {
    Empty,
    Bytes(Bytes),
    /// `len` bytes of `file` from `offset`, sent with sendfile.
    File {
        file: Arc<File>,
        offset: u64,
        len: u64,
    },
    /// A sequence of pieces (multipart/byteranges).
    Parts(Vec<Part>),
    /// A body of unknown length produced over time (a backend's answer, a module's output):
    /// chunked to HTTP/1.1 clients, delimited by closing the connection for HTTP/1.0.
    Stream(Box<dyn BodySource>),
    /// With a `101 Switching Protocols`: once the head is written, the connection becomes
    /// a tunnel, bytes copied both ways between the client and this until either closes.
    Upgrade(Box<dyn Tunnel>),
}

/// The other end of a tunnel (an upstream connection that switched protocols).
pub trait Tunnel: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin {
    /// The tunnel is closed when neither side sent anything for this long (`None`: never).
    fn idle_timeout(&self) -> Option<std::time::Duration> {
        None
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Body::Empty => write!(f, "Empty"),
            Body::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
            Body::File { offset, len, .. } => write!(f, "File({len} bytes at {offset})"),
            Body::Parts(p) => write!(f, "Parts({} parts)", p.len()),
            Body::Stream(_) => write!(f, "Stream"),
            Body::Upgrade(_) => write!(f, "Upgrade"),
        }
    }
}

/// The producer of a [`Body::Stream`]. The connection polls it only when the socket has
/// taken the previous piece, so a slow client holds the producer back (backpressure)
/// instead of making the pipeline buffer what it produces.
pub trait BodySource {
    /// The next piece of the body, `Ready(None)` at its end. Empty pieces are skipped. An
    /// error ends the connection without the body's end: the head has gone out, so an
    /// incomplete body is the only signal left to the client.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>>;

    /// The exact length, when it is known before the first piece (a backend's
    /// `Content-Length`): the response then carries it instead of chunked framing, and a
    /// source that yields more or fewer bytes ends the connection (the head promised them).
    fn length(&self) -> Option<u64> {
        None
    }

    /// Called once after the last piece of a chunked response: field lines
    /// (`Name: value\r\n` each) for the trailer section (a backend's trailers).
    fn trailers(&mut self) -> Option<bytes::Bytes> {
        None
    }
}

/// A piece of a [`Body::Parts`].
#[derive(Debug, Clone)]
pub enum Part {
    Bytes(Bytes),
    File {
        file: Arc<File>,
        offset: u64,
        len: u64,
    },
}

impl Body {
    /// The body's length in bytes (the Content-Length), or `None` for a stream of unknown
    /// length.
    pub fn length(&self) -> Option<u64> {
        Some(match self {
            Body::Empty | Body::Upgrade(_) => 0,
            Body::Bytes(b) => b.len() as u64,
            Body::File { len, .. } => *len,
            Body::Parts(parts) => parts
                .iter()
                .map(|p| match p {
                    Part::Bytes(b) => b.len() as u64,
                    Part::File { len, .. } => *len,
                })
                .sum(),
            Body::Stream(source) => return source.length(),
        })
    }
}

impl Response {
    /// A response with a body and no extra headers.
    pub fn new(status: u16, body: Body) -> Response {
        Response {
            status,
            server_page: false,
            own_date: false,
            shared_headers: Bytes::new(),
            headers: Vec::new(),
            body,
            extras: None,
        }
    }

    /// Append one header line.
    pub fn header(mut self, name: &str, value: &[u8]) -> Response {
        self.headers.extend_from_slice(name.as_bytes());
        self.headers.extend_from_slice(b": ");
        self.headers.extend_from_slice(value);
        self.headers.extend_from_slice(b"\r\n");
        self
    }
}
