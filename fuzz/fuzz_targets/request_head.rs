//! Request heads: never panic; a complete head's slices lie inside the input and a
//! pipelined sequence is consumed exactly.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_http1::{parse_request_head, Limits, Parse};

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_target: 512, max_head: 2048 };
    let mut rest = data;
    while let Parse::Complete(head) = parse_request_head(rest, &limits) {
        let n = head.head_len();
        assert!(n > 0 && n <= rest.len());
        assert!(head.target.len() <= limits.max_target);
        let _ = head.request_line();
        rest = &rest[n..];
    }
});
