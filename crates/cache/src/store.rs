//! One cache (`[cache.NAME]`), shared by every worker: the index of stored answers by key
//! (each key a list of variants, for `Vary`), the fetches in progress (so one origin fetch
//! serves every request that wants the object, on any worker), and the size manager.
//!
//! The size manager keeps each tier under its budget at every insertion (no periodic
//! sweep): each tier has a clock (a queue of object ids in insertion order; a hit sets the
//! object's reference bit, one relaxed store; eviction takes the queue's front, giving a
//! referenced object another turn). Leaving the memory tier, an object with a disk copy
//! stays as a disk object; leaving the disk tier, it goes, files and all.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use ramjet_config::CacheZone;
use ramjet_http1::RequestHead;
use tokio::sync::watch;

use crate::disk::Disk;
use crate::key::vary_matches;
use crate::object::{Object, Stored};

/// After an answer that may not be stored, requests for its key go to the origin side by
/// side for this long instead of waiting for one another (Varnish's hit-for-miss).
pub const PASS_FOR_MS: u64 = 10_000;

/// Counters of one cache (`/metrics`, the status page).
#[derive(Default)]
pub struct Counts {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub stale: AtomicU64,
    pub revalidated: AtomicU64,
    pub bypass: AtomicU64,
    pub collapsed: AtomicU64,
    pub stored: AtomicU64,
    pub evicted: AtomicU64,
    pub purged: AtomicU64,
    pub hit_bytes: AtomicU64,
    pub miss_bytes: AtomicU64,
}

