//! What a running module and the connection hand each other: the answer's head and body
//! parts going out, request body pieces coming in, and why a call ended badly. The guest's
//! host calls fill it from inside the instance's fiber; the driver ([`crate::call`]) reads it
//! on the worker's event loop between polls.

use std::collections::VecDeque;
use std::fs::File;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ramjet_modules::{Head, Piece, Reply};

/// Bytes a module may write before its answer starts streaming on its own.
pub const BUFFERED_MAX: u64 = 256 << 10;

/// When streaming, a write waits while more than this is queued for the client (bytes and
/// file ranges): enough to fill a socket buffer in one go, little enough per connection.
pub const QUEUED_MAX: u64 = 64 << 10;

/// Queued byte parts are handed to the connection joined up to this size.
pub const JOINED_MAX: usize = 64 << 10;

/// A header field as the module gave it.
pub type Field = (String, Vec<u8>);

/// Why a call ended without an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// It used more CPU time than its budget.
    Cpu,
    /// It asked for memory past its cap.
    Memory,
}

/// The request body as the module asked for it.
#[derive(Debug, Default)]
pub enum BodyTurn {
    /// Nothing asked.
    #[default]
    Idle,
    /// The module waits for a piece of at most this many bytes.
    Wanted(u32),
    /// A piece (or the end: `None`) handed over, not yet taken.
    Given(Result<Option<Bytes>, BodyFailure>),
}

/// Why the body could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFailure {
    Aborted,
    Gone,
}

/// The request's header fields, copied out of the connection's buffer in one block: a
/// module asks for the ones it reads (`header`, `headers`).
#[derive(Debug, Default)]
pub struct Headers {
    data: Vec<u8>,
    /// Each field's name and value ends in `data` (the name starts where the previous
    /// value ended).
    ends: Vec<(u32, u32)>,
}

impl Headers {
    /// Hold these fields instead, in the buffers already allocated.
    pub fn refill<'a>(&mut self, fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) {
        self.data.clear();
        self.ends.clear();
        // Room for a browser's usual fields at once, not one allocation per doubling.
        self.data.reserve(512);
        self.ends.reserve(16);
        for (name, value) in fields {
            self.data.extend_from_slice(name);
            let name_end = self.data.len() as u32;
            self.data.extend_from_slice(value);
            self.ends.push((name_end, self.data.len() as u32));
        }
    }

    fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut start = 0usize;
        self.ends.iter().map(move |&(name_end, end)| {
            let (name_end, end) = (name_end as usize, end as usize);
            let field = (&self.data[start..name_end], &self.data[name_end..end]);
            start = end;
            field
        })
    }

    /// The first field called `name`, any case.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.fields()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    /// Every field, in order (a name that is not UTF-8 is shown lossily).
    pub fn all(&self) -> Vec<Field> {
        self.fields()
            .map(|(n, v)| (String::from_utf8_lossy(n).into_owned(), v.to_vec()))
            .collect()
    }
}

/// The shared state of one call.
#[derive(Debug, Default)]
pub struct Exchange {
    /// The request's header fields.
    pub headers: Headers,
    /// The status and header lines, once the module set them ([`Exchange::respond`]).
    pub head: Option<Head>,
    /// Body parts not yet handed to the connection.
    pub parts: VecDeque<Piece>,
    /// Bytes (not file ranges) among `parts` before streaming.
    pub buffered: u64,
    /// Bytes and file range lengths among `parts`.
    pub queued: u64,
    /// The answer goes out as it is written (after `flush`, or past [`BUFFERED_MAX`]).
    pub streaming: bool,
    /// The request body handshake.
    pub body: BodyTurn,
    /// What was read of a body piece beyond what the module asked for.
    pub leftover: Bytes,
    /// The request body can no longer be read (the answer is streaming).
    pub body_gone: bool,
    /// Why the call ended badly, when the host knows better than the trap.
    pub cause: Option<Cause>,
    /// Time the module has run, over the polls that ended.
    pub run_used: Duration,
    /// When the poll now running began.
    pub poll_began: Option<Instant>,
    /// The location's path prefix (the worker's one copy).
    pub mount: Arc<str>,
}

/// A handle on one call's [`Exchange`], shared by the store and the driver.
#[derive(Debug, Clone, Default)]
pub struct Shared(Arc<Mutex<Exchange>>);

