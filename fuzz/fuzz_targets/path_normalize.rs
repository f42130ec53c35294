//! Path normalisation: the result never climbs, never holds NUL, `.`/`..` or `//`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_http1::path::normalize;

fuzz_target!(|data: &str| {
    if let Ok(clean) = normalize(data) {
        let p = &clean.path;
        assert!(p.starts_with(b"/"));
        assert!(!p.contains(&0));
        assert!(!p.windows(2).any(|w| w == b"//"));
        for seg in p.split(|&b| b == b'/') {
            assert!(seg != b"." && seg != b"..");
        }
    }
});
