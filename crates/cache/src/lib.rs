//! The accelerator's cache (RFC 9111): answers a proxy location forwards are stored and
//! served again without asking the origin while they are fresh.
//!
//! Brief overview: [`policy`] decides what may be stored, how long it stays fresh and
//! whether a stored answer serves a request (on [`directives`]); [`key`] builds keys and
//! matches `Vary` variants; [`store`] is one cache shared by every worker (index, one
//! fetch per key with waiters, the size manager of the memory and disk tiers); [`fill`]
//! is an answer still arriving, read by every request that wants it; [`fetch`] stores an
//! answer as it streams; [`object`] a stored answer (a `filters::Representation`, so
//! conditional and range requests are answered from it); [`meta`] and [`disk`] the disk
//! tier's files. The proxy crate asks it per request (`proxy/src/cached/`).
#![forbid(unsafe_code)]

pub mod directives;
pub mod disk;
pub mod fetch;
pub mod fill;
pub mod key;
pub mod meta;
pub mod object;
pub mod policy;
pub mod store;

pub use object::{Hit, Object, Stored};
pub use store::{Lookup, Store};

/// Now, in Unix milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
