//! What the SPECweb99 parts read from others: a request's query, cookie, POST body and
//! Reset parameters (the native and WebAssembly modules), a file's ad tags, table files and
//! post-log records (the module at start, the client after Fetch): never panic; an object
//! a query names stays inside the file set.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_specweb::request;

fuzz_target!(|data: &[u8]| {
    let _ = request::parse_post(data);
    let _ = request::find_placeholders(data);
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(o) = request::Object::parse(text) {
            let name = o.name();
            assert!(name.starts_with("file_set/dir") && !name.contains(".."));
        }
        let _ = request::my_cookie(text);
        let _ = request::parse_reset(text, 0);
    }
    let _ = ramjet_specweb::tables::parse_users(data);
    let _ = ramjet_specweb::tables::parse_ads(data);
    let _ = ramjet_specweb::postlog::parse_record(data);
});
