//! The per-worker proxy handler and the state its requests share: for each upstream, each
//! server's health, requests in flight and idle connections, and the balancer.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use ramjet_config::{Resolved, Upstream};
use ramjet_pipeline::{Content, Later, Outcome, Request};
use ramjet_runtime::Spares;
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

/// One upstream's state in one worker. An exchange holds its upstream's state (an `Rc`)
/// from start to end, so a reload, which builds new states, never pulls one from under
/// it: a connection an old exchange gives back goes to the old pool and closes with it.
pub(crate) struct UpstreamState {
    /// The upstream's configuration, shared with the bodies streaming from it.
    pub(crate) config: Rc<Upstream>,
    /// Each server's address as text (logs, and the Host for a client that sent none).
    pub(crate) labels: Box<[String]>,
    pub(crate) servers: RefCell<Vec<ServerState>>,
    pub(crate) balancer: RefCell<Balancer>,
    /// Each server's `max_conns` count, shared by the workers (`None`: no limit).
    pub(crate) limits: Vec<Option<std::sync::Arc<tokio::sync::Semaphore>>>,
    last_check: Cell<Option<Instant>>,
}

impl UpstreamState {
    fn new(u: &Upstream) -> UpstreamState {
        UpstreamState {
            config: Rc::new(u.clone()),
            labels: u.servers.iter().map(|s| s.addr.to_string()).collect(),
            servers: RefCell::new(u.servers.iter().map(|_| ServerState::default()).collect()),
            balancer: RefCell::new(Balancer::new(u)),
            limits: crate::origin_limit::of(u),
            last_check: Cell::new(None),
        }
    }

    /// Give back a connection after a complete exchange.
    pub(crate) fn put_back(&self, server: usize, io: Io, now: Instant) {
        if let Some(s) = self.servers.borrow_mut().get_mut(server) {
            s.pool.put(io, self.config.keepalive, now);
        }
    }
}

/// The states built for one configuration (known by its address while it is alive).
#[derive(Default)]
struct Built {
    config: usize,
    upstreams: Vec<Rc<UpstreamState>>,
    /// The configuration's caches (`[cache.NAME]`), by index.
    caches: Vec<std::sync::Arc<ramjet_cache::Store>>,
}

/// What a worker's proxy requests share: the states for the configuration in force and
/// for the one before it (requests that started before a reload finish on it), and
/// buffers.
pub(crate) struct Shared {
    current: RefCell<Built>,
    previous: RefCell<Built>,
    /// Request-head and response-head buffers for reuse.
    pub(crate) buffers: Spares<(Vec<u8>, Vec<u8>)>,
}

/// Buffer pairs kept per worker through idle seconds, and at most (`Spares`).
const POOL_FLOOR: usize = 64;
const POOL_CAP: usize = 4096;

impl Default for Shared {
    fn default() -> Shared {
        Shared {
            current: RefCell::default(),
            previous: RefCell::default(),
            buffers: Spares::new(POOL_FLOOR, POOL_CAP),
        }
    }
}

impl Shared {
    /// What `pick` takes from the states built for `config` (built on its first use; the
    /// previous configuration's stay for the requests that started under it).
    fn built<T>(&self, config: &Resolved, pick: impl Fn(&Built) -> Option<T>) -> Option<T> {
        let id = config as *const Resolved as usize;
        if self.current.borrow().config != id {
            if self.previous.borrow().config == id {
                return pick(&self.previous.borrow());
            }
            self.rebuild(config);
        }
        pick(&self.current.borrow())
    }

    /// Cache `index` of `config`.
    pub(crate) fn cache(
        &self,
        config: &Resolved,
        index: usize,
    ) -> Option<std::sync::Arc<ramjet_cache::Store>> {
        self.built(config, |b| b.caches.get(index).cloned())
    }

    /// The state of upstream `index` of `config`.
    pub(crate) fn upstream(&self, config: &Resolved, index: usize) -> Option<Rc<UpstreamState>> {
        self.built(config, |b| b.upstreams.get(index).cloned())
    }

