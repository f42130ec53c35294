//! The handler chain of a location (DESIGN.md §3, "Handlers"): each handler of
//! `location.handlers` is asked in turn; `Declined` passes to the next, and the last
//! `Declined` is the pipeline's 404. A match on the closed [`Handler`] enum, so the static
//! fast path costs one comparison more than calling the file cache directly.
//!
//! A new handler: add a variant to `ramjet_config::Handler` (with its options beside it in
//! the config crate), a crate that implements `ramjet_pipeline::Content`, a field here and
//! one arm in [`Handlers::one`], and the `on_reload`/`on_tick` calls.

use std::cell::Cell;

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

/// Ask producers `resume..n` of a chain in turn (`ask(i)`) until one does not decline: its
/// outcome, or the work it returned and its place, which is then recorded in `resume`. A
/// request produced again after its fast path returned work (see `Request::resume`) starts
/// there: those before it declined and are not asked twice. `Declined` when all decline.
fn first_answer<'r>(
    n: usize,
    resume: &Cell<u8>,
    mut ask: impl FnMut(usize) -> Result<Outcome, Later<'r>>,
) -> Result<Outcome, (Later<'r>, usize)> {
    for i in usize::from(resume.get())..n {
        match ask(i) {
            Ok(Outcome::Declined) => continue,
            Ok(outcome) => return Ok(outcome),
            Err(later) => {
                // A chain longer than 255 is asked from its start again: correct, if slower.
                resume.set(u8::try_from(i).unwrap_or(0));
                return Err((later, i));
            }
        }
    }
    Ok(Outcome::Declined)
}

impl Content for Handlers {
    #[inline]
    fn produce<'r>(&'r self, req: &'r Request<'r>) -> Result<Outcome, Later<'r>> {
        let chain = &req.location.handlers[..];
        if let [only] = chain {
            return self.one(*only, req);
        }
        match first_answer(chain.len(), &req.resume, |i| self.one(chain[i], req)) {
            Ok(outcome) => Ok(outcome),
            // The last handler's work needs no wrapping: nothing follows it.
            Err((later, i)) if i + 1 == chain.len() => Err(later),
            Err((later, i)) => Err(req.later(|| self.rest(req, later, i + 1))),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A chain of fake producers: each answers (`'r'`), declines (`'d'`) or returns work
    /// (`'w'`); which were asked, in order.
    fn run(chain: &str, resume: &Cell<u8>) -> (Vec<usize>, Result<&'static str, usize>) {
        let asked = RefCell::new(Vec::new());
        let kinds: Vec<char> = chain.chars().collect();
        let result = first_answer(kinds.len(), resume, |i| {
            asked.borrow_mut().push(i);
            match kinds[i] {
                'r' => Ok(Outcome::Respond(ramjet_pipeline::Response::handoff(
                    Default::default(),
                ))),
                'd' => Ok(Outcome::Declined),
                _ => Err(Box::pin(async { Outcome::Declined })),
            }
        });
        let result = match result {
            Ok(Outcome::Declined) => Ok("declined"),
            Ok(_) => Ok("answered"),
            Err((_, i)) => Err(i),
        };
        (asked.into_inner(), result)
    }

    #[test]
    fn a_chain_asked_again_after_its_fast_path_returned_work_starts_where_the_work_came_from() {
        // The fast path: a static miss declines, the proxy returns work.
        let resume = Cell::new(0);
        assert_eq!(run("dw", &resume), (vec![0, 1], Err(1)));
        assert_eq!(resume.get(), 1);
        // Produced again with the hint the stage carries over: the static miss is not
        // asked a second time.
        let again = Cell::new(resume.get());
        assert_eq!(run("dw", &again), (vec![1], Err(1)));
        // Work from the first producer: the second run starts at the first.
        let resume = Cell::new(0);
        assert_eq!(run("wd", &resume), (vec![0], Err(0)));
        assert_eq!(resume.get(), 0);
        // Answers and declines leave the hint alone.
        let resume = Cell::new(0);
        assert_eq!(run("dr", &resume), (vec![0, 1], Ok("answered")));
        assert_eq!(run("dd", &resume), (vec![0, 1], Ok("declined")));
        assert_eq!(run("", &resume), (vec![], Ok("declined")));
        assert_eq!(resume.get(), 0);
    }
}
