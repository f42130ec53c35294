use super::*;
use crate::http2::hpack;

const SETTINGS: Settings = Settings {
    max_streams: 4,
    stream_window: 1 << 20,
    connection_window: 4 << 20,
    max_head: 8192,
};

/// A client's frames.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::head(&mut out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
    out
}

fn request_block(path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, v) in [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "h"),
    ]
    .iter()
    .chain(extra)
    {
        hpack::field(&mut b, n.as_bytes(), v.as_bytes());
    }
    b
}

fn get(id: u32, path: &str) -> Vec<u8> {
    frame(
        frame::HEADERS,
        frame::END_HEADERS | frame::END_STREAM,
        id,
        &request_block(path, &[]),
    )
}

fn settings(values: &[(u16, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::settings(&mut out, values);
    out
}

/// A machine past the preface and the client's SETTINGS (`values`), its own first frames
/// taken.
fn open(values: &[(u16, u32)]) -> Machine<()> {
    let mut m = Machine::new(SETTINGS, false);
    let mut input = PREFACE.to_vec();
    input.extend(settings(values));
    assert_eq!(m.receive(&input), input.len());
    let frames = parse(&m.out.take_all());
    assert_eq!(frames[0].0, frame::SETTINGS);
    assert!(frames
        .iter()
        .any(|f| f.0 == frame::SETTINGS && f.1 == frame::ACK));
    m
}

/// Frames written: (type, flags, stream, payload).
fn parse(mut b: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut v = Vec::new();
    while let Some(h) = Head::parse(b) {
        v.push((h.kind, h.flags, h.stream, b[9..9 + h.len].to_vec()));
        b = &b[9 + h.len..];
    }
    assert!(b.is_empty(), "a frame cut short");
    v
}

fn code(p: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]])
}

/// The error of the first RST_STREAM on `id`, or of the GOAWAY (stream 0).
fn error_of(frames: &[(u8, u8, u32, Vec<u8>)], id: u32) -> Option<u32> {
    frames.iter().find_map(|(k, _, s, p)| match *k {
        frame::RST_STREAM if *s == id => Some(code(p, 0)),
        frame::GOAWAY if id == 0 => Some(code(p, 4)),
        _ => None,
    })
}

#[test]
fn a_request_opens_a_stream_and_its_answer_goes_out_in_frames() {
    let mut m = open(&[]);
    m.receive(&get(1, "/a"));
    let n = m.new.pop_front().unwrap();
    assert_eq!(n.id, 1);
    assert!(n.end_stream);
    let head = String::from_utf8(n.request.unwrap().head).unwrap();
    assert_eq!(head, "GET /a HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(m.respond(1, &[0x88], false));
    m.push(1, Chunk::Bytes(Bytes::from(vec![5u8; 20_000])));
    m.finish(1, None);
    m.schedule(std::time::Instant::now);
    let f = parse(&m.out.take_all());
    let kinds: Vec<_> = f.iter().map(|x| (x.0, x.1, x.3.len())).collect();
    assert_eq!(
        kinds,
        [
            (frame::HEADERS, frame::END_HEADERS, 1),
            (frame::DATA, 0, 16_384),
            (frame::DATA, frame::END_STREAM, 20_000 - 16_384),
        ]
    );
    // The stream ended: counted once, with its bytes.
    assert_eq!(m.open_streams(), 0);
    assert_eq!(m.ended.len(), 1);
    assert_eq!(m.ended[0].sent, 20_000);
}

#[test]
fn sending_waits_for_the_clients_windows_and_resumes_on_window_update() {
    // Stream windows of 10 bytes.
    let mut m = open(&[(frame::INITIAL_WINDOW_SIZE, 10)]);
    m.receive(&get(1, "/a"));
    m.new.clear();
    m.respond(1, &[0x88], false);
    m.push(1, Chunk::Bytes(Bytes::from(vec![1u8; 25])));
    m.finish(1, None);
    m.schedule(std::time::Instant::now);
    let f = parse(&m.out.take_all());
    assert_eq!(f.last().unwrap().3.len(), 10);
    assert!(m.stalled_since().is_some(), "waiting for the window");
    // The client opens 5 more on the stream: 5 go.
    let mut wu = Vec::new();
    frame::window_update(&mut wu, 1, 5);
    m.receive(&wu);
    m.schedule(std::time::Instant::now);
    let f = parse(&m.out.take_all());
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].3.len(), 5);
    // A SETTINGS change opens every stream's window by the difference (§6.9.2).
    m.receive(&settings(&[(frame::INITIAL_WINDOW_SIZE, 100)]));
    m.schedule(std::time::Instant::now);
    let f = parse(&m.out.take_all());
    let data: Vec<_> = f.iter().filter(|x| x.0 == frame::DATA).collect();
    assert_eq!(data.len(), 1);
    assert_eq!((data[0].1, data[0].3.len()), (frame::END_STREAM, 10));
    assert_eq!(m.open_streams(), 0);
}

