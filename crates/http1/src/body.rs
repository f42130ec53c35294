//! Request body framing (RFC 9112 §6–§7): consume a body by Content-Length or chunked
//! coding without ever reading past it, so the next pipelined request starts where it should.

use crate::error::ErrorKind;

/// How the length of a message body is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// Longest chunk-size line with extensions we accept; extensions are ignored, not stored.
const MAX_CHUNK_LINE: u32 = 4096;
/// Longest trailer section we skip.
const MAX_TRAILERS: u32 = 16 * 1024;

/// One step of [`BodyDecoder::decode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// Bytes of the input used by this step.
    pub consumed: usize,
    /// Payload bytes inside the consumed input, as a range of it.
    pub data: std::ops::Range<usize>,
    /// The body has ended.
    pub done: bool,
    /// Trailer field lines (`Name: value\r\n` each) inside the consumed input, as a range
    /// of it: empty except at the end of a chunked body with trailers. A proxy collects
    /// them to pass on; everyone else ignores them.
    pub trailer: std::ops::Range<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Length(u64),
    Size { value: u64, digits: u32 },
    Extension { line: u32 },
    SizeLf { value: u64 },
    Data(u64),
    DataCr,
    DataLf,
    TrailerStart { total: u32 },
    TrailerLine { total: u32 },
    TrailerLf { total: u32, empty: bool },
    Done,
}

/// Incremental body decoder: feed it bytes as they arrive.
#[derive(Debug, Clone)]
pub struct BodyDecoder {
    state: State,
    /// Payload bytes still allowed before 413.
    budget: u64,
    /// Chunk size read before an extension, used once the size line ends.
    pending_size: u64,
}

impl BodyDecoder {
    /// A decoder for `framing` that refuses bodies longer than `max` payload bytes.
    pub fn new(framing: BodyFraming, max: u64) -> Result<Self, ErrorKind> {
        let state = match framing {
            BodyFraming::None => State::Done,
            BodyFraming::Length(n) if n > max => return Err(ErrorKind::PayloadTooLarge),
            BodyFraming::Length(n) => State::Length(n),
            BodyFraming::Chunked => State::Size {
                value: 0,
                digits: 0,
            },
        };
        Ok(BodyDecoder {
            state,
            budget: max,
            pending_size: 0,
        })
    }

