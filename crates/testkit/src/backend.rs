//! A scripted upstream for proxy tests: a loopback HTTP/1.1 server whose answer to each
//! request is written by the test (raw bytes, so it can misbehave on purpose), counting
//! connections and requests and keeping every request head it saw.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ramjet_http1::{parse_request_head, BodyDecoder, Limits, Parse};

/// A backend connection never waits longer than this for a byte.
const READ_TIMEOUT: Duration = Duration::from_secs(20);

/// One request as the backend saw it, and the socket to answer on.
pub struct Exchange<'a> {
    /// The head as text.
    pub head: String,
    pub body: Vec<u8>,
    /// Requests before this one on the same connection.
    pub earlier: usize,
    pub stream: &'a mut TcpStream,
}

impl Exchange<'_> {
    /// The request line's target.
    pub fn target(&self) -> &str {
        self.head.split(' ').nth(1).unwrap_or("")
    }

    /// The first value of field `name`.
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    /// Write raw bytes (errors ignored: the test decides what a failure means).
    pub fn write(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes);
    }

    /// A 200 with `body` and a Content-Length.
    pub fn ok(&mut self, body: &[u8]) {
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        self.write(head.as_bytes());
        if !self.head.starts_with("HEAD ") {
            self.write(body);
        }
    }
}

/// What the backend does after answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Read the next request on this connection.
    Keep,
    /// Close the connection.
    Close,
}

type Handler = dyn Fn(&mut Exchange<'_>) -> Flow + Send + Sync;

/// A running scripted backend (stopped on drop).
pub struct Backend {
    pub addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl Backend {
    /// Listen on a free loopback port; `handler` answers every request.
    pub fn start(handler: impl Fn(&mut Exchange<'_>) -> Flow + Send + Sync + 'static) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind backend");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let (c, h, s) = (connections.clone(), heads.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        c.fetch_add(1, Ordering::SeqCst);
                        let (handler, heads) = (handler.clone(), h.clone());
                        std::thread::spawn(move || serve(stream, &*handler, &heads));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(_) => break,
                }
            }
        });
        Backend {
            addr,
            connections,
            heads,
            stop,
        }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Request heads seen so far, in order.
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }

    pub fn requests(&self) -> usize {
        self.heads.lock().unwrap().len()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(mut stream: TcpStream, handler: &Handler, heads: &Mutex<Vec<String>>) {
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::new();
    let mut earlier = 0;
    loop {
        let (head, body) = loop {
            if let Parse::Complete(h) = parse_request_head(&buf, &Limits::default()) {
                let head_len = h.head_len();
                let text = String::from_utf8_lossy(&buf[..head_len]).into_owned();
                let mut decoder = BodyDecoder::new(h.framing, u64::MAX).unwrap();
                let expect = h.expect_continue;
                buf.drain(..head_len);
                if expect && !decoder.is_done() {
                    let _ = stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
                }
                let mut body = Vec::new();
                while !decoder.is_done() {
                    if buf.is_empty() && !fill(&mut stream, &mut buf) {
                        return;
                    }
                    let step = decoder.decode(&buf).expect("valid body");
                    body.extend_from_slice(&buf[step.data.clone()]);
                    buf.drain(..step.consumed);
                }
                break (text, body);
            }
            if !fill(&mut stream, &mut buf) {
                return;
            }
        };
        heads.lock().unwrap().push(head.clone());
        let mut ex = Exchange {
            head,
            body,
            earlier,
            stream: &mut stream,
        };
        if handler(&mut ex) == Flow::Close {
            return;
        }
        earlier += 1;
    }
}

fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 65536];
    match stream.read(&mut chunk) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}
