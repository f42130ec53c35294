//! WebAssembly modules (`docs/WASM.md`): a component built against `wit/module.wit`,
//! mounted with `module = "wasm"`, answers requests inside the worker. A request runs on
//! an instance the worker kept from an earlier one or on a new one from a pooling
//! allocator, with a memory cap and a CPU budget; a module that traps, loops or runs out
//! of memory fails its own request (500 and one log line) and nothing else. It sees only what its location grants: named file trees (read-only, sent
//! by the host with sendfile), journals (durable numbered records), upstreams (HTTP
//! requests by name), settings, a key-value store, the log.
//!
//! Without the `host` feature (on by default) only the boundary is built: what a module
//! hands the host ([`exchange`]) and how its file requests are confined ([`grants`]), for
//! the fuzz target, with no WebAssembly compiler.
#![forbid(unsafe_code)]

#[cfg(feature = "host")]
mod bindings;
#[cfg(feature = "host")]
mod borrowing;
#[cfg(feature = "host")]
mod call;
#[cfg(feature = "host")]
pub mod engine;
pub mod exchange;
pub mod grants;
#[cfg(feature = "host")]
mod host;
pub mod journal;
#[cfg(feature = "host")]
mod mount;
#[cfg(feature = "host")]
mod options;
pub mod search;
pub mod upstream;

#[cfg(feature = "host")]
pub use mount::REGISTRATION;
