use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use ramjet_http1::{parse_response_head, BodyDecoder, BodyFraming, ResponseParse};

/// Tests never wait longer than this for a byte.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A raw HTTP/1.1 client over one TCP connection.
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// The head as text (status line and fields).
    pub head: String,
    pub body: Vec<u8>,
    pub keep_alive: bool,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The parts of a `multipart/byteranges` body: (part head, part bytes) each, or `None`
    /// when the response is not multipart.
    pub fn parts(&self) -> Option<Vec<(String, Vec<u8>)>> {
        let ct = self.header("Content-Type")?;
        let boundary = ct.strip_prefix("multipart/byteranges; boundary=")?;
        let delim = format!("--{boundary}");
        let text = self.body.as_slice();
        let mut parts = Vec::new();
        let mut pos = 0;
        while let Some(i) = find(&text[pos..], delim.as_bytes()) {
            let start = pos + i + delim.len();
            if text[start..].starts_with(b"--") {
                break;
            }
            let head_end = start + find(&text[start..], b"\r\n\r\n")? + 4;
            let next = head_end + find(&text[head_end..], delim.as_bytes())?.checked_sub(2)?;
            parts.push((
                String::from_utf8_lossy(&text[start..head_end]).into_owned(),
                text[head_end..next].to_vec(),
            ));
            pos = next;
        }
        Some(parts)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    /// A client over a connection the test already used by hand.
    pub fn from_stream(stream: TcpStream) -> Client {
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Read one response; `to_head` says it answers a HEAD request.
    pub fn response(&mut self, to_head: bool) -> Response {
        self.try_response(to_head).expect("a complete response")
    }

    /// Read one response, or `None` if the connection closed first.
    pub fn try_response(&mut self, to_head: bool) -> Option<Response> {
        let head = loop {
            match parse_response_head(&self.buf, to_head) {
                ResponseParse::Complete(h) => break h,
                ResponseParse::Invalid => {
                    panic!("invalid response: {:?}", String::from_utf8_lossy(&self.buf))
                }
                ResponseParse::Partial => {
                    if !self.fill() {
                        return None;
                    }
                }
            }
        };
        let head_text = String::from_utf8_lossy(&self.buf[..head.head_len]).into_owned();
        self.buf.drain(..head.head_len);
        let mut body = Vec::new();
        if head.until_close {
            while self.fill() {}
            body = std::mem::take(&mut self.buf);
        } else if head.framing != BodyFraming::None {
            let mut decoder = BodyDecoder::new(head.framing, u64::MAX).unwrap();
            while !decoder.is_done() {
                if self.buf.is_empty() && !self.fill() {
                    panic!("connection closed mid-body after {} bytes", body.len());
                }
                let step = decoder.decode(&self.buf).expect("valid body");
                body.extend_from_slice(&self.buf[step.data.clone()]);
                self.buf.drain(..step.consumed);
            }
        }
        Some(Response {
            status: head.status,
            head: head_text,
            body,
            keep_alive: head.keep_alive,
        })
    }

    /// True if the server closed the connection (EOF) with nothing more to read.
    pub fn closed(&mut self) -> bool {
        self.buf.is_empty() && !self.fill()
    }

    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 65536];
        match self.stream.read(&mut chunk) {
            Ok(0) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e) if e.kind() == ErrorKind::ConnectionReset => false,
            Err(e) => panic!("read: {e}"),
        }
    }
}