    /// Whether the body has been fully consumed.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consume from `input`; returns at most one payload slice per call. Call again with the
    /// unconsumed rest until `done` or the input is used up.
    pub fn decode(&mut self, input: &[u8]) -> Result<Decoded, ErrorKind> {
        let mut i = 0;
        // The trailer bytes seen in this call: they are contiguous (start, end).
        let mut trailer = (usize::MAX, 0);
        while i < input.len() {
            let b = input[i];
            match self.state {
                State::Done => break,
                State::Length(left) => {
                    let take = left.min((input.len() - i) as u64) as usize;
                    self.state = if take as u64 == left {
                        State::Done
                    } else {
                        State::Length(left - take as u64)
                    };
                    return Ok(Decoded {
                        consumed: i + take,
                        data: i..i + take,
                        done: self.is_done(),
                        trailer: 0..0,
                    });
                }
                State::Data(left) => {
                    let take = left.min((input.len() - i) as u64) as usize;
                    self.state = if take as u64 == left {
                        State::DataCr
                    } else {
                        State::Data(left - take as u64)
                    };
                    return Ok(Decoded {
                        consumed: i + take,
                        data: i..i + take,
                        done: false,
                        trailer: 0..0,
                    });
                }
                State::Size { value, digits } => {
                    if let Some(d) = (b as char).to_digit(16) {
                        if digits >= 15 {
                            return Err(ErrorKind::BadRequest);
                        }
                        self.state = State::Size {
                            value: value * 16 + u64::from(d),
                            digits: digits + 1,
                        };
                    } else if digits == 0 {
                        return Err(ErrorKind::BadRequest);
                    } else {
                        match b {
                            b';' | b' ' | b'\t' => self.state = State::Extension { line: digits },
                            b'\r' => self.state = State::SizeLf { value },
                            _ => return Err(ErrorKind::BadRequest),
                        }
                        self.check_budget(value)?;
                        if let State::Extension { .. } = self.state {
                            self.pending_size = value;
                        }
                    }
                }
                State::Extension { line } => match b {
                    b'\r' => {
                        self.state = State::SizeLf {
                            value: self.pending_size,
                        }
                    }
                    b'\n' | 0 => return Err(ErrorKind::BadRequest),
                    _ if line >= MAX_CHUNK_LINE => return Err(ErrorKind::BadRequest),
                    _ => self.state = State::Extension { line: line + 1 },
                },
                State::SizeLf { value } => {
                    if b != b'\n' {
                        return Err(ErrorKind::BadRequest);
                    }
                    self.state = if value == 0 {
                        State::TrailerStart { total: 0 }
                    } else {
                        State::Data(value)
                    };
                }
                State::DataCr => {
                    if b != b'\r' {
                        return Err(ErrorKind::BadRequest);
                    }
                    self.state = State::DataLf;
                }
                State::DataLf => {
                    if b != b'\n' {
                        return Err(ErrorKind::BadRequest);
                    }
                    self.state = State::Size {
                        value: 0,
                        digits: 0,
                    };
                }
                State::TrailerStart { total } => {
                    self.state = if b == b'\r' {
                        State::TrailerLf { total, empty: true }
                    } else if b == b'\n' || b == b' ' || b == b'\t' {
                        return Err(ErrorKind::BadRequest);
                    } else {
                        trailer = (trailer.0.min(i), i + 1);
                        State::TrailerLine { total: total + 1 }
                    };
                }
                State::TrailerLine { total } => {
                    if total >= MAX_TRAILERS {
                        return Err(ErrorKind::HeadersTooLarge);
                    }
                    self.state = match b {
                        b'\r' => State::TrailerLf {
                            total,
                            empty: false,
                        },
                        b'\n' | 0 => return Err(ErrorKind::BadRequest),
                        _ => State::TrailerLine { total: total + 1 },
                    };
                    trailer = (trailer.0.min(i), i + 1);
                }
                State::TrailerLf { total, empty } => {
                    if b != b'\n' {
                        return Err(ErrorKind::BadRequest);
                    }
                    if !empty {
                        trailer = (trailer.0.min(i), i + 1);
                    }
                    self.state = if empty {
                        State::Done
                    } else {
                        State::TrailerStart { total }
                    };
                }
            }
            i += 1;
            if self.state == State::Done {
                break;
            }
        }
        Ok(Decoded {
            consumed: i,
            data: i..i,
            done: self.is_done(),
            trailer: if trailer.0 < trailer.1 {
                trailer.0..trailer.1
            } else {
                i..i
            },
        })
    }

    /// Lower the limit to `max` payload bytes before any byte is decoded (a location's own
    /// limit, known only once the request is routed): a declared length over it is
    /// `PayloadTooLarge` at once; a chunked body is held to it as it arrives.
    pub fn limit(&mut self, max: u64) -> Result<(), ErrorKind> {
        if let State::Length(n) = self.state {
            if n > max {
                return Err(ErrorKind::PayloadTooLarge);
            }
        }
        self.budget = self.budget.min(max);
        Ok(())
    }

