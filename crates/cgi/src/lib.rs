//! CGI/1.1 (RFC 3875): the `cgi` handler runs a program under the location's `cgi_root`
//! for each request, with the standard environment and the request body on its stdin,
//! and streams its output back. `Status`, `Location` and `Content-Type` are understood; a
//! program that fails, hangs or writes no valid header gets the client a 502 or 504 and
//! the reason in the error log, where its stderr goes too.
#![forbid(unsafe_code)]

mod env;
mod handler;
mod output;

pub use handler::Cgi;
pub use output::Head;

/// Parse the header section at the start of a program's output: `None` while it is
/// incomplete (no empty line yet), else the head or what is wrong with it.
pub fn parse_head(output: &[u8]) -> Option<Result<Head, String>> {
    let end = output::head_end(output)?;
    Some(output::parse(output, end))
}
