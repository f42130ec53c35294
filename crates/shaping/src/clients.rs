//! State per client address, shared by all workers: sharded maps, so two workers rarely
//! contend, with entries dropped when they hold nothing.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};

const SHARDS: usize = 16;

/// A value per client address.
#[derive(Debug)]
pub struct ClientTable<T> {
    shards: Vec<Mutex<HashMap<IpAddr, T>>>,
    hasher: RandomState,
}

impl<T> Default for ClientTable<T> {
    fn default() -> Self {
        ClientTable {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
        }
    }
}

impl<T> ClientTable<T> {
    pub fn new() -> ClientTable<T> {
        ClientTable::default()
    }

    /// The shard holding `ip`, locked.
    pub fn shard(&self, ip: IpAddr) -> MutexGuard<'_, HashMap<IpAddr, T>> {
        let i = self.hasher.hash_one(ip) as usize % SHARDS;
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Entries in all shards (for tests and the status page).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// IPv4 clients reaching an IPv6 listener (`::ffff:a.b.c.d`) count as their IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}
