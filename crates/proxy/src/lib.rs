//! The reverse proxy handler: forwards a request to a server of the location's upstream
//! and streams the answer back.
//!
//! Brief overview: [`Proxy`] implements [`ramjet_pipeline::Content`], one per worker. For a
//! request it picks a server ([`balance`]) that [`health`] says is up, takes an idle
//! connection from the worker's [`pool`] or connects ([`upstream_io`]), writes the head
//! built by [`forward`] and the request body, reads the response head ([`response_head`]:
//! framing checked, hop-by-hop fields removed), and answers with a body that streams from
//! the upstream connection as the client takes it ([`body`]); the connection goes back to
//! the pool at the body's end; [`origin_limit`] holds `max_conns`, counted across workers. [`exchange`] holds the attempt loop: retries, timeouts and
//! the failures the pipeline maps to 502/504.
#![forbid(unsafe_code)]

mod balance;
mod body;
mod cached;
mod exchange;
mod forward;
mod handler;
mod health;
mod origin_limit;
mod pool;
pub mod response_head;
mod trailers;
mod upstream_io;

pub use handler::Proxy;
pub use upstream_io::Io as UpstreamIo;