impl Shared {
    /// The exchange. Never held across an await; a poisoned lock (a panic elsewhere while
    /// it was held) still gives the data.
    pub fn lock(&self) -> MutexGuard<'_, Exchange> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This exchange made new for another call, with its buffers (header fields, parts)
    /// kept, when nothing but this handle holds it: an instance's last call is over and no
    /// stream still takes parts from it. `None` otherwise.
    pub fn renewed(&self) -> Option<Shared> {
        if Arc::strong_count(&self.0) != 1 {
            return None;
        }
        // Every field named, so a new one cannot be left out; the header fields and the
        // mount are the caller's to set.
        let Exchange {
            headers: _,
            head,
            parts,
            buffered,
            queued,
            streaming,
            body,
            leftover,
            body_gone,
            cause,
            run_used,
            poll_began,
            mount: _,
        } = &mut *self.lock();
        *head = None;
        parts.clear();
        (*buffered, *queued, *streaming, *body_gone) = (0, 0, false, false);
        *body = BodyTurn::Idle;
        *leftover = Bytes::new();
        (*cause, *run_used, *poll_began) = (None, Duration::ZERO, None);
        Some(self.clone())
    }
}

impl Exchange {
    /// Time the module has run so far, at `now`.
    pub fn run_time(&self, now: Instant) -> Duration {
        let running = self.poll_began.map(|b| now.saturating_duration_since(b));
        self.run_used + running.unwrap_or_default()
    }

    /// Append bytes to the body; start streaming when too much is waiting.
    pub fn write(&mut self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        self.buffered += bytes.len() as u64;
        self.queued += bytes.len() as u64;
        self.parts.push_back(Piece::Bytes(bytes));
        if self.buffered > BUFFERED_MAX {
            self.start_streaming();
        }
    }

    /// Append a file range to the body.
    pub fn send_file(&mut self, file: Arc<File>, offset: u64, len: u64) {
        if len > 0 {
            self.queued += len;
            self.parts.push_back(Piece::File { file, offset, len });
        }
    }

    /// The reply's head: the module's status and fields, 200 if it gave none. Taken: the
    /// head goes out once.
    pub fn head_reply(&mut self) -> Reply {
        self.head.take().unwrap_or_else(|| Head::new(200)).into()
    }

    /// The module returned: everything it wrote, in one reply with its length (204 when
    /// it answered nothing at all).
    pub fn whole(&mut self) -> Reply {
        let mut reply = match self.head {
            None if self.parts.is_empty() => Reply::new(204),
            _ => self.head_reply(),
        };
        self.queued = 0;
        for part in std::mem::take(&mut self.parts) {
            match part {
                Piece::Bytes(b) => reply.push_bytes(b),
                Piece::File { file, offset, len } => reply.push_file(file, offset, len),
            }
        }
        reply
    }

    /// Whether a streaming module must wait for the client before it writes more.
    pub fn backed_up(&self) -> bool {
        self.streaming && self.queued > QUEUED_MAX
    }

    /// The next part for the connection: consecutive byte parts joined (up to
    /// [`JOINED_MAX`]), or a file range of at most `file_max` bytes (the rest stays first in
    /// the queue).
    pub fn take_part(&mut self, file_max: u64) -> Option<Piece> {
        let part = match self.parts.pop_front()? {
            Piece::File { file, offset, len } if len > file_max => {
                let rest = Piece::File {
                    file: file.clone(),
                    offset: offset + file_max,
                    len: len - file_max,
                };
                self.parts.push_front(rest);
                Piece::File {
                    file,
                    offset,
                    len: file_max,
                }
            }
            Piece::Bytes(first) => {
                let mut joined: Option<bytes::BytesMut> = None;
                while let Some(Piece::Bytes(next)) = self.parts.front() {
                    let so_far = joined.as_ref().map_or(first.len(), |j| j.len());
                    if so_far + next.len() > JOINED_MAX {
                        break;
                    }
                    let j = joined.get_or_insert_with(|| bytes::BytesMut::from(&first[..]));
                    j.extend_from_slice(next);
                    self.parts.pop_front();
                }
                Piece::Bytes(joined.map_or(first, |j| j.freeze()))
            }
            file => file,
        };
        self.queued -= match &part {
            Piece::Bytes(b) => b.len() as u64,
            Piece::File { len, .. } => *len,
        };
        Some(part)
    }

    /// Go out as written from now on (with a 200 head if the module gave none).
    pub fn start_streaming(&mut self) {
        self.head.get_or_insert_with(|| Head::new(200));
        self.streaming = true;
    }

