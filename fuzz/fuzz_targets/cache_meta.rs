//! The disk tier's meta records (and object files ending in one) as the cache reads them back at start (a torn, truncated or
//! foreign file must be refused, never panic): whatever decodes re-encodes to the same
//! bytes, and its field lines could never split a response head.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_cache::meta::Meta;

fuzz_target!(|data: &[u8]| {
    if let Some(m) = Meta::decode(data) {
        assert_eq!(m.encode(), data);
        for line in m.fields.split_inclusive(|&b| b == b'\n') {
            assert!(line.ends_with(b"\r\n"));
            assert!(!line[..line.len() - 2].contains(&b'\r'));
        }
    }
    // The same bytes as a whole object file (body, record, trailer).
    if let Some(m) = Meta::of_object(data) {
        let at = m.length as usize;
        assert_eq!(&data[at..], &m.encode_with_trailer()[..]);
    }
    // Cache-Control and the policy's field readers on the same bytes.
    let _ = ramjet_cache::directives::Directives::parse([data]);
});