/// The body a plain-socket machine sends for a file of `size` bytes from `from`, windows
/// wide open, and how many of its frames went out by sendfile and from a mapping.
fn file_frames(size: usize, from: u64) -> (Vec<u8>, (usize, usize)) {
    file_frames_of(size, from, frame::DEFAULT_MAX_FRAME as u32)
}

/// [`file_frames`] to a client whose frames are at most `max_frame` bytes.
fn file_frames_of(size: usize, from: u64, max_frame: u32) -> (Vec<u8>, (usize, usize)) {
    use std::io::Write;
    let mut m: Machine<()> = Machine::new(SETTINGS, true);
    let mut input = PREFACE.to_vec();
    input.extend(settings(&[
        (frame::INITIAL_WINDOW_SIZE, 1 << 30),
        (frame::MAX_FRAME_SIZE, max_frame),
    ]));
    frame::window_update(&mut input, 0, 1 << 30);
    m.receive(&input);
    m.out.take_all();
    let mut f = tempfile::tempfile().unwrap();
    let data: Vec<u8> = (0..size).map(|i| (i * 31 % 253) as u8).collect();
    f.write_all(&data).unwrap();
    m.receive(&get(1, "/f"));
    m.respond(1, &[0x88], false);
    let len = size as u64 - from;
    m.push(
        1,
        Chunk::File {
            file: Arc::new(f),
            offset: from,
            len,
        },
    );
    m.finish(1, None);
    let (mut body, mut sent, mut mapped) = (Vec::new(), 0, 0);
    while m.open_streams() > 0 {
        m.schedule(std::time::Instant::now);
        let (s, mp) = m.out.file_segments();
        (sent, mapped) = (sent + s, mapped + mp);
        for (kind, _, _, payload) in parse(&m.out.take_all()) {
            if kind == frame::DATA {
                body.extend(payload);
            }
        }
    }
    assert_eq!(body, data[from as usize..]);
    (body, (sent, mapped))
}

#[test]
fn a_large_file_goes_out_from_a_mapping_and_a_small_one_by_sendfile() {
    // At the threshold: every frame from the mapping.
    let (body, frames) = file_frames(MAP_MIN as usize, 0);
    assert_eq!((body.len(), frames), (MAP_MIN as usize, (0, 16)));
    // One byte under it: sendfile per frame.
    let (body, frames) = file_frames(MAP_MIN as usize - 1, 0);
    assert_eq!((body.len(), frames), (MAP_MIN as usize - 1, (16, 0)));
    // From an odd offset (a range): a whole window mapped, then a tail under the
    // threshold by sendfile; the bytes are the file's.
    let size = RESIDENT_SPAN as usize + 100 * 1024;
    let (body, frames) = file_frames(size, 4097);
    assert_eq!((body.len(), frames), (size - 4097, (6, 128)));
    // Frames that do not divide a mapped window: a frame that would cross its end starts
    // the next window; every byte is still the file's, in order.
    let (body, (sent, mapped)) = file_frames_of(size, 0, 20_000);
    assert_eq!(body.len(), size);
    assert_eq!(sent + mapped, size.div_ceil(20_000));
    assert!(sent < 10, "{sent} frames by sendfile");
}

