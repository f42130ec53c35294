//! The load generator's argument parsers (URL lists with weights, sweeps, rates, source
//! ranges, durations): never panic, and what they accept is well formed.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The list's lines and weights (resolving the URLs would ask DNS, so not here).
    if let Ok(lines) = ramjet_bench::url_list_lines(text) {
        assert!(lines.iter().all(|(n, url, w)| *n >= 1 && !url.is_empty() && *w >= 1));
    }
    if let Ok(rates) = ramjet_bench::parse_sweep(text) {
        assert!(!rates.is_empty() && rates.iter().all(|r| *r > 0.0));
    }
    if let Ok(rate) = ramjet_bench::parse_rate(text) {
        assert!(rate >= 1);
    }
    if let Ok(sources) = ramjet_bench::parse_sources(text) {
        assert!(sources.len() <= 65_536);
    }
    let _ = ramjet_bench::parse_duration(text);
});
