//! Small HTTP servers written for the load generator's tests.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// An answer ending with this is written without it, then the connection is closed.
pub const CLOSE: &[u8] = b"<close>";

/// Counters a test server keeps.
#[derive(Default)]
pub struct Seen {
    pub connections: AtomicU64,
    pub requests: AtomicU64,
    /// Peer addresses of the connections, in accept order.
    pub peers: Mutex<Vec<SocketAddr>>,
}

/// Start a server whose `answer(request_number_on_connection, seen)` decides what to write
/// for each request; `None` closes the connection. `batch` answers only once that many
/// requests arrived on the connection (to prove pipelining).
pub fn server(batch: usize, answer: fn(u64) -> Option<Vec<u8>>) -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            s.connections.fetch_add(1, Ordering::Relaxed);
            if let Ok(peer) = conn.peer_addr() {
                s.peers.lock().unwrap().push(peer);
            }
            let s = s.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let mut n = 0u64;
                loop {
                    let count = buf.windows(4).filter(|w| w == b"\r\n\r\n").count();
                    if count >= batch {
                        let end = nth_end(&buf, batch);
                        buf.drain(..end);
                        for _ in 0..batch {
                            s.requests.fetch_add(1, Ordering::Relaxed);
                            match answer(n) {
                                Some(bytes) => {
                                    let (bytes, close) = match bytes.strip_suffix(CLOSE) {
                                        Some(b) => (b, true),
                                        None => (&bytes[..], false),
                                    };
                                    if conn.write_all(bytes).is_err() || close {
                                        return;
                                    }
                                }
                                None => return,
                            }
                            n += 1;
                        }
                        continue;
                    }
                    match conn.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => buf.extend_from_slice(&chunk[..k]),
                    }
                }
            });
        }
    });
    (addr, seen)
}

fn nth_end(buf: &[u8], n: usize) -> usize {
    let mut found = 0;
    for i in 0..buf.len() - 3 {
        if &buf[i..i + 4] == b"\r\n\r\n" {
            found += 1;
            if found == n {
                return i + 4;
            }
        }
    }
    buf.len()
}
