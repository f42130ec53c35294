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

/// Whether this kernel offers TLS offload (the `tls` upper-layer protocol is loaded, or
/// built in): what `sendfile` over TLS would need.
pub fn kernel_tls_available() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp")
        .is_ok_and(|s| s.split_whitespace().any(|u| u == "tls"))
}
