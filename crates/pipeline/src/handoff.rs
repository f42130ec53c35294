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

/// What a client gets when its backend cannot take the connection (with the `Date` of
/// `now`, as every answer of the server has one).
fn unavailable(now: std::time::SystemTime) -> Vec<u8> {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nServer: ramjet\r\nDate: {}\r\nContent-Type: text/plain\r\nContent-Length: 33\r\nRetry-After: 1\r\nConnection: close\r\n\r\nThe backend is not available now.",
        httpdate::fmt_http_date(now)
    )
    .into_bytes()
}

/// How often a connection waiting for a backend whose queue is full tries again (the
/// waiting costs the worker nothing: it is a timer in the connection's task).
pub(crate) const RETRY: Duration = Duration::from_millis(2);

/// Why a backend could not take connections at its last try: the OS error (when there
/// was one) and its kind; an `io::Error` is not `Copy`, so this is kept instead.
#[derive(Debug, Clone, Copy)]
struct Why(Option<i32>, std::io::ErrorKind);

impl Why {
    fn error(self) -> std::io::Error {
        self.0
            .map_or_else(|| self.1.into(), std::io::Error::from_raw_os_error)
    }
}

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
    /// Backends that were full or absent at the last try, when to try again, and why they
    /// failed (the OS error, for the warning when their connections are refused): however
    /// many connections wait for one, it is tried once per `RETRY`.
    resting: RefCell<Vec<(Arc<PathBuf>, Instant, Why)>>,
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
            resting: RefCell::new(Vec::new()),
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

    /// Send every queued connection, per backend in batches. A backend whose queue is
    /// full, or that is not there (no socket, or nobody bound to it: a backend restarting,
    /// as Apache's graceful and hard restarts and logrotate's daily reload do), keeps its
    /// connections queued until their deadline, tried again at most once per `RETRY`;
    /// those still queued then are answered 503 and closed, with one warning naming the
    /// backend.
    pub(crate) fn flush(&self, max_batch: usize, now: Instant) -> Flushed {
        let mut queue = std::mem::take(&mut *self.queue.borrow_mut());
        let mut done = Flushed::default();
        self.resting
            .borrow_mut()
            .retain(|(_, until, _)| *until > now);
        while let Some(first) = queue.first() {
            let socket = first.socket.clone();
            let (mine, rest): (Vec<Queued>, Vec<Queued>) =
                queue.into_iter().partition(|q| q.socket == socket);
            queue = rest;
            let resting = self
                .resting
                .borrow()
                .iter()
                .find(|(s, ..)| *s == socket)
                .map(|&(_, _, why)| why);
            let (sent, messages, failure) = match resting {
                Some(why) => (0, 0, Some(why.error())),
                None => self.send_all(&socket, &mine, max_batch),
            };
            for q in &mine[..sent] {
                q.fate.set(Fate::Went);
            }
            done.connections += sent;
            done.messages += messages;
            let Some(e) = failure else { continue };
            let wait = matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock
                    | std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::ConnectionRefused
            );
            if wait && resting.is_none() {
                let why = Why(e.raw_os_error(), e.kind());
                self.resting
                    .borrow_mut()
                    .push((socket.clone(), now + RETRY, why));
            }
            let mut refused = 0;
            let mut answer: Option<Vec<u8>> = None;
            for q in mine.into_iter().skip(sent) {
                if wait && q.deadline > now {
                    done.waiting += 1;
                    self.queue.borrow_mut().push(q);
                    continue;
                }
                q.fate.set(Fate::Refused);
                if q.answer {
                    let bytes =
                        answer.get_or_insert_with(|| unavailable(std::time::SystemTime::now()));
                    let mut stream = std::net::TcpStream::from(q.fd);
                    // Best effort: the socket is non-blocking and the answer small.
                    let _ = stream.write(bytes);
                }
                refused += 1;
            }
            if refused > 0 {
                let waited = if wait { " after waiting" } else { "" };
                tracing::warn!(
                    "hand-off to {}: {e}; {refused} connection(s) answered 503{waited}",
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

    /// What a refused client read: the 503, with a `Date` and `Server` as every answer.
    fn assert_unavailable(got: &[u8]) {
        let text = String::from_utf8_lossy(got);
        assert!(
            text.starts_with("HTTP/1.1 503 Service Unavailable\r\nServer: ramjet\r\nDate: "),
            "{text}"
        );
        assert!(
            text.ends_with("\r\n\r\nThe backend is not available now."),
            "{text}"
        );
    }

    #[test]
    fn an_absent_backend_is_waited_for_then_each_client_gets_a_503_and_a_close() {
        let dir = tempfile::tempdir().unwrap();
        let path = Arc::new(dir.path().join("absent.sock"));
        let h = Handoffs::new(0);
        let conns = pairs(3);
        let t0 = Instant::now();
        let went = queue_at(&h, &path, &conns, t0);
        assert_eq!(h.flush(64, t0).waiting, 3);
        // Tried at most once per RETRY however often flushed.
        assert_eq!(h.flush(64, t0).waiting, 3);
        assert!(went.iter().all(|w| w.get() == Fate::Queued));
        assert_eq!(h.flush(64, t0 + WAIT + RETRY).refused, 3);
        assert!(went.iter().all(|w| w.get() == Fate::Refused));
        for (mut c, s) in conns {
            drop(s); // ramjet's own descriptor
            let mut got = Vec::new();
            c.read_to_end(&mut got).unwrap();
            assert_unavailable(&got);
        }
    }

    /// A backend restarting (Apache's graceful or hard restart, logrotate's reload): its
    /// socket is gone, then left with nobody bound (refused), then back. The connections
    /// that arrived meanwhile wait and then go; none is refused.
    #[test]
    fn connections_wait_for_a_restarting_backend_and_go_when_it_is_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = Arc::new(dir.path().join("restart.sock"));
        let h = Handoffs::new(0);
        let conns = pairs(4);
        let t0 = Instant::now();
        let mut fates = queue_at(&h, &path, &conns[..2], t0);
        assert_eq!(h.flush(64, t0).waiting, 2);
        // A socket file nobody reads any more: refused, still waited for.
        let gone = std::os::unix::net::UnixDatagram::bind(&*path).unwrap();
        drop(gone);
        fates.extend(queue_at(&h, &path, &conns[2..], t0));
        let f = h.flush(64, t0 + RETRY);
        assert_eq!((f.waiting, f.refused), (4, 0), "{f:?}");
        // Back: everything goes at the next try.
        std::fs::remove_file(&*path).unwrap();
        let backend = std::os::unix::net::UnixDatagram::bind(&*path).unwrap();
        let f = h.flush(64, t0 + RETRY * 2);
        assert_eq!((f.connections, f.refused, f.waiting), (4, 0, 0), "{f:?}");
        assert!(fates.iter().all(|f| f.get() == Fate::Went));
        let mut buf = [0u8; 4096];
        assert!(backend.recv(&mut buf).unwrap() > 0);
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
        assert_unavailable(&got);
    }
}
