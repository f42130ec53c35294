//! The request stages, in order. This table is the one place the order is written down;
//! `docs/ARCHITECTURE.md` mirrors it and a test keeps the two in step.

use ramjet_auth::Check;
use ramjet_config::{BasicAuth, ErrorPages, Location, Resolved};
use ramjet_http1::path::{self, CleanPath};
use ramjet_http1::{ErrorKind, RequestHead};
use ramjet_shaping::Verdict;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use crate::content::{Content, Outcome, Request};
use crate::error_page::{customise, error_response};
use crate::request_body::{Finished, RequestBody};
use crate::response::Response;

/// A stage of the request pipeline: its name and the statuses with which it may end a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stage {
    pub name: &'static str,
    pub may_end_with: &'static str,
}

/// The pipeline, in order (DESIGN.md §3).
pub const STAGES: [Stage; 9] = [
    Stage {
        name: "accept",
        may_end_with: "-",
    },
    Stage {
        name: "read head",
        may_end_with: "400 408 413 414 429 431 501 505",
    },
    Stage {
        name: "route",
        may_end_with: "400 404 413",
    },
    Stage {
        name: "admit",
        may_end_with: "401 403 429",
    },
    Stage {
        name: "content",
        may_end_with: "301 403 404 405 501 502 504",
    },
    Stage {
        name: "response filters",
        may_end_with: "304 412 206 416",
    },
    Stage {
        name: "write",
        may_end_with: "-",
    },
    Stage {
        name: "log",
        may_end_with: "-",
    },
    Stage {
        name: "next",
        may_end_with: "-",
    },
];

/// A response, how far its producer read the request body (`None`: it had none) or why
/// the body is refused (413 for the location's limit: the connection closes), and the
/// location that answered (`None`: none was found), whose headers the write stage adds.
pub(crate) type Answer<'r> = (
    Response,
    Result<Option<Finished>, ErrorKind>,
    Option<&'r Location>,
);

/// An answer that needs more work first (the content stage's slow path).
pub(crate) type Pending<'r> = Pin<Box<dyn Future<Output = Answer<'r>> + 'r>>;

/// Stages 2–5 for one parsed request: route, admit, content (whose producer applies its
/// method policy, and the conditional and range filters to its own representation). `Ok`
/// is the answer now; `Err` is boxed work for a producer that has to wait (disk, listing,
/// the request body). The body reader is owned here, so on the slow path it lives in the
/// boxed future, not in every connection's state.
pub(crate) fn respond<'r, C: Content>(
    content: &'r C,
    config: &'r Resolved,
    head: &'r RequestHead<'r>,
    now: tokio::time::Instant,
    (client, listener, secure): (SocketAddr, SocketAddr, bool),
    body: RequestBody<'r>,
) -> Result<Answer<'r>, Pending<'r>> {
    let addrs = Addrs {
        client,
        listener,
        secure,
    };
    let server_pages = config.error_pages.as_deref();
    // route
    let clean: CleanPath<'r> = match path::normalize(head.path) {
        Ok(c) => c,
        Err(_) => return Ok((refusal(400, server_pages), Ok(body.finish()), None)),
    };
    let Some(location) = config.route(head.host, &clean.path) else {
        return Ok((refusal(404, server_pages), Ok(body.finish()), None));
    };
    let pages = location.error_pages.as_deref();
    // The location's own body limit (the connection read up to the largest of them).
    if let Err(kind) = body.limit(location.max_body) {
        return Ok((refusal(kind.status(), pages), Err(kind), Some(location)));
    }
    // admit: the client's request rate here (nginx limit_req, nodelay).
    if let Some((_, _, rate)) = location.shaping.as_ref().and_then(|s| s.requests.as_ref()) {
        if let Verdict::Refuse(wait) = rate.check(client.ip(), now.into_std()) {
            let mut r = refusal(429, pages);
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            r.headers.extend_from_slice(b"Retry-After: ");
            r.headers
                .extend_from_slice(itoa::Buffer::new().format(secs.max(1)).as_bytes());
            r.headers.extend_from_slice(b"\r\n");
            return Ok((r, Ok(body.finish()), Some(location)));
        }
    }
    // admit: the location's client address rules (none: no check).
    if let Some(rules) = &location.access {
        if !rules.admits(client.ip()) {
            return Ok((refusal(403, pages), Ok(body.finish()), Some(location)));
        }
    }
    // The location's headers are added to its successful responses by the write stage.
    let extra = Some(location);
    let work = Work {
        head,
        clean,
        location,
        config,
        now,
        addrs,
    };
    // admit: Basic authentication (none: no check). A slow hash is computed off the event
    // loop, once per worker and credentials (`ramjet_auth::verified`).
    if let Some(auth) = &location.auth {
        match auth.users.check(head.field(b"authorization")) {
            Check::Allowed => {}
            Check::Denied => {
                return Ok((unauthorized(auth, pages), Ok(body.finish()), extra));
            }
            Check::Verify(job) => {
                return Err(Box::pin(async move {
                    let (job, ok) = match ramjet_observe::stats::blocking(move || {
                        let ok = job.run();
                        (job, ok)
                    })
                    .await
                    {
                        Ok(r) => r,
                        Err(_) => return (refusal(500, pages), Ok(body.finish()), extra),
                    };
                    if !ok {
                        return (unauthorized(auth, pages), Ok(body.finish()), extra);
                    }
                    job.remember();
                    let outcome = work.produce_waiting(content, &body, 0).await;
                    (work.finish(outcome), Ok(body.finish()), extra)
                }));
            }
        }
    }
    // Method policy is the producer's.
    // content: the fast path answers from the producer's cache; if it cannot, the work is
    // redone inside one boxed future that owns the normalised path and the body reader.
    let req = work.request(&body, 0, true);
    let immediate = content.produce(&req).ok();
    let resume = req.resume.get();
    match immediate {
        Some(outcome) => Ok((work.finish(outcome), Ok(body.finish()), extra)),
        None => Err(Box::pin(async move {
            let outcome = work.produce_waiting(content, &body, resume).await;
            (work.finish(outcome), Ok(body.finish()), extra)
        })),
    }
}

