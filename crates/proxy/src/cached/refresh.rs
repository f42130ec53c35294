//! Fetching for the cache: the request the origin gets (the client's GET without the
//! conditionals and range the cache answers itself, plus the stored validators when
//! revalidating), and what is done with the answer: a 304 refreshes the stored head, a
//! storable answer becomes a stored object (filled as it arrives), anything else passes on
//! and releases the waiters. Also the background revalidation of stale-while-revalidate,
//! which owns a copy of what it needs of the request.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use ramjet_cache::fetch::{self, Tier};
use ramjet_cache::fill::Fill;
use ramjet_cache::meta::Meta;
use ramjet_cache::policy::{self, Answer, Asked};
use ramjet_cache::store::{Counts, Lead};
use ramjet_cache::{key, now_ms, Object, Store, Stored};
use ramjet_config::{CacheRule, ProxyOptions};
use ramjet_http1::{parse_request_head, Limits, Parse, RequestHead};
use ramjet_pipeline::{Body, Extras, Outcome};

use super::answer::cache_status;
use super::Cached;
use crate::exchange::{self, Asking};
use crate::handler::{Shared, UpstreamState};

/// Request fields the origin does not get from the cache: it answers them itself from the
/// stored object (a revalidation sends its own validators).
const HELD_BACK: [&[u8]; 6] = [
    b"range",
    b"if-range",
    b"if-none-match",
    b"if-modified-since",
    b"if-match",
    b"if-unmodified-since",
];

/// What became of a fetch.
pub(crate) enum Fetched {
    /// Stored (maybe still arriving); the exchange's log fields with it.
    Stored(Arc<Object>, Option<Box<Extras>>),
    /// The origin said 304: the stored object with its refreshed head.
    NotModified(Arc<Object>),
    /// Not stored: passed on as it is (with its Cache-Status).
    Passed(Outcome),
    /// The origin failed (no answer, or a 5xx while a stale answer may stand in).
    Failed(Outcome),
}

