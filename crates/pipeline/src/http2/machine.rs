//! The protocol state of one HTTP/2 connection, without I/O: the client's bytes go in
//! (`receive`), and out come new requests (`new`), request bodies (per stream), the
//! frames to write (`out`), and the streams that ended (`ended`). Responses go in as
//! header blocks and body pieces; `schedule` turns queued pieces into DATA frames within
//! the client's windows, a frame per stream in turn, so a large download does not hold
//! back the small answers beside it.
//!
//! The rules are RFC 9113's: stream states (§5.1), identifiers (§5.1.1), concurrency
//! (§5.1.2), errors (§5.4), frame checks (§6), flow control (§6.9), field sections (§8).

use std::collections::VecDeque;
use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;
use ramjet_runtime::sys::Mapping;

use super::fields::{Fields, Refused, Request};
use super::frame::{self, Code, Head};
use super::hpack::{Decoder, Encoder};
use super::meter::PREFACE;
use super::out::Out;

/// What the server advertises and holds to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub max_streams: u32,
    /// Each stream's receive window, and the connection's.
    pub stream_window: u32,
    pub connection_window: u32,
    /// The largest header list, decoded.
    pub max_head: usize,
}

/// The most bytes of a header block (HEADERS and its CONTINUATIONs) read before it ends.
const MAX_BLOCK: usize = 256 * 1024;
/// Closed stream identifiers remembered, to tell a frame on a closed stream (§5.1) from
/// one on a stream that was never opened.
const CLOSED_KEPT: usize = 64;
/// How much the scheduler queues for the socket before it waits for the socket.
pub(crate) const OUT_HIGH: usize = 512 * 1024;
/// Frames of a file read into memory at once (one `preadv2`), where files are copied
/// (under TLS, which encrypts them anyway).
const FILE_BATCH: usize = 4;
/// How much of a file chunk is checked to be in the page cache at once (and mapped).
const RESIDENT_SPAN: u64 = 2 << 20;
/// The smallest file chunk whose frames go out from a mapping rather than by sendfile
/// each: below it, the mapping's two system calls cost more than the sendfiles saved.
const MAP_MIN: u64 = 256 << 10;

/// A request that opened a stream.
#[derive(Debug)]
pub(crate) struct NewStream {
    pub id: u32,
    pub request: Result<Request, Refused>,
    /// The request has no body (END_STREAM on its HEADERS).
    pub end_stream: bool,
}

/// A piece of a response body.
#[derive(Debug)]
pub(crate) enum Chunk {
    Bytes(Bytes),
    File {
        file: Arc<File>,
        offset: u64,
        len: u64,
    },
}

/// A file range to read ahead on the blocking pool (not in the page cache).
#[derive(Debug)]
pub(crate) struct Warm {
    pub id: u32,
    pub file: Arc<File>,
    pub offset: u64,
    pub len: usize,
}

/// What a stream's request body reader finds.
#[derive(Debug)]
pub(crate) enum Read {
    Data(Bytes),
    End,
    /// The stream was reset or the connection is ending.
    Gone,
    /// Nothing yet.
    Wait,
}

/// A stream that ended: what the access log and the counters need.
#[derive(Debug)]
pub(crate) struct Ended<L> {
    pub status: u16,
    pub slot: u16,
    pub sent: u64,
    pub log: Option<L>,
}

#[derive(Debug)]
struct Stream<L> {
    id: u32,
    /// END_STREAM received (half-closed remote).
    recv_closed: bool,
    /// END_STREAM (or RST_STREAM) sent.
    send_closed: bool,
    send_window: i64,
    recv_window: i64,
    /// Received bytes the handler read and the window was not yet opened for.
    unacked: u32,
    declared: Option<u64>,
    received: u64,
    /// Body bytes received and not yet read.
    inbox: VecDeque<Bytes>,
    /// Response pieces not yet framed, and whether the body ends after them (with a
    /// trailer section when `Some(Some(block))`).
    queue: VecDeque<Chunk>,
    queued: u64,
    finish: Option<Option<Vec<u8>>>,
    /// Bytes of the front file chunk known to be in the page cache, from its offset.
    resident: u64,
    /// Those bytes mapped, when the chunk is large and frames go out on a plain socket.
    mapped: Option<Arc<Mapping>>,
    warming: bool,
    /// When the client's windows last stopped this stream's sending.
    stalled: Option<std::time::Instant>,
    ended: Ended<L>,
}

/// A header block being read (HEADERS and CONTINUATION frames).
#[derive(Debug)]
struct Block {
    stream: u32,
    end_stream: bool,
    self_dependent: bool,
    buf: Vec<u8>,
}

/// A request's header block and what it decoded to, with the decoder's table as it was.
#[derive(Debug)]
struct LastRequest {
    block: Vec<u8>,
    changes: u64,
    head: Vec<u8>,
    content_length: Option<u64>,
}

