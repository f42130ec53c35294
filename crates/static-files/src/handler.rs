//! The static-file producer: look up, then answer with the file, a redirect, an index file,
//! a listing, or a refusal.

use std::cell::{Cell, OnceCell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use ramjet_config::{Encoding, Handler, StaticOptions};
use ramjet_http1::Method;
use ramjet_pipeline::{error_response, filters, Body, Content, Later, Outcome, Request, Response};
use ramjet_runtime::sys::FileStat;
use tokio::time::Instant;

use crate::autoindex::Options;
use crate::cache::{stale, Entry, FileCache, Kind};
use crate::encoding::accepts;
use crate::mime;
use crate::open::{load, load_cached, Loaded};
use crate::watch::Watcher;

/// Cache variant of the identity representation; encodings use 1 + their index.
const IDENTITY: u8 = 0;

/// One worker's static-file producer and its open-file cache.
pub struct StaticFiles {
    /// Shared with re-checks and the change watcher (local tasks on the same worker).
    cache: Rc<RefCell<FileCache>>,
    /// Bumped whenever the watcher reports changes: a load that sees it move while its
    /// file was being opened marks what it loaded for another check.
    epoch: Rc<Cell<u64>>,
    /// Started with the first load (inside the worker's runtime); `None` without inotify.
    watcher: OnceCell<Option<Arc<Watcher>>>,
}

/// What the synchronous path could not do by itself.
enum Need {
    /// Open (or re-check) this path on the blocking pool, then try again.
    Load {
        variant: u8,
        path: Vec<u8>,
        /// The name whose extension gives the media type (the uncompressed name).
        type_of: Vec<u8>,
        /// Header lines for the entry's shared block.
        extra: String,
    },
    /// Render a directory listing on the blocking pool.
    Listing(Rc<Entry>),
    /// This entry is being re-checked (it changed, or `file_cache.valid` ran out): wait for
    /// the re-check, then try again.
    Recheck(Rc<Entry>),
}

/// The methods a static location answers (`Allow` of OPTIONS and 405).
const ALLOW: &[u8] = b"GET, HEAD, OPTIONS";

/// A slow-path request loads at most this many entries (path, index files, siblings).
const MAX_LOADS: usize = 16;

impl Default for StaticFiles {
    fn default() -> Self {
        Self::new()
    }
}

impl StaticFiles {
    pub fn new() -> StaticFiles {
        StaticFiles {
            cache: Rc::new(RefCell::new(FileCache::new())),
            epoch: Rc::new(Cell::new(0)),
            watcher: OnceCell::new(),
        }
    }

    /// The change watcher, started on first use unless `file_cache.watch` is off.
    fn watcher(&self, req: &Request<'_>) -> Option<Arc<Watcher>> {
        if !req.config.file_cache.watch {
            return None;
        }
        self.watcher
            .get_or_init(|| Watcher::start(self.cache.clone(), self.epoch.clone()))
            .clone()
    }

    /// The cached entry for `path`, if it is current for this request. An entry that
    /// changed (inotify) or is older than `file_cache.valid` is re-checked first, once for
    /// all the requests that want it: they wait for that one re-check (`Need::Recheck`)
    /// rather than each re-opening the file, and none is answered from the old entry. An
    /// entry checked after this request arrived is current for it.
    fn fresh(
        &self,
        req: &Request<'_>,
        s: &StaticOptions,
        variant: u8,
        path: &[u8],
    ) -> Result<Option<Rc<Entry>>, Need> {
        let Some(e) = self.cache.borrow_mut().get(req.location.id, variant, path) else {
            return Ok(None);
        };
        let checked = e.checked.get();
        if checked >= req.now {
            return Ok(Some(e));
        }
        if e.revalidating.get() {
            return Err(Need::Recheck(e));
        }
        if !(e.invalid.get() || stale(checked, req.config.file_cache.valid, req.now)) {
            return Ok(Some(e));
        }
        e.revalidating.set(true);
        self.revalidate(req, s, variant, path, e.clone());
        Err(Need::Recheck(e))
    }

    /// Re-open `path` on the blocking pool in a local task of its own (it finishes even if
    /// the request that started it goes away), replace or confirm the entry, then wake the
    /// requests waiting for it.
    fn revalidate(
        &self,
        req: &Request<'_>,
        s: &StaticOptions,
        variant: u8,
        path: &[u8],
        old: Rc<Entry>,
    ) {
        // Cleared now, not when done: a change reported during the re-check sets it again.
        old.invalid.set(false);
        let (cache, epoch) = (self.cache.clone(), self.epoch.clone());
        let watcher = self.watcher(req);
        let started = epoch.get();
        let location = req.location.id;
        let (root, policy) = (s.root.clone(), s.symlinks);
        let fc = req.config.file_cache;
        let path = path.to_vec();
        let (small, prev) = (fc.small_file_max, old.stat);
        // Done here when the kernel's caches answer (nothing can change meanwhile), else
        // in a task around the blocking pool.
        let done = move |loaded, changed_meanwhile: bool, path: &[u8]| {
            match entry_of(loaded, &old.content_type, &old.extra) {
                // Unchanged (or the pool failed, which is logged): the entry stays.
                None => {
                    old.checked.set(Instant::now());
                    if changed_meanwhile {
                        old.invalid.set(true);
                    }
                }
                Some(entry) => {
                    entry.invalid.set(changed_meanwhile);
                    cache
                        .borrow_mut()
                        .insert(location, variant, path, entry, fc.entries, fc.memory);
                }
            }
            old.revalidating.set(false);
            old.rechecked.notify_waiters();
        };
        if let Some(loaded) = inline_load(
            watcher.as_deref(),
            location,
            &root,
            &path,
            policy,
            small,
            prev,
        ) {
            return done(Ok(loaded), false, &path);
        }
        let rel = path.clone();
        tokio::task::spawn_local(async move {
            let loaded = ramjet_observe::stats::blocking(move || {
                if let Some(w) = watcher {
                    w.blocking_watch_parent(&root, location, &rel);
                }
                load(&root, &rel, policy, small, prev)
            })
            .await;
            done(loaded, epoch.get() != started, &path);
        });
    }

    /// A sendfile entry is checked against its descriptor before a head is built from it
    /// (one fstat; the body goes to the socket straight from the file, so what the head
    /// promises must be what the file holds now). A file changed in place (same inode, new
    /// size or mtime) is described afresh from that fstat, and the cache updated. A file
    /// replaced by rename keeps its old inode's bytes, which still match the old entry.
    fn current(&self, req: &Request<'_>, variant: u8, path: &[u8], entry: Rc<Entry>) -> Rc<Entry> {
        if entry.body.is_some() || entry.kind != Kind::File {
            return entry;
        }
        let (Some(file), Some(was)) = (&entry.file, entry.stat) else {
            return entry;
        };
        match FileStat::of(&**file) {
            Ok(now) if (now.size, now.mtime) != (was.size, was.mtime) => {
                let fresh = Entry::found(
                    file.clone(),
                    now,
                    None,
                    entry.content_type.to_string(),
                    &entry.extra,
                );
                let fc = &req.config.file_cache;
                self.cache.borrow_mut().insert(
                    req.location.id,
                    variant,
                    path,
                    fresh,
                    fc.entries,
                    fc.memory,
                )
            }
            _ => entry,
        }
    }

    /// Answer from the cache alone, or say what is missing.
    fn try_serve(&self, req: &Request<'_>, s: &StaticOptions) -> Result<Outcome, Need> {
        let rel = &req.path[1..];
        let vary = if s.precompressed.is_empty() {
            ""
        } else {
            "Vary: Accept-Encoding\r\n"
        };
        let need = |path: &[u8]| Need::Load {
            variant: IDENTITY,
            path: path.to_vec(),
            type_of: path.to_vec(),
            extra: vary.to_string(),
        };
        let entry = self
            .fresh(req, s, IDENTITY, rel)?
            .ok_or_else(|| need(rel))?;
        match entry.kind {
            // Not found: the next handler is asked, or the pipeline answers 404.
            Kind::Refused(404) => Ok(Outcome::Declined),
            Kind::Refused(code) => Ok(Outcome::Respond(error_response(code))),
            Kind::File => self
                .try_serve_file(req, s, entry, rel)
                .map(Outcome::Respond),
            Kind::Dir => {
                if !req.path.ends_with(b"/") {
                    return Ok(Outcome::Respond(redirect_to_slash(req)));
                }
                for index in &s.index {
                    let mut path = rel.to_vec();
                    path.extend_from_slice(index.as_bytes());
                    let e = self
                        .fresh(req, s, IDENTITY, &path)?
                        .ok_or_else(|| need(&path))?;
                    if e.kind == Kind::File {
                        return self.try_serve_file(req, s, e, &path).map(Outcome::Respond);
                    }
                }
                if s.autoindex {
                    Err(Need::Listing(entry))
                } else if req.location.has_after(Handler::Static) {
                    // Accelerator mode: a directory without an index belongs to the backend.
                    Ok(Outcome::Declined)
                } else {
                    Ok(Outcome::Respond(error_response(403)))
                }
            }
        }
    }

    /// Pick the representation (a precompressed sibling if accepted and present), then
    /// apply conditionals and ranges.
    fn try_serve_file(
        &self,
        req: &Request<'_>,
        s: &StaticOptions,
        identity: Rc<Entry>,
        rel: &[u8],
    ) -> Result<Response, Need> {
        if let (false, Some(ae)) = (s.precompressed.is_empty(), req.head.accept_encoding) {
            for (i, enc) in s.precompressed.iter().enumerate() {
                if !accepts(ae, enc.token()) {
                    continue;
                }
                let variant = 1 + i as u8;
                let sibling = sibling_path(rel, *enc);
                let Some(e) = self.fresh(req, s, variant, &sibling)? else {
                    return Err(Need::Load {
                        variant,
                        path: sibling,
                        type_of: rel.to_vec(),
                        extra: format!(
                            "Content-Encoding: {}\r\nVary: Accept-Encoding\r\n",
                            enc.token()
                        ),
                    });
                };
                if e.kind == Kind::File {
                    return Ok(respond_with(
                        req,
                        s,
                        &self.current(req, variant, &sibling, e),
                    ));
                }
            }
        }
        Ok(respond_with(
            req,
            s,
            &self.current(req, IDENTITY, rel, identity),
        ))
    }

    /// The slow path: load what is missing on the blocking pool, then answer.
    async fn serve_slow(&self, req: &Request<'_>, s: &StaticOptions) -> Outcome {
        ramjet_observe::stats::local().cache_misses.add(1);
        for _ in 0..MAX_LOADS {
            match self.try_serve(req, s) {
                Ok(r) => return r,
                Err(Need::Listing(dir)) => {
                    let options = Options {
                        dotfiles: s.autoindex_dotfiles,
                    };
                    return Outcome::Respond(crate::listing::respond(req, &dir, options).await);
                }
                Err(Need::Recheck(e)) => {
                    if e.revalidating.get() {
                        e.rechecked.notified().await;
                    }
                }
                Err(Need::Load {
                    variant,
                    path,
                    type_of,
                    extra,
                }) => {
                    self.load(req, s, variant, &path, &type_of, &extra).await;
                }
            }
        }
        tracing::error!(
            "{}: gave up after {MAX_LOADS} loads",
            String::from_utf8_lossy(req.path)
        );
        Outcome::Respond(error_response(500))
    }

    /// Open `rel` (not cached yet) on the blocking pool and put the result in the cache.
    async fn load(
        &self,
        req: &Request<'_>,
        s: &StaticOptions,
        variant: u8,
        rel: &[u8],
        type_of: &[u8],
        extra: &str,
    ) {
        let (location, fc) = (req.location, &req.config.file_cache);
        let (root, policy, small) = (s.root.clone(), s.symlinks, fc.small_file_max);
        let (watcher, started) = (self.watcher(req), self.epoch.get());
        let id = location.id;
        let loaded = match inline_load(watcher.as_deref(), id, &root, rel, policy, small, None) {
            Some(loaded) => Ok(loaded),
            None => {
                let path = rel.to_vec();
                ramjet_observe::stats::blocking(move || {
                    if let Some(w) = watcher {
                        w.blocking_watch_parent(&root, id, &path);
                    }
                    load(&root, &path, policy, small, None)
                })
                .await
            }
        };
        let content_type = mime::content_type(type_of, &s.types, s.charset.as_deref());
        let entry = entry_of(loaded, &content_type, extra)
            .unwrap_or_else(|| Entry::refused(500, content_type, extra));
        entry.invalid.set(self.epoch.get() != started);
        self.cache
            .borrow_mut()
            .insert(location.id, variant, rel, entry, fc.entries, fc.memory);
    }
}

/// [`load_cached`] on the event loop, when the kernel's caches answer and the file's
/// directory is already watched (or needs no watch); `None` sends the load to the pool.
fn inline_load(
    watcher: Option<&Watcher>,
    location: usize,
    root: &std::fs::File,
    rel: &[u8],
    policy: ramjet_config::SymlinkPolicy,
    small: u64,
    prev: Option<FileStat>,
) -> Option<Loaded> {
    if watcher.is_some_and(|w| !w.covers(location, rel)) {
        return None;
    }
    load_cached(root, rel, policy, small, prev)
}

/// The cache entry for what the blocking side found; `None` when the old entry stays
/// (unchanged file, or the pool failed, which is logged).
fn entry_of(
    loaded: Result<Loaded, tokio::task::JoinError>,
    content_type: &str,
    extra: &str,
) -> Option<Entry> {
    match loaded {
        Ok(Loaded::Found { file, stat, body }) => Some(Entry::found(
            Arc::new(file),
            stat,
            body,
            content_type.to_string(),
            extra,
        )),
        Ok(Loaded::Refused(code)) => Some(Entry::refused(code, content_type.to_string(), extra)),
        Ok(Loaded::Unchanged) => None,
        Err(e) => {
            tracing::error!("blocking pool: {e}");
            None
        }
    }
}

fn sibling_path(rel: &[u8], enc: Encoding) -> Vec<u8> {
    let mut p = rel.to_vec();
    p.extend_from_slice(enc.suffix().as_bytes());
    p
}

/// The pipeline's filters (conditionals, then ranges, then the whole file) on an entry.
fn respond_with(req: &Request<'_>, s: &StaticOptions, entry: &Entry) -> Response {
    filters::respond(req.head, entry, s.max_ranges)
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

impl Content for StaticFiles {
    fn produce<'r>(&'r self, req: &'r Request<'r>) -> Result<Outcome, Later<'r>> {
        let Some(s) = req.location.statics.as_ref() else {
            return Ok(Outcome::Declined);
        };
        // Method policy: files are read, never written (405 with `Allow`); a method this
        // server does not know at all is 501 (RFC 9110 §9.1). With a handler after this
        // one (`["static", "proxy"]`), other methods are that handler's.
        match req.head.method {
            Method::Get | Method::Head => {}
            _ if req.location.has_after(Handler::Static) => return Ok(Outcome::Declined),
            Method::Options => {
                return Ok(Outcome::Respond(
                    Response::new(200, Body::Empty).header("Allow", ALLOW),
                ))
            }
            Method::Other => return Ok(Outcome::Respond(error_response(501))),
            _ => return Ok(Outcome::Respond(error_response(405))),
        }
        if let Some(Some(w)) = self.watcher.get() {
            if w.apply_queued(&self.cache) {
                self.epoch.set(self.epoch.get() + 1);
            }
        }
        // Counted once per request: a hit is answered from the cache without waiting, a
        // miss when the slow path runs (the pipeline may ask twice before it waits).
        match self.try_serve(req, s) {
            Ok(outcome) => {
                ramjet_observe::stats::local().cache_hits.add(1);
                Ok(outcome)
            }
            Err(_) => Err(req.later(|| self.serve_slow(req, s))),
        }
    }

    fn on_reload(&self, _config: &ramjet_config::Resolved) {
        self.cache.borrow_mut().clear();
        if let Some(Some(w)) = self.watcher.get() {
            w.forget();
        }
    }
}
