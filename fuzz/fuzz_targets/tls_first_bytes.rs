//! The first bytes of a connection on a TLS port, as any client (or scanner) sends them:
//! the sniff that tells TLS from plaintext HTTP, where the first record ends, and rustls
//! reading them with ramjet's server configuration (its SNI resolver among what runs on a
//! ClientHello). Never panic; a complete first record is never shorter than its header.
#![no_main]
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ramjet_tls::{first_record_end, sniff, Acceptor, First, Sites};

fn acceptor() -> &'static Acceptor {
    static A: OnceLock<Acceptor> = OnceLock::new();
    A.get_or_init(|| Acceptor::new(Sites::new(None), &[b"http/1.1"]).unwrap())
}

fuzz_target!(|data: &[u8]| {
    let first = sniff(data);
    if first == First::Tls {
        assert!(data.len() >= 2 && data[0] == 0x16);
    }
    if let Some(end) = first_record_end(data) {
        assert!(end >= 5);
    }
    let mut session = acceptor().accept().unwrap();
    let mut rest = data;
    while !rest.is_empty() {
        match session.read_tls(&mut rest) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if session.process_new_packets().is_err() {
            break;
        }
    }
});
