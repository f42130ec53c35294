//! The SPECweb99 workload, as `../shared/specweb99.md` specifies it from the kit's code:
//! the file set (wafgen99), SPEC's random generator and Zipf draw, the user and ad tables
//! (upfgen99, cadgen99), the ad selection, the post log's records and what the dynamic module reads from a request. Shared by the
//! server-side module and the `ramjet specweb` client, so both agree byte for byte.

pub mod deck;
pub mod fileset;
pub mod frame;
pub mod postlog;
pub mod request;
pub mod rng;
pub mod tables;

pub use rng::{SpecRandom, Zipf};
