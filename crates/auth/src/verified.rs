//! Credentials already verified on this worker thread, so a slow hash (bcrypt costs
//! milliseconds by design) is computed once per client and password, not per request.
//! Keyed by a SHA-256 of the htpasswd load and the `Authorization` value, so no password
//! is kept in memory; an entry is trusted for [`TTL`] (Apache mod_authn_socache keeps 300 s).

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// How long a verified credential is trusted without recomputing its hash.
pub const TTL: Duration = Duration::from_secs(300);
/// Most remembered credentials per worker (past it, the table starts over).
const MAX: usize = 4096;

/// What identifies a verified credential.
pub type Key = [u8; 32];

thread_local! {
    static VERIFIED: RefCell<HashMap<Key, Instant>> = RefCell::new(HashMap::new());
}

pub(crate) fn key(load: u64, authorization: &[u8]) -> Key {
    Sha256::new()
        .chain_update(load.to_le_bytes())
        .chain_update(authorization)
        .finalize()
        .into()
}

pub(crate) fn contains(key: Key) -> bool {
    VERIFIED.with_borrow(|m| m.get(&key).is_some_and(|at| at.elapsed() < TTL))
}

pub(crate) fn remember(key: Key) {
    VERIFIED.with_borrow_mut(|m| {
        if m.len() >= MAX {
            m.clear();
        }
        m.insert(key, Instant::now());
    });
}
