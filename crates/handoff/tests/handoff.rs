//! Real TCP connections handed from a sender to a receiver in another thread, as ramjet
//! hands them to a backend: batches, prefixes (a head split across packets, pipelined
//! requests), addresses, and the failure cases.

use std::io::{self, IoSlice, Read, Write};
use std::mem::MaybeUninit;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::Duration;

use ramjet_handoff::{Receiver, Record, Sender};

/// A receiver thread that answers each request on every handed connection with
/// "id client local request-line", keep-alive, until the client closes.
fn backend(path: &std::path::Path) -> std::thread::JoinHandle<()> {
    let receiver = Receiver::bind(path).unwrap();
    std::thread::spawn(move || {
        let channel = receiver.accept().unwrap();
        while let Some(batch) = channel.recv().unwrap() {
            for h in batch {
                std::thread::spawn(move || {
                    let mut stream = h.stream;
                    let mut buf = h.prefix;
                    loop {
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                            buf.drain(..end + 4);
                            let body = format!(
                                "{} {} {} {}",
                                h.id,
                                h.client,
                                h.local,
                                head.lines().next().unwrap_or("")
                            );
                            let reply = format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if stream.write_all(reply.as_bytes()).is_err() {
                                return;
                            }
                        }
                        let mut chunk = [0u8; 1024];
                        match stream.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        }
    })
}

/// Read `n` whole responses (Content-Length framed); their bodies.
fn bodies(stream: &mut TcpStream, n: usize) -> Vec<String> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while out.len() < n {
        if let Some(end) = buf.windows(4).position(|w: &[u8]| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .unwrap()
                .parse()
                .unwrap();
            if buf.len() >= end + 4 + len {
                out.push(String::from_utf8(buf[end + 4..end + 4 + len].to_vec()).unwrap());
                buf.drain(..end + 4 + len);
                continue;
            }
        }
        let mut chunk = [0u8; 1024];
        let k = stream.read(&mut chunk).expect("a response");
        assert!(k > 0, "closed after {} responses", out.len());
        buf.extend_from_slice(&chunk[..k]);
    }
    out
}

#[test]
fn a_batch_of_live_connections_is_served_by_the_receiver() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("backend.sock");
    let _backend = backend(&path);
    let sender = Sender::connect(&path).unwrap();

    // The front end: accepts clients and reads what has arrived, as ramjet does.
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    let local = front.local_addr().unwrap();
    let mut clients = Vec::new();
    let mut accepted = Vec::new();
    for i in 0..12 {
        let mut c = TcpStream::connect(local).unwrap();
        // Client i sends the first part of its head (and, for odd i, a whole first
        // request then the start of a pipelined second one).
        let first: &[u8] = if i % 2 == 1 {
            b"GET /one HTTP/1.1\r\nHost: t\r\n\r\nGET /tw"
        } else {
            b"GET /only HTTP/1.1\r\nHo"
        };
        c.write_all(first).unwrap();
        let (mut s, peer) = front.accept().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        let mut prefix = vec![0u8; first.len()];
        s.read_exact(&mut prefix).unwrap();
        // As ramjet's sockets are: the receiver must hand them over blocking, or its
        // blocking reads of the rest of each head would fail with WouldBlock.
        s.set_nonblocking(true).unwrap();
        clients.push(c);
        accepted.push((s, peer, prefix));
    }
    let records: Vec<Record> = accepted
        .iter()
        .enumerate()
        .map(|(i, (_, peer, prefix))| Record {
            id: 1000 + i as u64,
            listener: 0,
            client: *peer,
            local,
            prefix: prefix.clone(),
        })
        .collect();
    let batch: Vec<_> = accepted
        .iter()
        .zip(&records)
        .map(|((s, _, _), r)| (s.as_fd(), r))
        .collect();
    // All twelve in one message.
    assert_eq!(sender.try_send(&batch).unwrap(), 12);
    drop(batch);
    drop(accepted); // the front end's descriptors: the backend has its own

    for (i, c) in clients.iter_mut().enumerate() {
        let me = c.local_addr().unwrap();
        if i % 2 == 1 {
            c.write_all(b"o HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            let got = bodies(c, 2);
            assert_eq!(
                got[0],
                format!("{} {me} {local} GET /one HTTP/1.1", 1000 + i)
            );
            assert_eq!(
                got[1],
                format!("{} {me} {local} GET /two HTTP/1.1", 1000 + i)
            );
        } else {
            c.write_all(b"st: t\r\n\r\n").unwrap();
            let got = bodies(c, 1);
            assert_eq!(
                got[0],
                format!("{} {me} {local} GET /only HTTP/1.1", 1000 + i)
            );
        }
        // The connection stays the backend's: another request on it is answered too.
        c.write_all(b"GET /again HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert!(bodies(c, 1)[0].ends_with("GET /again HTTP/1.1"));
    }
}

#[test]
fn ipv6_clients_keep_their_address() {
    let Ok(front) = TcpListener::bind("[::1]:0") else {
        eprintln!("no IPv6 loopback here; skipped");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.sock");
    let _backend = backend(&path);
    let sender = Sender::connect(&path).unwrap();
    let local = front.local_addr().unwrap();
    let mut c = TcpStream::connect(local).unwrap();
    let (s, peer) = front.accept().unwrap();
    let r = Record {
        id: 6,
        listener: 3,
        client: peer,
        local,
        prefix: Vec::new(),
    };
    assert_eq!(sender.try_send(&[(s.as_fd(), &r)]).unwrap(), 1);
    drop(s);
    c.write_all(b"GET /v6 HTTP/1.1\r\n\r\n").unwrap();
    let me = c.local_addr().unwrap();
    assert!(me.is_ipv6());
    assert_eq!(
        bodies(&mut c, 1)[0],
        format!("6 {me} {local} GET /v6 HTTP/1.1")
    );
}

#[test]
fn a_backend_that_stops_receiving_is_would_block_never_a_wait() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stuck.sock");
    let receiver = Receiver::bind(&path).unwrap();
    let sender = Sender::connect(&path).unwrap();
    let _channel = receiver.accept().unwrap(); // accepted, never read
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    let _c = TcpStream::connect(front.local_addr().unwrap()).unwrap();
    let (s, peer) = front.accept().unwrap();
    let r = Record {
        id: 1,
        listener: 0,
        client: peer,
        local: front.local_addr().unwrap(),
        prefix: vec![b'x'; 1000],
    };
    let mut sent = 0;
    let err = loop {
        match sender.try_send(&[(s.as_fd(), &r)]) {
            Ok(n) => sent += n,
            Err(e) => break e,
        }
        assert!(sent < 100_000, "the queue never filled");
    };
    assert_eq!(err.kind(), io::ErrorKind::WouldBlock, "{err}");
    assert!(sent > 0);
}

#[test]
fn nobody_listening_is_an_error_at_connect() {
    let dir = tempfile::tempdir().unwrap();
    assert!(Sender::connect(&dir.path().join("absent.sock")).is_err());
}

#[test]
fn a_forged_message_is_refused_and_the_channel_goes_on() {
    use rustix::net::{
        connect, sendmsg, socket_with, AddressFamily, SendAncillaryBuffer, SendAncillaryMessage,
        SendFlags, SocketAddrUnix, SocketFlags, SocketType,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.sock");
    let receiver = Receiver::bind(&path).unwrap();
    let raw = socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    connect(&raw, &SocketAddrUnix::new(&path).unwrap()).unwrap();
    let channel = receiver.accept().unwrap();
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr: SocketAddr = front.local_addr().unwrap();
    let _c = TcpStream::connect(addr).unwrap();
    let (s, _) = front.accept().unwrap();
    let send = |bytes: &[u8]| {
        let fds = [s.as_fd()];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
        sendmsg(
            &raw,
            &[IoSlice::new(bytes)],
            &mut control,
            SendFlags::empty(),
        )
        .unwrap();
    };
    // Not the protocol.
    send(b"GET / HTTP/1.1\r\n\r\n");
    let e = channel.recv().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    // A valid header claiming no records, with a descriptor: counts disagree.
    send(b"RJH1\0\0\0\0");
    let e = channel.recv().unwrap_err();
    assert!(e.to_string().contains("0 records but 1 descriptors"), "{e}");
    // The channel still works for a good message.
    let r = Record {
        id: 5,
        listener: 0,
        client: addr,
        local: addr,
        prefix: b"hi".to_vec(),
    };
    let mut good = Vec::new();
    ramjet_handoff::wire::encode(&[&r], &mut good);
    send(&good);
    let got = channel.recv().unwrap().unwrap();
    assert_eq!(
        (got.len(), got[0].id, &got[0].prefix[..]),
        (1, 5, &b"hi"[..])
    );
}
