//! Traffic shaping, without I/O: [`TokenBucket`] (a send rate), [`SharedBucket`] (one rate
//! for many connections, across workers), [`ClientTable`] (per client address state,
//! sharded), [`RequestRate`] (nginx `limit_req`: a rate with a burst, GCRA).
//!
//! No timer runs per connection per packet: a throttled connection writes what its buckets
//! allow, then sleeps once until they hold a useful amount again
//! ([`TokenBucket::ready_in`]), about eight times a second at its own rate.
#![forbid(unsafe_code)]

mod bucket;
mod clients;
mod request_rate;

pub use clients::canonical;

pub use bucket::{SharedBucket, TokenBucket};
pub use clients::ClientTable;
pub use request_rate::{RequestRate, Verdict};
