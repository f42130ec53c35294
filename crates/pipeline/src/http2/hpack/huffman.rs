//! Huffman decoding (RFC 7541 §5.2): a tree built once from the code table, then turned
//! into a table that reads four bits at a time (no code is shorter than five bits, so a
//! nibble emits at most one symbol). Built once per process, 16 KiB.

use std::sync::OnceLock;

use super::codes::CODES;

/// EOS, the symbol that must never appear in a string (§5.2).
const EOS: u16 = 256;
/// A tree node's child that is a symbol, not a node.
const LEAF: u16 = 0x8000;

/// Nodes: `[child for 0, child for 1]`; a child is a node index, or `LEAF | symbol`, or 0
/// (no code goes there; the root is never a child).
fn tree() -> Vec<[u16; 2]> {
    let mut nodes = vec![[0u16; 2]];
    for (symbol, &(code, len)) in CODES.iter().enumerate() {
        let mut at = 0usize;
        for i in (0..len).rev() {
            let bit = ((code >> i) & 1) as usize;
            if i == 0 {
                nodes[at][bit] = LEAF | symbol as u16;
            } else {
                if nodes[at][bit] == 0 {
                    nodes.push([0, 0]);
                    nodes[at][bit] = (nodes.len() - 1) as u16;
                }
                at = nodes[at][bit] as usize;
            }
        }
    }
    nodes
}

/// A step of the table: the next node (low 8 bits), the symbol emitted (bits 8-15) when
/// `EMIT` is set, `FAIL` when the nibble holds EOS or no code.
const EMIT: u32 = 1 << 16;
const FAIL: u32 = 1 << 17;

struct Table {
    steps: Vec<[u32; 16]>,
    /// Where a string may end: the root, or up to 7 one-bits into a code (padding).
    accept: Vec<bool>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let tree = tree();
        // 257 leaves: 256 inner nodes, numbered as the tree numbers them.
        debug_assert_eq!(tree.len(), 256);
        let mut steps = vec![[0u32; 16]; tree.len()];
        for (node, row) in steps.iter_mut().enumerate() {
            for (nibble, step) in row.iter_mut().enumerate() {
                let mut at = node;
                let mut out = 0u32;
                for i in (0..4).rev() {
                    let next = tree[at][(nibble >> i) & 1];
                    if next & LEAF != 0 {
                        let symbol = next & !LEAF;
                        if symbol == EOS {
                            out = FAIL;
                            break;
                        }
                        out = EMIT | (symbol as u32) << 8;
                        at = 0;
                    } else if next == 0 {
                        out = FAIL;
                        break;
                    } else {
                        at = next as usize;
                    }
                }
                *step = out | at as u32;
            }
        }
        let mut accept = vec![false; tree.len()];
        accept[0] = true;
        let mut at = 0usize;
        for _ in 0..7 {
            at = tree[at][1] as usize;
            accept[at] = true;
        }
        Table { steps, accept }
    })
}

/// Why a Huffman string is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Invalid;

/// Decode `input` onto `out`. Refused: the EOS symbol, a bit sequence no code has, and
/// padding longer than 7 bits or not all ones.
pub(crate) fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), Invalid> {
    let t = table();
    out.reserve(input.len() * 8 / 5);
    let mut at = 0usize;
    for &byte in input {
        for nibble in [byte >> 4, byte & 0xf] {
            let step = t.steps[at][nibble as usize];
            if step & FAIL != 0 {
                return Err(Invalid);
            }
            if step & EMIT != 0 {
                out.push((step >> 8) as u8);
            }
            at = (step & 0xff) as usize;
        }
    }
    if !t.accept[at] {
        return Err(Invalid);
    }
    Ok(())
}

/// Encode `input` (for tests: the server sends plain strings).
#[cfg(test)]
pub(crate) fn encode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u64, 0u32);
    for &b in input {
        let (code, len) = CODES[b as usize];
        acc = (acc << len) | code as u64;
        bits += len as u32;
        while bits >= 8 {
            out.push((acc >> (bits - 8)) as u8);
            bits -= 8;
        }
    }
    if bits > 0 {
        out.push(((acc << (8 - bits)) as u8) | (0xff >> bits));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_decodes_back_and_the_rfc_example_reads() {
        let all: Vec<u8> = (0..=255u8).collect();
        let mut out = Vec::new();
        decode(&encode(&all), &mut out).unwrap();
        assert_eq!(out, all);
        // RFC 7541 C.4.1: "www.example.com".
        let ex = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        out.clear();
        decode(&ex, &mut out).unwrap();
        assert_eq!(out, b"www.example.com");
        out.clear();
        decode(&[], &mut out).unwrap();
        assert!(out.is_empty());
        // Every string of two symbols, with every padding, against the tree walked a bit
        // at a time.
        let tree = tree();
        for a in 0..=255u8 {
            for b in [0u8, b'a', b'/', 0xff, a] {
                let enc = encode(&[a, b]);
                out.clear();
                decode(&enc, &mut out).unwrap();
                assert_eq!(out, [a, b]);
                let mut at = 0usize;
                let mut walked = Vec::new();
                for byte in &enc {
                    for i in (0..8).rev() {
                        let next = tree[at][((byte >> i) & 1) as usize];
                        if next & LEAF != 0 {
                            walked.push((next & !LEAF) as u8);
                            at = 0;
                        } else {
                            at = next as usize;
                        }
                    }
                }
                assert_eq!(walked, [a, b]);
            }
        }
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        let mut out = Vec::new();
        // 'a' is 00011 (5 bits): padded with 111 it is one byte; with 000 it is not.
        assert_eq!(decode(&[0b0001_1111], &mut out), Ok(()));
        assert_eq!(decode(&[0b0001_1000], &mut out), Err(Invalid));
        // A whole byte of padding (8 ones) is too long.
        assert_eq!(decode(&[0b0001_1111, 0xff], &mut out), Err(Invalid));
        // EOS is 30 ones.
        assert_eq!(decode(&[0xff, 0xff, 0xff, 0xff], &mut out), Err(Invalid));
    }
}
