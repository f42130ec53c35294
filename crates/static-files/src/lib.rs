//! Static files.
#![forbid(unsafe_code)]

mod options;
pub use options::{Encoding, StaticOptions, SymlinkPolicy, DEFAULT_MAX_RANGES};
