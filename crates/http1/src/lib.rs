//! Sans-I/O HTTP/1.1 codec.
//!
//! Brief overview: [`parse_request_head`] turns bytes into a [`RequestHead`] borrowing the
//! buffer, or says [`Parse::Partial`] / [`Parse::Invalid`] with an [`ErrorKind`] that maps to a
//! status code. [`BodyDecoder`] consumes a request body by its framing (RFC 9112 §6) so it is
//! never parsed as the next request. [`range`] parses `Range` headers into coalesced, capped
//! byte ranges. [`status`] holds reason phrases. Nothing here touches a socket: every function
//! is pure over bytes, which is what makes it fuzzable and shareable with the load generator.
#![forbid(unsafe_code)]

mod body;
pub mod byte_set;
mod error;
mod limits;
mod method;
pub mod path;
mod proxy_protocol;
pub mod range;
mod request;
mod response;
pub mod status;

pub use body::{BodyDecoder, BodyFraming, Decoded};
pub use error::ErrorKind;
pub use limits::Limits;
pub use method::Method;
pub use proxy_protocol::{parse_proxy_header, ProxyHeader, ProxyParse};
pub use request::{parse_request_head, Parse, RequestHead, Version};
pub use response::{parse_response_head, ResponseHead, ResponseParse};
