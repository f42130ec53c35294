//! Hand-off of live client connections from ramjet to a backend process, with the bytes
//! ramjet already read from them, over a UNIX `SOCK_SEQPACKET` socket.
//!
//! One message carries a batch: a header, one record per connection (correlation id,
//! listener, client and local address, the bytes already read) and the connections'
//! descriptors as `SCM_RIGHTS`, in record order. The wire format is in `docs/HANDOFF.md`
//! and [`wire`]. [`Sender`] is ramjet's side (never blocks: a full backend is
//! `WouldBlock`); [`Receiver`] and [`Channel`] are what a backend links to get each
//! connection back as a `std::net::TcpStream` with its prefix and addresses.

mod channel;
pub mod wire;

pub use channel::{Channel, Handed, Receiver, Sender};
pub use wire::{Record, WireError, MAX_BATCH, MAX_MESSAGE};
