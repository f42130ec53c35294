//! Error responses: a small HTML body naming the status, as every peer server sends.

use bytes::Bytes;
use ramjet_http1::status::reason;

use crate::response::{Body, Response};

/// A complete error response for `status`.
pub fn error_response(status: u16) -> Response {
    let reason = reason(status);
    let body = format!(
        "<html>\r\n<head><title>{status} {reason}</title></head>\r\n<body>\r\n<center><h1>{status} {reason}</h1></center>\r\n<hr><center>ramjet</center>\r\n</body>\r\n</html>\r\n"
    );
    let mut r = Response::new(status, Body::Bytes(Bytes::from(body)))
        .header("Content-Type", b"text/html; charset=utf-8");
    if status == 405 {
        r = r.header("Allow", b"GET, HEAD, OPTIONS");
    }
    r
}
