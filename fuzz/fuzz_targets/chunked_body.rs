//! Chunked bodies: never panic, never consume past the end, same result however split.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_http1::{BodyDecoder, BodyFraming};

fn run(data: &[u8], step: usize) -> Option<(Vec<u8>, usize)> {
    let mut d = BodyDecoder::new(BodyFraming::Chunked, 1 << 20).ok()?;
    let mut payload = Vec::new();
    let mut pos = 0;
    while pos < data.len() && !d.is_done() {
        let end = (pos + step).min(data.len());
        let s = d.decode(&data[pos..end]).ok()?;
        assert!(s.consumed <= end - pos && s.data.end <= s.consumed);
        payload.extend_from_slice(&data[pos..end][s.data.clone()]);
        pos += s.consumed;
        if s.consumed == 0 {
            break;
        }
    }
    d.is_done().then_some((payload, pos))
}

fuzz_target!(|data: &[u8]| {
    let whole = run(data, data.len().max(1));
    let bytewise = run(data, 1);
    assert_eq!(whole, bytewise);
});
