//! The example module, small enough to copy: it greets the client, echoes what it sees of
//! the request, counts requests per worker, and can wrap a file's bytes in generated text
//! (the file range goes out with `sendfile`, the text around it from memory).
//!
//! ```toml
//! [[location]]
//! path = "/hello/"
//! module = "hello"
//! [location.module_config]
//! greeting = "Hi"                 # default "Hello"
//! file = "/srv/www/motd.txt"      # optional: opened at load, sent inside every reply
//! ```
//!
//! GET and HEAD answer the greeting; `GET ...?lines=N` streams N numbered lines instead,
//! written one at a time as the client takes them; POST answers the body's length and first
//! line; any other method gets 405 with `Allow`.

use std::cell::Cell;
use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;
use ramjet_config::{ModuleError, MountContext};
use serde::Deserialize;

use crate::api::{Module, ModuleRequest, ModuleWorker, Reply};
use crate::registry::{option_error, options, Registration};

/// How `module = "hello"` is found.
pub const REGISTRATION: Registration = Registration {
    name: "hello",
    start,
};

/// The largest POST body read.
const MAX_BODY: usize = 64 * 1024;

/// The most lines `?lines=N` streams.
const MAX_LINES: u64 = 10_000_000;

/// `[location.module_config]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    greeting: Option<String>,
    file: Option<String>,
}

/// The shared part: what every worker uses, read-only.
struct Hello {
    greeting: String,
    /// The file, open, and its length.
    file: Option<(Arc<File>, u64)>,
}

/// Start: check the options (an error names the key), open the file.
fn start(config: &toml::Table, _: &MountContext<'_>) -> Result<Arc<dyn Module>, ModuleError> {
    let o: Options = options(config)?;
    let file = match o.file {
        None => None,
        Some(path) => {
            let f = File::open(&path).map_err(|e| option_error("file", format!("{path}: {e}")))?;
            let len = f
                .metadata()
                .map_err(|e| option_error("file", e.to_string()))?
                .len();
            Some((Arc::new(f), len))
        }
    };
    Ok(Arc::new(Hello {
        greeting: o.greeting.unwrap_or_else(|| "Hello".into()),
        file,
    }))
}

impl Module for Hello {
    fn worker(self: Arc<Self>) -> Box<dyn ModuleWorker> {
        Box::new(HelloWorker {
            shared: self,
            served: Cell::new(0),
        })
    }
}

/// One worker's part: the shared part and a counter only this thread touches.
struct HelloWorker {
    shared: Arc<Hello>,
    served: Cell<u64>,
}

impl ModuleWorker for HelloWorker {
    fn handle<'r>(
        &'r self,
        req: &'r ModuleRequest<'r>,
    ) -> Result<Reply, crate::api::LaterReply<'r>> {
        self.served.set(self.served.get() + 1);
        match req.method() {
            // Answered at once: no await, no allocation of a future.
            "GET" | "HEAD" => Ok(match lines(req) {
                Some(n) => stream_lines(&self.shared.greeting, n),
                None => self.greet(req),
            }),
            // Reading the body waits for the client: answered later.
            "POST" => Err(Box::pin(async move {
                match req.body(MAX_BODY).await {
                    Ok(body) => {
                        let first = body.split(|&b| b == b'\n').next().unwrap_or_default();
                        Reply::text(
                            200,
                            format!(
                                "{}: {} bytes, first line {:?}\n",
                                self.shared.greeting,
                                body.len(),
                                String::from_utf8_lossy(first)
                            ),
                        )
                    }
                    Err(e) => Reply::text(e.status(), "request body refused\n"),
                }
            })),
            _ => Ok(Reply::text(405, "GET, HEAD or POST\n").header("Allow", "GET, HEAD, POST")),
        }
    }
}

/// `lines=N` from the query, when it is a number (capped at [`MAX_LINES`]).
fn lines(req: &ModuleRequest<'_>) -> Option<u64> {
    let n = req
        .query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("lines="))?;
    Some(n.parse::<u64>().ok()?.min(MAX_LINES))
}

/// A body of `n` lines produced over time: each line is written when the client has taken
/// the one before, so a slow reader holds the loop back and memory stays one line.
fn stream_lines(greeting: &str, n: u64) -> Reply {
    let greeting = greeting.to_string();
    Reply::new(200)
        .header("Content-Type", "text/plain; charset=utf-8")
        .header("Cache-Control", "no-store")
        .stream(crate::produce(move |mut sink| async move {
            for i in 1..=n {
                sink.send(format!("{greeting} {i} of {n}\n")).await;
            }
            Ok(())
        }))
}

impl HelloWorker {
    fn greet(&self, req: &ModuleRequest<'_>) -> Reply {
        let text = format!(
            "{}, {}!\nmethod {} target {} query {}\ncookie name {}\nrequest {} on this worker\n",
            self.shared.greeting,
            req.client().ip(),
            req.method(),
            req.uri(),
            req.query().unwrap_or("-"),
            req.cookie("name").unwrap_or("-"),
            self.served.get(),
        );
        let mut reply = Reply::new(200)
            .header("Content-Type", "text/plain; charset=utf-8")
            .header("Cache-Control", "no-store")
            .bytes(text);
        if let Some((file, len)) = &self.shared.file {
            reply.push_bytes(Bytes::from_static(b"--- file ---\n"));
            reply.push_file(file.clone(), 0, *len);
            reply.push_bytes(Bytes::from_static(b"--- end ---\n"));
        }
        reply
    }
}
