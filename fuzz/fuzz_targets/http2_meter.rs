//! The flood meter reads frame headers from a byte stream cut anywhere: fed whole or in
//! pieces (cut where the input's first bytes say), it reaches the same verdict. Never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_pipeline::http2::meter::Meter;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let now = std::time::Instant::now();
    let mut whole = Meter::new();
    let a = whole.feed(rest, || now);
    let mut pieces = Meter::new();
    let mut b = Ok(());
    for piece in rest.chunks(usize::from(cut).max(1)) {
        b = pieces.feed(piece, || now);
        if b.is_err() {
            break;
        }
    }
    assert_eq!(a, b);
});
