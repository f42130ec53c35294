//! Decoding a request's header block (RFC 7541 §6): the static table, the client's
//! dynamic table (§4), integers (§5.1) and strings (§5.2). Each field goes to a callback
//! as borrowed bytes; nothing is allocated per field except what enters the table.

use std::collections::VecDeque;

use super::huffman;
use super::static_table::STATIC;

/// Why a block could not be decoded (a COMPRESSION_ERROR for the connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DecoderError;

/// One entry of the dynamic table: name and value in one allocation.
#[derive(Debug)]
struct Entry {
    bytes: Box<[u8]>,
    name: usize,
}

/// The request decoder of one connection.
#[derive(Debug)]
pub(crate) struct Decoder {
    /// Newest first (index 62 is its front).
    table: VecDeque<Entry>,
    size: usize,
    max: usize,
    /// The most the client may set `max` to (SETTINGS_HEADER_TABLE_SIZE).
    allowed: usize,
    name: Vec<u8>,
    value: Vec<u8>,
    /// Counts the table's changes (entries in, size updates): a block decoded while the
    /// table stays the same decodes to the same fields.
    changes: u64,
}

/// Where a string's bytes are: in the block, or Huffman-decoded into a scratch buffer.
enum Str {
    Block(usize, usize),
    Scratch,
}

impl Decoder {
    /// Give back the scratch buffers (an idle connection's decoder keeps only its table).
    pub(crate) fn release(&mut self) {
        self.name = Vec::new();
        self.value = Vec::new();
    }

    pub(crate) fn new(allowed: usize) -> Decoder {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max: allowed,
            allowed,
            name: Vec::new(),
            value: Vec::new(),
            changes: 0,
        }
    }

    /// Bytes the dynamic table holds, as §4.1 counts them.
    #[cfg(test)]
    pub(crate) fn table_size(&self) -> usize {
        self.size
    }

    /// Counts the dynamic table's changes.
    pub(crate) fn changes(&self) -> u64 {
        self.changes
    }

    /// Decode a whole header block, each field to `field`.
    pub(crate) fn decode(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), DecoderError> {
        let mut at = 0;
        let mut fields = 0;
        while at < block.len() {
            let b = block[at];
            if b & 0x80 != 0 {
                let i = integer(block, &mut at, 7)?;
                let (n, v) = self.get(i)?;
                field(n, v);
            } else if b & 0xe0 == 0x20 {
                // A table size update comes before the block's first field (§4.2).
                if fields > 0 {
                    return Err(DecoderError);
                }
                let max = integer(block, &mut at, 5)?;
                if max > self.allowed {
                    return Err(DecoderError);
                }
                self.max = max;
                self.changes += 1;
                self.evict(0);
                continue;
            } else {
                let (prefix, index) = if b & 0xc0 == 0x40 {
                    (6, true)
                } else {
                    (4, false)
                };
                let i = integer(block, &mut at, prefix)?;
                let name = if i == 0 {
                    Some(string(block, &mut at, &mut self.name)?)
                } else {
                    // Check the index now; the name is read again below.
                    self.get(i)?;
                    None
                };
                let value = string(block, &mut at, &mut self.value)?;
                let v: &[u8] = match value {
                    Str::Block(s, e) => &block[s..e],
                    Str::Scratch => &self.value,
                };
                let n: &[u8] = match name {
                    Some(Str::Block(s, e)) => &block[s..e],
                    Some(Str::Scratch) => &self.name,
                    None => self.get(i)?.0,
                };
                field(n, v);
                if index {
                    let mut bytes = Vec::with_capacity(n.len() + v.len());
                    bytes.extend_from_slice(n);
                    bytes.extend_from_slice(v);
                    let name = n.len();
                    self.insert(Entry {
                        bytes: bytes.into_boxed_slice(),
                        name,
                    });
                }
            }
            fields += 1;
        }
        Ok(())
    }

    /// The field at index `i` (1-based: static, then dynamic).
    fn get(&self, i: usize) -> Result<(&[u8], &[u8]), DecoderError> {
        if i == 0 {
            return Err(DecoderError);
        }
        if let Some((n, v)) = STATIC.get(i - 1) {
            return Ok((n.as_bytes(), v.as_bytes()));
        }
        let e = self.table.get(i - 1 - STATIC.len()).ok_or(DecoderError)?;
        Ok(e.bytes.split_at(e.name))
    }

    fn insert(&mut self, e: Entry) {
        self.changes += 1;
        let size = e.bytes.len() + 32;
        if size > self.max {
            // An entry larger than the table empties it (§4.4).
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.size += size;
        self.table.push_front(e);
    }

    /// Drop the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            match self.table.pop_back() {
                Some(e) => self.size -= e.bytes.len() + 32,
                None => break,
            }
        }
    }
}

