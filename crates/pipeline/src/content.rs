//! The content stage's contract: exactly one producer answers a request.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;

use ramjet_config::{Location, Resolved};
use ramjet_http1::RequestHead;

use crate::failure::Failure;
use crate::request_body::RequestBody;
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
    /// When the bytes of this request were read: a clock read once per batch, good enough
    /// for cache validity and cheaper than asking the kernel per request.
    pub now: tokio::time::Instant,
    /// The client's address (the peer of the connection).
    pub client: std::net::SocketAddr,
    /// The address the connection came in on (the listener's).
    pub listener: std::net::SocketAddr,
    /// The request came over TLS (`https`).
    pub secure: bool,
    /// The request body, for a producer that reads it; what it leaves unread the pipeline
    /// drains. A producer that takes no body answers methods that carry one itself (405).
    pub body: &'r RequestBody<'r>,
    /// Where a chain of producers starts. 0, except when the request is produced a second
    /// time because its fast path returned work to wait for: a chain records there which of
    /// its producers returned it (the stage carries it over), so the ones before it, which
    /// declined, are not asked again. A proxied request behind `["static", "proxy"]` spent
    /// about 420 instructions on a second static miss.
    pub resume: Cell<u8>,
    /// The stage's first, synchronous try: work returned from it is dropped unpolled and
    /// the request produced again to wait for it, so [`Request::later`] builds none.
    pub(crate) first_try: bool,
}

impl<'r> Request<'r> {
    /// Work a producer returns to be waited for: `work()`, boxed. On the stage's first try,
    /// whose work is dropped unpolled (the request is produced again, from the producer
    /// that returned it, inside the future the connection awaits), `work` is not called and
    /// nothing is allocated: a proxied request built, moved into a box and freed a future
    /// of several hundred bytes it never ran.
    pub fn later<F>(&self, work: impl FnOnce() -> F) -> Later<'r>
    where
        F: Future<Output = Outcome> + 'r,
    {
        if self.first_try {
            // A zero-sized future: boxing it allocates nothing.
            Box::pin(std::future::pending())
        } else {
            Box::pin(work())
        }
    }
}

/// What a producer did with a request.
#[derive(Debug)]
pub enum Outcome {
    Respond(Response),
    /// Not mine: the next producer is asked; if none is left the answer is 404.
    Declined,
    /// Could not answer: the pipeline logs the failure and answers with its status.
    Fail(Failure),
}

/// Work a producer could not finish at once (it needs the disk, a backend, ...).
pub type Later<'r> = Pin<Box<dyn Future<Output = Outcome> + 'r>>;

/// A content producer, one instance per worker (so it may keep `!Send` caches).
///
/// `produce` answers at once when it can (a cache hit: no allocation, no await) and returns
/// boxed work otherwise. Keeping the slow path boxed keeps every connection's future small,
/// which is what bounds memory per idle connection.
pub trait Content: 'static {
    /// Answer `req` now (`Ok`), or return the work that will (`Err`). Never blocks.
    fn produce<'r>(&'r self, req: &'r Request<'r>) -> Result<Outcome, Later<'r>>;
    /// The configuration was replaced by `config`: drop anything derived from the old one.
    fn on_reload(&self, _config: &Resolved) {}
    /// Called about once a second with the configuration in force (pool pruning, health
    /// checks).
    fn on_tick(&self, _config: &Resolved) {}
}
