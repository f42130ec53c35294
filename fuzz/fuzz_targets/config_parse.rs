//! Configuration text: never panic; every error names the file.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &str| {
    if let Err(e) = ramjet_config::load_str(data, "fuzz.toml", std::path::Path::new("/nonexistent")) {
        assert_eq!(e.file, "fuzz.toml");
        let _ = e.to_string();
    }
});