/// One connection's protocol state. `L`: what the access log keeps of a request.
pub(crate) struct Machine<L> {
    settings: Settings,
    /// Preface bytes still expected.
    preface: usize,
    /// The client's first frame (its SETTINGS) has come.
    greeted: bool,
    decoder: Decoder,
    /// The header block being decoded, its buffers kept from block to block.
    fields: Fields,
    /// The answers' encoder: its table follows the blocks in the order they are framed.
    encoder: Encoder,
    /// An answer's header block being encoded, kept from answer to answer.
    head: Vec<u8>,
    /// The last request whose block changed nothing in the decoder's table: the same
    /// bytes, while the table stays, are the same request.
    last_request: Option<Box<LastRequest>>,
    peer_window: i64,
    peer_max_frame: usize,
    send_window: i64,
    recv_window: i64,
    recv_unacked: u32,
    streams: Vec<Stream<L>>,
    max_seen: u32,
    closed: VecDeque<u32>,
    block: Option<Block>,
    /// Next stream to send a frame, in turn.
    turn: usize,
    /// File ranges may go out by sendfile (a plain socket).
    sendfile: bool,
    pub out: Out,
    pub new: VecDeque<NewStream>,
    pub ended: Vec<Ended<L>>,
    pub warm: Vec<Warm>,
    /// GOAWAY sent: the last stream accepted.
    pub going_away: Option<u32>,
    /// A connection error was sent (GOAWAY): read nothing more.
    pub failed: Option<Code>,
    /// The client sent GOAWAY.
    pub client_left: bool,
}

impl<L> std::fmt::Debug for Machine<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Machine({} streams)", self.streams.len())
    }
}

/// A connection error: its code (the GOAWAY is sent by `fail`).
struct ConnError(Code);

type Step = Result<(), ConnError>;

impl<L> Machine<L> {
    /// A connection whose preface (or part of it) is still to be read. The server's
    /// SETTINGS and connection window go out first.
    pub(crate) fn new(settings: Settings, sendfile: bool) -> Machine<L> {
        let mut out = Out::default();
        out.put(|o| {
            frame::settings(
                o,
                &[
                    (frame::MAX_CONCURRENT_STREAMS, settings.max_streams),
                    (frame::INITIAL_WINDOW_SIZE, settings.stream_window),
                    (
                        frame::MAX_HEADER_LIST_SIZE,
                        settings.max_head.min(u32::MAX as usize) as u32,
                    ),
                    (frame::ENABLE_PUSH, 0),
                ],
            );
            let more = settings.connection_window as i64 - frame::DEFAULT_WINDOW;
            if more > 0 {
                frame::window_update(o, 0, more as u32);
            }
        });
        Machine {
            settings,
            preface: PREFACE.len(),
            greeted: false,
            decoder: Decoder::new(super::hpack::TABLE_SIZE),
            fields: Fields::default(),
            encoder: Encoder::default(),
            head: Vec::new(),
            last_request: None,
            peer_window: frame::DEFAULT_WINDOW,
            peer_max_frame: frame::DEFAULT_MAX_FRAME,
            send_window: frame::DEFAULT_WINDOW,
            recv_window: settings.connection_window as i64,
            recv_unacked: 0,
            streams: Vec::new(),
            max_seen: 0,
            closed: VecDeque::new(),
            block: None,
            turn: 0,
            sendfile,
            out,
            new: VecDeque::new(),
            ended: Vec::new(),
            warm: Vec::new(),
            going_away: None,
            failed: None,
            client_left: false,
        }
    }

    /// No stream is open: give back the memory kept for streams and their requests (an
    /// idle connection holds its settings, windows and the client's HPACK table).
    pub(crate) fn quiet(&mut self) {
        if !self.streams.is_empty() {
            return;
        }
        self.streams = Vec::new();
        self.new = VecDeque::new();
        self.ended = Vec::new();
        self.warm = Vec::new();
        self.fields = Fields::default();
        self.encoder.forget();
        self.head = Vec::new();
        self.last_request = None;
        self.out.release();
    }

    /// Quiet, and parked: the closed streams remembered are forgotten too (a HEADERS
    /// frame on one of them is then a PROTOCOL_ERROR rather than STREAM_CLOSED, both
    /// ending the connection), and the decoder's scratch given back, so a parked state
    /// holds no memory of its own but the client's HPACK table.
    pub(crate) fn park(&mut self) {
        self.quiet();
        self.closed = VecDeque::new();
        self.decoder.release();
    }

    /// The client's SETTINGS came (after the preface).
    pub(crate) fn greeted(&self) -> bool {
        self.greeted
    }

    /// Streams open (or half-closed) now.
    pub(crate) fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Where stream `id` is among the open streams.
    fn index(&self, id: u32) -> Option<usize> {
        // Few streams are open at once (at most `max_streams`, mostly a handful): a scan
        // costs less than keeping them in order, which made every close move the rest.
        self.streams.iter().position(|s| s.id == id)
    }