#[test]
fn the_connection_window_is_shared_and_streams_take_turns() {
    let mut m = open(&[]);
    for id in [1, 3] {
        m.receive(&get(id, "/big"));
        m.respond(id, &[0x88], false);
        m.push(id, Chunk::Bytes(Bytes::from(vec![id as u8; 50_000])));
        m.finish(id, None);
    }
    m.new.clear();
    m.schedule(std::time::Instant::now);
    let f = parse(&m.out.take_all());
    let data: Vec<_> = f
        .iter()
        .filter(|x| x.0 == frame::DATA)
        .map(|x| (x.2, x.3.len()))
        .collect();
    // 65,535 bytes of connection window, a frame from each stream in turn.
    assert_eq!(data.iter().map(|d| d.1).sum::<usize>(), 65_535);
    assert_eq!(data[0].0, 1);
    assert_eq!(data[1].0, 3);
    assert_eq!(data[2].0, 1);
    assert_eq!(data[3].0, 3);
}

#[test]
fn a_request_body_is_read_in_order_and_opens_the_windows_as_it_is_read() {
    let mut m = open(&[]);
    let block = request_block("/up", &[("content-length", "600000")]);
    m.receive(&frame(frame::HEADERS, frame::END_HEADERS, 1, &block));
    let n = m.new.pop_front().unwrap();
    assert!(!n.end_stream);
    assert!(matches!(m.read(1), Read::Wait));
    // Half the body, read as it comes: the stream's window is opened once a quarter of
    // it (262,144 bytes) was read; the connection's 4 MiB not yet.
    let part = |from: u8, to: u8, last: bool| {
        let mut input = Vec::new();
        for i in from..to {
            let flags = if last && i == to - 1 {
                frame::END_STREAM
            } else {
                0
            };
            input.extend(frame(frame::DATA, flags, 1, &[i; 15_000]));
        }
        input
    };
    let mut got = 0;
    let mut read_all = |m: &mut Machine<()>, from: u8, to: u8| {
        for i in from..to {
            match m.read(1) {
                Read::Data(b) => {
                    assert_eq!(b[0], i);
                    got += b.len();
                }
                other => panic!("{other:?}"),
            }
        }
    };
    m.receive(&part(0, 20, false));
    read_all(&mut m, 0, 20);
    let updates = |m: &mut Machine<()>| -> Vec<u32> {
        parse(&m.out.take_all())
            .iter()
            .filter(|x| x.0 == frame::WINDOW_UPDATE)
            .map(|x| x.2)
            .collect()
    };
    assert_eq!(updates(&mut m), [1]);
    assert!(matches!(m.read(1), Read::Wait));
    // The rest ends the stream: no window is opened for a stream that is done.
    m.receive(&part(20, 40, true));
    read_all(&mut m, 20, 40);
    assert!(matches!(m.read(1), Read::End));
    assert_eq!(updates(&mut m), Vec::<u32>::new());
    assert_eq!(got, 600_000);
}

#[test]
fn a_body_longer_or_shorter_than_its_content_length_resets_the_stream() {
    for (sent, end) in [(11usize, false), (9, true)] {
        let mut m = open(&[]);
        let block = request_block("/up", &[("content-length", "10")]);
        m.receive(&frame(frame::HEADERS, frame::END_HEADERS, 1, &block));
        let flags = if end { frame::END_STREAM } else { 0 };
        m.receive(&frame(frame::DATA, flags, 1, &vec![0; sent]));
        let f = parse(&m.out.take_all());
        assert_eq!(error_of(&f, 1), Some(Code::PROTOCOL_ERROR.0), "{sent}");
        assert_eq!(m.open_streams(), 0);
    }
}

