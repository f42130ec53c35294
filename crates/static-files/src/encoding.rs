//! Accept-Encoding negotiation for precompressed siblings (RFC 9110 §12.5.3).

/// Whether `header` accepts content coding `token` (q > 0, explicitly or through `*`).
pub(crate) fn accepts(header: &[u8], token: &str) -> bool {
    let mut star = None;
    for item in header.split(|&b| b == b',') {
        let mut parts = item.split(|&b| b == b';');
        let coding = parts.next().unwrap_or(b"").trim_ascii();
        let q = parts
            .filter_map(|p| {
                let p = p.trim_ascii();
                (p.len() > 2 && p[..2].eq_ignore_ascii_case(b"q=")).then(|| &p[2..])
            })
            .next()
            .is_none_or(|q| {
                std::str::from_utf8(q)
                    .ok()
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q > 0.0)
            });
        if coding.eq_ignore_ascii_case(token.as_bytes())
            || (token == "gzip" && coding.eq_ignore_ascii_case(b"x-gzip"))
        {
            return q;
        }
        if coding == b"*" {
            star = Some(q);
        }
    }
    star.unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation() {
        assert!(accepts(b"gzip, deflate, br, zstd", "zstd"));
        assert!(accepts(b"GZIP;q=0.5", "gzip"));
        assert!(!accepts(b"gzip;q=0", "gzip"));
        assert!(!accepts(b"gzip;q=0.000", "gzip"));
        assert!(!accepts(b"deflate", "br"));
        assert!(accepts(b"*", "br"));
        assert!(!accepts(b"*, br;q=0", "br"));
        assert!(!accepts(b"identity", "gzip"));
    }
}
