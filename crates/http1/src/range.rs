//! `Range: bytes=...` (RFC 9110 §14.1–§14.2), parsed against a known representation size.
//!
//! Overlapping and adjacent ranges are coalesced and the count is capped, which is what
//! defeats the 2011 Apache "Range: bytes=0-,0-,0-,..." memory exhaustion.

/// A half-open byte range `[start, end)` within the representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

impl ByteRange {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// What to do with a request's Range header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeOutcome {
    /// Serve the whole representation (no header, other unit, bad syntax, too many ranges).
    Full,
    /// 206 with these ranges, sorted and coalesced.
    Partial(Vec<ByteRange>),
    /// 416 with `Content-Range: bytes */size`.
    Unsatisfiable,
}

/// More range specs than this in one header is not a real client; the header is ignored.
pub const MAX_RANGE_SPECS: usize = 1024;

/// Parse `header` for a representation of `size` bytes, allowing at most `max_ranges`
/// ranges after coalescing (more than that serves the whole file, as Apache's MaxRanges does).
pub fn parse_range(header: &[u8], size: u64, max_ranges: usize) -> RangeOutcome {
    let Some(eq) = header.iter().position(|&b| b == b'=') else {
        return RangeOutcome::Full;
    };
    if !header[..eq].trim_ascii().eq_ignore_ascii_case(b"bytes") {
        return RangeOutcome::Full;
    }
    let mut ranges = Vec::new();
    let mut specs = 0usize;
    for spec in header[eq + 1..].split(|&b| b == b',') {
        let spec = spec.trim_ascii();
        if spec.is_empty() {
            // RFC 9110 §5.6.1: empty list elements are allowed and ignored.
            continue;
        }
        specs += 1;
        if specs > MAX_RANGE_SPECS {
            return RangeOutcome::Full;
        }
        match parse_spec(spec, size) {
            Spec::Invalid => return RangeOutcome::Full,
            Spec::Unsatisfiable => {}
            Spec::Range(r) => ranges.push(r),
        }
    }
    if specs == 0 {
        return RangeOutcome::Full;
    }
    if ranges.is_empty() {
        return RangeOutcome::Unsatisfiable;
    }
    ranges.sort_unstable_by_key(|r| r.start);
    let mut merged: Vec<ByteRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    if merged.len() > max_ranges {
        return RangeOutcome::Full;
    }
    RangeOutcome::Partial(merged)
}

enum Spec {
    Range(ByteRange),
    Unsatisfiable,
    Invalid,
}

fn parse_spec(spec: &[u8], size: u64) -> Spec {
    let Some(dash) = spec.iter().position(|&b| b == b'-') else {
        return Spec::Invalid;
    };
    let (first, last) = (spec[..dash].trim_ascii(), spec[dash + 1..].trim_ascii());
    match (number(first), number(last)) {
        // suffix-range: the last N bytes.
        (None, Some(n)) if first.is_empty() => {
            if n == 0 || size == 0 {
                Spec::Unsatisfiable
            } else {
                Spec::Range(ByteRange {
                    start: size - n.min(size),
                    end: size,
                })
            }
        }
        (Some(start), None) if last.is_empty() => {
            if start >= size {
                Spec::Unsatisfiable
            } else {
                Spec::Range(ByteRange { start, end: size })
            }
        }
        (Some(start), Some(end)) if end >= start => {
            if start >= size {
                Spec::Unsatisfiable
            } else {
                Spec::Range(ByteRange {
                    start,
                    end: end.saturating_add(1).min(size),
                })
            }
        }
        _ => Spec::Invalid,
    }
}

/// `1*DIGIT` as u64; `None` for empty, non-digits or overflow.
fn number(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u64) -> ByteRange {
        ByteRange { start, end }
    }

    fn p(h: &str, size: u64) -> RangeOutcome {
        parse_range(h.as_bytes(), size, 16)
    }

    #[test]
    fn single_forms() {
        assert_eq!(p("bytes=0-9", 100), RangeOutcome::Partial(vec![r(0, 10)]));
        assert_eq!(p("bytes=90-", 100), RangeOutcome::Partial(vec![r(90, 100)]));
        assert_eq!(p("bytes=-10", 100), RangeOutcome::Partial(vec![r(90, 100)]));
        assert_eq!(
            p("bytes=-1000", 100),
            RangeOutcome::Partial(vec![r(0, 100)])
        );
        assert_eq!(
            p("bytes=50-1000", 100),
            RangeOutcome::Partial(vec![r(50, 100)])
        );
        assert_eq!(p("Bytes = 0-0", 100), RangeOutcome::Partial(vec![r(0, 1)]));
    }

    #[test]
    fn beyond_4gib() {
        let size = 5 * (1u64 << 30);
        assert_eq!(
            p("bytes=4294967296-4294967305", size),
            RangeOutcome::Partial(vec![r(1 << 32, (1 << 32) + 10)])
        );
        assert_eq!(
            p("bytes=-1", size),
            RangeOutcome::Partial(vec![r(size - 1, size)])
        );
    }

    #[test]
    fn unsatisfiable() {
        assert_eq!(p("bytes=100-", 100), RangeOutcome::Unsatisfiable);
        assert_eq!(p("bytes=-0", 100), RangeOutcome::Unsatisfiable);
        assert_eq!(p("bytes=200-300,100-", 100), RangeOutcome::Unsatisfiable);
        assert_eq!(p("bytes=0-", 0), RangeOutcome::Unsatisfiable);
        // One satisfiable part makes the whole request satisfiable.
        assert_eq!(
            p("bytes=200-300,0-0", 100),
            RangeOutcome::Partial(vec![r(0, 1)])
        );
    }

    #[test]
    fn invalid_syntax_is_ignored() {
        for h in [
            "bytes=5-1",
            "bytes=abc",
            "bytes=1-2-3",
            "bytes=-",
            "items=0-1",
            "bytes",
            "bytes=",
            "bytes=0x1-2",
            "bytes=99999999999999999999-",
        ] {
            assert_eq!(p(h, 100), RangeOutcome::Full, "{h}");
        }
    }

    #[test]
    fn coalesces_and_caps() {
        assert_eq!(
            p("bytes=0-10,5-20,21-30,50-60", 100),
            RangeOutcome::Partial(vec![r(0, 31), r(50, 61)])
        );
        let dos = format!("bytes={}", vec!["0-"; 500].join(","));
        assert_eq!(p(&dos, 100), RangeOutcome::Partial(vec![r(0, 100)]));
        let many: Vec<String> = (0..40).map(|i| format!("{}-{}", i * 2, i * 2)).collect();
        assert_eq!(
            p(&format!("bytes={}", many.join(",")), 1000),
            RangeOutcome::Full
        );
        let too_many = format!("bytes={}", vec!["1-1"; MAX_RANGE_SPECS + 1].join(","));
        assert_eq!(p(&too_many, 100), RangeOutcome::Full);
    }

    proptest::proptest! {
        #[test]
        fn ranges_stay_inside(h in "bytes=[0-9,\\- ]{0,40}", size in 0u64..1000) {
            if let RangeOutcome::Partial(rs) = parse_range(h.as_bytes(), size, 16) {
                let mut prev_end = 0;
                for (i, r) in rs.iter().enumerate() {
                    proptest::prop_assert!(r.start < r.end && r.end <= size);
                    if i > 0 { proptest::prop_assert!(r.start > prev_end); }
                    prev_end = r.end;
                }
            }
        }
    }
}