/// A routed request on its way through the content stage.
struct Work<'r> {
    head: &'r RequestHead<'r>,
    clean: CleanPath<'r>,
    location: &'r Location,
    config: &'r Resolved,
    now: tokio::time::Instant,
    addrs: Addrs,
}

impl<'r> Work<'r> {
    /// The request for the content stage, its chain starting at producer `resume`.
    /// `first_try`: the fast path's, whose work is dropped (see [`Request::later`]).
    fn request<'a>(
        &'a self,
        body: &'a RequestBody<'a>,
        resume: u8,
        first_try: bool,
    ) -> Request<'a> {
        Request {
            head: self.head,
            path: &self.clean.path,
            raw_path: self.clean.raw_path,
            query: self.clean.query,
            location: self.location,
            config: self.config,
            now: self.now,
            client: self.addrs.client,
            listener: self.addrs.listener,
            secure: self.addrs.secure,
            body,
            resume: std::cell::Cell::new(resume),
            first_try,
        }
    }

    /// The content stage when the producer may wait (disk, a backend, the request body).
    /// `resume`: where the fast path's chain returned its work (see [`Request::resume`]).
    async fn produce_waiting<C: Content>(
        &self,
        content: &C,
        body: &RequestBody<'_>,
        resume: u8,
    ) -> Outcome {
        let req = self.request(body, resume, false);
        // Bound, not the block's tail: the producer's future must end before `req`.
        let outcome = match content.produce(&req) {
            Ok(o) => o,
            Err(later) => later.await,
        };
        outcome
    }

    fn finish(&self, outcome: Outcome) -> Response {
        let mut r = finish(outcome, self.head);
        customise(&mut r, self.location.error_pages.as_deref());
        r
    }
}

/// The server's error page for `status`, or the configured one.
fn refusal(status: u16, pages: Option<&ErrorPages>) -> Response {
    let mut r = error_response(status);
    customise(&mut r, pages);
    r
}

/// 401 with the location's challenge.
fn unauthorized(auth: &BasicAuth, pages: Option<&ErrorPages>) -> Response {
    let mut r = error_response(401);
    r.headers.extend_from_slice(&auth.challenge);
    customise(&mut r, pages);
    r
}

/// Who sent a request, and where it came in.
#[derive(Clone, Copy)]
struct Addrs {
    client: SocketAddr,
    listener: SocketAddr,
    /// The connection is TLS.
    secure: bool,
}

fn finish(outcome: Outcome, head: &RequestHead<'_>) -> Response {
    match outcome {
        Outcome::Respond(r) => r,
        Outcome::Declined => error_response(404),
        Outcome::Fail(f) => {
            let mut r = error_response(f.log(head.request_line()));
            if let Some(upstream) = f.upstream {
                r.extras = Some(Box::new(crate::response::Extras {
                    upstream: Some(upstream),
                    ..Default::default()
                }));
            }
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::Later;
    use crate::response::Body;
    use std::cell::Cell;

    /// A producer that always has to wait, counting the work futures it builds.
    struct Waits {
        built: Cell<u32>,
    }

    impl Content for Waits {
        fn produce<'r>(&'r self, req: &'r Request<'r>) -> Result<Outcome, Later<'r>> {
            Err(req.later(|| {
                self.built.set(self.built.get() + 1);
                async { Outcome::Respond(Response::new(200, Body::Empty)) }
            }))
        }
    }

    #[tokio::test]
    async fn work_returned_to_the_fast_path_is_built_once_and_answers() {
        let config = ramjet_config::load_str(
            "listen = [\"127.0.0.1:0\"]\n[[location]]\nroot = \"/tmp\"\n",
            "t.toml",
            std::path::Path::new("/"),
        )
        .expect("config");
        let raw = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
        let ramjet_http1::Parse::Complete(head) =
            ramjet_http1::parse_request_head(raw, &config.limits.http1)
        else {
            panic!("test request does not parse")
        };
        let content = Waits {
            built: Cell::new(0),
        };
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let Err(pending) = respond(
            &content,
            &config,
            &head,
            tokio::time::Instant::now(),
            (addr, addr, false),
            RequestBody::http2(None),
        ) else {
            panic!("a producer that waits was answered at once")
        };
        // The fast path's try built nothing; the awaited one built the work once.
        assert_eq!(content.built.get(), 0);
        let (response, _, location) = pending.await;
        assert_eq!(response.status, 200);
        assert!(location.is_some());
        assert_eq!(content.built.get(), 1);
    }
}