#[test]
fn a_closed_stream_and_a_skipped_one_are_told_apart() {
    let mut m = open(&[]);
    m.receive(&get(1, "/"));
    m.respond(1, &[0x88], true);
    assert_eq!(m.open_streams(), 0);
    // DATA on the closed stream: a stream error.
    m.receive(&frame(frame::DATA, 0, 1, b"x"));
    let f = parse(&m.out.take_all());
    assert_eq!(error_of(&f, 1), Some(Code::STREAM_CLOSED.0));
    assert!(m.failed.is_none());
    // HEADERS on it again: a connection error, STREAM_CLOSED.
    m.receive(&get(1, "/"));
    assert_eq!(m.failed, Some(Code::STREAM_CLOSED));
    // A stream below the highest seen that was never opened: PROTOCOL_ERROR.
    let mut m = open(&[]);
    m.receive(&get(5, "/"));
    m.receive(&get(3, "/"));
    assert_eq!(m.failed, Some(Code::PROTOCOL_ERROR));
    let f = parse(&m.out.take_all());
    let goaway = f.iter().find(|x| x.0 == frame::GOAWAY).unwrap();
    assert_eq!(code(&goaway.3, 0), 5, "the last stream accepted");
}

#[test]
fn streams_past_the_limit_are_refused_and_others_go_on() {
    let mut m = open(&[]);
    let mut input = Vec::new();
    for i in 0..5u32 {
        input.extend(frame(
            frame::HEADERS,
            frame::END_HEADERS,
            2 * i + 1,
            &request_block("/", &[]),
        ));
    }
    m.receive(&input);
    assert_eq!(m.new.len(), 4);
    let f = parse(&m.out.take_all());
    assert_eq!(error_of(&f, 9), Some(Code::REFUSED_STREAM.0));
    assert!(m.failed.is_none());
}

#[test]
fn frames_cut_anywhere_are_read_the_same() {
    let mut input = PREFACE.to_vec();
    input.extend(settings(&[]));
    for id in [1, 3, 5] {
        input.extend(get(id, "/x"));
    }
    let mut ping = frame(frame::PING, 0, 0, &[9; 8]);
    input.append(&mut ping);
    for cut in 0..input.len() {
        let mut m: Machine<()> = Machine::new(SETTINGS, false);
        let used = m.receive(&input[..cut]);
        let rest: Vec<u8> = input[used..].to_vec();
        assert_eq!(m.receive(&rest), rest.len(), "cut at {cut}");
        assert_eq!(m.new.len(), 3, "cut at {cut}");
        let f = parse(&m.out.take_all());
        assert!(f.iter().any(|x| x.0 == frame::PING && x.1 == frame::ACK));
    }
}

