//! `max_conns`: requests in progress to one server, counted across the process's workers
//! (each worker has its own pools and balancer, so the limit lives outside them). A
//! request over the limit waits in the semaphore's queue (first come, first served) for up
//! to `queue_timeout`; a cold cache tier in front of one origin therefore sends it at most
//! `max_conns` requests at a time, however many clients miss at once.

use std::sync::{Arc, Mutex};

use ramjet_config::Upstream;
use tokio::sync::Semaphore;

/// One server's limit.
struct Limit {
    upstream: String,
    server: String,
    max: u32,
    permits: Arc<Semaphore>,
}

/// Every limited server's semaphore, by upstream name and server address: a reload that
/// keeps a server's limit keeps its semaphore (the requests in progress still count).
static LIMITS: Mutex<Vec<Limit>> = Mutex::new(Vec::new());

/// The semaphores of `u`'s servers (`None` for all without `max_conns`).
pub(crate) fn of(u: &Upstream) -> Vec<Option<Arc<Semaphore>>> {
    let Some(max) = u.max_conns else {
        return vec![None; u.servers.len()];
    };
    let mut all = LIMITS.lock().unwrap_or_else(|p| p.into_inner());
    u.servers
        .iter()
        .map(|s| {
            let server = s.addr.to_string();
            let at = all
                .iter()
                .position(|l| l.upstream == u.name && l.server == server);
            match at {
                Some(i) if all[i].max == max => Some(all[i].permits.clone()),
                _ => {
                    // New, or a new limit: a new count (the requests under the old one
                    // finish on it).
                    let permits = Arc::new(Semaphore::new(max as usize));
                    let limit = Limit {
                        upstream: u.name.clone(),
                        server,
                        max,
                        permits: permits.clone(),
                    };
                    match at {
                        Some(i) => all[i] = limit,
                        None => all.push(limit),
                    }
                    Some(permits)
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(name: &str, max: Option<u32>) -> Upstream {
        let text = format!(
            "[upstream.{name}]\nservers = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\n{}\n\
             [[location]]\nproxy = \"{name}\"\n",
            max.map_or(String::new(), |m| format!("max_conns = {m}"))
        );
        let config =
            ramjet_config::load_str(&text, "t.toml", std::path::Path::new("/")).expect("valid");
        config.upstreams[0].clone()
    }

    #[test]
    fn a_limit_is_shared_and_kept_across_reloads_until_it_changes() {
        assert!(of(&upstream("free", None)).iter().all(Option::is_none));
        let a = of(&upstream("limited", Some(2)));
        let b = of(&upstream("limited", Some(2)));
        let (a0, b0) = (a[0].as_ref().unwrap(), b[0].as_ref().unwrap());
        assert!(Arc::ptr_eq(a0, b0), "the same server shares one count");
        assert!(
            !Arc::ptr_eq(a0, a[1].as_ref().unwrap()),
            "each server its own"
        );
        let _held = a0.clone().try_acquire_many_owned(2).unwrap();
        assert!(b0.clone().try_acquire_owned().is_err(), "the limit holds");
        let c = of(&upstream("limited", Some(3)));
        assert!(
            !Arc::ptr_eq(a0, c[0].as_ref().unwrap()),
            "a new limit, a new count"
        );
    }
}
