//! Upstream response heads as the proxy checks them before anything reaches the client:
//! never panic, a complete head never claims more bytes than it was given, and every field
//! line passed on is one line (no CR or LF inside it: no header injection).
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_proxy::response_head::{parse, Parsed};

fuzz_target!(|data: &[u8]| {
    let flags = data.first().copied().unwrap_or(0);
    if let Parsed::Complete(h) = parse(data, flags & 1 == 1, flags & 2 == 2) {
        assert!(h.head_len <= data.len());
        for line in h.fields.split_inclusive(|&b| b == b'\n') {
            assert!(line.ends_with(b"\r\n"), "{line:?}");
            let inner = &line[..line.len() - 2];
            assert!(!inner.contains(&b'\r') && !inner.contains(&b'\n'));
            assert!(inner.windows(2).any(|w| w == b": "));
        }
    }
});
