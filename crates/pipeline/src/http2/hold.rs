//! A flooder's connection after its GOAWAY: held open, not closed at once. An attacker
//! that reconnects when closed then waits on it at no cost to the server, where a close
//! at once let it reconnect at once: an accept, a preface and a SETTINGS exchange each
//! time, thousands a second, more work than answering its PINGs (measured in
//! `bench/results/2026-11-27-h2-flood-hold/`).

use std::time::Duration;

use crate::transport::Transport;

/// How long a flooder's connection is held after its GOAWAY.
pub(super) const FLOOD_HOLD: Duration = Duration::from_secs(2);
/// What a held flooder may still send that is read (and dropped), only to see it leave.
const HOLD_READ: usize = 64 << 10;

/// Hold the connection for `FLOOD_HOLD`, or until the client leaves. What it sends is
/// read and dropped up to `HOLD_READ` bytes; past that nothing more is read (the
/// socket's buffers fill and the attacker's writes block) until the time is up.
pub(super) async fn hold(transport: &Transport) {
    let _ = tokio::time::timeout(FLOOD_HOLD, async {
        let mut sink = Vec::with_capacity(4096);
        if !transport.drain(&mut sink, HOLD_READ).await {
            std::future::pending::<()>().await;
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use tokio::net::TcpListener;
    use tokio::time::Instant;

    async fn pair() -> (Transport, std::net::TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().await.unwrap();
        (Transport::Plain(server), client)
    }

    #[tokio::test]
    async fn a_client_that_stays_is_held_for_the_whole_time() {
        let (server, mut client) = pair().await;
        // It goes on sending, more than is read: still held.
        client.set_nonblocking(true).unwrap();
        let junk = vec![0u8; 256 << 10];
        let _ = client.write(&junk);
        let start = Instant::now();
        hold(&server).await;
        assert!(
            start.elapsed() >= FLOOD_HOLD,
            "let go after {:?}",
            start.elapsed()
        );
    }

    #[tokio::test]
    async fn a_client_that_leaves_is_let_go_at_once() {
        let (server, mut client) = pair().await;
        client.write_all(&[0u8; 1000]).unwrap();
        drop(client);
        let start = Instant::now();
        hold(&server).await;
        assert!(
            start.elapsed() < FLOOD_HOLD,
            "held {:?} after the client left",
            start.elapsed()
        );
    }

    #[tokio::test]
    async fn what_it_sends_past_the_limit_is_not_read() {
        let (server, client) = pair().await;
        let writer = std::thread::spawn(move || {
            let mut client = client;
            let chunk = vec![1u8; 16 << 10];
            let mut sent = 0;
            while client.write_all(&chunk).is_ok() && sent < 64 << 20 {
                sent += chunk.len();
            }
            sent
        });
        hold(&server).await;
        drop(server);
        // The writer blocked once the buffers were full (far short of 64 MiB), and the
        // close ended it.
        let sent = writer.join().unwrap();
        assert!(sent < 32 << 20, "{sent} bytes were taken while held");
    }
}