impl Counts {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// A fetch in progress for a key: waiters hold a receiver and look again when it changes.
pub struct Busy {
    tx: watch::Sender<bool>,
}

#[derive(Default)]
struct Slot {
    variants: Vec<Arc<Object>>,
    busy: Option<Arc<Busy>>,
    pass_until_ms: u64,
}

#[derive(Default)]
struct Inner {
    slots: HashMap<Box<[u8]>, Slot>,
    memory_used: u64,
    disk_used: u64,
    memory_clock: VecDeque<(Box<[u8]>, u64)>,
    disk_clock: VecDeque<(Box<[u8]>, u64)>,
    /// Keys passed on (hit-for-miss) and until when, in that order: a slot that holds
    /// nothing else goes when its time is over (unique uncacheable URLs would otherwise
    /// pile up).
    passes: VecDeque<(Box<[u8]>, u64)>,
}

impl Inner {
    /// Forget the hit-for-miss marks that are over (a few per call).
    fn expire_passes(&mut self, now_ms: u64) {
        for _ in 0..8 {
            match self.passes.front() {
                Some((_, until)) if *until <= now_ms => {}
                _ => return,
            }
            let Some((key, _)) = self.passes.pop_front() else {
                return;
            };
            if let Some(slot) = self.slots.get_mut(&key) {
                if slot.pass_until_ms <= now_ms {
                    slot.pass_until_ms = 0;
                    if slot.variants.is_empty() && slot.busy.is_none() {
                        self.slots.remove(&key);
                    }
                }
            }
        }
    }
}

pub struct Store {
    pub zone: Mutex<CacheZone>,
    inner: Mutex<Inner>,
    pub disk: Option<Disk>,
    /// The disk tier works (off after a write failed: the cache then keeps to memory).
    disk_ok: AtomicBool,
    next_id: AtomicU64,
    pub counts: Counts,
}

/// What a lookup found.
pub enum Lookup {
    /// A stored variant for this request (fresh or not: the caller asks the policy).
    Found(Arc<Object>),
    /// Another request is fetching this key: wait for the change, then look again.
    Wait(watch::Receiver<bool>),
    /// Fetch it; the guard tells the waiters when done (or dropped).
    Lead(Lead),
    /// Recently uncacheable: go to the origin without waiting.
    Pass,
}

/// The right to fetch a key for everyone waiting on it.
pub struct Lead {
    store: Arc<Store>,
    key: Box<[u8]>,
    busy: Arc<Busy>,
    done: bool,
}

/// Files to remove once the index lock is released.
type Removals = Vec<u128>;

impl Store {
    fn new(zone: CacheZone) -> Store {
        let disk = zone.disk.clone().map(|dir| Disk { dir });
        Store {
            zone: Mutex::new(zone),
            inner: Mutex::new(Inner::default()),
            disk,
            disk_ok: AtomicBool::new(true),
            next_id: AtomicU64::new(1),
            counts: Counts::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn zone(&self) -> CacheZone {
        self.zone.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The disk tier, while it works.
    pub fn disk(&self) -> Option<&Disk> {
        self.disk
            .as_ref()
            .filter(|_| self.disk_ok.load(Ordering::Relaxed))
    }

    /// A disk write failed: the cache keeps to memory from now on (one line in the log).
    pub fn disk_failed(&self, why: &std::io::Error) {
        if self.disk_ok.swap(false, Ordering::Relaxed) {
            let z = self.zone();
            tracing::error!(
                "cache {}: the disk tier at {} failed ({why}); it is off until a restart, and answers too large for memory pass through",
                z.name,
                z.disk.as_ref().map(|d| d.display().to_string()).unwrap_or_default()
            );
        }
    }

    /// Bytes held by each tier.
    pub fn used(&self) -> (u64, u64, usize) {
        let i = self.lock();
        let objects = i.slots.values().map(|s| s.variants.len()).sum();
        (i.memory_used, i.disk_used, objects)
    }

    /// The variant of `key` this request selects, or who fetches it.
    pub fn lookup(self: &Arc<Store>, key: &[u8], head: &RequestHead<'_>, now_ms: u64) -> Lookup {
        let mut inner = self.lock();
        inner.expire_passes(now_ms);
        let slot = match inner.slots.get_mut(key) {
            Some(s) => s,
            None => inner.slots.entry(key.into()).or_default(),
        };
        if let Some(o) = slot
            .variants
            .iter()
            .find(|o| vary_matches(&o.meta.vary, head))
        {
            o.touch();
            return Lookup::Found(o.clone());
        }
        self.lead_or_wait(slot, key, now_ms)
    }

    /// The variant of `key` this request selects, if one is stored (nothing else is
    /// changed: the synchronous hit path).
    pub fn peek(&self, key: &[u8], head: &RequestHead<'_>) -> Option<Arc<Object>> {
        let inner = self.lock();
        let o = inner
            .slots
            .get(key)?
            .variants
            .iter()
            .find(|o| vary_matches(&o.meta.vary, head))?
            .clone();
        drop(inner);
        o.touch();
        Some(o)
    }

    /// Start a fetch of `key` (a miss, or a stored answer that needs revalidating), or
    /// wait for the one under way.
    pub fn begin(self: &Arc<Store>, key: &[u8], now_ms: u64) -> Lookup {
        let mut inner = self.lock();
        let slot = inner.slots.entry(key.into()).or_default();
        self.lead_or_wait(slot, key, now_ms)
    }

    fn lead_or_wait(self: &Arc<Store>, slot: &mut Slot, key: &[u8], now_ms: u64) -> Lookup {
        if slot.pass_until_ms > now_ms {
            return Lookup::Pass;
        }
        if let Some(b) = &slot.busy {
            return Lookup::Wait(b.tx.subscribe());
        }
        let busy = Arc::new(Busy {
            tx: watch::channel(false).0,
        });
        slot.busy = Some(busy.clone());
        Lookup::Lead(Lead {
            store: self.clone(),
            key: key.into(),
            busy,
            done: false,
        })
    }

    /// Put `object` in, replacing the variant it replaces, and keep the tiers in budget.
    fn insert_locked(
        &self,
        inner: &mut Inner,
        key: &[u8],
        object: Arc<Object>,
        gone: &mut Removals,
    ) {
        let slot = inner.slots.entry(key.into()).or_default();
        let old = slot
            .variants
            .iter()
            .position(|o| o.meta.vary == object.meta.vary || o.hash == object.hash)
            .map(|i| slot.variants.swap_remove(i));
        // A new object gets one turn of the clock before it may go.
        object.touch();
        slot.variants.push(object.clone());
        if let Some(old) = old {
            self.account(inner, &old, false);
            if old.disk.is_some() && object.disk.is_none() {
                gone.push(old.hash);
            }
        }
        self.account(inner, &object, true);
        if object.memory_size() > 0 && !matches!(object.body, Stored::Disk(_)) {
            inner.memory_clock.push_back((key.into(), object.id));
        }
        if object.disk.is_some() {
            inner.disk_clock.push_back((key.into(), object.id));
        }
        self.trim(inner, gone);
    }

    fn account(&self, inner: &mut Inner, o: &Object, add: bool) {
        let mem = if matches!(o.body, Stored::Disk(_)) {
            0
        } else {
            o.memory_size()
        };
        let disk = if o.disk.is_some() { o.disk_size() } else { 0 };
        if add {
            inner.memory_used += mem;
            inner.disk_used += disk;
        } else {
            inner.memory_used = inner.memory_used.saturating_sub(mem);
            inner.disk_used = inner.disk_used.saturating_sub(disk);
        }
    }

    /// Evict until both tiers are within budget.
    fn trim(&self, inner: &mut Inner, gone: &mut Removals) {
        let (memory, disk_size) = {
            let z = self.zone.lock().unwrap_or_else(|e| e.into_inner());
            (z.memory, z.disk_size)
        };
        let mut turns = inner.memory_clock.len() * 2 + 1;
        while inner.memory_used > memory && turns > 0 {
            turns -= 1;
            let Some((key, id)) = inner.memory_clock.pop_front() else {
                break;
            };
            let Some(o) = find(inner, &key, id) else {
                continue;
            };
            if matches!(o.body, Stored::Disk(_)) {
                continue;
            }
            // An answer still arriving stays (requests are reading it); so does one used
            // since the clock last passed, once more.
            if matches!(o.body, Stored::Filling(_)) || o.referenced.swap(false, Ordering::Relaxed) {
                inner.memory_clock.push_back((key, id));
                continue;
            }
            // Out of memory: kept on disk if it is there, else gone.
            match o.disk.clone() {
                Some(f) => {
                    let id = self.next_id();
                    let moved =
                        Arc::new(o.with(id, o.meta.clone(), Stored::Disk(f.clone()), Some(f)));
                    replace(inner, &key, o.id, Some(moved.clone()));
                    self.account(inner, &o, false);
                    self.account(inner, &moved, true);
                    inner.disk_clock.push_back((key, id));
                }
                None => {
                    replace(inner, &key, o.id, None);
                    self.account(inner, &o, false);
                }
            }
            Counts::add(&self.counts.evicted, 1);
        }
        let mut turns = inner.disk_clock.len() * 2 + 1;
        while inner.disk_used > disk_size && turns > 0 {
            turns -= 1;
            let Some((key, id)) = inner.disk_clock.pop_front() else {
                break;
            };
            let Some(o) = find(inner, &key, id) else {
                continue;
            };
            if o.referenced.swap(false, Ordering::Relaxed) {
                inner.disk_clock.push_back((key, id));
                continue;
            }
            replace(inner, &key, o.id, None);
            self.account(inner, &o, false);
            gone.push(o.hash);
            Counts::add(&self.counts.evicted, 1);
        }
    }

    fn remove_files(&self, gone: Removals) {
        if gone.is_empty() {
            return;
        }
        let Some(disk) = self.disk.as_ref() else {
            return;
        };
        let dir = disk.dir.clone();
        let job = move || {
            let d = Disk { dir };
            for h in gone {
                d.remove(h);
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => drop(h.spawn_blocking(job)),
            Err(_) => job(),
        }
    }

    /// Put an object in (outside a fetch: the disk scan at start, a write-through).
    pub fn insert(&self, key: &[u8], object: Arc<Object>) {
        let mut gone = Vec::new();
        {
            let mut inner = self.lock();
            self.insert_locked(&mut inner, key, object, &mut gone);
        }
        self.remove_files(gone);
    }

    /// Replace object `id` of `key` by `by` (a fill that completed, a write-through), if it
    /// is still there; `None` removes it.
    pub fn update(&self, key: &[u8], id: u64, by: Option<Arc<Object>>) -> bool {
        let mut gone = Vec::new();
        let found = {
            let mut inner = self.lock();
            match find(&inner, key, id) {
                Some(old) => {
                    replace(&mut inner, key, id, None);
                    self.account(&mut inner, &old, false);
                    if let Some(by) = by {
                        self.insert_locked(&mut inner, key, by, &mut gone);
                    } else if old.disk.is_some() {
                        gone.push(old.hash);
                    }
                    true
                }
                None => false,
            }
        };
        self.remove_files(gone);
        found
    }

    /// Remove every variant of `key` (invalidation, PURGE). Returns how many.
    pub fn remove(&self, key: &[u8]) -> usize {
        let mut gone = Vec::new();
        let n = {
            let mut inner = self.lock();
            let Some(slot) = inner.slots.get_mut(key) else {
                return 0;
            };
            let variants = std::mem::take(&mut slot.variants);
            if slot.busy.is_none() {
                inner.slots.remove(key);
            }
            for o in &variants {
                self.account(&mut inner, o, false);
                if o.disk.is_some() {
                    gone.push(o.hash);
                }
            }
            variants.len()
        };
        self.remove_files(gone);
        Counts::add(&self.counts.purged, n as u64);
        n
    }

    /// Remove every key that starts with `prefix`. Returns how many answers went.
    pub fn remove_prefix(&self, prefix: &[u8]) -> usize {
        let keys: Vec<Box<[u8]>> = self
            .lock()
            .slots
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        keys.iter().map(|k| self.remove(k)).sum()
    }
}

fn find(inner: &Inner, key: &[u8], id: u64) -> Option<Arc<Object>> {
    inner
        .slots
        .get(key)?
        .variants
        .iter()
        .find(|o| o.id == id)
        .cloned()
}

fn replace(inner: &mut Inner, key: &[u8], id: u64, by: Option<Arc<Object>>) {
    let Some(slot) = inner.slots.get_mut(key) else {
        return;
    };
    if let Some(i) = slot.variants.iter().position(|o| o.id == id) {
        match by {
            Some(b) => slot.variants[i] = b,
            None => {
                slot.variants.swap_remove(i);
            }
        }
    }
    if slot.variants.is_empty() && slot.busy.is_none() && slot.pass_until_ms == 0 {
        inner.slots.remove(key);
    }
}

impl Lead {
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The fetched answer is stored: waiters find it when they look again.
    pub fn stored(mut self, object: Arc<Object>) {
        let mut gone = Vec::new();
        let store = self.store.clone();
        {
            let mut inner = store.lock();
            store.insert_locked(&mut inner, &self.key, object, &mut gone);
            self.release(&mut inner, 0);
        }
        store.remove_files(gone);
    }

    /// The answer may not be stored: the waiters, and requests for a while, go to the
    /// origin themselves, side by side.
    pub fn pass(mut self, now_ms: u64) {
        let store = self.store.clone();
        let mut inner = store.lock();
        inner
            .passes
            .push_back((self.key.clone(), now_ms + PASS_FOR_MS));
        self.release(&mut inner, now_ms + PASS_FOR_MS);
    }

    fn release(&mut self, inner: &mut Inner, pass_until_ms: u64) {
        self.done = true;
        if let Some(slot) = inner.slots.get_mut(&self.key) {
            if slot
                .busy
                .as_ref()
                .is_some_and(|b| Arc::ptr_eq(b, &self.busy))
            {
                slot.busy = None;
            }
            if pass_until_ms > 0 {
                slot.pass_until_ms = pass_until_ms;
            }
            if slot.variants.is_empty() && slot.busy.is_none() && slot.pass_until_ms == 0 {
                inner.slots.remove(&self.key);
            }
        }
        self.busy.tx.send_replace(true);
    }
}

impl Drop for Lead {
    /// A fetch that ended without an answer (an error, a client gone): the waiters look
    /// again, and one of them leads.
    fn drop(&mut self) {
        if !self.done {
            let store = self.store.clone();
            let mut inner = store.lock();
            self.release(&mut inner, 0);
        }
    }
}

/// Every cache of the process, by name: one store per `[cache.NAME]`, kept across reloads
/// (budgets follow the configuration; a changed disk directory makes a new store).
fn registry() -> &'static Mutex<Vec<Arc<Store>>> {
    static STORES: OnceLock<Mutex<Vec<Arc<Store>>>> = OnceLock::new();
    STORES.get_or_init(Default::default)
}

/// The stores for `zones`, in their order, made (and their disk tiers read) on first use.
pub fn open(zones: &[CacheZone]) -> Vec<Arc<Store>> {
    let mut all = registry().lock().unwrap_or_else(|e| e.into_inner());
    zones
        .iter()
        .map(|z| {
            if let Some(s) = all.iter().find(|s| {
                let have = s.zone();
                have.name == z.name && have.disk == z.disk
            }) {
                *s.zone.lock().unwrap_or_else(|e| e.into_inner()) = z.clone();
                return s.clone();
            }
            let s = Arc::new(Store::new(z.clone()));
            s.load_disk();
            all.retain(|o| o.zone().name != z.name);
            all.push(s.clone());
            s
        })
        .collect()
}

/// Every store opened so far (metrics).
pub fn all() -> Vec<Arc<Store>> {
    registry().lock().unwrap_or_else(|e| e.into_inner()).clone()
}

impl Store {
    /// Read the disk tier's objects into the index (at start, before serving).
    fn load_disk(&self) {
        let Some(disk) = self.disk.as_ref() else {
            return;
        };
        let found = match disk.scan() {
            Ok(f) => f,
            Err(e) => {
                self.disk_failed(&e);
                return;
            }
        };
        let n = found.len();
        for f in found {
            let key = f.meta.key.clone();
            let o = Object::new(
                self.next_id(),
                f.hash,
                f.meta,
                Stored::Disk(f.body.clone()),
                Some(f.body),
            );
            self.insert(&key, Arc::new(o));
        }
        if n > 0 {
            let (_, disk, _) = self.used();
            tracing::info!(
                "cache {}: {n} stored answers ({disk} bytes) read from {}",
                self.zone().name,
                disk_dir(self)
            );
        }
    }
}

fn disk_dir(s: &Store) -> String {
    s.disk
        .as_ref()
        .map(|d| d.dir.display().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramjet_http1::{parse_request_head, Limits, Parse};

    fn head() -> ramjet_http1::RequestHead<'static> {
        let raw = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        let Parse::Complete(head) = parse_request_head(raw, &Limits::default()) else {
            panic!()
        };
        head
    }

    fn zone() -> CacheZone {
        CacheZone {
            name: "t".into(),
            memory: 1 << 20,
            disk: None,
            disk_size: 0,
            memory_object_max: 1 << 20,
            max_object: 1 << 20,
            identity: "ramjet".into(),
        }
    }

    #[test]
    fn hit_for_miss_marks_expire_and_leave_nothing_behind() {
        let store = Arc::new(Store::new(zone()));
        let head = head();
        for i in 0..100u32 {
            let key = i.to_le_bytes();
            let Lookup::Lead(lead) = store.lookup(&key, &head, 1_000) else {
                panic!("a first lookup leads")
            };
            lead.pass(1_000);
            assert!(matches!(store.lookup(&key, &head, 1_001), Lookup::Pass));
        }
        assert_eq!(store.lock().slots.len(), 100);
        // Once over, each lookup forgets a few expired marks.
        let later = 1_000 + PASS_FOR_MS + 1;
        for _ in 0..20 {
            let _ = store.lookup(b"other", &head, later);
        }
        assert!(
            store.lock().slots.len() <= 1,
            "only the key being fetched is left"
        );
    }

    fn object(store: &Store, key: &[u8], body: Stored, length: u64) -> Arc<Object> {
        let meta = crate::meta::Meta {
            key: key.into(),
            status: 200,
            fields: bytes::Bytes::new(),
            vary: Vec::new(),
            freshness: Default::default(),
            length,
        };
        Arc::new(Object::new(store.next_id(), 0, meta, body, None))
    }

    #[test]
    fn the_memory_budget_holds_and_a_disk_bound_fill_counts_its_window() {
        let store = Store::new(CacheZone {
            memory: 64 << 20,
            ..zone()
        });
        let small = |i: u8| {
            let b = bytes::Bytes::from(vec![i; 1 << 20]);
            object(&store, &[i], Stored::Memory(b), 1 << 20)
        };
        // 32 answers of 1 MiB: half the 64 MiB budget.
        for i in 0..32u8 {
            store.insert(&[i], small(i));
        }
        // A 200 MB answer bound for disk holds its window (8 MiB) at most: they all stay.
        let fill = crate::fill::Fill::new(Some(200 << 20), false);
        store.insert(
            b"big",
            object(&store, b"big", Stored::Filling(fill), 200 << 20),
        );
        assert_eq!(store.used().2, 33);
        // Answers past the budget are evicted as they come: never over it.
        for i in 100..200u8 {
            store.insert(&[i], small(i));
            assert!(store.used().0 <= 64 << 20, "over budget after {i}");
        }
        assert!(store.counts.evicted.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn a_dropped_lead_lets_a_waiter_lead() {
        let store = Arc::new(Store::new(zone()));
        let head = head();
        let Lookup::Lead(lead) = store.lookup(b"k", &head, 0) else {
            panic!()
        };
        let Lookup::Wait(mut rx) = store.lookup(b"k", &head, 0) else {
            panic!("a second lookup waits")
        };
        drop(lead);
        assert!(*rx.borrow_and_update());
        assert!(matches!(store.lookup(b"k", &head, 0), Lookup::Lead(_)));
    }
}