    /// Read frames from `input`; returns the bytes used (a frame cut short waits for the
    /// rest). After a connection error nothing more is read.
    pub(crate) fn receive(&mut self, input: &[u8]) -> usize {
        let mut at = 0;
        if self.failed.is_some() {
            return input.len();
        }
        if self.preface > 0 {
            let from = PREFACE.len() - self.preface;
            let n = self.preface.min(input.len());
            if input[..n] != PREFACE[from..from + n] {
                self.fail(Code::PROTOCOL_ERROR);
                return input.len();
            }
            self.preface -= n;
            at = n;
        }
        while self.failed.is_none() {
            let Some(h) = Head::parse(&input[at..]) else {
                break;
            };
            if h.len > frame::DEFAULT_MAX_FRAME {
                self.fail(Code::FRAME_SIZE_ERROR);
                break;
            }
            if input.len() - at < 9 + h.len {
                break;
            }
            let payload = &input[at + 9..at + 9 + h.len];
            at += 9 + h.len;
            if let Err(ConnError(code)) = self.frame(h, payload) {
                self.fail(code);
            }
        }
        if self.failed.is_some() {
            return input.len();
        }
        at
    }

    /// A connection error: GOAWAY with `code`, and nothing more is read.
    pub(crate) fn fail(&mut self, code: Code) {
        if self.failed.is_some() {
            return;
        }
        self.failed = Some(code);
        let last = self.max_seen;
        self.out.put(|o| frame::goaway(o, last, code));
        self.going_away = Some(last);
    }

    /// Accept no new stream: GOAWAY (NO_ERROR) naming the last one accepted.
    pub(crate) fn go_away(&mut self) {
        if self.going_away.is_some() {
            return;
        }
        let last = self.max_seen;
        self.going_away = Some(last);
        self.out.put(|o| frame::goaway(o, last, Code::NO_ERROR));
    }

    fn frame(&mut self, h: Head, payload: &[u8]) -> Step {
        if !self.greeted {
            // The preface's SETTINGS frame comes first (§3.4).
            if h.kind != frame::SETTINGS || h.has(frame::ACK) {
                return Err(ConnError(Code::PROTOCOL_ERROR));
            }
            self.greeted = true;
        }
        if let Some(b) = &self.block {
            // Nothing but the block's CONTINUATION frames until it ends (§6.10).
            if h.kind != frame::CONTINUATION || h.stream != b.stream {
                return Err(ConnError(Code::PROTOCOL_ERROR));
            }
        }
        match h.kind {
            frame::DATA => self.data(h, payload),
            frame::HEADERS => self.headers(h, payload),
            frame::CONTINUATION => self.continuation(h, payload),
            frame::PRIORITY => {
                if h.stream == 0 {
                    return Err(ConnError(Code::PROTOCOL_ERROR));
                }
                if h.len != 5 {
                    self.stream_error(h.stream, Code::FRAME_SIZE_ERROR);
                } else if dependency(payload) == h.stream {
                    self.stream_error(h.stream, Code::PROTOCOL_ERROR);
                }
                Ok(())
            }
            frame::RST_STREAM => {
                if h.stream == 0 {
                    return Err(ConnError(Code::PROTOCOL_ERROR));
                }
                if h.len != 4 {
                    return Err(ConnError(Code::FRAME_SIZE_ERROR));
                }
                if h.stream > self.max_seen {
                    return Err(ConnError(Code::PROTOCOL_ERROR));
                }
                if let Some(i) = self.index(h.stream) {
                    self.close(i);
                }
                Ok(())
            }
            frame::SETTINGS => self.settings(h, payload),
            frame::PUSH_PROMISE => Err(ConnError(Code::PROTOCOL_ERROR)),
            frame::PING => {
                if h.stream != 0 {
                    return Err(ConnError(Code::PROTOCOL_ERROR));
                }
                if h.len != 8 {
                    return Err(ConnError(Code::FRAME_SIZE_ERROR));
                }
                if !h.has(frame::ACK) {
                    self.out.put(|o| frame::ping_ack(o, payload));
                }
                Ok(())
            }
            frame::GOAWAY => {
                if h.stream != 0 {
                    return Err(ConnError(Code::PROTOCOL_ERROR));
                }
                if h.len < 8 {
                    return Err(ConnError(Code::FRAME_SIZE_ERROR));
                }
                self.client_left = true;
                Ok(())
            }
            frame::WINDOW_UPDATE => self.window_update(h, payload),
            // Unknown types are ignored (§5.5).
            _ => Ok(()),
        }
    }

