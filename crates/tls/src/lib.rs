//! TLS termination's parts that touch no socket: certificates loaded and checked
//! ([`certificate`]), the server configuration with a certificate chosen by SNI, shared
//! session tickets and ALPN ([`server`]), and the look at a connection's first bytes that
//! tells a TLS client from a plaintext one ([`sniff`]). The session itself runs in the
//! pipeline's transport layer.
#![forbid(unsafe_code)]

pub mod certificate;
pub mod server;
pub mod sniff;

pub use certificate::{load, Certificate};
pub use rustls;
pub use server::{Acceptor, Sites};
pub use sniff::{first_record_end, sniff, First};
