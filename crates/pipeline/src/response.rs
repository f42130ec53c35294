//! Responses and bodies. A file body is a descriptor and a range, never bytes in memory.

use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;

/// A response before encoding. The pipeline adds the status line, `Server`, `Date`,
/// `Content-Length` and `Connection`; producers add everything else.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Header lines shared with a cache entry (each `Name: value\r\n`), e.g. a pre-rendered
    /// Content-Type/ETag/Last-Modified block.
    pub shared_headers: Bytes,
    /// Header lines for this response only.
    pub headers: Vec<u8>,
    pub body: Body,
}

/// A message body.
#[derive(Debug, Clone)]
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
    /// The body's length in bytes (the Content-Length).
    pub fn len(&self) -> u64 {
        match self {
            Body::Empty => 0,
            Body::Bytes(b) => b.len() as u64,
            Body::File { len, .. } => *len,
            Body::Parts(parts) => parts
                .iter()
                .map(|p| match p {
                    Part::Bytes(b) => b.len() as u64,
                    Part::File { len, .. } => *len,
                })
                .sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Response {
    /// A response with a body and no extra headers.
    pub fn new(status: u16, body: Body) -> Response {
        Response {
            status,
            shared_headers: Bytes::new(),
            headers: Vec::new(),
            body,
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
