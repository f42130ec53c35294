//! The request stages, in order. This table is the one place the order is written down;
//! `docs/ARCHITECTURE.md` mirrors it and a test keeps the two in step.

use ramjet_config::Resolved;
use ramjet_http1::path::{self, CleanPath};
use ramjet_http1::{Method, RequestHead};

use crate::content::{Content, Outcome, Request};
use crate::error_page::error_response;
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
        may_end_with: "400 408 413 414 431 501 505",
    },
    Stage {
        name: "route",
        may_end_with: "400 404",
    },
    Stage {
        name: "admit",
        may_end_with: "405 501",
    },
    Stage {
        name: "content",
        may_end_with: "301 403 404",
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

/// Stages 2–5 for one parsed request: route, admit, content (whose producer applies the
/// conditional and range filters to its own representation).
pub(crate) async fn respond<C: Content>(
    content: &C,
    config: &Resolved,
    head: &RequestHead<'_>,
) -> Response {
    // route
    let clean: CleanPath<'_> = match path::normalize(head.path) {
        Ok(c) => c,
        Err(_) => return error_response(400),
    };
    let Some(location) = config.route(head.host, &clean.path) else {
        return error_response(404);
    };
    // admit
    match head.method {
        Method::Get | Method::Head => {}
        Method::Other => return error_response(501),
        _ => return error_response(405),
    }
    // content
    let req = Request {
        head,
        path: &clean.path,
        raw_path: clean.raw_path,
        query: clean.query,
        location,
        config,
    };
    match content.produce(&req).await {
        Outcome::Respond(r) => r,
        Outcome::Declined => error_response(404),
    }
}
