//! A directory listing: rendered on the blocking pool and sent whole, without validators.
//!
//! A listing has no `ETag` and no `Last-Modified`, as Apache's and nginx's have none: a
//! change deep in a tree changes neither the listing nor its directory's mtime, and a
//! recursive mirror tool that got `304 Not Modified` for a listing would not descend into
//! it (`wget -r -N` does exactly that), so the changed file would never be fetched. A large
//! listing is gzip-compressed when the client accepts it (a 20,000-entry directory is a
//! 3 MB page).

use bytes::Bytes;
use ramjet_pipeline::{error_response, Body, Request, Response};

use crate::autoindex::{self, Format, Options, Sort};
use crate::cache::Entry;
use crate::encoding::accepts;

/// Listings smaller than this are sent as they are (compressing them saves too little).
const COMPRESS_FROM: usize = 1024;

/// A rendered listing.
pub(crate) struct Listing {
    body: Bytes,
    content_type: &'static str,
    gzip: bool,
}

impl Listing {
    fn new(body: Vec<u8>, format: Format, gzip: bool) -> Listing {
        let content_type = match format {
            Format::Json => "application/json",
            Format::Html => "text/html; charset=utf-8",
        };
        let (body, gzip) = if gzip && body.len() >= COMPRESS_FROM {
            (compress(&body), true)
        } else {
            (body, false)
        };
        Listing {
            body: Bytes::from(body),
            content_type,
            gzip,
        }
    }

    fn headers(&self) -> Bytes {
        let mut h = Vec::with_capacity(128);
        h.extend_from_slice(b"Content-Type: ");
        h.extend_from_slice(self.content_type.as_bytes());
        h.extend_from_slice(b"\r\n");
        if self.gzip {
            h.extend_from_slice(b"Content-Encoding: gzip\r\n");
        }
        h.extend_from_slice(b"Vary: Accept, Accept-Encoding\r\nCache-Control: no-cache\r\n");
        Bytes::from(h)
    }

    /// The whole listing, 200, without validators.
    fn response(self) -> Response {
        let headers = self.headers();
        let mut r = Response::new(200, Body::Bytes(self.body));
        r.shared_headers = headers;
        r
    }
}

fn compress(body: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4),
        flate2::Compression::default(),
    );
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(body);
    enc.finish().unwrap_or_default()
}

/// Answer `req` with the listing of `dir` (HTML, or JSON for `?format=json` or an
/// `Accept` that prefers it), through the conditional and range filters.
pub(crate) async fn respond(req: &Request<'_>, dir: &Entry, options: Options) -> Response {
    let wants_json = req
        .query
        .is_some_and(|q| q.split(['&', ';']).any(|kv| kv == "format=json"))
        || req.head.accept.is_some_and(|a| {
            a.split(|&b| b == b',')
                .next()
                .is_some_and(|first| first.trim_ascii().starts_with(b"application/json"))
        });
    let format = if wants_json {
        Format::Json
    } else {
        Format::Html
    };
    let gzip = req
        .head
        .accept_encoding
        .is_some_and(|ae| accepts(ae, "gzip"));
    let sort = Sort::from_query(req.query);
    let Some(file) = dir.file.clone() else {
        return error_response(500);
    };
    let display = req.path.to_vec();
    let rendered = ramjet_observe::stats::blocking(move || {
        let rows = autoindex::read(&file, options)?;
        let body = match format {
            Format::Json => autoindex::json(rows, sort),
            Format::Html => autoindex::html(&file, rows, sort, &display),
        };
        Ok::<_, std::io::Error>(Listing::new(body, format, gzip))
    })
    .await;
    match rendered {
        Ok(Ok(listing)) => listing.response(),
        Ok(Err(e)) => {
            tracing::warn!("listing {}: {e}", String::from_utf8_lossy(req.path));
            error_response(403)
        }
        Err(e) => {
            tracing::error!("blocking pool: {e}");
            error_response(500)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_listings_are_compressed_and_none_has_validators() {
        let big = vec![b'x'; 10_000];
        let gz = Listing::new(big, Format::Html, true);
        assert!(gz.gzip && gz.body.len() < 200, "{} bytes", gz.body.len());
        // Small listings are not compressed.
        assert!(!Listing::new(b"tiny".to_vec(), Format::Json, true).gzip);
        let h = String::from_utf8(gz.headers().to_vec()).unwrap();
        assert!(h.contains("Content-Encoding: gzip\r\n"), "{h}");
        assert!(!h.contains("ETag") && !h.contains("Last-Modified"), "{h}");
    }
}