/// The client's request as the origin gets it from the cache: GET, without the fields the
/// cache answers itself, plus `extra` lines (validators).
fn origin_head(head: &RequestHead<'_>, extra: &[u8]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(head.raw.len() + extra.len());
    raw.extend_from_slice(b"GET ");
    raw.extend_from_slice(head.target.as_bytes());
    raw.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in head.fields() {
        if HELD_BACK.iter().any(|n| name.eq_ignore_ascii_case(n)) {
            continue;
        }
        raw.extend_from_slice(name);
        raw.extend_from_slice(b": ");
        raw.extend_from_slice(value);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(extra);
    raw.extend_from_slice(b"\r\n");
    raw
}

fn field_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Fetch `ask` for storage (revalidating `stale` when given) and store what may be stored.
pub(crate) async fn refresh(
    c: &Cached<'_>,
    ask: &Asking<'_>,
    limits: &Limits,
    asked: &Asked,
    stale: Option<&Arc<Object>>,
    lead: Lead,
) -> Fetched {
    let mut extra = Vec::new();
    if let Some(o) = stale {
        if !o.etag.is_empty() {
            field_line(&mut extra, b"If-None-Match", &o.etag);
        }
        if let Some(lm) = policy::value(&o.meta.fields, b"last-modified") {
            field_line(&mut extra, b"If-Modified-Since", lm);
        }
    }
    let raw = origin_head(ask.head, &extra);
    let mut limits = *limits;
    limits.max_head = limits.max_head.max(raw.len());
    limits.max_target = limits.max_target.max(raw.len());
    let sent = now_ms();
    let out = match parse_request_head(&raw, &limits) {
        Parse::Complete(head) => {
            let origin = Asking {
                head: &head,
                body: None,
                ..*ask
            };
            exchange::forward(c.shared, c.state.clone(), &origin, c.opts, true).await
        }
        _ => exchange::forward(c.shared, c.state.clone(), ask, c.opts, true).await,
    };
    let now = now_ms();
    let mut r = match out {
        Outcome::Respond(r) => r,
        other => return Fetched::Failed(other),
    };
    if let Some(o) = stale {
        if r.status == 304 {
            return not_modified(c, asked, o, &r.headers, sent, now, lead);
        }
        if matches!(r.status, 500 | 502 | 503 | 504) && o.meta.freshness.usable_on_error(now) {
            return Fetched::Failed(Outcome::Respond(r));
        }
    }
    let decided = policy::storable(
        asked,
        &Answer {
            status: r.status,
            fields: &r.headers,
        },
        c.rule,
        sent,
        now,
    );
    let zone = c.store.zone();
    let length = r.body.length();
    // Small answers to memory; larger ones to disk when there is a disk tier, else to
    // memory too; none larger than max_object.
    let has_disk = c.store.disk().is_some();
    let tier = match length {
        Some(n) if n > zone.max_object => None,
        Some(n) if n <= zone.memory_object_max || !has_disk => Some(Tier::Memory),
        _ if has_disk => Some(Tier::Disk),
        _ => Some(Tier::Memory),
    };
    let streamable = matches!(r.body, Body::Empty | Body::Bytes(_) | Body::Stream(_));
    let (freshness, tier) = match (decided, tier) {
        (Ok(f), Some(t)) if streamable => (f, t),
        (decided, _) => {
            // A newer answer that may not be stored replaces the stored one too.
            if let Some(o) = stale {
                c.store.update(lead.key(), o.id, None);
            }
            lead.pass(now);
            Counts::add(&c.store.counts.bypass, 1);
            without_date(&mut r.headers);
            let why = decided.err().unwrap_or("too large");
            cache_status(
                &mut r,
                &c.rule.identity,
                &format!("fwd=uri-miss; detail=\"{why}\""),
            );
            return Fetched::Passed(Outcome::Respond(r));
        }
    };
    if stale.is_none() {
        Counts::add(&c.store.counts.misses, 1);
    }
    Counts::add(&c.store.counts.miss_bytes, length.unwrap_or(0));
    let fields = stored_fields(&r.headers, c.rule.ignore_set_cookie);
    let vary: Vec<_> = key::vary_names(&fields)
        .into_iter()
        .map(|n| {
            let v = key::field_value(ask.head, &n).map(Vec::into_boxed_slice);
            (n, v)
        })
        .collect();
    let k: Box<[u8]> = lead.key().into();
    let hash = key::hash(&k, &vary);
    let meta = Meta {
        key: k.clone(),
        status: r.status,
        fields: Bytes::from(fields),
        vary,
        freshness,
        length: length.unwrap_or(0),
    };
    let store = c.store.clone();
    let id = store.next_id();
    let o = match std::mem::replace(&mut r.body, Body::Empty) {
        Body::Stream(src) => {
            let fill = Fill::new(length, tier == Tier::Memory);
            let o = Arc::new(Object::new(
                id,
                hash,
                meta,
                Stored::Filling(fill.clone()),
                None,
            ));
            lead.stored(o.clone());
            tokio::task::spawn_local(fetch::fill(store, k, o.clone(), fill, src, tier));
            o
        }
        body => {
            let bytes = match body {
                Body::Bytes(b) => b,
                _ => Bytes::new(),
            };
            let mut meta = meta;
            meta.length = bytes.len() as u64;
            let o = Arc::new(Object::new(id, hash, meta, Stored::Memory(bytes), None));
            lead.stored(o.clone());
            Counts::add(&store.counts.stored, 1);
            if store.disk().is_some() {
                tokio::task::spawn_local(fetch::write_through(store, k, o.clone()));
            }
            o
        }
    };
    Fetched::Stored(o, r.extras.take())
}

/// RFC 9111 §4.3.4: the 304's fields replace the stored ones of the same names, and the
/// freshness is worked out again.
fn not_modified(
    c: &Cached<'_>,
    asked: &Asked,
    o: &Arc<Object>,
    fresh: &[u8],
    sent: u64,
    now: u64,
    lead: Lead,
) -> Fetched {
    Counts::add(&c.store.counts.revalidated, 1);
    let merged = merge(&o.meta.fields, fresh);
    let mut for_policy = merged.clone();
    if let Some(v) = policy::value(fresh, b"age") {
        field_line(&mut for_policy, b"age", v);
    }
    let decided = policy::storable(
        asked,
        &Answer {
            status: o.meta.status,
            fields: &for_policy,
        },
        c.rule,
        sent,
        now,
    );
    let mut meta = o.meta.clone();
    meta.fields = Bytes::from(merged);
    let Ok(freshness) = decided else {
        // No longer storable: served once more, then forgotten.
        c.store.update(lead.key(), o.id, None);
        drop(lead);
        return Fetched::NotModified(Arc::new(o.with(0, meta, o.body.clone(), None)));
    };
    meta.freshness = freshness;
    let store = c.store.clone();
    let updated = Arc::new(o.with(store.next_id(), meta, o.body.clone(), o.disk.clone()));
    lead.stored(updated.clone());
    if let Some(file) = updated.disk.clone() {
        let meta = updated.meta.clone();
        tokio::task::spawn_blocking(move || {
            let _ = ramjet_cache::disk::Disk::write_meta(&file, &meta);
        });
    }
    Fetched::NotModified(updated)
}

/// Stored fields with every field the 304 carries replaced by its lines (its `Date` too),
/// except the ones that describe the stored body itself (and Age, the cache's to compute).
fn merge(stored: &[u8], fresh: &[u8]) -> Vec<u8> {
    let name_of = |line: &[u8]| -> Vec<u8> {
        line.split(|&b| b == b':')
            .next()
            .unwrap_or(b"")
            .to_ascii_lowercase()
    };
    let kept_back = |n: &[u8]| {
        matches!(
            n,
            b"content-length"
                | b"content-range"
                | b"content-encoding"
                | b"content-md5"
                | b"etag"
                | b"age"
                | b"surrogate-control"
        )
    };
    let replaced: Vec<Vec<u8>> = fresh
        .split_inclusive(|&b| b == b'\n')
        .map(name_of)
        .filter(|n| !n.is_empty() && !kept_back(n))
        .collect();
    let mut out = Vec::with_capacity(stored.len() + fresh.len());
    for line in stored.split_inclusive(|&b| b == b'\n') {
        if !replaced.contains(&name_of(line)) {
            out.extend_from_slice(line);
        }
    }
    for line in fresh.split_inclusive(|&b| b == b'\n') {
        let n = name_of(line);
        if !n.is_empty() && !kept_back(&n) {
            out.extend_from_slice(line);
        }
    }
    out
}

/// The fields stored: the origin's (its `Date` included, which hits carry), without `Age`
/// (the cache sends its own), `Surrogate-Control` (meant for this cache), and `Set-Cookie` when
/// the location stores answers that carry it.
fn stored_fields(fields: &[u8], drop_set_cookie: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(fields.len());
    for line in fields.split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or(b"");
        let skip = name.eq_ignore_ascii_case(b"age")
            || name.eq_ignore_ascii_case(b"surrogate-control")
            || (drop_set_cookie && name.eq_ignore_ascii_case(b"set-cookie"));
        if !skip {
            out.extend_from_slice(line);
        }
    }
    out
}

