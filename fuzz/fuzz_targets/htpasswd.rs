//! An htpasswd file and an `Authorization` value as anyone could write them: never panic;
//! a parsed credential borrows only what was decoded.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_auth::{Credentials, Htpasswd};

fuzz_target!(|data: &[u8]| {
    let _ = Htpasswd::parse(data);
    let mut buf = [0u8; 512];
    if let Some(c) = Credentials::parse(data, &mut buf) {
        assert!(c.user.len() + c.password.len() < 512);
    }
});