    fn check_budget(&mut self, chunk: u64) -> Result<(), ErrorKind> {
        if chunk > self.budget {
            return Err(ErrorKind::PayloadTooLarge);
        }
        self.budget -= chunk;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lower_limit_applies_to_lengths_at_once_and_to_chunks_as_they_come() {
        let mut d = BodyDecoder::new(BodyFraming::Length(10), 100).unwrap();
        assert_eq!(d.limit(9), Err(ErrorKind::PayloadTooLarge));
        let mut d = BodyDecoder::new(BodyFraming::Length(10), 100).unwrap();
        assert_eq!(d.limit(10), Ok(()));
        let mut d = BodyDecoder::new(BodyFraming::Chunked, 100).unwrap();
        d.limit(4).unwrap();
        assert!(d.decode(b"4\r\nabcd\r\n").is_ok(), "exactly at the limit");
        let mut d = BodyDecoder::new(BodyFraming::Chunked, 100).unwrap();
        d.limit(4).unwrap();
        assert_eq!(d.decode(b"5\r\n"), Err(ErrorKind::PayloadTooLarge));
        // A limit never raises the one the decoder was made with.
        let mut d = BodyDecoder::new(BodyFraming::Chunked, 3).unwrap();
        d.limit(100).unwrap();
        assert_eq!(d.decode(b"4\r\n"), Err(ErrorKind::PayloadTooLarge));
    }

    #[test]
    fn trailer_lines_are_reported_in_any_split() {
        let input = b"3\r\nabc\r\n0\r\nX-Sum: 1\r\nX-Other: two\r\n\r\nNEXT";
        for step in 1..input.len() {
            let mut d = BodyDecoder::new(BodyFraming::Chunked, 100).unwrap();
            let (mut pos, mut trailers) = (0, Vec::new());
            while !d.is_done() {
                let end = (pos + step).min(input.len());
                let r = d.decode(&input[pos..end]).unwrap();
                trailers.extend_from_slice(&input[pos..end][r.trailer.clone()]);
                assert!(r.trailer.is_empty() || r.data.is_empty());
                pos += r.consumed;
            }
            assert_eq!(&input[pos..], b"NEXT");
            assert_eq!(trailers, b"X-Sum: 1\r\nX-Other: two\r\n", "step {step}");
        }
        let mut d = BodyDecoder::new(BodyFraming::Chunked, 100).unwrap();
        assert!(d.decode(b"0\r\n\r\n").unwrap().trailer.is_empty());
    }

    /// Feed `input` in pieces of `step` bytes; return (payload, consumed, done).
    fn run(
        framing: BodyFraming,
        input: &[u8],
        step: usize,
    ) -> Result<(Vec<u8>, usize, bool), ErrorKind> {
        let mut d = BodyDecoder::new(framing, 1 << 20)?;
        let mut payload = Vec::new();
        let mut pos = 0;
        while pos < input.len() && !d.is_done() {
            let end = (pos + step).min(input.len());
            let mut piece = &input[pos..end];
            while !piece.is_empty() && !d.is_done() {
                let step = d.decode(piece)?;
                payload.extend_from_slice(&piece[step.data.clone()]);
                pos += step.consumed;
                piece = &piece[step.consumed..];
                if step.consumed == 0 {
                    break;
                }
            }
        }
        Ok((payload, pos, d.is_done()))
    }

    #[test]
    fn content_length_stops_at_the_end() {
        let (p, used, done) = run(BodyFraming::Length(5), b"helloGET /", 3).unwrap();
        assert_eq!((p.as_slice(), used, done), (&b"hello"[..], 5, true));
    }

    #[test]
    fn chunked_in_every_split() {
        let body = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\nNEXT";
        for step in 1..body.len() {
            let (p, used, done) = run(BodyFraming::Chunked, body, step).unwrap();
            assert_eq!(p, b"hello world");
            assert_eq!(used, body.len() - 4, "step {step}");
            assert!(done);
        }
    }

    #[test]
    fn chunked_rejects_smuggling_shapes() {
        for bad in [
            &b"5\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhelloX\r\n0\r\n\r\n",
            b"-5\r\nhello\r\n0\r\n\r\n",
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b"\r\n",
            b"ffffffffffffffffff\r\n",
            b"0\r\n\nX",
        ] {
            assert!(
                run(BodyFraming::Chunked, bad, 64).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn too_large_is_413() {
        assert_eq!(
            BodyDecoder::new(BodyFraming::Length(11), 10).unwrap_err(),
            ErrorKind::PayloadTooLarge
        );
        let mut d = BodyDecoder::new(BodyFraming::Chunked, 10).unwrap();
        assert_eq!(d.decode(b"b\r\n").unwrap_err(), ErrorKind::PayloadTooLarge);
    }
}
