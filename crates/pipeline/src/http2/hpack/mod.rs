//! HPACK (RFC 7541). Responses are encoded by `encode.rs`: a dynamic table per
//! connection for answers (emptied when the connection goes quiet, so an idle connection
//! holds none), literals that are not indexed for blocks built ahead of their place on
//! the wire. Requests are decoded by `decode.rs` (the client's dynamic table, held to the
//! size the server allows), with Huffman strings by `huffman.rs`.

mod codes;
mod decode;
mod encode;
mod huffman;
mod static_table;

pub(crate) use decode::Decoder;
pub(crate) use encode::{field, lower, status, Encoder};
#[cfg(test)]
use encode::{field_any_case, integer};

/// The dynamic table the client's encoder may use (SETTINGS_HEADER_TABLE_SIZE, default).
pub(crate) const TABLE_SIZE: usize = 4096;

/// What a fresh decoder reads from `block`, as text (for tests).
#[cfg(test)]
pub(crate) fn decoded(block: &[u8]) -> Vec<(String, String)> {
    let mut d = Decoder::new(TABLE_SIZE);
    let mut v = Vec::new();
    d.decode(block, |n, val| {
        v.push((
            String::from_utf8_lossy(n).into_owned(),
            String::from_utf8_lossy(val).into_owned(),
        ))
    })
    .unwrap();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_encoded_decodes_to_the_same_fields() {
        let mut out = Vec::new();
        status(&mut out, 200);
        status(&mut out, 302);
        status(&mut out, 599);
        field_any_case(&mut out, b"Content-Type", b"text/html");
        field(&mut out, b"x-long", &[b'v'; 300]);
        field_any_case(&mut out, &[b'X'; 100], b"");
        field(&mut out, b"server", b"ramjet");
        let got = decoded(&out);
        let want: Vec<(String, String)> = [
            (":status", "200".to_string()),
            (":status", "302".to_string()),
            (":status", "599".to_string()),
            ("content-type", "text/html".to_string()),
            ("x-long", "v".repeat(300)),
            (&"x".repeat(100), String::new()),
            ("server", "ramjet".to_string()),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn integers_at_each_prefix_edge() {
        for n in [4u32, 7] {
            let max = (1usize << n) - 1;
            for v in [0, 1, max - 1, max, max + 1, max + 127, max + 128, 1 << 20] {
                let mut out = Vec::new();
                integer(&mut out, 0, n, v);
                // Decode by hand (§5.1).
                let mut got = (out[0] as usize) & max;
                if got == max {
                    let mut shift = 0;
                    for b in &out[1..] {
                        got += ((b & 0x7f) as usize) << shift;
                        shift += 7;
                    }
                }
                assert_eq!(got, v, "prefix {n}");
            }
        }
    }

    #[test]
    fn a_table_size_past_the_servers_is_refused() {
        let mut d = Decoder::new(TABLE_SIZE);
        // Dynamic table size update to 4097 (§6.3), then an indexed field.
        let mut block = Vec::new();
        integer(&mut block, 0x20, 5, TABLE_SIZE + 1);
        block.push(0x82);
        assert!(d.decode(&block, |_, _| {}).is_err());
        let mut d = Decoder::new(TABLE_SIZE);
        // Index 0 and an index past the table are errors.
        assert!(d.decode(&[0x80], |_, _| {}).is_err());
        assert!(d.decode(&[0xff, 0x00], |_, _| {}).is_err());
    }
}
