//! HTTP/2 frames (RFC 9113 §4, §6): the 9-byte header read from the client's bytes, and
//! the frames the server writes, appended to an output buffer. Pure.

/// Frame types.
pub(crate) const DATA: u8 = 0x0;
pub(crate) const HEADERS: u8 = 0x1;
pub(crate) const PRIORITY: u8 = 0x2;
pub(crate) const RST_STREAM: u8 = 0x3;
pub(crate) const SETTINGS: u8 = 0x4;
pub(crate) const PUSH_PROMISE: u8 = 0x5;
pub(crate) const PING: u8 = 0x6;
pub(crate) const GOAWAY: u8 = 0x7;
pub(crate) const WINDOW_UPDATE: u8 = 0x8;
pub(crate) const CONTINUATION: u8 = 0x9;

/// Flags.
pub(crate) const END_STREAM: u8 = 0x1;
pub(crate) const ACK: u8 = 0x1;
pub(crate) const END_HEADERS: u8 = 0x4;
pub(crate) const PADDED: u8 = 0x8;
pub(crate) const PRIORITY_FLAG: u8 = 0x20;

/// SETTINGS identifiers (§6.5.2).
pub(crate) const HEADER_TABLE_SIZE: u16 = 0x1;
pub(crate) const ENABLE_PUSH: u16 = 0x2;
pub(crate) const MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub(crate) const INITIAL_WINDOW_SIZE: u16 = 0x4;
pub(crate) const MAX_FRAME_SIZE: u16 = 0x5;
pub(crate) const MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// The largest frame payload before SETTINGS say otherwise, and the largest the server
/// reads (it advertises no larger).
pub(crate) const DEFAULT_MAX_FRAME: usize = 16_384;
/// The largest flow-control window (§6.9.1).
pub(crate) const MAX_WINDOW: i64 = (1 << 31) - 1;
/// The window every stream and the connection start with (§6.9.2).
pub(crate) const DEFAULT_WINDOW: i64 = 65_535;

/// Error codes (§7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Code(pub u32);

impl Code {
    pub const NO_ERROR: Code = Code(0x0);
    pub const PROTOCOL_ERROR: Code = Code(0x1);
    pub const INTERNAL_ERROR: Code = Code(0x2);
    pub const FLOW_CONTROL_ERROR: Code = Code(0x3);
    pub const STREAM_CLOSED: Code = Code(0x5);
    pub const FRAME_SIZE_ERROR: Code = Code(0x6);
    pub const REFUSED_STREAM: Code = Code(0x7);
    pub const CANCEL: Code = Code(0x8);
    pub const COMPRESSION_ERROR: Code = Code(0x9);
    pub const ENHANCE_YOUR_CALM: Code = Code(0xb);
    pub const HTTP_1_1_REQUIRED: Code = Code(0xd);
}

/// A frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    pub len: usize,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl Head {
    /// The header at the start of `b`, if all 9 bytes are there (the reserved bit of the
    /// stream identifier is ignored, §4.1).
    #[inline]
    pub fn parse(b: &[u8]) -> Option<Head> {
        let h: &[u8; 9] = b.get(..9)?.try_into().ok()?;
        Some(Head {
            len: (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize,
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        })
    }

    #[inline]
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Append a frame header.
#[inline]
pub(crate) fn head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let l = (len as u32).to_be_bytes();
    let s = stream.to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]]);
}

/// A frame header as bytes.
#[inline]
pub(crate) fn head_bytes(len: usize, kind: u8, flags: u8, stream: u32) -> [u8; 9] {
    let l = (len as u32).to_be_bytes();
    let s = stream.to_be_bytes();
    [l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]]
}

/// SETTINGS with `values` (identifier, value).
pub(crate) fn settings(out: &mut Vec<u8>, values: &[(u16, u32)]) {
    head(out, values.len() * 6, SETTINGS, 0, 0);
    for (id, v) in values {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&v.to_be_bytes());
    }
}

pub(crate) fn settings_ack(out: &mut Vec<u8>) {
    head(out, 0, SETTINGS, ACK, 0);
}