/// An answer not stored is passed on without the `Date` the exchange kept.
fn without_date(fields: &mut Vec<u8>) {
    if policy::value(fields, b"date").is_none() {
        return;
    }
    let mut out = Vec::with_capacity(fields.len());
    for line in fields.split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or(b"");
        if !name.eq_ignore_ascii_case(b"date") {
            out.extend_from_slice(line);
        }
    }
    *fields = out;
}

/// What a background revalidation keeps of the request that started it, and of the
/// location's proxy and cache.
pub(crate) struct Owned {
    pub(crate) shared: Rc<Shared>,
    pub(crate) state: Rc<UpstreamState>,
    pub(crate) opts: ProxyOptions,
    pub(crate) rule: Arc<CacheRule>,
    pub(crate) store: Arc<Store>,
    pub(crate) raw: Vec<u8>,
    pub(crate) path: Vec<u8>,
    pub(crate) query: Option<String>,
    pub(crate) prefix: String,
    pub(crate) client: SocketAddr,
    pub(crate) secure: bool,
    pub(crate) limits: Limits,
}

/// Revalidate `stale` in a task of its own (stale-while-revalidate): the client that found
/// it stale has been answered already.
pub(crate) fn background(request: Owned, asked: Asked, stale: Arc<Object>, lead: Lead) {
    tokio::task::spawn_local(async move {
        let Parse::Complete(head) = parse_request_head(&request.raw, &request.limits) else {
            return;
        };
        let ask = Asking {
            head: &head,
            path: &request.path,
            query: request.query.as_deref(),
            prefix: &request.prefix,
            client: request.client,
            secure: request.secure,
            body: None,
        };
        let c = Cached {
            shared: &request.shared,
            state: request.state.clone(),
            opts: &request.opts,
            rule: &request.rule,
            store: request.store.clone(),
        };
        let _ = refresh(&c, &ask, &request.limits, &asked, Some(&stale), lead).await;
    });
}
