//! HPACK (RFC 7541). Responses are encoded here: static-table names and statuses, every
//! other field a literal that is not indexed, so the encoder keeps no state per
//! connection (nothing to hold while a connection is idle). Requests are decoded by
//! `decode.rs` (the client's dynamic table, held to the size the server allows), with
//! Huffman strings by `huffman.rs`.

mod codes;
mod decode;
mod huffman;
mod static_table;

pub(crate) use decode::Decoder;

/// The dynamic table the client's encoder may use (SETTINGS_HEADER_TABLE_SIZE, default).
pub(crate) const TABLE_SIZE: usize = 4096;

/// The static table's index for a response field name, if it has one (Appendix A).
fn static_name(name: &[u8]) -> Option<u8> {
    Some(match name {
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
fn integer(out: &mut Vec<u8>, first: u8, n: u32, mut v: usize) {
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

/// `:status`, indexed when the static table has it (§6.1), else a literal with its name
/// indexed.
pub(crate) fn status(out: &mut Vec<u8>, code: u16) {
    let indexed = match code {
        200 => 8,
        204 => 9,
        206 => 10,
        304 => 11,
        400 => 12,
        404 => 13,
        500 => 14,
        _ => 0,
    };
    if indexed > 0 {
        out.push(0x80 | indexed);
        return;
    }
    integer(out, 0, 4, 8);
    let mut digits = itoa::Buffer::new();
    string(out, digits.format(code).as_bytes());
}

/// A field as a literal without indexing (§6.2.2); `name` must be lower case.
pub(crate) fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    match static_name(name) {
        Some(i) => integer(out, 0, 4, i as usize),
        None => {
            out.push(0);
            string(out, name);
        }
    }
    string(out, value);
}

/// A field whose name may have upper-case letters (the HTTP/1 spelling): lower-cased on
/// the way (RFC 9113 §8.2.1).
pub(crate) fn field_any_case(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    if !name.iter().any(u8::is_ascii_uppercase) {
        return field(out, name, value);
    }
    let mut low = [0u8; 64];
    if name.len() <= low.len() {
        for (d, s) in low.iter_mut().zip(name) {
            *d = s.to_ascii_lowercase();
        }
        field(out, &low[..name.len()], value)
    } else {
        field(out, &name.to_ascii_lowercase(), value)
    }
}

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