    /// Set the head, once (a second call changes nothing).
    pub fn respond(&mut self, head: Head) {
        if self.head.is_none() {
            self.head = Some(head);
        }
    }

    /// Whether the module waits for a body piece not yet given.
    pub fn wants_body(&self) -> Option<u32> {
        match self.body {
            BodyTurn::Wanted(max) => Some(max),
            _ => None,
        }
    }

    /// Hand the waiting module a body piece, keeping what is beyond what it asked for.
    pub fn give_body(&mut self, piece: Result<Option<Bytes>, BodyFailure>) {
        let max = self.wants_body().unwrap_or(u32::MAX) as usize;
        let piece = piece.map(|p| {
            p.map(|mut b| {
                if b.len() > max {
                    self.leftover = b.split_off(max);
                }
                b
            })
        });
        self.body = BodyTurn::Given(piece);
    }
}

/// The length of the range a module asks of a file of `size` bytes: from `offset`, `len`
/// bytes or to the end. `None` when it is not inside the file.
pub fn file_range(offset: u64, len: Option<u64>, size: u64) -> Option<u64> {
    match len {
        None => size.checked_sub(offset),
        Some(len) => offset
            .checked_add(len)
            .filter(|&end| end <= size)
            .map(|_| len),
    }
}

/// A module's head as the reply's: a status outside 100-999 becomes 500; a field with CR,
/// LF or NUL in its value, or a name that is empty or not visible ASCII without `:`, is
/// dropped.
pub fn head<'a>(status: u16, fields: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Head {
    let mut head = Head::new(if (100..=999).contains(&status) {
        status
    } else {
        500
    });
    for (name, value) in fields {
        if field_allowed(name, value) {
            head.add_header(name, value);
        }
    }
    head
}

