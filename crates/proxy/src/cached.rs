//! A proxy location with a `cache`: the RFC 9111 flow around [`exchange::forward`].
//!
//! GET: look the key up (`Vary` variants included). A stored answer the policy lets serve is
//! answered through the response filters (`cache::Hit` is a `Representation`), with `Age`
//! and `Cache-Status`; a stale one with `stale-while-revalidate` is served and refreshed in
//! a task of its own. Otherwise one request per key (on any worker) leads the fetch and the
//! others wait for it: a miss is fetched whole (the client's conditionals and range are
//! kept back from the origin and applied to the stored answer), a stale answer is
//! revalidated with its validators (a 304 refreshes its head), and, when the origin fails,
//! a stale answer within `stale-if-error` is served instead of the error. An answer that
//! may not be stored releases the waiters to go to the origin side by side (and requests
//! for the next [`store::PASS_FOR_MS`] do not wait at all). Unsafe methods are forwarded
//! and, when they succeed, invalidate the target (and its `Location`/`Content-Location`).
//! `PURGE` from an allowed address removes a key, or every key under a path ending in `*`.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ramjet_cache::fetch::{self, Tier};
use ramjet_cache::fill::Fill;
use ramjet_cache::meta::Meta;
use ramjet_cache::policy::{self, Answer, Asked, Use};
use ramjet_cache::store::{self, Counts};
use ramjet_cache::{key, now_ms, Hit, Lookup, Object, Store, Stored};
use ramjet_config::{CacheRule, ProxyOptions};
use ramjet_http1::range::{parse_range, RangeOutcome};
use ramjet_http1::{parse_request_head, Method, Parse, RequestHead};
use ramjet_pipeline::filters::conditional::{evaluate, if_range_holds, Verdict};
use ramjet_pipeline::filters::{self, Representation};
use ramjet_pipeline::{error_response, Body, Outcome, Request, Response};

use crate::exchange;
use crate::handler::{Shared, UpstreamState};

/// How long a request waits for another's fetch of the same key before going itself.
const WAIT_MAX: Duration = Duration::from_secs(30);

/// Request fields a fill does not send to the origin (they are answered from the stored
/// object), and the ones a revalidation replaces.
const HELD_BACK: [&[u8]; 6] = [
    b"range",
    b"if-range",
    b"if-none-match",
    b"if-modified-since",
    b"if-match",
    b"if-unmodified-since",
];

pub(crate) struct Cached<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) state: Rc<UpstreamState>,
    pub(crate) opts: &'a ProxyOptions,
    pub(crate) rule: &'a CacheRule,
    pub(crate) store: Arc<Store>,
}

