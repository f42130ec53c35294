//! The static-file producer: look up, then answer with the file, a redirect, an index file,
//! a listing, or a refusal.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use ramjet_config::{Encoding, Location, Resolved};
use ramjet_http1::range::{parse_range, RangeOutcome};
use ramjet_http1::Method;
use ramjet_pipeline::{error_response, Body, Content, Outcome, Request, Response};
use tokio::time::Instant;

use crate::autoindex::{self, Format, Sort};
use crate::cache::{stale, Entry, FileCache, Kind};
use crate::conditional::{evaluate, if_range_holds, Verdict};
use crate::encoding::accepts;
use crate::open::{load, Loaded};
use crate::{mime, ranges};

/// Cache variant of the identity representation; encodings use 1 + their index.
const IDENTITY: u8 = 0;

/// One worker's static-file producer and its open-file cache.
pub struct StaticFiles {
    cache: RefCell<FileCache>,
}

impl Default for StaticFiles {
    fn default() -> Self {
        Self::new()
    }
}

impl StaticFiles {
    pub fn new() -> StaticFiles {
        StaticFiles {
            cache: RefCell::new(FileCache::new()),
        }
    }

    /// The cache entry for `rel` in `location`, (re)loading it on the blocking pool when
    /// missing or due for a check.
    async fn lookup(
        &self,
        config: &Resolved,
        location: &Location,
        variant: u8,
        rel: &[u8],
        type_of: &[u8],
        extra: &str,
    ) -> Rc<Entry> {
        let fc = &config.file_cache;
        let cached = self.cache.borrow_mut().get(location.id, variant, rel);
        if let Some(e) = &cached {
            if !stale(e.checked.get(), fc.valid) {
                return e.clone();
            }
        }
        let s = &location.statics;
        let root = s.root.clone();
        let path = rel.to_vec();
        let policy = s.symlinks;
        let small = fc.small_file_max;
        let prev = cached.as_ref().and_then(|e| e.stat);
        let loaded =
            tokio::task::spawn_blocking(move || load(&root, &path, policy, small, prev)).await;
        let entry = match loaded {
            Ok(Loaded::Unchanged) => {
                let e = cached.expect("Unchanged implies a previous entry");
                e.checked.set(Instant::now());
                return e;
            }
            Ok(Loaded::Found { file, stat, body }) => {
                let ct = mime::content_type(type_of, &s.types, s.charset.as_deref());
                Entry::found(file, stat, body, ct, extra)
            }
            Ok(Loaded::Refused(code)) => Entry::refused(code),
            Err(e) => {
                tracing::error!("blocking pool: {e}");
                Entry::refused(500)
            }
        };
        self.cache
            .borrow_mut()
            .insert(location.id, variant, rel, entry, fc.entries, fc.memory)
    }

    async fn serve(&self, req: &Request<'_>) -> Response {
        let s = &req.location.statics;
        let rel = &req.path[1..];
        let vary = if s.precompressed.is_empty() {
            ""
        } else {
            "Vary: Accept-Encoding\r\n"
        };
        let entry = self
            .lookup(req.config, req.location, IDENTITY, rel, rel, vary)
            .await;
        match entry.kind {
            Kind::Refused(code) => error_response(code),
            Kind::File => self.serve_file(req, entry, rel).await,
            Kind::Dir => {
                if !req.path.ends_with(b"/") {
                    return redirect_to_slash(req);
                }
                for index in &s.index {
                    let mut path = rel.to_vec();
                    path.extend_from_slice(index.as_bytes());
                    let e = self
                        .lookup(req.config, req.location, IDENTITY, &path, &path, vary)
                        .await;
                    if e.kind == Kind::File {
                        return self.serve_file(req, e, &path).await;
                    }
                }
                if s.autoindex {
                    listing(req, &entry).await
                } else {
                    error_response(403)
                }
            }
        }
    }

