//! Encoding response header blocks (RFC 7541 §6). Stateless pieces (a field as a literal
//! that is not indexed, `:status`) serve blocks whose place on the wire is not known when
//! they are built (trailers, informational heads); `Encoder` keeps a connection's dynamic
//! table (§2.3.2, §4), so the fields every answer repeats (`server`, `date`, a file's
//! type, validators and length) cost a byte each after their first time.

use std::collections::VecDeque;

use bytes::Bytes;

use super::TABLE_SIZE;

/// The static table's index for a response field name, if it has one (Appendix A).
fn static_name(name: &[u8]) -> Option<u8> {
    Some(match name {
        b":status" => 8,
        b"accept-ranges" => 18,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"date" => 33,
        b"etag" => 34,
        b"expires" => 36,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"proxy-authenticate" => 48,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    })
}

/// An integer with an `n`-bit prefix, the first byte's other bits `first` (§5.1).
pub(super) fn integer(out: &mut Vec<u8>, first: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A string literal, not Huffman-coded (§5.2).
fn string(out: &mut Vec<u8>, s: &[u8]) {
    integer(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// The static table's index for a whole `:status` field, if it has one.
fn static_status(code: u16) -> Option<u8> {
    Some(match code {
        200 => 8,
        204 => 9,
        206 => 10,
        304 => 11,
        400 => 12,
        404 => 13,
        500 => 14,
        _ => return None,
    })
}

/// `:status`, indexed when the static table has it (§6.1), else a literal with its name
/// indexed.
pub(crate) fn status(out: &mut Vec<u8>, code: u16) {
    if let Some(i) = static_status(code) {
        out.push(0x80 | i);
        return;
    }
    let mut digits = itoa::Buffer::new();
    field(out, b":status", digits.format(code).as_bytes());
}

/// A literal field representation (§6.2) whose first byte is `kind` with an `n`-bit
/// name index; `name` must be lower case.
fn literal(out: &mut Vec<u8>, kind: u8, n: u32, name: &[u8], value: &[u8]) {
    match static_name(name) {
        Some(i) => integer(out, kind, n, i as usize),
        None => {
            out.push(kind);
            string(out, name);
        }
    }
    string(out, value);
}

/// A field as a literal without indexing (§6.2.2); `name` must be lower case.
pub(crate) fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    literal(out, 0, 4, name, value);
}

/// Calls `f` with `name` in lower case (the HTTP/1 spelling may have capitals; RFC 9113
/// §8.2.1), without allocating for names of up to 64 bytes.
pub(crate) fn lower<R>(name: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    if !name.iter().any(u8::is_ascii_uppercase) {
        return f(name);
    }
    let mut low = [0u8; 64];
    if name.len() <= low.len() {
        for (d, s) in low.iter_mut().zip(name) {
            *d = s.to_ascii_lowercase();
        }
        f(&low[..name.len()])
    } else {
        f(&name.to_ascii_lowercase())
    }
}

/// A field whose name may have upper-case letters, as a literal without indexing.
#[cfg(test)]
pub(crate) fn field_any_case(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    lower(name, |name| field(out, name, value))
}

/// Slots of the lookup from a field's hash to its newest entry.
const SLOTS: usize = 64;
/// Longer values are sent as literals without indexing: they are seldom repeated and
/// would push the repeated fields out of the table.
const MAX_INDEXED_VALUE: usize = 128;
/// What §4.1 adds to an entry's name and value for its size.
const ENTRY_OVERHEAD: usize = 32;

/// One entry of the dynamic table: name and value in one allocation.
#[derive(Debug)]
struct Entry {
    hash: u64,
    name: usize,
    bytes: Box<[u8]>,
}

/// The response encoder of one connection: the dynamic table as the client's decoder
/// holds it, and the size updates the next block must begin with. Every block it writes
/// must reach the wire, in the order written: the client's table follows the blocks.
#[derive(Debug)]
pub(crate) struct Encoder {
    /// Oldest first: entry `k` has the sequence number `first + k`, and the newest is
    /// index 62.
    entries: VecDeque<Entry>,
    first: u64,
    size: usize,
    /// The table's maximum size as the client's decoder knows it.
    max: usize,
    /// The smallest maximum since the last block, when it changed: the next block
    /// announces it (and then `max`) before its first field (§4.2).
    announce: Option<usize>,
    /// Per hash slot, the sequence number plus one of the newest entry that had it
    /// (0: none). Allocated with the first entry.
    slots: Vec<u64>,
    /// Blocks begun since the table was last emptied: the first is written without
    /// indexing, so a connection that asks once and idles allocates no table.
    blocks: u32,
    /// Counts the table's changes (entries in, sizes changed, emptied).
    changes: u64,
    /// The last block that changed nothing in the table, to write again while the table
    /// stays as it was.
    repeat: Option<Box<Repeat>>,
}

/// A run of fields the encoder wrote without changing its table: the caller's summary
/// of what they were made from, and the bytes.
#[derive(Debug)]
struct Repeat {
    key: [u64; 5],
    /// Holds the memory the key names by address, so the address means the same bytes.
    keep: Bytes,
    changes: u64,
    block: Vec<u8>,
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder {
            entries: VecDeque::new(),
            first: 0,
            size: 0,
            max: TABLE_SIZE,
            announce: None,
            slots: Vec::new(),
            blocks: 0,
            changes: 0,
            repeat: None,
        }
    }
}

/// A field's hash for the table's lookup (not for a map an attacker fills: the table is
/// the server's own, from its own answers).
fn hash(name: &[u8], value: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = ((name.len() as u64) << 32) | value.len() as u64;
    for part in [name, value] {
        let mut words = part.chunks_exact(8);
        for w in &mut words {
            let w = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            h = (h.rotate_left(5) ^ w).wrapping_mul(K);
        }
        let mut last = 0u64;
        for (i, &b) in words.remainder().iter().enumerate() {
            last |= (b as u64) << (8 * i);
        }
        h = (h.rotate_left(5) ^ last).wrapping_mul(K);
    }
    h
}

impl Encoder {
    /// The client's SETTINGS_HEADER_TABLE_SIZE: the table is kept within it (and within
    /// `TABLE_SIZE`), and a change is announced at the start of the next block.
    pub(crate) fn allow(&mut self, settings: u32) {
        let max = (settings as usize).min(TABLE_SIZE);
        if max == self.max {
            return;
        }
        self.max = max;
        self.changes += 1;
        self.evict(0);
        self.announce = Some(self.announce.map_or(max, |a| a.min(max)));
    }

    /// Empty the table (an idle connection keeps no copy of it); the next block tells
    /// the client to empty its own.
    pub(crate) fn forget(&mut self) {
        self.entries = VecDeque::new();
        self.slots = Vec::new();
        self.first = 0;
        self.size = 0;
        self.announce = Some(0);
        self.blocks = 0;
        self.changes += 1;
        self.repeat = None;
    }

    /// Counts the table's changes: fields written while it stays the same write the
    /// same bytes again.
    pub(crate) fn changes(&self) -> u64 {
        self.changes
    }

    /// Write again the fields last remembered under `key`, if the table has not changed
    /// since; false when they must be encoded.
    pub(crate) fn repeat(&self, key: &[u64; 5], out: &mut Vec<u8>) -> bool {
        match &self.repeat {
            Some(r) if r.changes == self.changes && r.key == *key => {
                out.extend_from_slice(&r.block);
                true
            }
            _ => false,
        }
    }

    /// Remember `block` under `key` (whose addresses point into `keep`), if encoding it
    /// changed nothing in the table (`changes` is what `changes()` said before).
    pub(crate) fn remember(&mut self, key: [u64; 5], keep: &Bytes, block: &[u8], changes: u64) {
        if changes != self.changes || self.blocks < 2 {
            return;
        }
        let r = self.repeat.get_or_insert_with(|| {
            Box::new(Repeat {
                key,
                keep: Bytes::new(),
                changes,
                block: Vec::new(),
            })
        });
        r.key = key;
        r.changes = changes;
        if r.keep.as_ptr() != keep.as_ptr() || r.keep.len() != keep.len() {
            r.keep = keep.clone();
        }
        r.block.clear();
        r.block.extend_from_slice(block);
    }

    /// Start a block: the size updates owed (§6.3), at most two, the smallest first.
    pub(crate) fn begin(&mut self, out: &mut Vec<u8>) {
        self.blocks = self.blocks.saturating_add(1);
        if let Some(low) = self.announce.take() {
            if low < self.max {
                integer(out, 0x20, 5, low);
            }
            integer(out, 0x20, 5, self.max);
        }
    }

    /// `:status`: the static table's entry, or the dynamic table's.
    pub(crate) fn status(&mut self, out: &mut Vec<u8>, code: u16) {
        if let Some(i) = static_status(code) {
            out.push(0x80 | i);
            return;
        }
        let mut digits = itoa::Buffer::new();
        self.field(out, b":status", digits.format(code).as_bytes());
    }

    /// A field (`name` in lower case): indexed when the table has it; else a literal
    /// that enters the table, unless it is long or sensitive.
    pub(crate) fn field(&mut self, out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        let h = hash(name, value);
        let slot = (h >> 58) as usize % SLOTS;
        if let Some(k) = self.find(slot, h, name, value) {
            integer(out, 0x80, 7, 62 + (self.entries.len() - 1 - k));
            return;
        }
        if name == b"set-cookie" {
            // Never indexed, here or by an intermediary (§7.1.3).
            return literal(out, 0x10, 4, name, value);
        }
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if value.len() > MAX_INDEXED_VALUE || size > self.max || self.blocks < 2 {
            return field(out, name, value);
        }
        // Literal with incremental indexing (§6.2.1).
        literal(out, 0x40, 6, name, value);
        self.evict(size);
        if self.slots.is_empty() {
            self.slots = vec![0; SLOTS];
        }
        self.entries.push_back(Entry {
            hash: h,
            name: name.len(),
            bytes: [name, value].concat().into_boxed_slice(),
        });
        self.changes += 1;
        self.size += size;
        self.slots[slot] = self.first + self.entries.len() as u64;
    }

    /// Where the table holds `name: value` (hash `h`): the slot's entry, else the newest
    /// entry with the same hash (two fields may share a slot; the slot then points to the
    /// one found last).
    fn find(&mut self, slot: usize, h: u64, name: &[u8], value: &[u8]) -> Option<usize> {
        let seq = *self.slots.get(slot)?;
        let same = |e: &Entry| {
            let (n, v) = e.bytes.split_at(e.name);
            e.hash == h && n == name && v == value
        };
        if seq > self.first {
            let k = (seq - 1 - self.first) as usize;
            if self.entries.get(k).is_some_and(same) {
                return Some(k);
            }
        }
        let k = self.entries.iter().rposition(same)?;
        self.slots[slot] = self.first + k as u64 + 1;
        Some(k)
    }

    /// Evict the oldest entries until `room` more bytes fit within `max` (§4.4).
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            let Some(e) = self.entries.pop_front() else {
                break;
            };
            self.size -= e.bytes.len() + ENTRY_OVERHEAD;
            self.first += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Decoder;
    use super::*;

    type Fields = Vec<(Vec<u8>, Vec<u8>)>;

    fn decode(d: &mut Decoder, block: &[u8]) -> Fields {
        let mut v = Vec::new();
        d.decode(block, |n, val| v.push((n.to_vec(), val.to_vec())))
            .expect("the encoder's block decodes");
        v
    }

    fn block(e: &mut Encoder, fields: &Fields) -> Vec<u8> {
        let mut out = Vec::new();
        e.begin(&mut out);
        for (n, v) in fields {
            e.field(&mut out, n, v);
        }
        out
    }

    /// An encoder past a connection's first block (which indexes nothing).
    fn warm() -> Encoder {
        let mut e = Encoder::default();
        e.begin(&mut Vec::new());
        e
    }

    fn fields(list: &[(&str, &str)]) -> Fields {
        list.iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn repeated_fields_cost_a_byte_each_after_their_first_block() {
        let (mut e, mut d) = (warm(), Decoder::new(TABLE_SIZE));
        let f = fields(&[
            ("server", "ramjet"),
            ("date", "Thu, 26 Nov 2026 18:45:20 GMT"),
            ("content-type", "text/plain; charset=utf-8"),
            ("etag", "\"6b08699d.33390c78-6\""),
            ("x-own", "1"),
        ]);
        let first = block(&mut e, &f);
        assert_eq!(decode(&mut d, &first), f);
        let again = block(&mut e, &f);
        assert_eq!(again.len(), f.len(), "{again:x?}");
        assert!(again.iter().all(|b| b & 0x80 != 0));
        assert_eq!(decode(&mut d, &again), f);
        // One value changed: one literal, the rest indexed, in the shifted positions.
        let mut g = f.clone();
        g[1].1 = b"Thu, 26 Nov 2026 18:45:21 GMT".to_vec();
        let third = block(&mut e, &g);
        assert_eq!(decode(&mut d, &third), g);
        assert_eq!(decode(&mut d, &block(&mut e, &g)), g);
        assert_eq!(decode(&mut d, &block(&mut e, &f)), f);
    }

    #[test]
    fn eviction_keeps_encoder_and_decoder_in_step_over_many_blocks() {
        let (mut e, mut d) = (warm(), Decoder::new(TABLE_SIZE));
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..2_000 {
            let n = 1 + next() % 12;
            let f: Fields = (0..n)
                .map(|_| {
                    let r = next();
                    // Few names and values, so some repeat and some are new; some long.
                    let name = format!("x-f{}", r % 7).into_bytes();
                    let len = [0, 1, 5, 40, 128, 129, 3000][(r >> 8) as usize % 7];
                    let value = vec![b'a' + (r >> 16) as u8 % 5; len];
                    (name, value)
                })
                .collect();
            if round % 500 == 499 {
                e.allow([0, 100, 4096, 70_000][round / 500]);
            }
            assert_eq!(decode(&mut d, &block(&mut e, &f)), f, "round {round}");
            assert!(d.table_size() <= e.max);
        }
    }

    #[test]
    fn fields_that_share_a_hash_slot_are_both_found() {
        let mut e = warm();
        // Find two fields whose hashes fall in the same slot.
        let slot = |v: &str| (hash(b"x-a", v.as_bytes()) >> 58) as usize % SLOTS;
        let first = "0".to_string();
        let other = (1..10_000)
            .map(|i| i.to_string())
            .find(|v| slot(v) == slot(&first))
            .unwrap();
        let f = fields(&[("x-a", &first), ("x-a", &other)]);
        let mut d = Decoder::new(TABLE_SIZE);
        decode(&mut d, &block(&mut e, &f));
        for _ in 0..3 {
            let b = block(&mut e, &f);
            assert_eq!(b.len(), 2, "{b:x?}");
            assert_eq!(decode(&mut d, &b), f);
        }
    }

    #[test]
    fn a_smaller_table_is_announced_before_the_next_blocks_first_field() {
        let mut e = warm();
        let mut d = Decoder::new(TABLE_SIZE);
        let f = fields(&[("server", "ramjet"), ("x-a", "b")]);
        decode(&mut d, &block(&mut e, &f));
        assert!(d.table_size() > 0);
        // Down to 0, then up to 100, before the next block: both sizes, the smaller first.
        e.allow(0);
        e.allow(100);
        let b = block(&mut e, &f);
        assert_eq!(&b[..3], &[0x20, 0x3f, 100 - 31]);
        assert_eq!(decode(&mut d, &b), f);
        assert!(d.table_size() <= 100);
        // No change, no announcement.
        let b = block(&mut e, &f);
        assert_eq!(b.len(), 2, "{b:x?}");
        // Down to 0: nothing is indexed any more.
        e.allow(0);
        let b = block(&mut e, &f);
        assert_eq!(b[0], 0x20);
        assert_eq!(decode(&mut d, &b), f);
        assert_eq!(d.table_size(), 0);
        assert_eq!(decode(&mut d, &block(&mut e, &f)), f);
        assert_eq!(d.table_size(), 0);
    }

    #[test]
    fn a_forgotten_table_is_emptied_on_the_client_too() {
        let (mut e, mut d) = (warm(), Decoder::new(TABLE_SIZE));
        let f = fields(&[("server", "ramjet"), ("vary", "accept-encoding")]);
        decode(&mut d, &block(&mut e, &f));
        e.forget();
        let b = block(&mut e, &f);
        // Size 0, then 4096 (0x3f, 4065 in 7-bit groups), then two literals.
        assert_eq!(&b[..4], &[0x20, 0x3f, 0xe1, 0x1f]);
        assert_eq!(decode(&mut d, &b), f);
        assert_eq!(d.table_size(), 0);
        // Its first block after that indexes nothing; the next fills the table again.
        assert_eq!(decode(&mut d, &block(&mut e, &f)), f);
        assert_eq!(block(&mut e, &f), [0x80 | 63, 0x80 | 62]);
    }

    #[test]
    fn a_connections_first_block_allocates_no_table() {
        let (mut e, mut d) = (Encoder::default(), Decoder::new(TABLE_SIZE));
        let f = fields(&[("server", "ramjet"), ("etag", "\"1\"")]);
        let b = block(&mut e, &f);
        assert_eq!(decode(&mut d, &b), f);
        assert!(e.entries.is_empty() && e.slots.is_empty());
        e.remember([0; 5], &Bytes::new(), &b, e.changes());
        assert!(e.repeat.is_none());
        assert_eq!(decode(&mut d, &block(&mut e, &f)), f);
        assert_eq!(e.entries.len(), 2);
    }

    #[test]
    fn cookies_are_never_indexed_and_long_values_not_indexed() {
        let mut e = Encoder::default();
        let mut out = Vec::new();
        e.field(&mut out, b"set-cookie", b"a=1");
        assert_eq!(out[0], 0x10 | 15);
        let long = vec![b'v'; MAX_INDEXED_VALUE + 1];
        let mut out2 = Vec::new();
        e.field(&mut out2, b"x-long", &long);
        assert_eq!(out2[0], 0);
        assert!(e.entries.is_empty());
        let mut d = Decoder::new(TABLE_SIZE);
        out.extend_from_slice(&out2);
        assert_eq!(
            decode(&mut d, &out),
            [
                (b"set-cookie".to_vec(), b"a=1".to_vec()),
                (b"x-long".to_vec(), long)
            ]
        );
        assert_eq!(d.table_size(), 0);
    }

    #[test]
    fn statuses_outside_the_static_table_are_indexed_after_their_first_use() {
        let (mut e, mut d) = (warm(), Decoder::new(TABLE_SIZE));
        for _ in 0..2 {
            let mut out = Vec::new();
            e.begin(&mut out);
            e.status(&mut out, 302);
            e.status(&mut out, 200);
            assert_eq!(
                decode(&mut d, &out),
                fields(&[(":status", "302"), (":status", "200")])
            );
        }
        let mut out = Vec::new();
        e.begin(&mut out);
        e.status(&mut out, 302);
        assert_eq!(out, [0x80 | 62]);
    }
}