    fn data(&mut self, h: Head, payload: &[u8]) -> Step {
        if h.stream == 0 {
            return Err(ConnError(Code::PROTOCOL_ERROR));
        }
        let Some(range) = frame::unpadded(&h, payload) else {
            return Err(ConnError(Code::PROTOCOL_ERROR));
        };
        // The whole frame counts against the windows, padding included (§6.9.1).
        self.recv_window -= h.len as i64;
        if self.recv_window < 0 {
            return Err(ConnError(Code::FLOW_CONTROL_ERROR));
        }
        if h.stream > self.max_seen {
            return Err(ConnError(Code::PROTOCOL_ERROR));
        }
        let Some(i) = self.index(h.stream) else {
            // A closed stream: nothing reads this, so the connection's window reopens now.
            self.give_back(None, h.len as u32);
            self.stream_error(h.stream, Code::STREAM_CLOSED);
            return Ok(());
        };
        if self.streams[i].recv_closed {
            self.give_back(None, h.len as u32);
            self.stream_error(h.stream, Code::STREAM_CLOSED);
            return Ok(());
        }
        let s = &mut self.streams[i];
        s.recv_window -= h.len as i64;
        if s.recv_window < 0 {
            self.give_back(None, h.len as u32);
            self.stream_error(h.stream, Code::FLOW_CONTROL_ERROR);
            return Ok(());
        }
        let data = &payload[range];
        s.received += data.len() as u64;
        let end = h.has(frame::END_STREAM);
        let wrong_length = s
            .declared
            .is_some_and(|d| s.received > d || (end && s.received != d));
        let padding = (h.len - data.len()) as u32;
        if !data.is_empty() {
            s.inbox.push_back(Bytes::copy_from_slice(data));
        }
        if end {
            s.recv_closed = true;
        }
        if padding > 0 {
            self.give_back(Some(i), padding);
        }
        if wrong_length {
            self.stream_error(h.stream, Code::PROTOCOL_ERROR);
        } else if end {
            self.maybe_close(i);
        }
        Ok(())
    }

    fn headers(&mut self, h: Head, payload: &[u8]) -> Step {
        if h.stream == 0 {
            return Err(ConnError(Code::PROTOCOL_ERROR));
        }
        let Some(mut range) = frame::unpadded(&h, payload) else {
            return Err(ConnError(Code::PROTOCOL_ERROR));
        };
        let mut self_dependent = false;
        if h.has(frame::PRIORITY_FLAG) {
            if range.len() < 5 {
                return Err(ConnError(Code::FRAME_SIZE_ERROR));
            }
            self_dependent = dependency(&payload[range.start..]) == h.stream;
            range.start += 5;
        }
        if h.has(frame::END_HEADERS) {
            // The whole block in one frame (the usual case): decoded where it is.
            return self.block_done(
                h.stream,
                h.has(frame::END_STREAM),
                self_dependent,
                &payload[range],
            );
        }
        self.block = Some(Block {
            stream: h.stream,
            end_stream: h.has(frame::END_STREAM),
            self_dependent,
            buf: payload[range].to_vec(),
        });
        Ok(())
    }

    fn continuation(&mut self, h: Head, payload: &[u8]) -> Step {
        let Some(b) = &mut self.block else {
            return Err(ConnError(Code::PROTOCOL_ERROR));
        };
        b.buf.extend_from_slice(payload);
        if b.buf.len() > MAX_BLOCK {
            return Err(ConnError(Code::ENHANCE_YOUR_CALM));
        }
        if h.has(frame::END_HEADERS) {
            let Some(b) = self.block.take() else {
                return Ok(());
            };
            return self.block_done(b.stream, b.end_stream, b.self_dependent, &b.buf);
        }
        Ok(())
    }

    /// A whole header block: a request, or a trailer section.
    fn block_done(
        &mut self,
        id: u32,
        end_stream: bool,
        self_dependent: bool,
        block: &[u8],
    ) -> Step {
        if let Some(i) = self.index(id) {
            // A trailer section: it must end the stream (§8.1).
            self.fields.begin(true, self.settings.max_head);
            self.decode(block)?;
            let s = &self.streams[i];
            if s.recv_closed {
                self.stream_error(id, Code::STREAM_CLOSED);
            } else if !end_stream
                || self.fields.trailers_ok().is_err()
                || s.declared.is_some_and(|d| d != s.received)
            {
                self.stream_error(id, Code::PROTOCOL_ERROR);
            } else {
                self.streams[i].recv_closed = true;
                self.maybe_close(i);
            }
            return Ok(());
        }
        // A client asking for the same thing again sends the same bytes (its encoder
        // indexed every field): decoded and checked once.
        let changes = self.decoder.changes();
        let repeated = self
            .last_request
            .as_ref()
            .filter(|r| r.changes == changes && r.block == block)
            .map(|r| Request {
                head: r.head.clone(),
                content_length: r.content_length,
            });
        if repeated.is_none() {
            self.fields.begin(false, self.settings.max_head);
            self.decode(block)?;
        }
        if id <= self.max_seen {
            return Err(ConnError(if self.closed.contains(&id) {
                Code::STREAM_CLOSED
            } else {
                Code::PROTOCOL_ERROR
            }));
        }
        if id % 2 == 0 {
            return Err(ConnError(Code::PROTOCOL_ERROR));
        }
        // A connection's first request is not remembered: one that asks once and idles
        // keeps nothing of it.
        let first = self.max_seen == 0;
        self.max_seen = id;
        if self.going_away.is_some_and(|last| id > last) {
            // After GOAWAY new streams are ignored (§6.8); the client may retry them.
            return Ok(());
        }
        if self_dependent {
            self.stream_error(id, Code::PROTOCOL_ERROR);
            return Ok(());
        }
        if self.streams.len() >= self.settings.max_streams as usize {
            self.stream_error(id, Code::REFUSED_STREAM);
            return Ok(());
        }
        let request = match repeated {
            Some(r) => Ok(r),
            None => {
                let request = self.fields.finish();
                if let Ok(r) = &request {
                    if self.decoder.changes() == changes && !first {
                        self.remember_request(block, r, changes);
                    }
                }
                request
            }
        };
        if matches!(request, Err(Refused::Malformed)) {
            self.stream_error(id, Code::PROTOCOL_ERROR);
            return Ok(());
        }
        let declared = request.as_ref().ok().and_then(|r| r.content_length);
        if end_stream && declared.is_some_and(|d| d != 0) {
            self.stream_error(id, Code::PROTOCOL_ERROR);
            return Ok(());
        }
        self.streams.push(Stream {
            id,
            recv_closed: end_stream,
            send_closed: false,
            send_window: self.peer_window,
            recv_window: self.settings.stream_window as i64,
            unacked: 0,
            declared,
            received: 0,
            inbox: VecDeque::new(),
            queue: VecDeque::new(),
            queued: 0,
            finish: None,
            resident: 0,
            mapped: None,
            warming: false,
            stalled: None,
            ended: Ended {
                // A stream the client leaves before its answer (nginx logs 499 too).
                status: 499,
                slot: 0,
                sent: 0,
                log: None,
            },
        });
        self.new.push_back(NewStream {
            id,
            request,
            end_stream,
        });
        Ok(())
    }

