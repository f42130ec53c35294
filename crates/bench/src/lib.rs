//! The load generator (`ramjet bench`): closed-loop HTTP/1.x load, ab/wrk style.
//!
//! Brief overview: a [`Spec`] says what to send (targets, connections, duration or request
//! count, keep-alive, version, pipelining depth, headers, threads); [`run`] drives it with one
//! tokio `current_thread` runtime per thread and returns a [`Report`] whose every response was
//! parsed and validated with the server's own `http1` codec; errors are counted by kind, never
//! dropped. It never reaches into server internals: it only speaks HTTP over TCP.
#![forbid(unsafe_code)]

mod closed;
mod report;
mod spec;

pub use closed::run;
pub use report::{Errors, Report};
pub use spec::{parse_duration, Spec, Target};
