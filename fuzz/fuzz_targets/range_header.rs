//! Range headers: ranges are inside the representation, sorted, disjoint, capped. The
//! representation size is drawn from the edges first (0 and 1 bytes, each side of the
//! in-memory limit and of the sendfile chunk; issue 11: nothing asked for a 0-byte file),
//! then from the whole u64 range.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_http1::range::{parse_range, RangeOutcome};

/// Sizes at the edges of the static path: empty, one byte, small_file_max (16 KiB) ± 1,
/// the sendfile chunk (256 KiB) ± 1, two chunks + 1, and past 4 GiB.
const EDGES: [u64; 11] = [
    0,
    1,
    16_383,
    16_384,
    16_385,
    262_143,
    262_144,
    262_145,
    524_289,
    1 << 32,
    u64::MAX,
];

fuzz_target!(|input: (u8, u64, &[u8])| {
    let (pick, raw, header) = input;
    let size = EDGES.get(pick as usize).copied().unwrap_or(raw);
    if let RangeOutcome::Partial(rs) = parse_range(header, size, 16) {
        assert!(!rs.is_empty() && rs.len() <= 16);
        let mut prev_end = 0;
        for (i, r) in rs.iter().enumerate() {
            assert!(r.start < r.end && r.end <= size);
            if i > 0 {
                assert!(r.start > prev_end);
            }
            prev_end = r.end;
        }
    }
});
