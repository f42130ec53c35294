//! What the SPECweb99 parts read from others: a POST body (the module), table files and
//! post-log records (the module at start, the client after Fetch): never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ramjet_modules::specweb99::parse_post(data);
    let _ = ramjet_specweb::tables::parse_users(data);
    let _ = ramjet_specweb::tables::parse_ads(data);
    let _ = ramjet_specweb::postlog::parse_record(data);
});