/// Whether a module's header field may go out (see [`head`]).
pub fn field_allowed(name: &str, value: &[u8]) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_graphic() && b != b':')
        && !value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_is_set_once_and_bad_fields_are_dropped() {
        let mut x = Exchange::default();
        let fields: [(&str, &[u8]); 8] = [
            ("A", b"1"),
            ("B\r\nX", b"2"),
            ("C", b"3\r\nInjected: 1"),
            ("", b"4"),
            ("D:", b"5"),
            ("E", b""),
            ("F G", b"6"),
            ("H", b"7\08"),
        ];
        x.respond(head(201, fields));
        x.respond(head(404, []));
        let h = x.head.as_ref().unwrap();
        assert_eq!((h.status, h.header_lines()), (201, &b"A: 1\r\nE: \r\n"[..]));
        for (status, kept) in [(7, 500), (99, 500), (100, 100), (999, 999), (1000, 500)] {
            assert_eq!(head(status, []).status, kept);
        }
    }

    #[test]
    fn writing_past_the_buffer_starts_streaming() {
        let mut x = Exchange::default();
        x.write(Bytes::new());
        assert!(x.parts.is_empty());
        x.write(Bytes::from(vec![0; BUFFERED_MAX as usize]));
        assert!(!x.streaming && x.head.is_none());
        x.write(Bytes::from_static(b"1"));
        assert!(x.streaming);
        let h = x.head.as_ref().expect("a streamed answer needs a head");
        assert_eq!((h.status, h.header_lines()), (200, &b""[..]));
    }

    #[test]
    fn queued_parts_are_joined_and_files_cut() {
        let mut x = Exchange::default();
        for _ in 0..3 {
            x.write(Bytes::from_static(b"ab"));
        }
        let file = Arc::new(File::open("/dev/null").unwrap());
        x.send_file(file.clone(), 10, 100);
        x.write(Bytes::from(vec![b'z'; JOINED_MAX]));
        x.write(Bytes::from_static(b"y"));
        assert_eq!(x.queued, 6 + 100 + JOINED_MAX as u64 + 1);
        assert!(matches!(x.take_part(64), Some(Piece::Bytes(b)) if b == "ababab"));
        assert!(matches!(
            x.take_part(64),
            Some(Piece::File {
                offset: 10,
                len: 64,
                ..
            })
        ));
        assert!(matches!(
            x.take_part(64),
            Some(Piece::File {
                offset: 74,
                len: 36,
                ..
            })
        ));
        // Joined only up to the limit.
        assert!(matches!(x.take_part(64), Some(Piece::Bytes(b)) if b.len() == JOINED_MAX));
        assert!(matches!(x.take_part(64), Some(Piece::Bytes(b)) if b == "y"));
        assert_eq!((x.take_part(64).is_none(), x.queued), (true, 0));
    }

    #[test]
    fn a_streaming_writer_waits_past_the_queue_limit() {
        let mut x = Exchange::default();
        x.write(Bytes::from(vec![0; QUEUED_MAX as usize + 1]));
        assert!(!x.backed_up(), "not streaming yet: buffered");
        x.start_streaming();
        assert!(x.backed_up());
        x.take_part(u64::MAX);
        assert!(!x.backed_up());
    }

    #[test]
    fn header_fields_are_found_by_name_in_any_case() {
        let fields: [(&[u8], &[u8]); 3] = [(b"Host", b"a"), (b"X-Empty", b""), (b"host", b"b")];
        let mut h = Headers::default();
        h.refill(fields.into_iter());
        assert_eq!(h.get("HOST"), Some(&b"a"[..]));
        assert_eq!(h.get("x-empty"), Some(&b""[..]));
        assert_eq!(h.get("nope"), None);
        assert_eq!(h.all().len(), 3);
        assert_eq!(h.all()[2], ("host".to_string(), b"b".to_vec()));
        h.refill(std::iter::empty());
        assert_eq!(h.all(), vec![]);
    }

    #[test]
    fn file_ranges_stay_inside_the_file() {
        assert_eq!(file_range(0, None, 0), Some(0));
        assert_eq!(file_range(0, None, 10), Some(10));
        assert_eq!(file_range(10, None, 10), Some(0));
        assert_eq!(file_range(11, None, 10), None);
        assert_eq!(file_range(9, Some(1), 10), Some(1));
        assert_eq!(file_range(9, Some(2), 10), None);
        assert_eq!(file_range(u64::MAX, Some(2), u64::MAX), None);
    }

    #[test]
    fn a_reply_holds_what_was_written_or_says_no_content() {
        let mut x = Exchange::default();
        assert_eq!(x.whole().status, 204);
        x.write(Bytes::from_static(b"ab"));
        let r = x.whole();
        assert_eq!((r.status, r.len()), (200, 2));
        x.respond(head(404, [("x", &b"1"[..])]));
        let r = x.whole();
        assert_eq!((r.status, r.header_lines()), (404, &b"x: 1\r\n"[..]));
        assert_eq!(x.queued, 0);
    }

    #[test]
    fn an_exchange_is_renewed_only_when_nothing_else_holds_it() {
        let shared = Shared::default();
        {
            let mut x = shared.lock();
            x.headers
                .refill([(&b"Cookie"[..], &b"a=1"[..])].into_iter());
            x.respond(head(201, []));
            x.write(Bytes::from_static(b"ab"));
            x.send_file(Arc::new(File::open("/dev/null").unwrap()), 0, 0);
            x.start_streaming();
            x.body = BodyTurn::Wanted(5);
            x.leftover = Bytes::from_static(b"z");
            (x.body_gone, x.cause) = (true, Some(Cause::Cpu));
            (x.run_used, x.poll_began) = (Duration::from_secs(1), Some(Instant::now()));
        }
        let stream = shared.clone();
        assert!(shared.renewed().is_none(), "a stream still takes its parts");
        drop(stream);
        let again = shared.renewed().expect("only the instance holds it");
        assert!(Arc::ptr_eq(&again.0, &shared.0));
        let x = again.lock();
        assert_eq!(
            x.headers.get("cookie"),
            Some(&b"a=1"[..]),
            "the caller refills them"
        );
        assert!(x.head.is_none() && x.parts.is_empty() && x.leftover.is_empty());
        assert_eq!(
            (x.buffered, x.queued, x.streaming, x.body_gone),
            (0, 0, false, false)
        );
        assert!(matches!(x.body, BodyTurn::Idle) && x.cause.is_none());
        assert_eq!((x.run_used, x.poll_began), (Duration::ZERO, None));
    }

    #[test]
    fn a_body_piece_larger_than_asked_is_split() {
        let mut x = Exchange {
            body: BodyTurn::Wanted(3),
            ..Exchange::default()
        };
        x.give_body(Ok(Some(Bytes::from_static(b"abcdef"))));
        assert!(matches!(&x.body, BodyTurn::Given(Ok(Some(b))) if b == "abc"));
        assert_eq!(x.leftover, "def");
    }
}
