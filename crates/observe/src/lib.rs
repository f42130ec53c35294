//! Observability: the access log (compiled formats, per-worker buffers) and diagnostics.
//!
//! Brief overview: [`AccessLogOptions`] is the resolved `[log]` section; [`AccessLog`] is the
//! process-wide sink (one file, reopened on USR1); [`LogBuffer`] is each worker's buffer,
//! written with one `write(2)` when full or once a second; [`Entry`] is what the pipeline
//! records for every request, exactly once; [`stats`] holds the per-worker counters behind
//! `/metrics` and the status page.
#![forbid(unsafe_code)]

mod access_log;
mod diagnostics;
mod format;
mod options;
pub mod stats;

pub use access_log::{AccessLog, LogBuffer};
pub use diagnostics::init_diagnostics;
pub use format::{civil_from_days, Entry, UpstreamLog};
pub use options::{AccessLogOptions, LogFormat, LogTarget};
