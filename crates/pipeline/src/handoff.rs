//! Handing client connections to backend processes (the `handoff` handler,
//! `docs/HANDOFF.md`). A worker queues the connections whose heads asked for it during one
//! turn of its event loop, then sends them per backend in as few messages as the format
//! allows: one `sendmsg` for up to 64 connections, not one per connection.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use ramjet_handoff::{Record, Sender};

/// What a client gets when its backend cannot take the connection.
const UNAVAILABLE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 33\r\nRetry-After: 1\r\nConnection: close\r\n\r\nThe backend is not available now.";

/// A worker's hand-off state: connections to backends, and the connections waiting to be
/// sent at the end of this turn.
pub(crate) struct Handoffs {
    senders: RefCell<Vec<(Arc<PathBuf>, Sender)>>,
    queue: RefCell<Vec<Queued>>,
    next_id: Cell<u64>,
}

struct Queued {
    socket: Arc<PathBuf>,
    /// A duplicate of the connection's descriptor: the connection's own closes when its
    /// task ends.
    fd: OwnedFd,
    record: Record,
    /// Set when the backend took it.
    went: Rc<Cell<bool>>,
}

/// What one [`Handoffs::flush`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flushed {
    pub connections: usize,
    pub messages: usize,
    /// Answered 503 and closed instead.
    pub refused: usize,
}

impl Handoffs {
    pub(crate) fn new(worker: usize) -> Handoffs {
        Handoffs {
            senders: RefCell::new(Vec::new()),
            queue: RefCell::new(Vec::new()),
            // Worker index in the top byte: ids are unique in the process.
            next_id: Cell::new((worker as u64) << 56),
        }
    }

    /// A correlation id for the next handed-off connection.
    pub(crate) fn next_id(&self) -> u64 {
        let id = self.next_id.get() + 1;
        self.next_id.set(id);
        id
    }

    /// Queue a connection for the backend at `socket`; [`Handoffs::flush`] sends it and
    /// then sets the returned cell when the backend took it.
    pub(crate) fn queue(
        &self,
        socket: Arc<PathBuf>,
        fd: OwnedFd,
        record: Record,
    ) -> Rc<Cell<bool>> {
        let went = Rc::new(Cell::new(false));
        self.queue.borrow_mut().push(Queued {
            socket,
            fd,
            record,
            went: went.clone(),
        });
        went
    }

    /// Send every queued connection, per backend in batches. A backend that is not
    /// listening, or not receiving (its queue full: never waited for), gets its
    /// connections answered 503 and closed, with one warning naming it.
    pub(crate) fn flush(&self, max_batch: usize) -> Flushed {
        let mut queue = std::mem::take(&mut *self.queue.borrow_mut());
        let mut done = Flushed::default();
        while let Some(first) = queue.first() {
            let socket = first.socket.clone();
            let (mine, rest): (Vec<Queued>, Vec<Queued>) =
                queue.into_iter().partition(|q| q.socket == socket);
            queue = rest;
            let (sent, messages, failure) = self.send_all(&socket, &mine, max_batch);
            for q in &mine[..sent] {
                q.went.set(true);
            }
            done.connections += sent;
            done.messages += messages;
            if let Some(e) = failure {
                let refused = mine.len() - sent;
                tracing::warn!(
                    "hand-off to {}: {e}; {refused} connection(s) answered 503",
                    socket.display()
                );
                for q in mine.into_iter().skip(sent) {
                    let mut stream = std::net::TcpStream::from(q.fd);
                    // Best effort: the socket is non-blocking and the answer small.
                    let _ = stream.write(UNAVAILABLE);
                }
                done.refused += refused;
            }
        }
        done
    }

