//! A backend that receives connections from ramjet's `handoff` handler and answers them
//! itself: every request gets a small text page saying which connection it came on, the
//! client ramjet saw, and the request line. A starting point for a real backend.
//!
//!     cargo run -p ramjet-handoff --example backend -- /run/ramjet-backend.sock [ADDR:PORT]
//!
//! With an address it also accepts ordinary TCP connections there and answers them the
//! same way (so the same backend can sit behind a reverse proxy, for comparison).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;

use ramjet_handoff::{Handed, Receiver};

fn main() -> std::io::Result<()> {
    let path = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| {
        eprintln!("usage: backend SOCKET_PATH");
        std::process::exit(2)
    }));
    let receiver = Receiver::bind(&path)?;
    if let Some(addr) = std::env::args().nth(2) {
        let listener = std::net::TcpListener::bind(&addr)?;
        std::thread::spawn(move || {
            for (n, conn) in listener.incoming().enumerate() {
                let Ok(stream) = conn else { continue };
                let Ok(client) = stream.peer_addr() else {
                    continue;
                };
                let local = stream.local_addr().unwrap_or(client);
                let handed = Handed {
                    stream,
                    id: n as u64,
                    listener: 0,
                    client,
                    local,
                    prefix: Vec::new(),
                };
                std::thread::spawn(move || serve(handed));
            }
        });
        println!("also on http://{addr}");
    }
    println!("ready on {}", path.display());
    loop {
        let channel = receiver.accept()?;
        std::thread::spawn(move || loop {
            match channel.recv() {
                Ok(Some(batch)) => {
                    for handed in batch {
                        std::thread::spawn(move || serve(handed));
                    }
                }
                Ok(None) => return,
                Err(e) => eprintln!("hand-off: {e}"),
            }
        });
    }
}

/// HTTP/1.1 without request bodies, keep-alive until the client closes or asks to.
fn serve(h: Handed) {
    let Handed {
        mut stream,
        id,
        client,
        prefix,
        ..
    } = h;
    let mut buf = prefix;
    loop {
        let Some(end) = find(&buf, b"\r\n\r\n") else {
            if !read_more(&mut stream, &mut buf) {
                return;
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end + 4);
        let line = head.lines().next().unwrap_or("");
        let close = head.to_ascii_lowercase().contains("\nconnection: close");
        let body = format!("handed off: connection {id}, client {client}, request {line}\n");
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{}\r\n{body}",
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        if stream.write_all(reply.as_bytes()).is_err() || close {
            return;
        }
    }
}

fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 4096];
    match stream.read(&mut chunk) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
