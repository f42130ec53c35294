//! A proxy location with a `cache`: the RFC 9111 flow around [`exchange::forward`].
//!
//! GET: look the key up (`Vary` variants included). A stored answer the policy lets serve is
//! answered through the response filters (`cache::Hit` is a `Representation`), with `Age`
//! and `Cache-Status` ([`answer`]); a stale one within `stale-while-revalidate` is served
//! while a task of its own revalidates it. Otherwise one request per key (on any worker)
//! leads the fetch and the others wait for it ([`refresh`]): a miss is fetched whole (the
//! client's conditionals and range are kept back from the origin and applied to the stored
//! answer), a stale answer is revalidated with its validators (a 304 refreshes its head),
//! and, when the origin fails, a stale answer within `stale-if-error` is served instead of
//! the error. An answer that may not be stored releases the waiters to go to the origin
//! side by side (and requests for the next `store::PASS_FOR_MS` do not wait at all).
//! Methods that change state (not safe, RFC 9110 §9.2.1) are forwarded and, when they
//! succeed, invalidate the target (and its `Location`/`Content-Location`). `PURGE` from an
//! allowed address removes a key, or every key under a path ending in `*`.

mod answer;
mod refresh;

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ramjet_cache::policy::{self, Asked, Use};
use ramjet_cache::store::{Counts, Lead};
use ramjet_cache::{key, now_ms, Lookup, Object, Store};
use ramjet_config::{CacheRule, ProxyOptions};
use ramjet_http1::{parse_request_head, Method, Parse};
use ramjet_pipeline::{error_response, Body, Outcome, Request, Response};

use crate::exchange::{self, Asking};
use crate::handler::{Shared, UpstreamState};
use answer::{answer, with_status};
use refresh::{Fetched, Owned};

/// How long a request waits for another's fetch of the same key before going itself.
const WAIT_MAX: Duration = Duration::from_secs(30);

pub(crate) struct Cached<'a> {
    pub(crate) shared: &'a Rc<Shared>,
    pub(crate) state: Rc<UpstreamState>,
    pub(crate) opts: &'a ProxyOptions,
    pub(crate) rule: &'a Arc<CacheRule>,
    pub(crate) store: Arc<Store>,
}

pub(crate) async fn serve(c: Cached<'_>, req: &Request<'_>) -> Outcome {
    let counts = &c.store.counts;
    let method = req.head.method;
    if req.head.method_token == "PURGE" && !c.rule.purge.is_empty() {
        return purge(&c, req);
    }
    let ask = Asking::of(req);
    if !matches!(method, Method::Get | Method::Head)
        || req.head.framing != ramjet_http1::BodyFraming::None
    {
        let changes_state = !matches!(
            method,
            Method::Get | Method::Head | Method::Options | Method::Trace
        );
        let out = exchange::forward(c.shared, c.state.clone(), &ask, c.opts, false).await;
        Counts::add(&counts.bypass, 1);
        if changes_state {
            if let Outcome::Respond(r) = &out {
                if (200..400).contains(&r.status) {
                    invalidate(&c, req, &r.headers);
                }
            }
        }
        return with_status(out, &c.rule.identity, "fwd=bypass");
    }
    let asked = Asked::from_head(req.head);
    let mut k = Vec::with_capacity(64);
    key::build(&mut k, &c.rule.key, req.head, req.secure);
    let started = tokio::time::Instant::now();
    let arrived = now_ms();
    let mut collapsed = false;
    loop {
        let now = now_ms();
        let lookup = if method == Method::Head {
            // A HEAD is answered from a stored GET, else passed on (never stored, and it
            // neither leads nor waits for the GETs).
            c.store
                .peek(&k, req.head)
                .map_or(Lookup::Pass, Lookup::Found)
        } else {
            c.store.lookup(&k, req.head, now)
        };
        match lookup {
            // An answer received after this request arrived (the fetch it waited for) is
            // served as it is, even if it must be revalidated before every use (no-cache,
            // max-age=0, a client's no-cache): otherwise the waiters of a fetch would
            // revalidate one after another (Varnish's lesson).
            Lookup::Found(o) if collapsed && o.meta.freshness.response_time_ms >= arrived => {
                Counts::add(&counts.hits, 1);
                Counts::add(&counts.hit_bytes, o.meta.length);
                return Outcome::Respond(answer(
                    &o,
                    req.head,
                    now,
                    &c.rule.identity,
                    "hit; collapsed",
                ));
            }
            // A waiter whose fetch failed (the answer is unchanged) takes the stale answer
            // within stale-if-error rather than trying the origin again after the others.
            Lookup::Found(o)
                if collapsed
                    && o.meta.freshness.usable_on_error(now)
                    && policy::usable(&o.meta.freshness, &asked, now) != Use::Fresh =>
            {
                Counts::add(&counts.stale, 1);
                let status = "hit; fwd=stale; detail=stale-if-error";
                return Outcome::Respond(answer(&o, req.head, now, &c.rule.identity, status));
            }
            Lookup::Found(o) => match policy::usable(&o.meta.freshness, &asked, now) {
                Use::Fresh => {
                    Counts::add(&counts.hits, 1);
                    Counts::add(&counts.hit_bytes, o.meta.length);
                    let status = if collapsed { "hit; collapsed" } else { "hit" };
                    return Outcome::Respond(answer(&o, req.head, now, &c.rule.identity, status));
                }
                Use::StaleRevalidate => {
                    if let Lookup::Lead(lead) = c.store.begin(&k, now) {
                        revalidate_later(&c, req, asked, o.clone(), lead);
                    }
                    Counts::add(&counts.stale, 1);
                    let status = "hit; fwd=stale; detail=stale-while-revalidate";
                    return Outcome::Respond(answer(&o, req.head, now, &c.rule.identity, status));
                }
                Use::Revalidate if asked.directives.only_if_cached => {
                    return only_if_cached(&c.rule.identity)
                }
                Use::Revalidate if method == Method::Head => return pass(&c, &ask).await,
                Use::Revalidate => match c.store.begin(&k, now) {
                    Lookup::Lead(lead) => {
                        let limits = &req.config.limits.http1;
                        let got = refresh::refresh(&c, &ask, limits, &asked, Some(&o), lead).await;
                        return client_answer(&c, req, got, Some(&o), "fwd=stale; stored");
                    }
                    Lookup::Wait(rx) if started.elapsed() < WAIT_MAX => {
                        collapsed = true;
                        wait(rx, started).await;
                    }
                    _ => return pass(&c, &ask).await,
                },
            },
            _ if asked.directives.only_if_cached => return only_if_cached(&c.rule.identity),
            Lookup::Wait(rx) if started.elapsed() < WAIT_MAX => {
                Counts::add(&counts.collapsed, 1);
                collapsed = true;
                wait(rx, started).await;
            }
            Lookup::Lead(lead) => {
                let limits = &req.config.limits.http1;
                let got = refresh::refresh(&c, &ask, limits, &asked, None, lead).await;
                let status = if collapsed {
                    "fwd=miss; stored; collapsed"
                } else {
                    "fwd=miss; stored"
                };
                return client_answer(&c, req, got, None, status);
            }
            Lookup::Wait(_) | Lookup::Pass => return pass(&c, &ask).await,
        }
    }
}