    /// A new configuration: pools, health and balancing start afresh (as nginx's do).
    fn rebuild(&self, config: &Resolved) {
        let next = Built {
            config: config as *const Resolved as usize,
            upstreams: config
                .upstreams
                .iter()
                .map(|u| Rc::new(UpstreamState::new(u)))
                .collect(),
            caches: ramjet_cache::store::open(&config.caches),
        };
        let old = self.current.replace(next);
        *self.previous.borrow_mut() = old;
    }
}

/// Counts a request in flight on a server for as long as it lives (least-connections),
/// and holds its place under the server's `max_conns`.
pub(crate) struct InFlight {
    pub(crate) state: Rc<UpstreamState>,
    pub(crate) server: usize,
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl InFlight {
    pub(crate) fn new(
        state: &Rc<UpstreamState>,
        server: usize,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> InFlight {
        if let Some(s) = state.servers.borrow_mut().get_mut(server) {
            s.in_flight += 1;
        }
        if let Some(c) = counts(state, server) {
            c.in_flight.add(1);
        }
        InFlight {
            state: state.clone(),
            server,
            _permit: permit,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(s) = self.state.servers.borrow_mut().get_mut(self.server) {
            s.in_flight = s.in_flight.saturating_sub(1);
        }
        if let Some(c) = counts(&self.state, self.server) {
            c.in_flight.sub(1);
        }
    }
}

/// This worker's counters of a server (`/metrics`).
pub(crate) fn counts(
    state: &UpstreamState,
    server: usize,
) -> Option<&'static ramjet_observe::stats::UpstreamCounts> {
    let slot = state.config.servers.get(server)?.metrics;
    ramjet_observe::stats::local().upstream(slot)
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
        let Some(state) = self.shared.upstream(req.config, opts.upstream) else {
            return Ok(Outcome::Declined);
        };
        if let Some(rule) = &opts.cache {
            if let Some(store) = self.shared.cache(req.config, rule.zone) {
                if let Some(hit) = crate::cached::fresh_hit(&store, rule, req) {
                    return Ok(hit);
                }
                let c = crate::cached::Cached {
                    shared: &self.shared,
                    state,
                    opts,
                    rule,
                    store,
                };
                return Err(req.later(|| crate::cached::serve(c, req)));
            }
        }
        Err(req.later(|| async move {
            let asking = crate::exchange::Asking::of(req);
            crate::exchange::forward(&self.shared, state, &asking, opts, false).await
        }))
    }

    fn on_reload(&self, config: &Resolved) {
        self.shared.upstream(config, 0);
    }

    /// Drop spare buffers unused for a second, close pooled connections idle too long, and
    /// start due active health checks.
    fn on_tick(&self, config: &Resolved) {
        self.shared.buffers.tick();
        let now = Instant::now();
        for index in 0..config.upstreams.len() {
            let Some(state) = self.shared.upstream(config, index) else {
                continue;
            };
            let u = state.config.clone();
            for s in state.servers.borrow_mut().iter_mut() {
                s.pool.prune(now, u.keepalive_timeout);
            }
            let Some(path) = &u.health_check else {
                continue;
            };
            if state
                .last_check
                .get()
                .is_some_and(|t| now.saturating_duration_since(t) < u.health_interval)
            {
                continue;
            }
            state.last_check.set(Some(now));
            for si in 0..u.servers.len() {
                {
                    let mut servers = state.servers.borrow_mut();
                    if servers[si].health.checking {
                        continue;
                    }
                    servers[si].health.checking = true;
                }
                let state = state.clone();
                let (addr, path) = (u.servers[si].addr.clone(), path.clone());
                let timeout = u
                    .header_timeout
                    .min(u.health_interval.max(std::time::Duration::from_secs(1)));
                let connect = u.connect_timeout;
                tokio::task::spawn_local(async move {
                    let result = health::check(&addr, &path, connect, timeout).await;
                    let name = &state.config.name;
                    let mut servers = state.servers.borrow_mut();
                    let s = &mut servers[si];
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
                            tracing::warn!(
                                "upstream {name} ({addr}): health check {path} failed: {why}; out of service"
                            );
                            s.health.check_failed = true;
                        }
                        Err(_) => {}
                    }
                });
            }
        }
    }
}
