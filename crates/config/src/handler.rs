//! The closed set of handlers a location can chain (DESIGN.md §3, "Handlers").

use serde::Deserialize;

/// A handler of a location. Adding one adds a variant here and a crate beside its code;
/// the dispatcher matches on it (static dispatch, no `dyn` on the hot path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Handler {
    /// Files under the location's root; declines what does not exist.
    Static,
    /// Forward to the location's upstream.
    Proxy,
    /// Answer with a redirect to the location's `redirect` target.
    Redirect,
    /// The counters in Prometheus text format.
    Metrics,
    /// The status page (HTML, or JSON with `?json`).
    Status,
    /// Hand the client's connection itself to the backend process at the location's
    /// `handoff` socket (`docs/HANDOFF.md`).
    Handoff,
    /// The location's `module` (a native module, `docs/MODULES.md`).
    Module,
    /// A CGI/1.1 program under the location's `cgi_root`, a process per request.
    Cgi,
}

impl Handler {
    /// As written in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Handler::Static => "static",
            Handler::Proxy => "proxy",
            Handler::Redirect => "redirect",
            Handler::Metrics => "metrics",
            Handler::Status => "status",
            Handler::Handoff => "handoff",
            Handler::Module => "module",
            Handler::Cgi => "cgi",
        }
    }
}
