//! The module host: the `module` handler's `Content`. It finds the mount's started module,
//! makes this worker's part of it on first use, and turns its [`Reply`] into a response.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use ramjet_config::Resolved;
use ramjet_pipeline::{
    Body, Content, FailKind, Failure, Later, Outcome, Part, Request, Response, Side,
};

use crate::api::{Module, ModuleRequest, ModuleWorker, Piece, Reply};

/// A started module's shared part (kept so its address stays unique) and this worker's part.
type Held = (Arc<dyn Module>, Rc<dyn ModuleWorker>);

/// One worker's module states, one per started module it has served.
pub struct Modules {
    workers: RefCell<Vec<Held>>,
}

impl Default for Modules {
    fn default() -> Self {
        Modules::new()
    }
}

impl Modules {
    pub fn new() -> Modules {
        Modules {
            workers: RefCell::new(Vec::new()),
        }
    }

    fn worker(&self, module: &Arc<dyn Module>) -> Rc<dyn ModuleWorker> {
        let mut workers = self.workers.borrow_mut();
        if let Some((_, w)) = workers.iter().find(|(m, _)| Arc::ptr_eq(m, module)) {
            return w.clone();
        }
        let w: Rc<dyn ModuleWorker> = Rc::from(module.clone().worker());
        workers.push((module.clone(), w.clone()));
        w
    }
}

/// The response for a module's reply: its status, its header lines, its body pieces (a
/// small body with file ranges in the page cache joined into one block of bytes,
/// `joined`; else a single piece is sent as bytes or as one file range, several as parts,
/// in order) or its stream.
pub fn response(reply: Reply) -> Response {
    let Reply {
        status,
        headers,
        mut body,
        stream,
    } = reply;
    let body = match (stream, body.len()) {
        (Some(source), _) => Body::Stream(source),
        (None, _) if let Some(one) = crate::joined::joined(&body) => Body::Bytes(one),
        (None, 0) => Body::Empty,
        (None, 1) => match body.pop() {
            Some(Piece::Bytes(b)) => Body::Bytes(b),
            Some(Piece::File { file, offset, len }) => Body::File { file, offset, len },
            None => Body::Empty,
        },
        (None, _) => Body::Parts(
            body.into_iter()
                .map(|p| match p {
                    Piece::Bytes(b) => Part::Bytes(b),
                    Piece::File { file, offset, len } => Part::File { file, offset, len },
                })
                .collect(),
        ),
    };
    let mut r = Response::new(status, body);
    r.headers = headers;
    r
}

impl Content for Modules {
    fn produce<'r>(&'r self, req: &'r Request<'r>) -> Result<Outcome, Later<'r>> {
        let Some(mount) = req.location.module.as_ref() else {
            return Ok(Outcome::Declined);
        };
        let Some(module) = mount.instance.downcast_ref::<Arc<dyn Module>>() else {
            return Ok(Outcome::Fail(Failure::new(
                Side::Internal,
                FailKind::Bug,
                format!("module {}: not started by this program", mount.name),
            )));
        };
        let worker = self.worker(module);
        // The worker's part is held by the future, so a reload that drops it here cannot
        // pull it from under a request in progress.
        Err(req.later(|| async move {
            let mreq = ModuleRequest::new(req);
            let reply = match worker.handle(&mreq) {
                Ok(reply) => reply,
                Err(later) => later.await,
            };
            Outcome::Respond(response(reply))
        }))
    }

    fn on_reload(&self, _config: &Resolved) {
        self.workers.borrow_mut().clear();
    }

    fn on_tick(&self, _config: &Resolved) {
        let workers: Vec<Rc<dyn ModuleWorker>> = self
            .workers
            .borrow()
            .iter()
            .map(|(_, w)| w.clone())
            .collect();
        for w in workers {
            w.tick();
        }
    }
}
