//! PROXY protocol v1/v2 headers as a balancer (or an attacker on an opted-in listener)
//! sends them: never panic, and a complete header never claims more bytes than it was given.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_http1::{parse_proxy_header, ProxyParse};

fuzz_target!(|data: &[u8]| {
    if let ProxyParse::Complete(h) = parse_proxy_header(data) {
        assert!(h.len <= data.len() && h.len > 0);
    }
});
