//! The handler chain of a location (DESIGN.md §3, "Handlers"): each handler of
//! `location.handlers` is asked in turn; `Declined` passes to the next, and the last
//! `Declined` is the pipeline's 404. A match on the closed [`Handler`] enum, so the static
//! fast path costs one comparison more than calling the file cache directly.
//!
//! A new handler: add a variant to `ramjet_config::Handler` (with its options beside it in
//! the config crate), a crate that implements `ramjet_pipeline::Content`, a field here and
//! one arm in [`Handlers::one`], and the `on_reload`/`on_tick` calls.

use ramjet_cgi::Cgi;
use ramjet_config::{Handler, Resolved};
use ramjet_modules::Modules;
use ramjet_pipeline::{Content, Later, Outcome, Request};
use ramjet_proxy::Proxy;
use ramjet_redirect::Redirect;
use ramjet_static_files::StaticFiles;
use ramjet_status::{Health, Metrics, Status};

/// One worker's handlers.
pub struct Handlers {
    statics: StaticFiles,
    proxy: Proxy,
    redirect: Redirect,
    metrics: Metrics,
    status: Status,
    health: Health,
    modules: Modules,
    cgi: Cgi,
}

impl Handlers {
    pub fn new() -> Handlers {
        Handlers {
            statics: StaticFiles::new(),
            proxy: Proxy::new(),
            redirect: Redirect::new(),
            metrics: Metrics,
            status: Status,
            health: Health,
            modules: Modules::new(),
            cgi: Cgi::new(),
        }
    }

    #[inline(always)]
    fn one<'r>(&'r self, h: Handler, req: &'r Request<'r>) -> Result<Outcome, Later<'r>> {
        match h {
            Handler::Static => self.statics.produce(req),
            Handler::Proxy => self.proxy.produce(req),
            Handler::Redirect => self.redirect.produce(req),
            Handler::Metrics => self.metrics.produce(req),
            Handler::Status => self.status.produce(req),
            Handler::Health => self.health.produce(req),
            Handler::Module => self.modules.produce(req),
            Handler::Cgi => self.cgi.produce(req),
            Handler::Handoff => Ok(Outcome::Respond(ramjet_pipeline::Response::handoff(
                req.location.handoff.clone().unwrap_or_default(),
            ))),
        }
    }

    /// The rest of the chain after a handler that had to wait and then declined.
    async fn rest<'r>(&'r self, req: &'r Request<'r>, first: Later<'r>, next: usize) -> Outcome {
        let mut outcome = first.await;
        for &h in &req.location.handlers[next..] {
            if !matches!(outcome, Outcome::Declined) {
                break;
            }
            outcome = match self.one(h, req) {
                Ok(o) => o,
                Err(later) => later.await,
            };
        }
        outcome
    }
}

impl Content for Handlers {
    #[inline]
    fn produce<'r>(&'r self, req: &'r Request<'r>) -> Result<Outcome, Later<'r>> {
        let chain = &req.location.handlers[..];
        if let [only] = chain {
            return self.one(*only, req);
        }
        for (i, &h) in chain.iter().enumerate() {
            match self.one(h, req) {
                Ok(Outcome::Declined) => continue,
                Ok(outcome) => return Ok(outcome),
                // The last handler's work needs no wrapping: nothing follows it.
                Err(later) if i + 1 == req.location.handlers.len() => return Err(later),
                Err(later) => return Err(Box::pin(self.rest(req, later, i + 1))),
            }
        }
        Ok(Outcome::Declined)
    }

    fn on_reload(&self, config: &Resolved) {
        self.statics.on_reload(config);
        self.proxy.on_reload(config);
        self.modules.on_reload(config);
    }

    fn on_tick(&self, config: &Resolved) {
        self.statics.on_tick(config);
        self.proxy.on_tick(config);
        self.modules.on_tick(config);
    }
}
