//! Test-only helpers: start the real `ramjet` binary from an inline configuration, talk to
//! it with raw bytes, and check its diagnostics for unexpected errors.
//!
//! Brief overview: [`Server`] owns a running server process (killed on drop) and a
//! temporary document root; [`Client`] is a raw-bytes HTTP/1.1 client that reads responses
//! by their framing; [`Response`] is what it returns; [`Backend`] is a scripted upstream
//! for proxy tests.
#![forbid(unsafe_code)]

mod backend;
mod client;
mod server;

pub use backend::{Backend, Exchange, Flow};
pub use client::{Client, Response};
pub use server::Server;
