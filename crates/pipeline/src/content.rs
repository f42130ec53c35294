//! The content stage's contract: exactly one producer answers a request.

use std::future::Future;

use ramjet_config::{Location, Resolved};
use ramjet_http1::RequestHead;

use crate::response::Response;

/// A routed request as the content stage sees it.
#[derive(Debug)]
pub struct Request<'r> {
    pub head: &'r RequestHead<'r>,
    /// Decoded, normalised path (starts with `/`).
    pub path: &'r [u8],
    /// The path as received, still percent-encoded (for redirects).
    pub raw_path: &'r str,
    /// Undecoded query, without `?`.
    pub query: Option<&'r str>,
    pub location: &'r Location,
    pub config: &'r Resolved,
}

/// What a producer did with a request.
#[derive(Debug)]
pub enum Outcome {
    Respond(Response),
    /// Not mine: the next producer is asked; if none is left the answer is 404.
    Declined,
}

/// A content producer, one instance per worker (so it may keep `!Send` caches).
pub trait Content: 'static {
    /// Answer `req`. May await (disk work goes to the blocking pool), never blocks.
    fn produce<'r>(&'r self, req: &'r Request<'r>) -> impl Future<Output = Outcome> + 'r;
    /// The configuration was replaced: drop anything derived from the old one.
    fn on_reload(&self) {}
    /// Called about once a second.
    fn on_tick(&self) {}
}
