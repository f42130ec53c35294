//! Handing client connections to backend processes (the `handoff` handler,
//! `docs/HANDOFF.md`). A worker queues the connections whose heads asked for it during one
//! turn of its event loop, then sends them per backend in as few messages as the format
//! allows: one `sendmsg` for up to 64 connections, not one per connection. A backend
//! whose queue is full is waited for, up to `[timeouts] handoff` per connection, before
//! its client is answered 503.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ramjet_handoff::{Record, Sender};

/// What a client gets when its backend cannot take the connection.
const UNAVAILABLE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 33\r\nRetry-After: 1\r\nConnection: close\r\n\r\nThe backend is not available now.";

/// How often a connection waiting for a backend whose queue is full tries again (the
/// waiting costs the worker nothing: it is a timer in the connection's task).
pub(crate) const RETRY: Duration = Duration::from_millis(2);

/// What became of a queued connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Still in the queue (its backend was full: waiting).
    Queued,
    /// The backend took it.
    Went,
    /// Answered 503 and closed.
    Refused,
}

/// A worker's hand-off state: connections to backends, and the connections waiting to be
/// sent at the end of this turn.
pub(crate) struct Handoffs {
    senders: RefCell<Vec<Backend>>,
    queue: RefCell<Vec<Queued>>,
    next_id: Cell<u64>,
}

/// A backend this worker sends to.
struct Backend {
    socket: Arc<PathBuf>,
    sender: Sender,
}

struct Queued {
    socket: Arc<PathBuf>,
    /// A duplicate of the connection's descriptor: the connection's own closes when its
    /// task ends.
    fd: OwnedFd,
    record: Record,
    /// Answered 503 (or closed, without `answer`) if still here then.
    deadline: Instant,
    /// Whether a client that cannot be handed over gets a 503 (a request waits for an
    /// answer) or only a close (an idle connection of an upgrade).
    answer: bool,
    fate: Rc<Cell<Fate>>,
}

