//! HPACK as the server decodes a request's header block: any bytes, twice on one decoder
//! (the dynamic table carries over), and the server's own encoding read back. Never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ramjet_pipeline::http2::fuzz::hpack(data);
});
