//! Error responses: a small HTML body naming the status, as every peer server sends.

use bytes::Bytes;
use ramjet_config::ErrorPages;
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
    r.server_page = true;
    r
}

/// Put the configured page for the response's status in place of the server's own (only
/// for the server's pages, and only when one is configured). The status and the other
/// header lines (`Allow`, `WWW-Authenticate`) stay.
#[inline(always)]
pub(crate) fn customise(r: &mut Response, pages: Option<&ErrorPages>) {
    if r.server_page && pages.is_some() {
        replace_page(r, pages);
    }
}

#[cold]
fn replace_page(r: &mut Response, pages: Option<&ErrorPages>) {
    let Some(page) = pages.and_then(|p| p.get(r.status)) else {
        return;
    };
    // The server's page starts with its Content-Type line; the rest are kept.
    const OWN: &[u8] = b"Content-Type: text/html; charset=utf-8\r\n";
    let rest = r.headers.strip_prefix(OWN).unwrap_or(&r.headers);
    let mut headers = Vec::with_capacity(rest.len() + page.content_type.len() + 16);
    headers.extend_from_slice(b"Content-Type: ");
    headers.extend_from_slice(page.content_type.as_bytes());
    headers.extend_from_slice(b"\r\n");
    headers.extend_from_slice(rest);
    r.headers = headers;
    r.body = Body::Bytes(page.body.clone());
}