#[test]
fn a_bad_preface_or_a_first_frame_other_than_settings_ends_the_connection() {
    let mut m: Machine<()> = Machine::new(SETTINGS, false);
    m.receive(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n");
    assert_eq!(m.failed, Some(Code::PROTOCOL_ERROR));
    let mut m: Machine<()> = Machine::new(SETTINGS, false);
    let mut input = PREFACE.to_vec();
    input.extend(get(1, "/"));
    m.receive(&input);
    assert_eq!(m.failed, Some(Code::PROTOCOL_ERROR));
    assert!(m.new.is_empty());
}

#[test]
fn a_trailer_section_ends_a_body_and_a_pseudo_field_in_it_resets_the_stream() {
    for (field, ok) in [("x-sum", true), (":path", false)] {
        let mut m = open(&[]);
        m.receive(&frame(
            frame::HEADERS,
            frame::END_HEADERS,
            1,
            &request_block("/up", &[]),
        ));
        m.receive(&frame(frame::DATA, 0, 1, b"abc"));
        let mut t = Vec::new();
        hpack::field(&mut t, field.as_bytes(), b"1");
        m.receive(&frame(
            frame::HEADERS,
            frame::END_HEADERS | frame::END_STREAM,
            1,
            &t,
        ));
        if ok {
            assert!(matches!(m.read(1), Read::Data(_)));
            assert!(matches!(m.read(1), Read::End));
        } else {
            let f = parse(&m.out.take_all());
            assert_eq!(error_of(&f, 1), Some(Code::PROTOCOL_ERROR.0));
            assert!(matches!(m.read(1), Read::Gone));
        }
    }
}

#[test]
fn a_stalled_stream_is_reset_and_a_closed_one_gives_its_window_back() {
    let mut m = open(&[(frame::INITIAL_WINDOW_SIZE, 0)]);
    m.receive(&get(1, "/a"));
    m.respond(1, &[0x88], false);
    m.push(1, Chunk::Bytes(Bytes::from_static(b"abc")));
    m.finish(1, None);
    let t0 = std::time::Instant::now();
    m.schedule(|| t0);
    assert_eq!(m.stalled_since(), Some(t0));
    assert_eq!(m.reset_stalled(t0), 1);
    let f = parse(&m.out.take_all());
    assert_eq!(error_of(&f, 1), Some(Code::CANCEL.0));
    assert_eq!(m.open_streams(), 0);
    // Unread body bytes of a reset stream go back to the connection's window.
    let mut m = open(&[]);
    m.receive(&frame(
        frame::HEADERS,
        frame::END_HEADERS,
        1,
        &request_block("/up", &[]),
    ));
    let mut input = Vec::new();
    for _ in 0..60 {
        input.extend(frame(frame::DATA, 0, 1, &[0; 16_000]));
    }
    m.receive(&input);
    assert_eq!(m.recv_window, (4 << 20) - 960_000);
    let mut rst = Vec::new();
    frame::rst_stream(&mut rst, 1, Code::CANCEL);
    m.receive(&rst);
    assert_eq!(m.recv_window, 4 << 20);
    assert!(matches!(m.read(1), Read::Gone));
}

#[test]
fn a_repeated_block_is_the_same_request_only_while_the_clients_table_stays() {
    let mut m = open(&[]);
    let head_of = |m: &mut Machine<()>, id: u32, block: &[u8]| {
        m.receive(&frame(
            frame::HEADERS,
            frame::END_HEADERS | frame::END_STREAM,
            id,
            block,
        ));
        let n = m.new.pop_front().expect("a stream opened");
        assert_eq!(n.id, id);
        m.respond(id, &[0x88], true);
        String::from_utf8(n.request.unwrap().head).unwrap()
    };
    // "x-a: 1" enters the client's table (literal with incremental indexing).
    let mut first = request_block("/a", &[]);
    first.push(0x40);
    first.extend_from_slice(&[3, b'x', b'-', b'a', 1, b'1']);
    // The same request, the field by its index (62): changes nothing in the table.
    let mut indexed = request_block("/a", &[]);
    indexed.push(0x80 | 62);
    let want = "GET /a HTTP/1.1\r\nHost: h\r\nx-a: 1\r\n\r\n";
    assert_eq!(head_of(&mut m, 1, &first), want);
    assert_eq!(head_of(&mut m, 3, &indexed), want);
    assert_eq!(head_of(&mut m, 5, &indexed), want);
    // Another path: other bytes, another request.
    let mut other = request_block("/b", &[]);
    other.push(0x80 | 62);
    assert_eq!(
        head_of(&mut m, 7, &other),
        "GET /b HTTP/1.1\r\nHost: h\r\nx-a: 1\r\n\r\n"
    );
    // "x-a: 2" enters the table: index 62 is now it, and the same bytes as the request
    // remembered last mean another field.
    assert_eq!(head_of(&mut m, 9, &indexed), want);
    let mut second = request_block("/a", &[]);
    second.push(0x40);
    second.extend_from_slice(&[3, b'x', b'-', b'a', 1, b'2']);
    head_of(&mut m, 11, &second);
    assert_eq!(
        head_of(&mut m, 13, &indexed),
        "GET /a HTTP/1.1\r\nHost: h\r\nx-a: 2\r\n\r\n"
    );
    // The same bytes twice, each entering the table: each decoded.
    assert_eq!(
        head_of(&mut m, 15, &second),
        "GET /a HTTP/1.1\r\nHost: h\r\nx-a: 2\r\n\r\n"
    );
    assert_eq!(
        head_of(&mut m, 17, &second),
        "GET /a HTTP/1.1\r\nHost: h\r\nx-a: 2\r\n\r\n"
    );
}