/// An integer with an `n`-bit prefix at `*at` (§5.1); values past 2^28 are refused.
fn integer(block: &[u8], at: &mut usize, n: u32) -> Result<usize, DecoderError> {
    let max = (1usize << n) - 1;
    let first = *block.get(*at).ok_or(DecoderError)? as usize & max;
    *at += 1;
    if first < max {
        return Ok(first);
    }
    let mut v = max;
    let mut shift = 0;
    loop {
        let b = *block.get(*at).ok_or(DecoderError)?;
        *at += 1;
        v += ((b & 0x7f) as usize) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
        shift += 7;
        if shift > 21 {
            return Err(DecoderError);
        }
    }
}

/// A string at `*at` (§5.2): where it is in the block, or decoded into `scratch`.
fn string(block: &[u8], at: &mut usize, scratch: &mut Vec<u8>) -> Result<Str, DecoderError> {
    let huffman = *block.get(*at).ok_or(DecoderError)? & 0x80 != 0;
    let len = integer(block, at, 7)?;
    let start = *at;
    let end = start
        .checked_add(len)
        .filter(|&e| e <= block.len())
        .ok_or(DecoderError)?;
    *at = end;
    if !huffman {
        return Ok(Str::Block(start, end));
    }
    scratch.clear();
    huffman::decode(&block[start..end], scratch).map_err(|_| DecoderError)?;
    Ok(Str::Scratch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(d: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, DecoderError> {
        let mut v = Vec::new();
        d.decode(block, |n, val| {
            v.push((
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(val).into_owned(),
            ))
        })?;
        Ok(v)
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn the_rfc_request_examples_decode_with_and_without_huffman() {
        // RFC 7541 C.3 (plain) and C.4 (Huffman): three requests on one connection.
        for blocks in [
            [
                "828684410f7777772e6578616d706c652e636f6d",
                "828684be58086e6f2d6361636865",
                "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
            ],
            [
                "828684418cf1e3c2e5f23a6ba0ab90f4ff",
                "828684be5886a8eb10649cbf",
                "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
            ],
        ] {
            let mut d = Decoder::new(4096);
            let base = [
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ];
            assert_eq!(all(&mut d, &hex(blocks[0])).unwrap(), pairs(&base));
            assert_eq!(d.table_size(), 57);
            let mut second = base.to_vec();
            second.push(("cache-control", "no-cache"));
            assert_eq!(all(&mut d, &hex(blocks[1])).unwrap(), pairs(&second));
            assert_eq!(d.table_size(), 110);
            assert_eq!(
                all(&mut d, &hex(blocks[2])).unwrap(),
                pairs(&[
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":path", "/index.html"),
                    (":authority", "www.example.com"),
                    ("custom-key", "custom-value"),
                ])
            );
            assert_eq!(d.table_size(), 164);
        }
    }

    #[test]
    fn the_table_evicts_the_oldest_and_obeys_size_updates() {
        let mut d = Decoder::new(4096);
        // Table size 100: two entries of 32 + 20 = 52 do not both fit.
        let mut block = vec![0x3f, 0x45];
        block.extend_from_slice(&[0x40, 10]);
        block.extend_from_slice(b"aaaaaaaaaa");
        block.extend_from_slice(&[10]);
        block.extend_from_slice(b"1111111111");
        assert_eq!(all(&mut d, &block).unwrap().len(), 1);
        let mut block = vec![0x40, 10];
        block.extend_from_slice(b"bbbbbbbbbb");
        block.extend_from_slice(&[10]);
        block.extend_from_slice(b"2222222222");
        block.push(0xbe); // index 62: the newest
        let got = all(&mut d, &block).unwrap();
        assert_eq!(got[1].0, "bbbbbbbbbb");
        // The older entry is gone: index 63 is out of range.
        assert_eq!(all(&mut d, &[0xbf]), Err(DecoderError));
        // A size update past what SETTINGS allow, or after a field, is refused.
        assert_eq!(all(&mut d, &[0x3f, 0xe2, 0x1f]), Err(DecoderError));
        assert_eq!(all(&mut d, &[0x82, 0x20]), Err(DecoderError));
        // Size 0 empties the table.
        assert!(all(&mut d, &[0x20, 0x82]).is_ok());
        assert_eq!(d.table_size(), 0);
    }

    #[test]
    fn truncated_and_overlong_input_is_an_error_not_a_panic() {
        let mut d = Decoder::new(4096);
        for bad in [
            &[0x80][..],
            &[0xff],
            &[0xff, 0x80],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            &[0x40],
            &[0x40, 0x05, b'a'],
            &[0x00, 0x01, b'a', 0x85],
            &[0x0f],
            &[0x00, 0x81, 0x00, 0x00],
        ] {
            assert_eq!(all(&mut d, bad), Err(DecoderError), "{bad:?}");
        }
    }
}