    /// Send `items` to `socket`'s backend from the first: (sent, messages, why it stopped).
    fn send_all(
        &self,
        socket: &Arc<PathBuf>,
        items: &[Queued],
        max_batch: usize,
    ) -> (usize, usize, Option<std::io::Error>) {
        let mut senders = self.senders.borrow_mut();
        let (mut sent, mut messages, mut reconnected) = (0, 0, false);
        while sent < items.len() {
            let at = match senders.iter().position(|(p, _)| p == socket) {
                Some(at) => at,
                None => match Sender::connect(socket) {
                    Ok(s) => {
                        senders.push((socket.clone(), s));
                        senders.len() - 1
                    }
                    Err(e) => return (sent, messages, Some(e)),
                },
            };
            let batch: Vec<_> = items[sent..]
                .iter()
                .take(max_batch.max(1))
                .map(|q| (q.fd.as_fd(), &q.record))
                .collect();
            match senders[at].1.try_send(&batch) {
                Ok(n) => {
                    sent += n;
                    messages += 1;
                }
                // The backend closed this channel (a restart): connect again, once.
                Err(e)
                    if !reconnected
                        && matches!(
                            e.kind(),
                            std::io::ErrorKind::BrokenPipe
                                | std::io::ErrorKind::ConnectionReset
                                | std::io::ErrorKind::NotConnected
                        ) =>
                {
                    senders.swap_remove(at);
                    reconnected = true;
                }
                Err(e) => return (sent, messages, Some(e)),
            }
        }
        (sent, messages, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};

    /// `n` connected pairs: (the client's end, the server's end as ramjet holds it).
    fn pairs(n: usize) -> Vec<(TcpStream, TcpStream)> {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        (0..n)
            .map(|_| {
                let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
                let (s, _) = l.accept().unwrap();
                s.set_nonblocking(true).unwrap();
                (c, s)
            })
            .collect()
    }

    fn record(h: &Handoffs, s: &TcpStream) -> Record {
        Record {
            id: h.next_id(),
            listener: 0,
            client: s.peer_addr().unwrap(),
            local: s.local_addr().unwrap(),
            prefix: b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        }
    }

    /// Queue every pair's server end for `path`; each one's "went" cell.
    fn queue_all(
        h: &Handoffs,
        path: &Arc<PathBuf>,
        conns: &[(TcpStream, TcpStream)],
    ) -> Vec<Rc<Cell<bool>>> {
        conns
            .iter()
            .map(|(_, s)| {
                let fd = s.as_fd().try_clone_to_owned().unwrap();
                h.queue(path.clone(), fd, record(h, s))
            })
            .collect()
    }

    #[test]
    fn one_turns_connections_go_in_one_message() {
        let dir = tempfile::tempdir().unwrap();
        let path = Arc::new(dir.path().join("b.sock"));
        let receiver = ramjet_handoff::Receiver::bind(&path).unwrap();
        let h = Handoffs::new(3);
        let conns = pairs(70);
        let went = queue_all(&h, &path, &conns);
        // 70 connections: 64 in the first message, 6 in the second.
        let done = h.flush(64);
        assert!(went.iter().all(|w| w.get()));
        assert_eq!(
            done,
            Flushed {
                connections: 70,
                messages: 2,
                refused: 0
            }
        );
        let channel = receiver.accept().unwrap();
        let first = channel.recv().unwrap().unwrap();
        let second = channel.recv().unwrap().unwrap();
        assert_eq!((first.len(), second.len()), (64, 6));
        assert_eq!(first[0].id, (3 << 56) + 1);
        assert_eq!(first[0].client, conns[0].0.local_addr().unwrap());
        // Nothing queued: nothing sent.
        assert_eq!(h.flush(64), Flushed::default());
        // One per message when asked.
        queue_all(&h, &path, &conns[..3]);
        assert_eq!(h.flush(1).messages, 3);
    }

    #[test]
    fn an_absent_backend_gets_each_client_a_503_and_a_close() {
        let dir = tempfile::tempdir().unwrap();
        let path = Arc::new(dir.path().join("absent.sock"));
        let h = Handoffs::new(0);
        let conns = pairs(3);
        let went = queue_all(&h, &path, &conns);
        assert_eq!(h.flush(64).refused, 3);
        assert!(went.iter().all(|w| !w.get()));
        for (mut c, s) in conns {
            drop(s); // ramjet's own descriptor
            let mut got = Vec::new();
            c.read_to_end(&mut got).unwrap();
            assert_eq!(got, UNAVAILABLE);
        }
    }
}
