//! The per-worker proxy handler and the state its requests share: for each upstream, each
//! server's health, requests in flight and idle connections, and the balancer.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use ramjet_config::{Resolved, Upstream};
use ramjet_pipeline::{Content, Later, Outcome, Request};
use tokio::time::Instant;

use crate::balance::Balancer;
use crate::health::{self, Health};
use crate::pool::Pool;
use crate::upstream_io::Io;

/// One server's state in one worker.
#[derive(Default)]
pub(crate) struct ServerState {
    pub(crate) health: Health,
    pub(crate) in_flight: u32,
    pub(crate) pool: Pool,
}

/// One upstream's state in one worker.
pub(crate) struct UpstreamState {
    /// The upstream's configuration, shared with the bodies streaming from it.
    pub(crate) config: Rc<Upstream>,
    /// Each server's address as text (logs, and the Host for a client that sent none).
    pub(crate) labels: Rc<[String]>,
    pub(crate) servers: Vec<ServerState>,
    pub(crate) balancer: Balancer,
    last_check: Option<Instant>,
}

/// What a worker's proxy requests share. Replaced wholesale on reload (the generation
/// tells a connection returning from an old exchange not to come back).
#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) upstreams: RefCell<Vec<UpstreamState>>,
    pub(crate) generation: Cell<u64>,
    /// The configuration the state was built for (its address: a reload makes a new one).
    built_for: Cell<usize>,
    /// Request-head and response-head buffers for reuse.
    pub(crate) buffers: RefCell<Vec<(Vec<u8>, Vec<u8>)>>,
}

impl Shared {
    /// Build the state for `config`'s upstreams if it is not built yet.
    pub(crate) fn ensure(&self, config: &Resolved) {
        let id = config as *const Resolved as usize;
        if self.built_for.get() == id {
            return;
        }
        self.built_for.set(id);
        self.generation.set(self.generation.get() + 1);
        let mut ups = self.upstreams.borrow_mut();
        *ups = config
            .upstreams
            .iter()
            .map(|u| UpstreamState {
                config: Rc::new(u.clone()),
                labels: u.servers.iter().map(|s| s.addr.to_string()).collect(),
                servers: u.servers.iter().map(|_| ServerState::default()).collect(),
                balancer: Balancer::new(u),
                last_check: None,
            })
            .collect();
    }

    /// Give back a connection after a complete exchange.
    pub(crate) fn put_back(&self, at: Slot, io: Io, now: Instant) {
        if at.generation != self.generation.get() {
            return;
        }
        let mut ups = self.upstreams.borrow_mut();
        let u = &mut ups[at.upstream];
        let limit = u.config.keepalive;
        if let Some(s) = u.servers.get_mut(at.server) {
            s.pool.put(io, limit, now);
        }
    }
}

/// Which server of which upstream, in which generation of the state.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub(crate) upstream: usize,
    pub(crate) server: usize,
    pub(crate) generation: u64,
}

/// Counts a request in flight on a server for as long as it lives (least-connections).
pub(crate) struct InFlight {
    shared: Rc<Shared>,
    pub(crate) slot: Slot,
}

impl InFlight {
    pub(crate) fn new(shared: &Rc<Shared>, slot: Slot) -> InFlight {
        if let Some(s) = shared.upstreams.borrow_mut()[slot.upstream]
            .servers
            .get_mut(slot.server)
        {
            s.in_flight += 1;
        }
        InFlight {
            shared: shared.clone(),
            slot,
        }
    }

    pub(crate) fn shared(&self) -> &Rc<Shared> {
        &self.shared
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.slot.generation != self.shared.generation.get() {
            return;
        }
        if let Some(s) = self.shared.upstreams.borrow_mut()[self.slot.upstream]
            .servers
            .get_mut(self.slot.server)
        {
            s.in_flight = s.in_flight.saturating_sub(1);
        }
    }
}

/// The reverse proxy, one per worker.
#[derive(Default)]
pub struct Proxy {
    shared: Rc<Shared>,
}

impl Proxy {
    pub fn new() -> Proxy {
        Proxy::default()
    }
}

impl Content for Proxy {
    /// Forwards any method, extension methods included (the backend decides what it
    /// allows). Always asynchronous: the answer comes from another server.
    fn produce<'r>(&'r self, req: &'r Request<'r>) -> Result<Outcome, Later<'r>> {
        let Some(opts) = req.location.proxy.as_ref() else {
            return Ok(Outcome::Declined);
        };
        self.shared.ensure(req.config);
        Err(Box::pin(crate::exchange::forward(&self.shared, req, opts)))
    }

    fn on_reload(&self, config: &Resolved) {
        // Pools, health and balancing start afresh with the new upstreams (as nginx's).
        self.shared.ensure(config);
    }

    /// Close pooled connections idle too long, and start due active health checks.
    fn on_tick(&self, config: &Resolved) {
        self.shared.ensure(config);
        let now = Instant::now();
        let mut ups = self.shared.upstreams.borrow_mut();
        for (ui, state) in ups.iter_mut().enumerate() {
            let u = state.config.clone();
            for s in &mut state.servers {
                s.pool.prune(now, u.keepalive_timeout);
            }
            let Some(path) = &u.health_check else {
                continue;
            };
            if state
                .last_check
                .is_some_and(|t| now.saturating_duration_since(t) < u.health_interval)
            {
                continue;
            }
            state.last_check = Some(now);
            for (si, s) in state.servers.iter_mut().enumerate() {
                if s.health.checking {
                    continue;
                }
                s.health.checking = true;
                let shared = self.shared.clone();
                let generation = shared.generation.get();
                let (addr, path) = (u.servers[si].addr.clone(), path.clone());
                let (name, connect, header) = (u.name.clone(), u.connect_timeout, u.header_timeout);
                let timeout = header.min(u.health_interval.max(std::time::Duration::from_secs(1)));
                tokio::task::spawn_local(async move {
                    let result = health::check(&addr, &path, connect, timeout).await;
                    if shared.generation.get() != generation {
                        return;
                    }
                    let mut ups = shared.upstreams.borrow_mut();
                    let Some(s) = ups.get_mut(ui).and_then(|u| u.servers.get_mut(si)) else {
                        return;
                    };
                    s.health.checking = false;
                    match result {
                        Ok(_) if s.health.check_failed => {
                            tracing::info!(
                                "upstream {name} ({addr}): health check passed; back in service"
                            );
                            s.health.check_failed = false;
                            s.health.succeeded();
                        }
                        Ok(_) => {}
                        Err(why) if !s.health.check_failed => {
                            tracing::warn!("upstream {name} ({addr}): health check {path} failed: {why}; out of service");
                            s.health.check_failed = true;
                        }
                        Err(_) => {}
                    }
                });
            }
        }
    }
}