/// What one [`Handoffs::flush`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flushed {
    pub connections: usize,
    pub messages: usize,
    /// Answered 503 and closed instead.
    pub refused: usize,
    /// Left in the queue: their backend's queue was full.
    pub waiting: usize,
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

    /// Queue a connection for the backend at `socket`, to be sent by
    /// [`Handoffs::flush`]; the returned cell tells what became of it.
    pub(crate) fn queue(
        &self,
        socket: Arc<PathBuf>,
        fd: OwnedFd,
        record: Record,
        deadline: Instant,
        answer: bool,
    ) -> Rc<Cell<Fate>> {
        let fate = Rc::new(Cell::new(Fate::Queued));
        self.queue.borrow_mut().push(Queued {
            socket,
            fd,
            record,
            deadline,
            answer,
            fate: fate.clone(),
        });
        fate
    }

    /// Send every queued connection, per backend in batches. When a backend's queue is
    /// full, its connections stay queued until their deadline (a later flush tries
    /// again), then are answered 503 and closed. A backend that is not listening gets
    /// its connections answered 503 and closed at once. Each failure is one warning
    /// naming the backend.
    pub(crate) fn flush(&self, max_batch: usize, now: Instant) -> Flushed {
        let mut queue = std::mem::take(&mut *self.queue.borrow_mut());
        let mut done = Flushed::default();
        while let Some(first) = queue.first() {
            let socket = first.socket.clone();
            let (mine, rest): (Vec<Queued>, Vec<Queued>) =
                queue.into_iter().partition(|q| q.socket == socket);
            queue = rest;
            let (sent, messages, failure) = self.send_all(&socket, &mine, max_batch);
            for q in &mine[..sent] {
                q.fate.set(Fate::Went);
            }
            done.connections += sent;
            done.messages += messages;
            let Some(e) = failure else { continue };
            let full = e.kind() == std::io::ErrorKind::WouldBlock;
            let mut refused = 0;
            for q in mine.into_iter().skip(sent) {
                if full && q.deadline > now {
                    done.waiting += 1;
                    self.queue.borrow_mut().push(q);
                    continue;
                }
                q.fate.set(Fate::Refused);
                if q.answer {
                    let mut stream = std::net::TcpStream::from(q.fd);
                    // Best effort: the socket is non-blocking and the answer small.
                    let _ = stream.write(UNAVAILABLE);
                }
                refused += 1;
            }
            if refused > 0 {
                let wait = if full { " after waiting" } else { "" };
                tracing::warn!(
                    "hand-off to {}: {e}; {refused} connection(s) answered 503{wait}",
                    socket.display()
                );
            }
            done.refused += refused;
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
            let at = match senders.iter().position(|b| b.socket == *socket) {
                Some(at) => at,
                None => match Sender::connect(socket) {
                    Ok(s) => {
                        senders.push(Backend {
                            socket: socket.clone(),
                            sender: s,
                        });
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
            match senders[at].sender.try_send(&batch) {
                Ok(n) => {
                    sent += n;
                    messages += 1;
                }
                // The backend closed this channel, or its datagram socket went (a
                // restart): connect again, once.
                Err(e)
                    if !reconnected
                        && matches!(
                            e.kind(),
                            std::io::ErrorKind::BrokenPipe
                                | std::io::ErrorKind::ConnectionReset
                                | std::io::ErrorKind::NotConnected
                                | std::io::ErrorKind::ConnectionRefused
                                | std::io::ErrorKind::NotFound
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

    const WAIT: Duration = Duration::from_secs(1);

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

    /// Queue every pair's server end for `path` at `now`; each one's fate.
    fn queue_at(
        h: &Handoffs,
        path: &Arc<PathBuf>,
        conns: &[(TcpStream, TcpStream)],
        now: Instant,
    ) -> Vec<Rc<Cell<Fate>>> {
        conns
            .iter()
            .map(|(_, s)| {
                let fd = s.as_fd().try_clone_to_owned().unwrap();
                h.queue(path.clone(), fd, record(h, s), now + WAIT, true)
            })
            .collect()
    }

    fn queue_all(
        h: &Handoffs,
        path: &Arc<PathBuf>,
        conns: &[(TcpStream, TcpStream)],
    ) -> Vec<Rc<Cell<Fate>>> {
        queue_at(h, path, conns, Instant::now())
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
        let done = h.flush(64, Instant::now());
        assert!(went.iter().all(|w| w.get() == Fate::Went));
        assert_eq!(
            done,
            Flushed {
                connections: 70,
                messages: 2,
                refused: 0,
                waiting: 0,
            }
        );
        let channel = receiver.accept().unwrap();
        let first = channel.recv().unwrap().unwrap();
        let second = channel.recv().unwrap().unwrap();
        assert_eq!((first.len(), second.len()), (64, 6));
        assert_eq!(first[0].id, (3 << 56) + 1);
        assert_eq!(first[0].client, conns[0].0.local_addr().unwrap());
        // Nothing queued: nothing sent.
        assert_eq!(h.flush(64, Instant::now()), Flushed::default());
        // One per message when asked.
        queue_all(&h, &path, &conns[..3]);
        assert_eq!(h.flush(1, Instant::now()).messages, 3);
    }

    #[test]
    fn an_absent_backend_gets_each_client_a_503_and_a_close() {
        let dir = tempfile::tempdir().unwrap();
        let path = Arc::new(dir.path().join("absent.sock"));
        let h = Handoffs::new(0);
        let conns = pairs(3);
        let went = queue_all(&h, &path, &conns);
        assert_eq!(h.flush(64, Instant::now()).refused, 3);
        assert!(went.iter().all(|w| w.get() == Fate::Refused));
        for (mut c, s) in conns {
            drop(s); // ramjet's own descriptor
            let mut got = Vec::new();
            c.read_to_end(&mut got).unwrap();
            assert_eq!(got, UNAVAILABLE);
        }
    }

    /// A datagram backend (several processes reading one socket) whose queue is full:
    /// the connections wait in ramjet's queue, go when the backend reads, and those still
    /// waiting at their deadline get a 503.
    #[test]
    fn a_full_datagram_backend_is_waited_for_until_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let path = Arc::new(dir.path().join("dgram.sock"));
        let backend = std::os::unix::net::UnixDatagram::bind(&*path).unwrap();
        let h = Handoffs::new(0);
        let t0 = Instant::now();
        // One connection per message until the backend's queue refuses more
        // (net.unix.max_dgram_qlen messages).
        let qlen: usize = std::fs::read_to_string("/proc/sys/net/unix/max_dgram_qlen")
            .map_or(10, |s| s.trim().parse().unwrap());
        let n = qlen + 20;
        let conns = pairs(n);
        let fates = queue_at(&h, &path, &conns, t0);
        let first = h.flush(1, t0);
        assert!(first.connections > 0, "{first:?}");
        assert_eq!(first.refused, 0);
        assert_eq!(first.connections + first.waiting, n, "{first:?}");
        assert!(first.waiting > 0, "the queue never filled: {first:?}");
        let queued = |f: &[Rc<Cell<Fate>>]| f.iter().filter(|f| f.get() == Fate::Queued).count();
        assert_eq!(queued(&fates), first.waiting);
        // The backend reads one message: the next flush sends more, and keeps the rest.
        let mut buf = [0u8; 4096];
        backend.recv(&mut buf).unwrap();
        let second = h.flush(1, t0 + WAIT / 2);
        assert!(second.connections >= 1, "{second:?}");
        assert_eq!(second.refused, 0);
        // Past the deadline the rest are answered 503.
        let last = h.flush(1, t0 + WAIT + Duration::from_millis(1));
        assert_eq!(queued(&fates), 0);
        assert_eq!(
            last.refused,
            fates.iter().filter(|f| f.get() == Fate::Refused).count()
        );
        assert!(last.refused > 0);
        let refused_at = fates.iter().position(|f| f.get() == Fate::Refused).unwrap();
        let (mut c, s) = conns.into_iter().nth(refused_at).unwrap();
        drop(s);
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        assert_eq!(got, UNAVAILABLE);
    }
}