pub(crate) fn ping_ack(out: &mut Vec<u8>, payload: &[u8]) {
    head(out, 8, PING, ACK, 0);
    out.extend_from_slice(payload);
}

pub(crate) fn rst_stream(out: &mut Vec<u8>, stream: u32, code: Code) {
    head(out, 4, RST_STREAM, 0, stream);
    out.extend_from_slice(&code.0.to_be_bytes());
}

pub(crate) fn goaway(out: &mut Vec<u8>, last: u32, code: Code) {
    head(out, 8, GOAWAY, 0, 0);
    out.extend_from_slice(&last.to_be_bytes());
    out.extend_from_slice(&code.0.to_be_bytes());
}

pub(crate) fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    head(out, 4, WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

/// A header block as HEADERS and as many CONTINUATION frames as `max_frame` requires.
pub(crate) fn header_block(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame: usize,
) {
    let mut rest = block;
    let mut kind = HEADERS;
    let mut flags = if end_stream { END_STREAM } else { 0 };
    loop {
        let n = rest.len().min(max_frame);
        let last = n == rest.len();
        if last {
            flags |= END_HEADERS;
        }
        head(out, n, kind, flags, stream);
        out.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        if last {
            return;
        }
        kind = CONTINUATION;
        flags = 0;
    }
}

/// The payload of a frame without its padding (§6.1, §6.2): `None` when the pad length
/// is not shorter than the payload.
pub(crate) fn unpadded(h: &Head, payload: &[u8]) -> Option<std::ops::Range<usize>> {
    if !h.has(PADDED) {
        return Some(0..payload.len());
    }
    let pad = *payload.first()? as usize;
    if pad >= payload.len() {
        return None;
    }
    Some(1..payload.len() - pad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_what_was_written() {
        let mut out = Vec::new();
        head(
            &mut out,
            0x12_3456,
            HEADERS,
            END_HEADERS | END_STREAM,
            0x7fff_fffe,
        );
        assert_eq!(
            Head::parse(&out),
            Some(Head {
                len: 0x12_3456,
                kind: HEADERS,
                flags: END_HEADERS | END_STREAM,
                stream: 0x7fff_fffe,
            })
        );
        // Eight bytes are not a header; the reserved bit is not part of the stream.
        assert_eq!(Head::parse(&out[..8]), None);
        out[5] |= 0x80;
        assert_eq!(Head::parse(&out).unwrap().stream, 0x7fff_fffe);
    }

    #[test]
    fn a_block_longer_than_a_frame_continues() {
        let block = vec![7u8; 40];
        let mut out = Vec::new();
        header_block(&mut out, 3, &block, true, 16);
        let kinds: Vec<_> = {
            let mut at = 0;
            let mut v = Vec::new();
            while let Some(h) = Head::parse(&out[at..]) {
                v.push((h.kind, h.flags, h.len));
                at += 9 + h.len;
            }
            v
        };
        assert_eq!(
            kinds,
            [
                (HEADERS, END_STREAM, 16),
                (CONTINUATION, 0, 16),
                (CONTINUATION, END_HEADERS, 8)
            ]
        );
        let mut one = Vec::new();
        header_block(&mut one, 1, &[], false, 16);
        assert_eq!(Head::parse(&one).unwrap().flags, END_HEADERS);
    }

    #[test]
    fn padding_is_cut_and_a_pad_too_long_is_refused() {
        let h = |flags| Head {
            len: 0,
            kind: DATA,
            flags,
            stream: 1,
        };
        assert_eq!(unpadded(&h(0), b"abc"), Some(0..3));
        assert_eq!(unpadded(&h(PADDED), &[2, b'a', 0, 0]), Some(1..2));
        assert_eq!(unpadded(&h(PADDED), &[0]), Some(1..1));
        assert_eq!(unpadded(&h(PADDED), &[3, 9, 0, 0]), Some(1..1));
        assert_eq!(unpadded(&h(PADDED), &[4, 9, 0, 0]), None);
        assert_eq!(unpadded(&h(PADDED), &[]), None);
    }
}
