//! The closed set of handlers a location can chain (DESIGN.md §3, "Handlers").

use crate::error::ConfigError;
use crate::raw::RawLocation;
use crate::resolve::Resolver;
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
    /// `200 ok`, or `503 draining` once a graceful stop has begun (a balancer's check).
    Health,
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
            Handler::Health => "health",
            Handler::Handoff => "handoff",
            Handler::Module => "module",
            Handler::Cgi => "cgi",
        }
    }
}

impl Resolver<'_> {
    /// The location's handler chain: as written, or `["proxy"]` when it names an upstream,
    /// else `["static"]`.
    pub(crate) fn handlers(
        &self,
        d: &RawLocation,
        l: &RawLocation,
        key: &str,
    ) -> Result<Vec<Handler>, ConfigError> {
        let key = format!("{key}.handlers");
        let Some(list) = l.handlers.as_ref().or(d.handlers.as_ref()) else {
            let proxied = l.proxy.is_some() || d.proxy.is_some();
            return Ok(vec![if l.redirect.is_some() {
                Handler::Redirect
            } else if l.handoff.is_some() {
                Handler::Handoff
            } else if l.module.is_some() {
                Handler::Module
            } else if l.cgi_root.is_some() {
                Handler::Cgi
            } else if proxied {
                Handler::Proxy
            } else {
                Handler::Static
            }]);
        };
        let mut out = Vec::new();
        for h in list {
            if out.contains(h.get_ref()) {
                return Err(self.err(
                    Some(h.span()),
                    &key,
                    format!("`{}` is listed twice", h.get_ref().name()),
                ));
            }
            out.push(*h.get_ref());
        }
        if out.is_empty() {
            return Err(self.err(None, &key, "needs at least one handler".into()));
        }
        Ok(out)
    }
}
