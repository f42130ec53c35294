//! A directory listing as a representation: rendered on the blocking pool, then answered
//! through the pipeline's filters like a file, so mirror tools (`wget -N`, rclone, lftp)
//! get `304 Not Modified` for a listing that did not change instead of the whole page.
//!
//! The validators come from the listing itself: the entity tag is a hash of the rendered
//! bytes (a file changed in place changes its row but not the directory's mtime), and
//! `Last-Modified` is the newest of the directory's and its entries' mtimes. A large
//! listing is gzip-compressed when the client accepts it (a 20,000-entry directory is a
//! 3 MB page), as its own variant with its own tag.

use std::time::UNIX_EPOCH;

use bytes::Bytes;
use ramjet_pipeline::filters::{self, Representation};
use ramjet_pipeline::{error_response, Body, Part, Request, Response};

use crate::autoindex::{self, Format, Options, Sort};
use crate::cache::Entry;
use crate::encoding::accepts;

/// Listings smaller than this are sent as they are (compressing them saves too little).
const COMPRESS_FROM: usize = 1024;

/// A rendered listing and its validators.
pub(crate) struct Listing {
    body: Bytes,
    etag: Vec<u8>,
    modified: u64,
    content_type: &'static str,
    gzip: bool,
}

impl Listing {
    fn new(body: Vec<u8>, modified: u64, format: Format, gzip: bool) -> Listing {
        let content_type = match format {
            Format::Json => "application/json",
            Format::Html => "text/html; charset=utf-8",
        };
        let (body, gzip) = if gzip && body.len() >= COMPRESS_FROM {
            (compress(&body), true)
        } else {
            (body, false)
        };
        // FNV-1a over the bytes sent: the tag changes whenever the listing does.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in &body {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        let etag = format!("\"l{h:016x}{}\"", if gzip { "-gz" } else { "" }).into_bytes();
        Listing {
            body: Bytes::from(body),
            etag,
            modified,
            content_type,
            gzip,
        }
    }

    fn validator_lines(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(96);
        v.extend_from_slice(b"ETag: ");
        v.extend_from_slice(&self.etag);
        v.extend_from_slice(b"\r\nLast-Modified: ");
        let when = UNIX_EPOCH + std::time::Duration::from_secs(self.modified);
        v.extend_from_slice(httpdate::fmt_http_date(when).as_bytes());
        v.extend_from_slice(b"\r\n");
        v
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

impl Representation for Listing {
    fn etag(&self) -> &[u8] {
        &self.etag
    }

    fn modified(&self) -> u64 {
        self.modified
    }

    fn length(&self) -> u64 {
        self.body.len() as u64
    }

    fn content_type(&self) -> &str {
        self.content_type
    }

    fn headers(&self) -> Bytes {
        let mut h = Vec::with_capacity(256);
        h.extend_from_slice(b"Content-Type: ");
        h.extend_from_slice(self.content_type.as_bytes());
        h.extend_from_slice(b"\r\n");
        if self.gzip {
            h.extend_from_slice(b"Content-Encoding: gzip\r\n");
        }
        h.extend_from_slice(b"Vary: Accept, Accept-Encoding\r\nCache-Control: no-cache\r\n");
        h.extend_from_slice(&self.validator_lines());
        Bytes::from(h)
    }

    fn validators(&self) -> Bytes {
        Bytes::from(self.validator_lines())
    }

    fn slice(&self, start: u64, end: u64) -> Part {
        Part::Bytes(self.body.slice(start as usize..end as usize))
    }

    fn body(&self) -> Body {
        Body::Bytes(self.body.clone())
    }
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
    let dir_mtime = dir.mtime;
    let display = req.path.to_vec();
    let rendered = ramjet_observe::stats::blocking(move || {
        let rows = autoindex::read(&file, options)?;
        let newest = rows.iter().map(|r| r.mtime).fold(dir_mtime, u64::max);
        let body = match format {
            Format::Json => autoindex::json(rows, sort),
            Format::Html => autoindex::html(&file, rows, sort, &display),
        };
        Ok::<_, std::io::Error>(Listing::new(body, newest, format, gzip))
    })
    .await;
    match rendered {
        Ok(Ok(listing)) => filters::respond(req.head, &listing, 1),
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
    fn tags_follow_the_bytes_and_the_variant() {
        let a = Listing::new(b"<html>a</html>".to_vec(), 5, Format::Html, false);
        let b = Listing::new(b"<html>b</html>".to_vec(), 5, Format::Html, false);
        assert_ne!(a.etag, b.etag);
        let big = vec![b'x'; 10_000];
        let plain = Listing::new(big.clone(), 5, Format::Html, false);
        let gz = Listing::new(big, 5, Format::Html, true);
        assert!(gz.gzip && gz.body.len() < 200, "{} bytes", gz.body.len());
        assert_ne!(plain.etag, gz.etag);
        assert!(gz.etag.ends_with(b"-gz\""));
        // Small listings are not compressed.
        assert!(!Listing::new(b"tiny".to_vec(), 5, Format::Json, true).gzip);
        let h = String::from_utf8(gz.headers().to_vec()).unwrap();
        assert!(
            h.contains("Content-Encoding: gzip\r\n")
                && h.contains("Last-Modified: Thu, 01 Jan 1970 00:00:05 GMT\r\n")
        );
    }
}
