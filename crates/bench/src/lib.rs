//! The load generator (`ramjet bench`): HTTP/1.x load in the styles of ab/wrk (closed loop),
//! httperf/wrk2 (open loop at a fixed rate), autobench (rate sweeps with plots), and the
//! mirror's slow-download test.
//!
//! Brief overview: a [`Spec`] says what to send (targets, connections, duration or request
//! count, keep-alive, version, pipelining depth, headers, threads, CPUs, and a rate for the
//! open loop); [`run`] drives it with one tokio `current_thread` runtime per thread and
//! returns a [`Report`] whose every response was parsed and validated with the server's own
//! `http1` codec; errors are counted by kind, never dropped. [`sweep`] runs the open loop at
//! a list of rates and [`sweep_svg`] plots the result. [`run_slow`] holds throttled downloads
//! from many source addresses; [`run_processes`] spreads them over processes. It never
//! reaches into server internals: it only speaks HTTP over TCP.
#![forbid(unsafe_code)]

mod closed;
mod exchange;
mod fleet;
mod ftp;
mod http2;
mod open;
mod plot;
mod progress;
mod report;
mod slow;
mod spec;
pub mod specweb;
mod sweep;
mod threads;
mod tls;

pub use closed::{run, run_counted};
pub use fleet::run_processes;
pub use ftp::{parse_ftp_url, run_ftp, FtpReport, FtpSpec};
pub use plot::sweep_svg;
pub use progress::{Counter, Progress};
pub use report::{Errors, Report};
pub use slow::{run_slow, SlowReport, SlowSpec, KEPT};
pub use spec::{
    parse_duration, parse_rate, parse_sources, parse_url_list, url_list_lines, Spec, Target,
};
pub use sweep::{csv, csv_line, parse_sweep, sweep, Step, Sweep, CSV_HEADER};
