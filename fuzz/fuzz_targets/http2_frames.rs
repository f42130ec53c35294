//! What an HTTP/2 client sends after the connection preface, as the server reads it:
//! ramjet's frame layer (stream states, flow control, HPACK, request fields) with the
//! server's SETTINGS, every request answered and framed; and the flood meter on the same
//! bytes. Never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_pipeline::http2::meter::{Meter, PREFACE};

fuzz_target!(|data: &[u8]| {
    let mut meter = Meter::new();
    let now = std::time::Instant::now();
    let _ = meter.feed(PREFACE, || now);
    let _ = meter.feed(data, || now);
    ramjet_pipeline::http2::fuzz::frames(data, 16 * 1024);
});
