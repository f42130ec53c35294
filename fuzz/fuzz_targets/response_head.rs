//! Response heads and the bodies behind them, as the load generator reads them from any
//! server: never panic, and a complete head never claims more bytes than it was given.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_http1::{parse_response_head, BodyDecoder, BodyFraming, ResponseParse};

fuzz_target!(|data: &[u8]| {
    let to_head = data.first().is_some_and(|b| b & 1 == 1);
    if let ResponseParse::Complete(h) = parse_response_head(data, to_head) {
        assert!(h.head_len <= data.len());
        if h.framing == BodyFraming::None {
            return;
        }
        let Ok(mut d) = BodyDecoder::new(h.framing, u64::MAX) else {
            return;
        };
        let mut rest = &data[h.head_len..];
        while !rest.is_empty() && !d.is_done() {
            let Ok(step) = d.decode(rest) else {
                return;
            };
            assert!(step.consumed <= rest.len() && step.data.end <= step.consumed);
            if step.consumed == 0 {
                break;
            }
            rest = &rest[step.consumed..];
        }
    }
});
