//! What the server is doing, for people and for Prometheus: the `metrics` handler answers
//! with every counter in the Prometheus text format (version 0.0.4), the `status` handler
//! with a page like Apache's server-status and lighttpd's mod_status (HTML, or JSON for
//! `?json` or `Accept: application/json`). Both read [`ramjet_observe::stats`]: every
//! worker's counters, added up at the request, so requests themselves take no lock.
//! The `health` handler says whether the server takes traffic (503 while it drains).
//! Mount them on a location protected with `allow`/`deny` or `auth_basic`.
#![forbid(unsafe_code)]

mod page;
mod prometheus;
mod snapshot;

use bytes::Bytes;
use ramjet_http1::Method;
use ramjet_pipeline::{error_response, Body, Content, Later, Outcome, Request, Response};

pub use snapshot::Snapshot;

/// The `metrics` handler.
#[derive(Debug, Default)]
pub struct Metrics;

/// The `status` handler.
#[derive(Debug, Default)]
pub struct Status;

/// The `health` handler: `200 ok` while the server takes traffic, `503 draining` once a
/// graceful stop has begun (during `timeouts.drain`), for a balancer's health check
/// (HAProxy `option httpchk`, nginx `health_check`, ramjet's own `health_check`).
#[derive(Debug, Default)]
pub struct Health;

/// GET and HEAD only (405 with `Allow` otherwise).
fn readable(req: &Request<'_>) -> Option<Outcome> {
    match req.head.method {
        Method::Get | Method::Head => None,
        Method::Other => Some(Outcome::Respond(error_response(501))),
        _ => Some(Outcome::Respond(error_response(405))),
    }
}

fn answer(content_type: &str, body: Vec<u8>) -> Outcome {
    Outcome::Respond(
        Response::new(200, Body::Bytes(Bytes::from(body)))
            .header("Content-Type", content_type.as_bytes())
            .header("Cache-Control", b"no-store"),
    )
}

impl Content for Metrics {
    fn produce<'r>(&'r self, req: &'r Request<'r>) -> Result<Outcome, Later<'r>> {
        if let Some(refused) = readable(req) {
            return Ok(refused);
        }
        let text = prometheus::render(&Snapshot::take());
        Ok(answer(
            "text/plain; version=0.0.4; charset=utf-8",
            text.into_bytes(),
        ))
    }
}

impl Content for Health {
    fn produce<'r>(&'r self, req: &'r Request<'r>) -> Result<Outcome, Later<'r>> {
        if let Some(refused) = readable(req) {
            return Ok(refused);
        }
        let response = if ramjet_observe::stats::registry().draining() {
            Response::new(503, Body::Bytes(Bytes::from_static(b"draining\n")))
                .header("Retry-After", b"1")
        } else {
            Response::new(200, Body::Bytes(Bytes::from_static(b"ok\n")))
        };
        Ok(Outcome::Respond(
            response
                .header("Content-Type", b"text/plain; charset=utf-8")
                .header("Cache-Control", b"no-store"),
        ))
    }
}

impl Content for Status {
    fn produce<'r>(&'r self, req: &'r Request<'r>) -> Result<Outcome, Later<'r>> {
        if let Some(refused) = readable(req) {
            return Ok(refused);
        }
        let params = || req.query.into_iter().flat_map(|q| q.split(['&', ';']));
        let json = params().any(|p| p == "json" || p == "format=json")
            || req
                .head
                .accept
                .is_some_and(|a| a.trim_ascii_start().starts_with(b"application/json"));
        // Apache mod_status: `?auto` is the machine-readable form, `?refresh=N` reloads
        // the page every N seconds (1 to 3600).
        let auto = params().any(|p| p == "auto");
        let refresh = params()
            .find_map(|p| p.strip_prefix("refresh="))
            .and_then(|n| n.parse::<u32>().ok())
            .map(|n| n.clamp(1, 3600));
        let snap = Snapshot::take();
        Ok(if auto {
            let host = req
                .head
                .host
                .and_then(|h| std::str::from_utf8(ramjet_config::strip_port(h)).ok())
                .unwrap_or("localhost");
            answer(
                "text/plain; charset=utf-8",
                page::auto(&snap, host).into_bytes(),
            )
        } else if json {
            answer("application/json", page::json(&snap))
        } else {
            answer(
                "text/html; charset=utf-8",
                page::html(&snap, refresh).into_bytes(),
            )
        })
    }
}
