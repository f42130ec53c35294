//! Invalidation on change: each worker watches (inotify) the directories its cached entries
//! live in, and marks an entry for re-check as soon as its name changes, so a rewritten,
//! truncated, replaced or removed file is not served from the cache until
//! `file_cache.valid` runs out. The timer stays as the backstop for what inotify cannot see
//! (network filesystems, a directory renamed higher up, watches exhausted).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::File;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ramjet_runtime::sys::{Change, DirWatch};

use crate::cache::FileCache;

/// Watched directories: watch descriptor -> (location id, directory as a cache-key prefix,
/// `""` or ending in `/`). Written on the blocking pool, read by the event task.
type Dirs = Mutex<HashMap<i32, Vec<(usize, Box<[u8]>)>>>;

/// The part the blocking pool uses: add watches.
#[derive(Debug)]
pub(crate) struct Watcher {
    inotify: DirWatch,
    dirs: Dirs,
    /// Adding a watch failed for lack of watches (ENOSPC): said once, then the timer alone.
    full: AtomicBool,
}

impl Watcher {
    /// Start watching for this worker: the returned watcher adds watches, and a local task
    /// marks `cache` entries as changes arrive. `None` (logged) when inotify is unavailable.
    pub(crate) fn start(
        cache: Rc<RefCell<FileCache>>,
        epoch: Rc<Cell<u64>>,
    ) -> Option<Arc<Watcher>> {
        let inotify = match DirWatch::new() {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!(
                    "inotify unavailable ({e}): changed files are noticed after file_cache.valid"
                );
                return None;
            }
        };
        let watcher = Arc::new(Watcher {
            inotify,
            dirs: Mutex::new(HashMap::new()),
            full: AtomicBool::new(false),
        });
        let w = watcher.clone();
        tokio::task::spawn_local(async move {
            loop {
                // Every queued change marks its entries; then loads in flight learn that
                // something changed while they ran.
                let result = w.next(&cache).await;
                epoch.set(epoch.get() + 1);
                if let Err(e) = result {
                    tracing::warn!(
                        "inotify: {e}; changed files are noticed after file_cache.valid"
                    );
                    return;
                }
            }
        });
        Some(watcher)
    }

    /// Blocking side: watch the directory that holds `rel` (a cache key path of `location`)
    /// beneath `root`. Call before opening `rel`, so that a change after the open is
    /// reported; a directory that does not exist (the parent of a 404) is not watched.
    pub(crate) fn blocking_watch_parent(&self, root: &File, location: usize, rel: &[u8]) {
        let dir = match rel.iter().rposition(|&b| b == b'/') {
            Some(i) => &rel[..=i],
            None => &b""[..],
        };
        match self.inotify.blocking_watch(root, dir) {
            Ok(wd) => {
                let mut dirs = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
                let list = dirs.entry(wd).or_default();
                if !list.iter().any(|(l, d)| *l == location && **d == *dir) {
                    list.push((location, dir.into()));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => {
                if !self.full.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "inotify watches exhausted (fs.inotify.max_user_watches): further changes are noticed after file_cache.valid"
                    );
                }
            }
            Err(_) => {}
        }
    }

    /// Forget which directory is which location's (after a reload the ids change); the
    /// kernel's watches stay and are named again by the next loads.
    pub(crate) fn forget(&self) {
        self.dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Wait for changes and mark the cache entries they name.
    async fn next(&self, cache: &RefCell<FileCache>) -> std::io::Result<()> {
        let mut path = Vec::new();
        // The cache is borrowed per change, inside the callback: never across the wait.
        self.inotify
            .next(|change| self.apply(&mut cache.borrow_mut(), change, &mut path))
            .await
    }

    /// Apply the changes the reactor has already seen, without waiting; true if any were
    /// read. Errors are left to the waiting task, which reports them.
    pub(crate) fn apply_seen(&self, cache: &RefCell<FileCache>) -> bool {
        let mut path = Vec::new();
        self.inotify
            .poll_now(|change| self.apply(&mut cache.borrow_mut(), change, &mut path))
            .unwrap_or(false)
    }

    fn apply(&self, cache: &mut FileCache, change: Change<'_>, path: &mut Vec<u8>) {
        let mut dirs = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
        match change {
            Change::Entry { wd, name, is_dir } => {
                for (location, dir) in dirs.get(&wd).into_iter().flatten() {
                    path.clear();
                    path.extend_from_slice(dir);
                    path.extend_from_slice(name);
                    cache.invalidate(*location, path);
                    if is_dir {
                        path.push(b'/');
                        cache.invalidate_under(*location, path);
                    }
                }
            }
            Change::Dir { wd, ended } => {
                for (location, dir) in dirs.get(&wd).into_iter().flatten() {
                    cache.invalidate_under(*location, dir);
                }
                if ended {
                    dirs.remove(&wd);
                }
            }
            Change::Overflow => cache.invalidate_all(),
        }
    }
}
