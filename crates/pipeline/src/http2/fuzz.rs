//! Entry points for the fuzz targets: the frame layer and HPACK as a connection runs them,
//! on arbitrary bytes. Each checks what must hold whatever the input.

use bytes::Bytes;

use super::hpack;
use super::machine::{Chunk, Machine, Read, Settings};
use super::{CONNECTION_WINDOW, MAX_STREAMS, STREAM_WINDOW};

/// Feed `input` (after the preface) to a connection's protocol state with the server's
/// settings, answer every request it opens with a body larger than a frame, read every
/// request body, and frame the answers. Never panics; what is framed stays within what
/// the client's windows could ever have opened (a bound on the bytes queued, not a walk
/// of the frames).
pub fn frames(input: &[u8], max_head: usize) {
    let mut m: Machine<()> = Machine::new(
        Settings {
            max_streams: MAX_STREAMS,
            stream_window: STREAM_WINDOW,
            connection_window: CONNECTION_WINDOW,
            max_head,
        },
        false,
    );
    let mut all = super::PREFACE.to_vec();
    all.extend_from_slice(input);
    // In two reads cut in the middle, as a socket may deliver them.
    let cut = all.len() / 2;
    let used = m.receive(&all[..cut]);
    let mut rest = all[used..cut].to_vec();
    rest.extend_from_slice(&all[cut..]);
    m.receive(&rest);
    while let Some(n) = m.new.pop_front() {
        m.respond(n.id, &[0x88], false);
        m.push(n.id, Chunk::Bytes(Bytes::from_static(&[7; 40_000])));
        m.finish(n.id, None);
        while matches!(m.read(n.id), Read::Data(_)) {}
    }
    m.schedule(std::time::Instant::now);
    // The client never opened more than 65,535 bytes for the connection, plus what its
    // WINDOW_UPDATEs (at most 2^31-1 in all) add: what was framed stays within that.
    assert!(m.out.pending() < (1 << 31) + (1 << 20));
}

/// Decode `block` as a request's header block, twice in a row on one decoder (the
/// dynamic table carries over). Never panics; every field our own encoders write (the
/// stateless one, and the answers' with its table) decodes back to itself.
pub fn hpack(block: &[u8]) {
    let mut d = hpack::Decoder::new(hpack::TABLE_SIZE);
    let mut n = 0usize;
    let _ = d.decode(block, |name, value| n += name.len() + value.len());
    let _ = d.decode(block, |name, value| n += name.len() + value.len());
    // Round trip: the input cut into name and value.
    let (name, value) = block.split_at(block.len() / 2);
    let mut enc = Vec::new();
    hpack::field(&mut enc, name, value);
    let mut fresh = hpack::Decoder::new(hpack::TABLE_SIZE);
    let mut got = Vec::new();
    fresh
        .decode(&enc, |a, b| got.push((a.to_vec(), b.to_vec())))
        .expect("our own encoding decodes");
    assert_eq!(got, [(name.to_vec(), value.to_vec())]);
    // The answers' encoder: fields cut from the input (a byte's worth of length each, so
    // some repeat and some are long), over three blocks with a table size change
    // between, read back by a decoder that follows its table.
    let mut enc = hpack::Encoder::default();
    let mut dec = hpack::Decoder::new(hpack::TABLE_SIZE);
    for round in 0..3u32 {
        if round == 2 {
            enc.allow(block.first().map_or(0, |&b| b as u32 * 16));
        }
        let mut fields = Vec::new();
        let mut rest = block;
        while let [n, v, tail @ ..] = rest {
            let (n, v) = ((*n as usize % 8) + 1, *v as usize % 200);
            if tail.len() < n + v {
                break;
            }
            fields.push((tail[..n].to_ascii_lowercase(), tail[n..n + v].to_vec()));
            rest = &tail[n + v..];
        }
        let mut out = Vec::new();
        enc.begin(&mut out);
        for (n, v) in &fields {
            enc.field(&mut out, n, v);
        }
        let mut got = Vec::new();
        dec.decode(&out, |a, b| got.push((a.to_vec(), b.to_vec())))
            .expect("the encoder's blocks decode");
        assert_eq!(got, fields);
    }
}