/// A fresh hit for a GET or HEAD, answered at once (no boxed work, as a static file's cache
/// hit): `None` sends the request through [`serve`].
pub(crate) fn fresh_hit(store: &Store, rule: &CacheRule, req: &Request<'_>) -> Option<Outcome> {
    if !matches!(req.head.method, Method::Get | Method::Head)
        || req.head.framing != ramjet_http1::BodyFraming::None
    {
        return None;
    }
    let mut k = Vec::with_capacity(64);
    key::build(&mut k, &rule.key, req.head, req.secure);
    let o = store.peek(&k, req.head)?;
    let now = now_ms();
    if policy::usable(&o.meta.freshness, &Asked::from_head(req.head), now) != Use::Fresh {
        return None;
    }
    Counts::add(&store.counts.hits, 1);
    Counts::add(&store.counts.hit_bytes, o.meta.length);
    Some(Outcome::Respond(answer(
        &o,
        req.head,
        now,
        &rule.identity,
        "hit",
    )))
}

/// The client's answer after a fetch: from the stored object, or what passed, or a stale
/// answer within stale-if-error in place of a failure.
fn client_answer(
    c: &Cached<'_>,
    req: &Request<'_>,
    got: Fetched,
    stale: Option<&Arc<Object>>,
    status: &str,
) -> Outcome {
    let now = now_ms();
    match got {
        Fetched::Stored(o, extras) => {
            let mut out = answer(&o, req.head, now, &c.rule.identity, status);
            // The exchange's log fields (server, time), with the cache's word.
            let word = out
                .extras
                .as_ref()
                .and_then(|x| x.upstream.as_ref())
                .map(|u| u.cache);
            if let (Some(mut e), Some(word)) = (extras, word) {
                if let Some(u) = e.upstream.as_mut() {
                    u.cache = word;
                }
                out.extras = Some(e);
            }
            Outcome::Respond(out)
        }
        Fetched::NotModified(o) => Outcome::Respond(answer(
            &o,
            req.head,
            now,
            &c.rule.identity,
            "fwd=stale; fwd-status=304",
        )),
        Fetched::Passed(out) => out,
        Fetched::Failed(out) => match stale.filter(|o| o.meta.freshness.usable_on_error(now)) {
            Some(o) => {
                Counts::add(&c.store.counts.stale, 1);
                let status = "hit; fwd=stale; detail=stale-if-error";
                Outcome::Respond(answer(o, req.head, now, &c.rule.identity, status))
            }
            None => out,
        },
    }
}

/// Hand a stale-while-revalidate refresh to a task of its own.
fn revalidate_later(c: &Cached<'_>, req: &Request<'_>, asked: Asked, o: Arc<Object>, lead: Lead) {
    let request = Owned {
        shared: c.shared.clone(),
        state: c.state.clone(),
        opts: c.opts.clone(),
        rule: c.rule.clone(),
        store: c.store.clone(),
        raw: req.head.raw.to_vec(),
        path: req.path.to_vec(),
        query: req.query.map(str::to_string),
        prefix: req.location.prefix.clone(),
        client: req.client,
        secure: req.secure,
        limits: req.config.limits.http1,
    };
    refresh::background(request, asked, o, lead);
}

async fn wait(mut rx: tokio::sync::watch::Receiver<bool>, started: tokio::time::Instant) {
    let _ = tokio::time::timeout_at(started + WAIT_MAX, rx.wait_for(|done| *done)).await;
}

fn only_if_cached(cache: &str) -> Outcome {
    let mut r = error_response(504);
    answer::cache_status(&mut r, cache, "fwd=miss; detail=only-if-cached");
    Outcome::Respond(r)
}

/// Forward without storing.
async fn pass(c: &Cached<'_>, ask: &Asking<'_>) -> Outcome {
    Counts::add(&c.store.counts.bypass, 1);
    let out = exchange::forward(c.shared, c.state.clone(), ask, c.opts, false).await;
    with_status(out, &c.rule.identity, "fwd=uri-miss")
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

/// After a method that changes state succeeded: the target, and the `Location` and
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
