//! A hand-off message as a misbehaving sender could write it: never panic, and whatever
//! parses encodes back to exactly the same bytes (a message has one reading).
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_handoff::wire;

fuzz_target!(|data: &[u8]| {
    if let Ok(records) = wire::decode(data) {
        let refs: Vec<&wire::Record> = records.iter().collect();
        let mut again = Vec::new();
        wire::encode(&refs, &mut again);
        assert_eq!(again, data);
    }
});