pub(crate) async fn serve(c: Cached<'_>, req: &Request<'_>) -> Outcome {
    let counts = &c.store.counts;
    let method = req.head.method;
    if req.head.method_token == "PURGE" && !c.rule.purge.is_empty() {
        return purge(&c, req);
    }
    if !matches!(method, Method::Get | Method::Head)
        || req.head.framing != ramjet_http1::BodyFraming::None
    {
        let unsafe_method = !matches!(
            method,
            Method::Get | Method::Head | Method::Options | Method::Trace
        );
        let out = exchange::forward(c.shared, c.state.clone(), req, c.opts, false).await;
        Counts::add(&counts.bypass, 1);
        if unsafe_method {
            if let Outcome::Respond(r) = &out {
                if (200..400).contains(&r.status) {
                    invalidate(&c, req, &r.headers);
                }
            }
        }
        return with_status(out, "fwd=bypass");
    }
    let asked = Asked::from_head(req.head);
    let mut k = Vec::with_capacity(64);
    key::build(&mut k, &c.rule.key, req.head, req.secure);
    let started = tokio::time::Instant::now();
    let mut collapsed = false;
    loop {
        let now = now_ms();
        let lookup = if method == Method::Head {
            // A HEAD is answered from a stored GET, else passed on (never stored, and it
            // does not hold up the GETs).
            match c.store.lookup(&k, req.head, now) {
                Lookup::Found(o) => Lookup::Found(o),
                _ => Lookup::Pass,
            }
        } else {
            c.store.lookup(&k, req.head, now)
        };
        match lookup {
            Lookup::Found(o) => match policy::usable(&o.meta.freshness, &asked, now) {
                Use::Fresh => {
                    Counts::add(&counts.hits, 1);
                    Counts::add(&counts.hit_bytes, o.meta.length);
                    return Outcome::Respond(answer(
                        &o,
                        req,
                        now,
                        if collapsed { "hit; collapsed" } else { "hit" },
                    ));
                }
                Use::StaleRevalidate => {
                    // One request revalidates; the others meanwhile get the stale answer.
                    if let Lookup::Lead(lead) = c.store.begin(&k, now) {
                        return revalidate(&c, req, &asked, o, lead).await;
                    }
                    Counts::add(&counts.stale, 1);
                    return Outcome::Respond(answer(
                        &o,
                        req,
                        now,
                        "hit; detail=stale-while-revalidate",
                    ));
                }
                Use::Revalidate if asked.directives.only_if_cached => return only_if_cached(),
                Use::Revalidate if method == Method::Head => return pass(&c, req).await,
                Use::Revalidate => match c.store.begin(&k, now) {
                    Lookup::Lead(lead) => return revalidate(&c, req, &asked, o, lead).await,
                    Lookup::Wait(rx) if started.elapsed() < WAIT_MAX => {
                        collapsed = true;
                        wait(rx, started).await;
                    }
                    _ => return revalidate_alone(&c, req, &asked, o).await,
                },
            },
            _ if asked.directives.only_if_cached => return only_if_cached(),
            Lookup::Wait(rx) if started.elapsed() < WAIT_MAX => {
                Counts::add(&counts.collapsed, 1);
                collapsed = true;
                wait(rx, started).await;
            }
            Lookup::Lead(lead) => {
                Counts::add(&counts.misses, 1);
                let out = fetch_for(&c, req, &[]).await;
                return miss(
                    &c,
                    req,
                    &asked,
                    out,
                    Some(lead),
                    None,
                    if collapsed {
                        "fwd=miss; stored; collapsed"
                    } else {
                        "fwd=miss; stored"
                    },
                )
                .await;
            }
            Lookup::Wait(_) | Lookup::Pass => return pass(&c, req).await,
        }
    }
}

async fn wait(mut rx: tokio::sync::watch::Receiver<bool>, started: tokio::time::Instant) {
    let _ = tokio::time::timeout_at(started + WAIT_MAX, rx.wait_for(|done| *done)).await;
}

fn only_if_cached() -> Outcome {
    let mut r = error_response(504);
    r.headers
        .extend_from_slice(b"Cache-Status: ramjet; fwd=miss; detail=only-if-cached\r\n");
    Outcome::Respond(r)
}

/// Forward without storing.
async fn pass(c: &Cached<'_>, req: &Request<'_>) -> Outcome {
    Counts::add(&c.store.counts.bypass, 1);
    let out = exchange::forward(c.shared, c.state.clone(), req, c.opts, false).await;
    with_status(out, "fwd=uri-miss")
}

fn with_status(mut out: Outcome, status: &str) -> Outcome {
    if let Outcome::Respond(r) = &mut out {
        cache_status(r, status);
    }
    out
}

fn cache_status(r: &mut Response, status: &str) {
    r.headers.extend_from_slice(b"Cache-Status: ramjet; ");
    r.headers.extend_from_slice(status.as_bytes());
    r.headers.extend_from_slice(b"\r\n");
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

/// Forward the client's GET as the cache sends it (with `extra` lines), keeping the
/// origin's `Date`. Returns the outcome and when the request was sent.
async fn fetch_for(c: &Cached<'_>, req: &Request<'_>, extra: &[u8]) -> (Outcome, u64) {
    let raw = origin_head(req.head, extra);
    let mut limits = req.config.limits.http1;
    limits.max_head = limits.max_head.max(raw.len());
    limits.max_target = limits.max_target.max(raw.len());
    let sent = now_ms();
    let Parse::Complete(head) = parse_request_head(&raw, &limits) else {
        return (
            exchange::forward(c.shared, c.state.clone(), req, c.opts, true).await,
            sent,
        );
    };
    let r = Request {
        head: &head,
        path: req.path,
        raw_path: req.raw_path,
        query: req.query,
        location: req.location,
        config: req.config,
        now: req.now,
        client: req.client,
        listener: req.listener,
        secure: req.secure,
        body: req.body,
    };
    (
        exchange::forward(c.shared, c.state.clone(), &r, c.opts, true).await,
        sent,
    )
}

/// Remove the `Date` line the exchange kept for us (and `Age`: the cache sends its own),
/// returning the fields to store and the ones the policy reads.
fn split_fields(fields: &[u8], drop_set_cookie: bool) -> (Vec<u8>, Vec<u8>) {
    let mut stored = Vec::with_capacity(fields.len());
    for line in fields.split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or(b"");
        let skip = name.eq_ignore_ascii_case(b"date")
            || name.eq_ignore_ascii_case(b"age")
            || name.eq_ignore_ascii_case(b"surrogate-control")
            || (drop_set_cookie && name.eq_ignore_ascii_case(b"set-cookie"));
        if !skip {
            stored.extend_from_slice(line);
        }
    }
    (stored, fields.to_vec())
}