    fn remember_request(&mut self, block: &[u8], r: &Request, changes: u64) {
        let last = self.last_request.get_or_insert_with(|| {
            Box::new(LastRequest {
                block: Vec::new(),
                changes,
                head: Vec::new(),
                content_length: None,
            })
        });
        last.block.clear();
        last.block.extend_from_slice(block);
        last.changes = changes;
        last.head.clear();
        last.head.extend_from_slice(&r.head);
        last.content_length = r.content_length;
    }

    fn decode(&mut self, block: &[u8]) -> Step {
        let fields = &mut self.fields;
        self.decoder
            .decode(block, |n, v| fields.field(n, v))
            .map_err(|_| ConnError(Code::COMPRESSION_ERROR))
    }

    fn settings(&mut self, h: Head, payload: &[u8]) -> Step {
        if h.stream != 0 {
            return Err(ConnError(Code::PROTOCOL_ERROR));
        }
        if h.has(frame::ACK) {
            return if h.len == 0 {
                Ok(())
            } else {
                Err(ConnError(Code::FRAME_SIZE_ERROR))
            };
        }
        if h.len % 6 != 0 {
            return Err(ConnError(Code::FRAME_SIZE_ERROR));
        }
        for s in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                frame::ENABLE_PUSH if v > 1 => return Err(ConnError(Code::PROTOCOL_ERROR)),
                frame::INITIAL_WINDOW_SIZE => {
                    if v as i64 > frame::MAX_WINDOW {
                        return Err(ConnError(Code::FLOW_CONTROL_ERROR));
                    }
                    let delta = v as i64 - self.peer_window;
                    self.peer_window = v as i64;
                    for st in &mut self.streams {
                        st.send_window += delta;
                        if st.send_window > frame::MAX_WINDOW {
                            return Err(ConnError(Code::FLOW_CONTROL_ERROR));
                        }
                    }
                }
                frame::MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME as u32..=0xff_ffff).contains(&v) {
                        return Err(ConnError(Code::PROTOCOL_ERROR));
                    }
                    self.peer_max_frame = v as usize;
                }
                frame::HEADER_TABLE_SIZE => self.encoder.allow(v),
                // The others are not the server's concern.
                _ => {}
            }
        }
        self.out.put(frame::settings_ack);
        Ok(())
    }

    fn window_update(&mut self, h: Head, payload: &[u8]) -> Step {
        if h.len != 4 {
            return Err(ConnError(Code::FRAME_SIZE_ERROR));
        }
        let inc = (u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
            & 0x7fff_ffff) as i64;
        if h.stream == 0 {
            if inc == 0 {
                return Err(ConnError(Code::PROTOCOL_ERROR));
            }
            self.send_window += inc;
            if self.send_window > frame::MAX_WINDOW {
                return Err(ConnError(Code::FLOW_CONTROL_ERROR));
            }
            return Ok(());
        }
        if h.stream > self.max_seen {
            return Err(ConnError(Code::PROTOCOL_ERROR));
        }
        let Some(i) = self.index(h.stream) else {
            return Ok(());
        };
        if inc == 0 {
            self.stream_error(h.stream, Code::PROTOCOL_ERROR);
            return Ok(());
        }
        let s = &mut self.streams[i];
        s.send_window += inc;
        if s.send_window > frame::MAX_WINDOW {
            self.stream_error(h.stream, Code::FLOW_CONTROL_ERROR);
        }
        Ok(())
    }

    /// Reset stream `id` with `code` (a stream error, §5.4.2, or the server's own reset).
    pub(crate) fn stream_error(&mut self, id: u32, code: Code) {
        self.out.put(|o| frame::rst_stream(o, id, code));
        if let Some(i) = self.index(id) {
            self.close(i);
        } else if !self.closed.contains(&id) {
            self.remember_closed(id);
        }
    }

    fn remember_closed(&mut self, id: u32) {
        if self.closed.len() == CLOSED_KEPT {
            self.closed.pop_front();
        }
        self.closed.push_back(id);
    }

    /// Remove stream `i`: it ended (both sides closed) or was reset. Unread body bytes
    /// go back to the connection's window.
    fn close(&mut self, i: usize) {
        let s = self.streams.swap_remove(i);
        let unread: usize = s.inbox.iter().map(|b| b.len()).sum();
        let back = unread as u32 + s.unacked;
        if back > 0 {
            self.give_back(None, back);
        }
        self.remember_closed(s.id);
        self.ended.push(s.ended);
    }

    fn maybe_close(&mut self, i: usize) {
        let s = &self.streams[i];
        if s.recv_closed && s.send_closed {
            self.close(i);
        }
    }

    /// `n` received bytes were used: open the windows again, the stream's (when `i` is
    /// given) and the connection's, each once a quarter of it is owed (fewer frames).
    fn give_back(&mut self, i: Option<usize>, n: u32) {
        self.recv_window += n as i64;
        self.recv_unacked += n;
        if self.recv_unacked >= self.settings.connection_window / 4 {
            let inc = std::mem::take(&mut self.recv_unacked);
            self.out.put(|o| frame::window_update(o, 0, inc));
        }
        if let Some(i) = i {
            let quarter = self.settings.stream_window / 4;
            let s = &mut self.streams[i];
            s.recv_window += n as i64;
            s.unacked += n;
            if !s.recv_closed && s.unacked >= quarter {
                let (id, inc) = (s.id, std::mem::take(&mut s.unacked));
                self.out.put(|o| frame::window_update(o, id, inc));
            }
        }
    }

    /// The next piece of stream `id`'s request body.
    pub(crate) fn read(&mut self, id: u32) -> Read {
        let Some(i) = self.index(id) else {
            return Read::Gone;
        };
        let s = &mut self.streams[i];
        match s.inbox.pop_front() {
            Some(b) => {
                let n = b.len() as u32;
                self.give_back(Some(i), n);
                Read::Data(b)
            }
            None if s.recv_closed => Read::End,
            None if self.failed.is_some() => Read::Gone,
            None => Read::Wait,
        }
    }

    /// The answer to stream `id`: its header block (HEADERS, and CONTINUATION frames if
    /// it is larger than the client's frames), written by `encode` with the connection's
    /// encoder, ending the stream when there is no body. False when the stream is gone
    /// (and `encode` is not called: every block encoded must reach the client).
    pub(crate) fn respond_with(
        &mut self,
        id: u32,
        end_stream: bool,
        encode: impl FnOnce(&mut Encoder, &mut Vec<u8>),
    ) -> bool {
        let Some(i) = self.index(id) else {
            return false;
        };
        let mut block = std::mem::take(&mut self.head);
        block.clear();
        self.encoder.begin(&mut block);
        encode(&mut self.encoder, &mut block);
        let max = self.peer_max_frame;
        self.out
            .put(|o| frame::header_block(o, id, &block, end_stream, max));
        self.head = block;
        if end_stream {
            self.streams[i].send_closed = true;
            self.maybe_close(i);
        }
        true
    }

    /// The answer to stream `id` as a header block built without the connection's
    /// encoder (literals and static entries only).
    pub(crate) fn respond(&mut self, id: u32, block: &[u8], end_stream: bool) -> bool {
        self.respond_with(id, end_stream, |_, out| out.extend_from_slice(block))
    }

    /// An informational answer (1xx) ahead of the final one, its block built without the
    /// connection's encoder.
    pub(crate) fn interim(&mut self, id: u32, block: &[u8]) {
        if self.index(id).is_some() {
            self.literal_block(id, block, false);
        }
    }

    /// Frame a header block built without the encoder (its fields literals that are not
    /// indexed): only the size updates owed go before it.
    fn literal_block(&mut self, id: u32, block: &[u8], end_stream: bool) {
        let mut b = Vec::with_capacity(block.len() + 4);
        self.encoder.begin(&mut b);
        b.extend_from_slice(block);
        let max = self.peer_max_frame;
        self.out
            .put(|o| frame::header_block(o, id, &b, end_stream, max));
    }

    /// What the access log and counters record when stream `id` ends.
    pub(crate) fn note(&mut self, id: u32, status: u16, slot: u16, log: Option<L>) {
        if let Some(i) = self.index(id) {
            let e = &mut self.streams[i].ended;
            e.status = status;
            e.slot = slot;
            e.log = log;
        }
    }

    /// Queue a body piece of stream `id`; false when the stream is gone.
    pub(crate) fn push(&mut self, id: u32, chunk: Chunk) -> bool {
        let Some(i) = self.index(id) else {
            return false;
        };
        let s = &mut self.streams[i];
        let n = match &chunk {
            Chunk::Bytes(b) => b.len() as u64,
            Chunk::File { len, .. } => *len,
        };
        if n > 0 {
            s.queued += n;
            s.queue.push_back(chunk);
        }
        true
    }

    /// The body of stream `id` ends after what is queued, with a trailer section's block
    /// if given.
    pub(crate) fn finish(&mut self, id: u32, trailers: Option<Vec<u8>>) -> bool {
        let Some(i) = self.index(id) else {
            return false;
        };
        self.streams[i].finish = Some(trailers);
        true
    }

    /// Body bytes of stream `id` queued and not yet framed (`None`: the stream is gone).
    pub(crate) fn queued(&self, id: u32) -> Option<u64> {
        self.index(id).map(|i| self.streams[i].queued)
    }

    /// A read-ahead finished: the front of stream `id`'s queue from `offset` is `data`.
    pub(crate) fn warmed(&mut self, id: u32, offset: u64, data: Option<Bytes>) {
        let Some(i) = self.index(id) else {
            return;
        };
        let s = &mut self.streams[i];
        s.warming = false;
        let Some(data) = data else {
            // The file could not be read: the body cannot be what its head promised.
            self.stream_error(id, Code::INTERNAL_ERROR);
            return;
        };
        let Some(Chunk::File {
            offset: at, len, ..
        }) = s.queue.front_mut()
        else {
            return;
        };
        if *at != offset || data.is_empty() || data.len() as u64 > *len {
            self.stream_error(id, Code::INTERNAL_ERROR);
            return;
        }
        *at += data.len() as u64;
        *len -= data.len() as u64;
        if *len == 0 {
            s.queue.pop_front();
        }
        s.resident = 0;
        s.mapped = None;
        s.queue.push_front(Chunk::Bytes(data));
    }

    /// Streams whose client has opened no window since `before`: reset (CANCEL), and
    /// how many.
    pub(crate) fn reset_stalled(&mut self, before: std::time::Instant) -> usize {
        let stalled: Vec<u32> = self
            .streams
            .iter()
            .filter(|s| s.stalled.is_some_and(|t| t <= before))
            .map(|s| s.id)
            .collect();
        for id in &stalled {
            self.stream_error(*id, Code::CANCEL);
        }
        stalled.len()
    }

    /// The earliest time a stream began to wait for the client's window.
    pub(crate) fn stalled_since(&self) -> Option<std::time::Instant> {
        self.streams.iter().filter_map(|s| s.stalled).min()
    }

    /// Frame queued body pieces as DATA within the windows, one frame per stream in turn,
    /// until the output holds `OUT_HIGH` bytes or nothing more may go.
    pub(crate) fn schedule(&mut self, now: impl Fn() -> std::time::Instant) {
        if self.streams.is_empty() {
            return;
        }
        let mut i = self.turn % self.streams.len();
        loop {
            let mut progress = false;
            // One visit to each stream, from where the last turn stopped.
            let mut visits = self.streams.len();
            while visits > 0 {
                if self.out.pending() >= OUT_HIGH {
                    self.turn = i;
                    return;
                }
                visits -= 1;
                match self.send_one(i) {
                    Sent::Closed => {
                        progress = true;
                        if self.streams.is_empty() {
                            self.turn = 0;
                            return;
                        }
                        // The stream left the list: the last one has its index now.
                        i %= self.streams.len();
                        continue;
                    }
                    Sent::Frame => progress = true,
                    Sent::Blocked => {
                        let s = &mut self.streams[i];
                        if s.stalled.is_none() {
                            s.stalled = Some(now());
                        }
                    }
                    Sent::Nothing => {}
                }
                i = (i + 1) % self.streams.len();
            }
            self.turn = i;
            if !progress {
                return;
            }
        }
    }

    /// One DATA frame (or the end of the body) of stream `i`.
    fn send_one(&mut self, i: usize) -> Sent {
        let max_frame = self.peer_max_frame;
        let conn_window = self.send_window;
        let s = &mut self.streams[i];
        if s.send_closed || s.warming {
            return Sent::Nothing;
        }
        let Some(front) = s.queue.front_mut() else {
            let Some(finish) = s.finish.take() else {
                return Sent::Nothing;
            };
            let id = s.id;
            s.send_closed = true;
            match finish {
                // Built when the body ended, without the encoder.
                Some(trailers) => self.literal_block(id, &trailers, true),
                None => self
                    .out
                    .put(|o| frame::head(o, 0, frame::DATA, frame::END_STREAM, id)),
            }
            let recv_closed = self.streams[i].recv_closed;
            if recv_closed {
                self.close(i);
                return Sent::Closed;
            }
            return Sent::Frame;
        };
        let window = conn_window.min(s.send_window);
        if window <= 0 {
            return Sent::Blocked;
        }
        s.stalled = None;
        let avail = match front {
            Chunk::Bytes(b) => b.len() as u64,
            Chunk::File { len, .. } => *len,
        };
        // A file copied into memory goes several frames at a time (one read for them);
        // otherwise a frame per turn.
        let copy_file = matches!(front, Chunk::File { .. }) && !self.sendfile;
        let most = if copy_file {
            FILE_BATCH * max_frame
        } else {
            max_frame
        };
        let n = (window as u64).min(most as u64).min(avail) as usize;
        // The last piece carries END_STREAM when nothing else (trailers) follows.
        let last_piece = n as u64 == avail && s.queue.len() == 1 && matches!(s.finish, Some(None));
        let flags = if last_piece { frame::END_STREAM } else { 0 };
        let id = s.id;
        match s.queue.front_mut() {
            Some(Chunk::Bytes(b)) => {
                let piece = b.split_to(n);
                self.out.put(|o| frame::head(o, n, frame::DATA, flags, id));
                self.out.shared(piece);
            }
            Some(Chunk::File { file, offset, len }) if copy_file => {
                // Frame headers and payload slots laid out in the output, the payloads read
                // into them in one call, from the page cache only.
                let mut read = None;
                let at = *offset;
                self.out.put(|o| {
                    let base = o.len();
                    let frames = n.div_ceil(max_frame);
                    o.resize(base + n + 9 * frames, 0);
                    let mut slots: [std::io::IoSliceMut<'_>; FILE_BATCH] =
                        std::array::from_fn(|_| std::io::IoSliceMut::new(&mut []));
                    let mut rest = &mut o[base..];
                    let mut left = n;
                    for (k, slot) in slots.iter_mut().enumerate().take(frames) {
                        let m = left.min(max_frame);
                        left -= m;
                        let f = if k == frames - 1 { flags } else { 0 };
                        let (head, tail) = rest.split_at_mut(9);
                        head.copy_from_slice(&frame::head_bytes(m, frame::DATA, f, id));
                        let (payload, tail) = tail.split_at_mut(m);
                        *slot = std::io::IoSliceMut::new(payload);
                        rest = tail;
                    }
                    read =
                        ramjet_runtime::sys::read_vectored_cached(file, &mut slots[..frames], at);
                    if read != Some(n) {
                        o.truncate(base);
                    }
                });
                match read {
                    Some(got) if got == n => {
                        *offset += n as u64;
                        *len -= n as u64;
                    }
                    Some(_) => {
                        // The file shrank under its head: the stream cannot end as promised.
                        self.stream_error(id, Code::INTERNAL_ERROR);
                        return Sent::Closed;
                    }
                    None => {
                        // Not in the page cache: read ahead on the blocking pool first.
                        s.warming = true;
                        self.warm.push(Warm {
                            id,
                            file: file.clone(),
                            offset: at,
                            len: (*len).min(256 << 10) as usize,
                        });
                        return Sent::Nothing;
                    }
                }
            }
            Some(Chunk::File { file, offset, len }) => {
                if s.resident < n as u64 {
                    let span = (*len).min(RESIDENT_SPAN);
                    if ramjet_runtime::sys::is_resident(file, *offset, span) {
                        s.resident = span;
                        // A large chunk's frames go out from a mapping, many per writev;
                        // a small one's (or where mapping fails) by sendfile each.
                        s.mapped = (*len >= MAP_MIN)
                            .then(|| Mapping::new(file, *offset, span as usize).ok())
                            .flatten()
                            .map(Arc::new);
                    } else {
                        s.warming = true;
                        self.warm.push(Warm {
                            id,
                            file: file.clone(),
                            offset: *offset,
                            len: (*len).min(256 << 10) as usize,
                        });
                        return Sent::Nothing;
                    }
                }
                self.out.put(|o| frame::head(o, n, frame::DATA, flags, id));
                match &s.mapped {
                    Some(m) => {
                        let from = m.len() - s.resident as usize;
                        self.out.mapped(m.clone(), from, n);
                    }
                    None => self.out.file(file.clone(), *offset, n),
                }
                *offset += n as u64;
                *len -= n as u64;
                s.resident -= n as u64;
            }
            None => return Sent::Nothing,
        }
        let s = &mut self.streams[i];
        if matches!(s.queue.front(), Some(Chunk::Bytes(b)) if b.is_empty())
            || matches!(s.queue.front(), Some(Chunk::File { len: 0, .. }))
        {
            s.queue.pop_front();
            s.resident = 0;
            s.mapped = None;
        }
        s.queued -= n as u64;
        s.send_window -= n as i64;
        s.ended.sent += n as u64;
        self.send_window -= n as i64;
        if last_piece {
            s.finish = None;
            s.send_closed = true;
            if s.recv_closed {
                self.close(i);
                return Sent::Closed;
            }
        }
        Sent::Frame
    }
}

enum Sent {
    Frame,
    Closed,
    Blocked,
    Nothing,
}

/// The stream a PRIORITY field depends on (its first 4 bytes, exclusive bit cleared).
fn dependency(p: &[u8]) -> u32 {
    u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff
}

#[cfg(test)]
mod tests;
