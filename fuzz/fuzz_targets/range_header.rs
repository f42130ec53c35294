//! Range headers: ranges are inside the representation, sorted, disjoint, capped.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_http1::range::{parse_range, RangeOutcome};

fuzz_target!(|input: (u64, &[u8])| {
    let (size, header) = input;
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
