//! The example WebAssembly module, small enough to copy.
//!
//! - `GET /`: a greeting (the `greeting` var, else "Hello"), what it sees of the request
//!   and its `name` cookie, and how many requests this instance has answered (the same
//!   text as the native example module, `crates/modules/src/hello.rs`).
//! - `GET /count`: a count of requests kept in the mount's store, shared by every
//!   instance and worker.
//! - `GET /?lines=N`: N numbered lines, streamed: each is written when the client has
//!   taken the one before.
//! - `GET /file/PATH`: PATH from the granted tree `www`, sent by the server with sendfile
//!   between two lines of text.
//! - `GET /headers`: the request's header fields, one per line, and its `User-Agent`.
//! - `GET /upstream/PATH`: `/PATH` from the granted upstream `api`, passed on.
//! - `POST`: the body's length and first line.
//! - anything else: 405 with `Allow`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use ramjet_module::{files, respond, store, upstream, var, write, Handler, Request};

struct Hello;

/// Requests this instance has answered (an instance serves one request after another).
static SERVED: AtomicU64 = AtomicU64::new(0);

const TEXT: &[u8] = b"text/plain; charset=utf-8";

impl Handler for Hello {
    fn handle(req: Request) {
        match req.method.as_str() {
            "GET" | "HEAD" => get(&req),
            "POST" => post(),
            _ => {
                respond(
                    405,
                    &[("content-type", TEXT), ("allow", b"GET, HEAD, POST")],
                );
                write(b"GET, HEAD or POST\n");
            }
        }
    }
}

fn get(req: &Request) {
    let rel = req
        .path
        .strip_prefix(req.mount().as_bytes())
        .unwrap_or(&req.path);
    if let Some(path) = rel.strip_prefix(b"file/") {
        return file(&String::from_utf8_lossy(path));
    }
    if let Some(path) = rel.strip_prefix(b"upstream/") {
        return relay(&String::from_utf8_lossy(path), req.query());
    }
    if rel == b"headers" {
        respond(200, &[("content-type", TEXT)]);
        for (name, value) in ramjet_module::headers() {
            write(format!("{name}: {}\n", String::from_utf8_lossy(&value)).as_bytes());
        }
        let agent = ramjet_module::header("USER-AGENT").unwrap_or_default();
        write(format!("agent {}\n", String::from_utf8_lossy(&agent)).as_bytes());
        return;
    }
    let greeting = greeting();
    if let Some(n) = req.param("lines").and_then(|n| n.parse::<u64>().ok()) {
        respond(
            200,
            &[("content-type", TEXT), ("cache-control", b"no-store")],
        );
        ramjet_module::flush();
        for i in 1..=n {
            write(format!("{greeting} {i} of {n}\n").as_bytes());
        }
        return;
    }
    if rel == b"count" {
        let hits = store::get("hits")
            .and_then(|v| Some(u64::from_le_bytes(v.try_into().ok()?)))
            .unwrap_or(0)
            + 1;
        store::set("hits", &hits.to_le_bytes());
        respond(
            200,
            &[("content-type", TEXT), ("cache-control", b"no-store")],
        );
        write(format!("request {hits} to this mount\n").as_bytes());
        return;
    }
    let served = SERVED.fetch_add(1, Ordering::Relaxed) + 1;
    let cookie = ramjet_module::header("cookie").unwrap_or_default();
    let name = cookie_value(&cookie, "name").unwrap_or("-");
    let client = req
        .client
        .rsplit_once(':')
        .map_or(&*req.client, |(ip, _)| ip);
    let text = format!(
        "{greeting}, {client}!\nmethod {} target {} query {}\ncookie name {name}\nrequest {served} on this instance\n",
        req.method,
        req.uri,
        req.query().unwrap_or("-"),
    );
    ramjet_module::answer(
        200,
        &[("content-type", TEXT), ("cache-control", b"no-store")],
        text.as_bytes(),
    );
}

/// The `greeting` setting, asked for once per instance (an instance serves many requests).
fn greeting() -> &'static str {
    static GREETING: OnceLock<String> = OnceLock::new();
    GREETING.get_or_init(|| var("greeting").unwrap_or_else(|| "Hello".into()))
}

/// The value of cookie `name` in a `Cookie` field (`a=b; c=d`).
fn cookie_value<'a>(cookie: &'a [u8], name: &str) -> Option<&'a str> {
    std::str::from_utf8(cookie)
        .ok()?
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

/// `GET /upstream/PATH?QUERY`: `GET /PATH?QUERY` from the granted upstream `api`, its status,
/// `Content-Type` and body passed on; 502 naming what failed.
fn relay(path: &str, query: Option<&str>) {
    let target = match query {
        Some(q) => format!("/{path}?{q}"),
        None => format!("/{path}"),
    };
    let agent = ramjet_module::header("user-agent").unwrap_or_default();
    match upstream::request(
        "api",
        "GET",
        &target,
        &[("user-agent", &agent)],
        b"",
        1 << 20,
    ) {
        Ok(r) => {
            let kind = r
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("content-type"))
                .map_or(&b"application/octet-stream"[..], |(_, v)| v);
            ramjet_module::answer(r.status, &[("content-type", kind)], &r.body);
        }
        Err(e) => {
            let text = format!("upstream: {}\n", e.name());
            ramjet_module::answer(502, &[("content-type", TEXT)], text.as_bytes());
        }
    }
}

fn file(path: &str) {
    let status = match files::size("www", path) {
        Ok(_) => 200,
        Err(files::FileError::NotFound | files::FileError::NoTree) => 404,
        Err(files::FileError::Denied) => 403,
        Err(_) => 500,
    };
    respond(status, &[("content-type", TEXT)]);
    if status != 200 {
        write(format!("{status} for {path}\n").as_bytes());
        return;
    }
    write(b"--- file ---\n");
    if files::send("www", path, 0, None).is_err() {
        ramjet_module::log(
            ramjet_module::Level::Warn,
            &format!("{path} changed while sent"),
        );
    }
    write(b"--- end ---\n");
}

fn post() {
    match ramjet_module::body(1 << 20) {
        Ok(body) => {
            let first = body.split(|&b| b == b'\n').next().unwrap_or_default();
            respond(200, &[("content-type", TEXT)]);
            write(
                format!(
                    "{} bytes, first line {:?}\n",
                    body.len(),
                    String::from_utf8_lossy(first)
                )
                .as_bytes(),
            );
        }
        Err(ramjet_module::WholeBody::TooLarge) => {
            respond(413, &[("content-type", TEXT)]);
            write(b"body too large\n");
        }
        Err(_) => respond(400, &[]),
    }
}

ramjet_module::export!(Hello);
