//! The per-connection state machine and the request stages.
//!
//! Brief overview: [`HttpWorker`] is the runtime's per-thread [`ramjet_runtime::Worker`]; it
//! runs one [`conn`] loop per connection. Each request goes through the stages listed in
//! [`stage::STAGES`]; the content stage asks a [`Content`] producer, which answers with an
//! [`Outcome`]; it may read the request body through [`RequestBody`]. Responses are [`Response`]s whose [`Body`] is bytes, a file range (sent by
//! sendfile), parts or a stream; the [`outbox`] turns a batch of them into writev/sendfile calls.
#![forbid(unsafe_code)]

mod conn;
mod content;
mod date;
mod error_page;
mod failure;
pub mod filters;
mod ftp;
mod handoff;
pub mod http2;
mod outbox;
mod park;
mod request_body;
mod response;
pub mod stage;
mod throttle;
mod transport;
mod tunnel;
mod worker;

pub use content::{Content, Later, Outcome, Request};
pub use error_page::error_response;
pub use failure::{FailKind, Failure, Level, Side};
pub use request_body::{BodyError, RequestBody};
pub use response::{Body, BodySource, Extras, Part, Response, Tunnel};
pub use worker::{BoundListener, Generation, HttpWorker};
