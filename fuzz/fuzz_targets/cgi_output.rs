//! A CGI program's output head, whatever a broken or hostile program writes: never panic;
//! a head taken is within the output, its status valid, and every header line it passes on
//! is one `Name: value` line with no CR or LF inside.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(Ok(h)) = ramjet_cgi::parse_head(data) {
        assert!(h.end <= data.len());
        assert!((200..=599).contains(&h.status));
        for line in h.lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let line = line.strip_suffix(b"\r").expect("lines end with CRLF");
            assert!(!line.contains(&b'\r'));
            assert!(line.windows(2).any(|w| w == b": "));
        }
    }
});