    async fn serve_file(&self, req: &Request<'_>, identity: Rc<Entry>, rel: &[u8]) -> Response {
        let s = &req.location.statics;
        let mut entry = identity;
        if let (false, Some(ae)) = (s.precompressed.is_empty(), req.head.accept_encoding) {
            for (i, enc) in s.precompressed.iter().enumerate() {
                if !accepts(ae, enc.token()) {
                    continue;
                }
                let sibling = sibling_path(rel, *enc);
                let extra = format!(
                    "Content-Encoding: {}\r\nVary: Accept-Encoding\r\n",
                    enc.token()
                );
                let e = self
                    .lookup(req.config, req.location, 1 + i as u8, &sibling, rel, &extra)
                    .await;
                if e.kind == Kind::File {
                    entry = e;
                    break;
                }
            }
        }
        respond_with(req, &entry)
    }
}

fn sibling_path(rel: &[u8], enc: Encoding) -> Vec<u8> {
    let mut p = rel.to_vec();
    p.extend_from_slice(enc.suffix().as_bytes());
    p
}

/// Conditionals, then ranges, then the full representation.
fn respond_with(req: &Request<'_>, entry: &Entry) -> Response {
    match evaluate(req.head, &entry.etag, entry.mtime) {
        Verdict::NotModified => {
            let mut r = Response::new(304, Body::Empty);
            r.shared_headers = entry.validators();
            return r;
        }
        Verdict::PreconditionFailed => return error_response(412),
        Verdict::Proceed => {}
    }
    if let (Method::Get, Some(range)) = (req.head.method, req.head.range) {
        let applies = req
            .head
            .if_range
            .is_none_or(|v| if_range_holds(v, &entry.etag, entry.mtime));
        if applies {
            match parse_range(range, entry.size(), req.location.statics.max_ranges) {
                RangeOutcome::Full => {}
                RangeOutcome::Unsatisfiable => return ranges::unsatisfiable(entry),
                RangeOutcome::Partial(rs) if rs.len() == 1 => return ranges::single(entry, rs[0]),
                RangeOutcome::Partial(rs) => return ranges::multi(entry, &rs),
            }
        }
    }
    let body = match &entry.body {
        Some(b) => Body::Bytes(b.clone()),
        None => Body::File {
            file: entry.file.clone().expect("a file entry has a descriptor"),
            offset: 0,
            len: entry.size(),
        },
    };
    let mut r = Response::new(200, body);
    r.shared_headers = entry.head.clone();
    r
}

/// 301 to the same path with a slash, query kept (as nginx and Apache do).
fn redirect_to_slash(req: &Request<'_>) -> Response {
    let mut location = String::with_capacity(req.raw_path.len() + 1);
    location.push_str(req.raw_path);
    location.push('/');
    if let Some(q) = req.query {
        location.push('?');
        location.push_str(q);
    }
    error_response(301).header("Location", location.as_bytes())
}

async fn listing(req: &Request<'_>, dir: &Entry) -> Response {
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
    let sort = Sort::from_query(req.query);
    let file = dir
        .file
        .clone()
        .expect("a directory entry has a descriptor");
    let display = req.path.to_vec();
    let rendered = tokio::task::spawn_blocking(move || {
        let rows = autoindex::read(&file)?;
        Ok::<_, std::io::Error>(match format {
            Format::Json => autoindex::json(rows, sort),
            Format::Html => autoindex::html(&file, rows, sort, &display),
        })
    })
    .await;
    match rendered {
        Ok(Ok(body)) => {
            let ct: &[u8] = match format {
                Format::Json => b"application/json",
                Format::Html => b"text/html; charset=utf-8",
            };
            Response::new(200, Body::Bytes(Bytes::from(body)))
                .header("Content-Type", ct)
                .header("Vary", b"Accept")
                .header("Cache-Control", b"no-cache")
        }
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

impl Content for StaticFiles {
    async fn produce<'r>(&'r self, req: &'r Request<'r>) -> Outcome {
        Outcome::Respond(self.serve(req).await)
    }

    fn on_reload(&self) {
        self.cache.borrow_mut().clear();
    }
}
