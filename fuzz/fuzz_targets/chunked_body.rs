//! Chunked bodies: never panic, never consume past the end, same payload and trailer
//! lines however split, trailer bytes never overlapping payload bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_http1::{BodyDecoder, BodyFraming};

fn run(data: &[u8], step: usize) -> Option<(Vec<u8>, Vec<u8>, usize)> {
    let mut d = BodyDecoder::new(BodyFraming::Chunked, 1 << 20).ok()?;
    let mut payload = Vec::new();
    let mut trailers = Vec::new();
    let mut pos = 0;
    while pos < data.len() && !d.is_done() {
        let end = (pos + step).min(data.len());
        let s = d.decode(&data[pos..end]).ok()?;
        assert!(s.consumed <= end - pos && s.data.end <= s.consumed);
        assert!(s.trailer.end <= s.consumed && (s.trailer.is_empty() || s.data.is_empty()));
        payload.extend_from_slice(&data[pos..end][s.data.clone()]);
        trailers.extend_from_slice(&data[pos..end][s.trailer.clone()]);
        pos += s.consumed;
        if s.consumed == 0 {
            break;
        }
    }
    d.is_done().then_some((payload, trailers, pos))
}

fuzz_target!(|data: &[u8]| {
    let whole = run(data, data.len().max(1));
    let bytewise = run(data, 1);
    assert_eq!(whole, bytewise);
});