/// Fields passed on to the client from an answer not stored: without the kept `Date`.
fn without_date(r: &mut Response) {
    if policy::value(&r.headers, b"date").is_none() {
        return;
    }
    let mut out = Vec::with_capacity(r.headers.len());
    for line in r.headers.split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or(b"");
        if !name.eq_ignore_ascii_case(b"date") {
            out.extend_from_slice(line);
        }
    }
    r.headers = out;
}

/// The origin answered a fill (or a revalidation with a new answer): store it if allowed,
/// and answer the client from it.
async fn miss(
    c: &Cached<'_>,
    req: &Request<'_>,
    asked: &Asked,
    (out, sent): (Outcome, u64),
    lead: Option<store::Lead>,
    stale: Option<&Arc<Object>>,
    status: &str,
) -> Outcome {
    let now = now_ms();
    let mut r = match out {
        Outcome::Respond(r) => r,
        other => {
            if let Some(o) = stale.filter(|o| o.meta.freshness.usable_on_error(now)) {
                Counts::add(&c.store.counts.stale, 1);
                return Outcome::Respond(answer(
                    o,
                    req,
                    now,
                    "hit; fwd=stale; detail=stale-if-error",
                ));
            }
            return other;
        }
    };
    if let Some(o) = stale.filter(|o| {
        matches!(r.status, 500 | 502 | 503 | 504) && o.meta.freshness.usable_on_error(now)
    }) {
        Counts::add(&c.store.counts.stale, 1);
        return Outcome::Respond(answer(o, req, now, "hit; fwd=stale; detail=stale-if-error"));
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
    let tier = match length {
        Some(n) if n <= zone.memory_object_max => Some(Tier::Memory),
        Some(n) if n > zone.max_object => None,
        _ if c.store.disk().is_some() => Some(Tier::Disk),
        None => Some(Tier::Memory),
        Some(_) => None,
    };
    let streamable = matches!(r.body, Body::Empty | Body::Bytes(_) | Body::Stream(_));
    let (freshness, tier, lead) = match (decided, tier, lead) {
        (Ok(f), Some(t), Some(l)) if streamable => (f, t, l),
        (decided, _, lead) => {
            if let Some(l) = lead {
                l.pass(now);
            }
            without_date(&mut r);
            let why = match decided {
                Err(why) => why,
                Ok(_) => "too large",
            };
            cache_status(&mut r, &format!("fwd=uri-miss; detail=\"{why}\""));
            return Outcome::Respond(r);
        }
    };
    Counts::add(&c.store.counts.miss_bytes, length.unwrap_or(0));
    let (fields, _) = split_fields(&r.headers, c.rule.ignore_set_cookie);
    let names = key::vary_names(&fields);
    let vary: Vec<_> = names
        .into_iter()
        .map(|n| {
            let v = key::field_value(req.head, &n).map(Vec::into_boxed_slice);
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
    let extras = r.extras.take();
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
    let mut out = answer(&o, req, now, status);
    out.extras = extras;
    Outcome::Respond(out)
}

/// Revalidate a stored answer for everyone (this request leads): a 304 refreshes its head
/// and freshness; anything else is a new answer (or an error that stale-if-error covers).
async fn revalidate(
    c: &Cached<'_>,
    req: &Request<'_>,
    asked: &Asked,
    o: Arc<Object>,
    lead: store::Lead,
) -> Outcome {
    let mut extra = Vec::new();
    if !o.etag.is_empty() {
        extra.extend_from_slice(b"If-None-Match: ");
        extra.extend_from_slice(&o.etag);
        extra.extend_from_slice(b"\r\n");
    }
    if let Some(lm) = policy::value(&o.meta.fields, b"last-modified") {
        extra.extend_from_slice(b"If-Modified-Since: ");
        extra.extend_from_slice(lm);
        extra.extend_from_slice(b"\r\n");
    }
    let (out, sent) = fetch_for(c, req, &extra).await;
    let now = now_ms();
    let r = match &out {
        Outcome::Respond(r) if r.status == 304 => r,
        _ => {
            let status = "fwd=stale; stored";
            return miss(c, req, asked, (out, sent), Some(lead), Some(&o), status).await;
        }
    };
    // RFC 9111 §4.3.4: the 304's fields replace the stored ones of the same names.
    let merged = merge(&o.meta.fields, &r.headers);
    let mut for_policy = merged.clone();
    if let Some(d) = policy::value(&r.headers, b"date") {
        for_policy.extend_from_slice(b"Date: ");
        for_policy.extend_from_slice(d);
        for_policy.extend_from_slice(b"\r\n");
    }
    if let Some(a) = policy::value(&r.headers, b"age") {
        for_policy.extend_from_slice(b"Age: ");
        for_policy.extend_from_slice(a);
        for_policy.extend_from_slice(b"\r\n");
    }
    Counts::add(&c.store.counts.revalidated, 1);
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
    let freshness = match decided {
        Ok(f) => f,
        Err(_) => {
            // No longer storable: this answer is served once more and then forgotten.
            c.store.remove(lead.key());
            drop(lead);
            let gone = o.with(0, meta, o.body.clone(), None);
            return Outcome::Respond(answer(&gone, req, now, "fwd=stale; fwd-status=304"));
        }
    };
    meta.freshness = freshness;
    let store = c.store.clone();
    let updated = Arc::new(o.with(store.next_id(), meta, o.body.clone(), o.disk.clone()));
    lead.stored(updated.clone());
    if let (Some(d), Some(_)) = (store.disk(), &updated.disk) {
        let (dir, hash, meta) = (d.dir.clone(), updated.hash, updated.meta.clone());
        tokio::task::spawn_blocking(move || {
            let _ = ramjet_cache::disk::Disk { dir }.write_meta(hash, &meta);
        });
    }
    Outcome::Respond(answer(&updated, req, now, "fwd=stale; fwd-status=304"))
}

/// Stored fields with every field the 304 carries replaced by its lines (except the ones
/// that describe the stored body's framing).
fn merge(stored: &[u8], fresh: &[u8]) -> Vec<u8> {
    let name_of = |line: &[u8]| -> Vec<u8> {
        line.split(|&b| b == b':')
            .next()
            .unwrap_or(b"")
            .to_ascii_lowercase()
    };
    // The fields that describe the stored body itself stay as stored (and Date and Age
    // are the cache's to compute).
    let kept_back = |n: &[u8]| {
        matches!(
            n,
            b"content-length"
                | b"content-range"
                | b"content-encoding"
                | b"content-md5"
                | b"etag"
                | b"date"
                | b"age"
        )
    };
    let mut replaced: Vec<Vec<u8>> = Vec::new();
    for line in fresh.split_inclusive(|&b| b == b'\n') {
        let n = name_of(line);
        if !n.is_empty() && !kept_back(&n) {
            replaced.push(n);
        }
    }
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

/// Revalidation without the lead (another fetch of the key is stuck or passing): the
/// request goes to the origin as the client sent it.
async fn revalidate_alone(
    c: &Cached<'_>,
    req: &Request<'_>,
    _asked: &Asked,
    _o: Arc<Object>,
) -> Outcome {
    pass(c, req).await
}

/// PURGE from an allowed address: the key (all its variants), or with a path ending in
/// `*` every key under that path.
fn purge(c: &Cached<'_>, req: &Request<'_>) -> Outcome {
    if !c.rule.may_purge(req.client.ip()) {
        return Outcome::Respond(error_response(403));
    }
    let path = req.head.path;
    let n = match path.strip_suffix('*') {
        Some(prefix) => {
            let p = key::prefix(&c.rule.key, req.head, req.secure, prefix);
            if p.is_empty() {
                return Outcome::Respond(error_response(400));
            }
            c.store.remove_prefix(&p)
        }
        None => {
            let mut k = Vec::new();
            key::build(&mut k, &c.rule.key, req.head, req.secure);
            c.store.remove(&k)
        }
    };
    let status = if n == 0 { 404 } else { 200 };
    let body = format!("{{\"purged\": {n}}}\n");
    Outcome::Respond(
        Response::new(status, Body::Bytes(Bytes::from(body)))
            .header("Content-Type", b"application/json"),
    )
}

/// After an unsafe method succeeded: the target, and the `Location` and
/// `Content-Location` of the answer on the same host, are no longer served from storage.
fn invalidate(c: &Cached<'_>, req: &Request<'_>, answer_fields: &[u8]) {
    let mut k = Vec::new();
    key::build(&mut k, &c.rule.key, req.head, req.secure);
    c.store.remove(&k);
    let host = req.head.host.unwrap_or(b"");
    for name in [&b"location"[..], b"content-location"] {
        let Some(v) = policy::value(answer_fields, name) else {
            continue;
        };
        let Ok(v) = std::str::from_utf8(v) else {
            continue;
        };
        // Same origin only: a path, or an absolute URI naming this host.
        let path = if v.starts_with('/') {
            v.to_string()
        } else {
            let rest = v
                .strip_prefix("http://")
                .or_else(|| v.strip_prefix("https://"))
                .unwrap_or("");
            let (h, p) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            if !h.as_bytes().eq_ignore_ascii_case(host) || p.is_empty() {
                continue;
            }
            p.to_string()
        };
        let raw = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n",
            String::from_utf8_lossy(host)
        );
        if let Parse::Complete(h) = parse_request_head(raw.as_bytes(), &req.config.limits.http1) {
            key::build(&mut k, &c.rule.key, &h, req.secure);
            c.store.remove(&k);
        }
    }
}

/// Serve a stored object: the filters for a complete 200, its own status otherwise.
fn answer(o: &Object, req: &Request<'_>, now: u64, status: &str) -> Response {
    let mut r = if o.meta.status != 200 {
        let mut r = Response::new(o.meta.status, Hit(o).body());
        r.shared_headers = o.meta.fields.clone();
        r
    } else if let Stored::Filling(fill) = &o.body {
        filling(o, fill, req)
    } else {
        filters::respond(req.head, &Hit(o), ramjet_config::DEFAULT_MAX_RANGES)
    };
    r.headers.extend_from_slice(b"Age: ");
    r.headers.extend_from_slice(
        itoa::Buffer::new()
            .format(o.meta.freshness.age_ms(now) / 1000)
            .as_bytes(),
    );
    r.headers.extend_from_slice(b"\r\n");
    cache_status(&mut r, status);
    r
}

/// A 200 still arriving: preconditions now, a single range as soon as its bytes are there.
fn filling(o: &Object, fill: &Arc<Fill>, req: &Request<'_>) -> Response {
    match evaluate(req.head, &o.etag, o.modified) {
        Verdict::NotModified => {
            let mut r = Response::new(304, Body::Empty);
            r.shared_headers = o.validators.clone();
            return r;
        }
        Verdict::PreconditionFailed => return error_response(412),
        Verdict::Proceed => {}
    }
    if let (Method::Get, Some(range), Some(len)) = (req.head.method, req.head.range, fill.length) {
        let applies = req
            .head
            .if_range
            .is_none_or(|v| if_range_holds(v, &o.etag, o.modified));
        if applies {
            if let RangeOutcome::Partial(rs) = parse_range(range, len, 1) {
                if let [ramjet_http1::range::ByteRange { start, end }] = rs[..] {
                    let mut r =
                        Response::new(206, Body::Stream(Box::new(fill.reader(start, Some(end)))));
                    r.shared_headers = o.meta.fields.clone();
                    r.headers.extend_from_slice(
                        format!("Content-Range: bytes {start}-{}/{len}\r\n", end - 1).as_bytes(),
                    );
                    return r;
                }
            }
        }
    }
    let mut r = Response::new(200, Hit(o).body());
    r.shared_headers = o.meta.fields.clone();
    r
}
