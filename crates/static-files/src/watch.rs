//! Invalidation on change: each worker watches (inotify) the directories its cached entries
//! live in, and marks an entry for re-check as soon as its name changes, so a rewritten,
//! truncated, replaced or removed file is not served from the cache until
//! `file_cache.valid` runs out. The timer stays as the backstop for what inotify cannot see
//! (network filesystems, a directory renamed higher up, watches exhausted).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use ramjet_runtime::sys::{Change, DirWatch};

use crate::cache::FileCache;

/// (location id, directory): one location's directory.
type LocatedDir = (usize, Box<[u8]>);

/// Watched directories, as cache-key prefixes (`""` or ending in `/`). Written on the
/// blocking pool, read by the event task and by loads on the event loop.
#[derive(Debug, Default)]
struct Dirs {
    /// Watch descriptor -> (location id, directory).
    by_wd: HashMap<i32, Vec<LocatedDir>>,
    /// Location id -> its directories whose watch is known to be in place: a load there
    /// adds none (a path walk each), and may run on the event loop.
    watched: HashMap<usize, HashSet<Box<[u8]>>>,
}

/// The directory part of a cache key path: `""` or ending in `/`.
fn parent_of(rel: &[u8]) -> &[u8] {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => &rel[..=i],
        None => &b""[..],
    }
}

/// The part the blocking pool uses: add watches.
#[derive(Debug)]
pub(crate) struct Watcher {
    inotify: DirWatch,
    dirs: Mutex<Dirs>,
    /// Adding a watch failed for lack of watches (ENOSPC): said once, then the timer alone.
    full: AtomicBool,
    /// Set by the reactor when it wakes the watcher task (changes are queued), before any
    /// task of that turn runs; cleared when the queue is read. A request checks it (one
    /// load) and applies queued changes itself if the watcher task has not run yet.
    queued: Arc<AtomicBool>,
}

/// The watcher task's waker, wrapped so that the reactor's wake-up also raises `queued`.
struct Flagged {
    queued: Arc<AtomicBool>,
    task: Waker,
}

impl Wake for Flagged {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.queued.store(true, Ordering::Relaxed);
        self.task.wake_by_ref();
    }
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
            dirs: Mutex::new(Dirs::default()),
            full: AtomicBool::new(false),
            queued: Arc::new(AtomicBool::new(false)),
        });
        let w = watcher.clone();
        tokio::task::spawn_local(async move {
            let mut path = Vec::new();
            let result = std::future::poll_fn(|cx| {
                let flagged = Waker::from(Arc::new(Flagged {
                    queued: w.queued.clone(),
                    task: cx.waker().clone(),
                }));
                loop {
                    w.queued.store(false, Ordering::Relaxed);
                    let polled = w
                        .inotify
                        .poll_changes(&mut Context::from_waker(&flagged), |c| {
                            w.apply(&mut cache.borrow_mut(), c, &mut path)
                        });
                    match polled {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Err(e)) => return Poll::Ready(e),
                        // Loads in flight learn that something changed while they ran.
                        Poll::Ready(Ok(())) => epoch.set(epoch.get() + 1),
                    }
                }
            })
            .await;
            tracing::warn!("inotify: {result}; changed files are noticed after file_cache.valid");
        });
        Some(watcher)
    }

    /// Apply changes the reactor has already reported but the watcher task has not read
    /// yet (it runs later in this turn): a request calls this before it reads the cache, so
    /// a change made before the request was sent is applied before it is answered (the
    /// reactor saw both in the same or an earlier turn). One atomic load when nothing is
    /// queued. True if changes were read.
    pub(crate) fn apply_queued(&self, cache: &RefCell<FileCache>) -> bool {
        if !self.queued.swap(false, Ordering::Relaxed) {
            return false;
        }
        let mut path = Vec::new();
        // An error here is the watcher task's to report.
        let _ = self
            .inotify
            .drain(|c| self.apply(&mut cache.borrow_mut(), c, &mut path));
        true
    }

    /// Whether changes to `rel` (a cache key path of `location`) are reported without
    /// adding a watch: its directory is watched, or no more watches can be had (then the
    /// timer alone notices changes, wherever the file is loaded).
    pub(crate) fn covers(&self, location: usize, rel: &[u8]) -> bool {
        if self.full.load(Ordering::Relaxed) {
            return true;
        }
        let dirs = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
        dirs.watched
            .get(&location)
            .is_some_and(|set| set.contains(parent_of(rel)))
    }

    /// Blocking side: watch the directory that holds `rel` (a cache key path of `location`)
    /// beneath `root`, unless it is watched already. Call before opening `rel`, so that a
    /// change after the open is reported; a directory that does not exist (the parent of a
    /// 404) is not watched.
    pub(crate) fn blocking_watch_parent(&self, root: &File, location: usize, rel: &[u8]) {
        if self.covers(location, rel) {
            return;
        }
        let dir = parent_of(rel);
        match self.inotify.blocking_watch(root, dir) {
            Ok(wd) => {
                let mut dirs = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
                let list = dirs.by_wd.entry(wd).or_default();
                if !list.iter().any(|(l, d)| *l == location && **d == *dir) {
                    list.push((location, dir.into()));
                }
                dirs.watched.entry(location).or_default().insert(dir.into());
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
        let mut dirs = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
        dirs.by_wd.clear();
        dirs.watched.clear();
    }

    fn apply(&self, cache: &mut FileCache, change: Change<'_>, path: &mut Vec<u8>) {
        let mut guard = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
        let dirs = &mut *guard;
        match change {
            Change::Entry { wd, name, is_dir } => {
                for (location, dir) in dirs.by_wd.get(&wd).into_iter().flatten() {
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
                for (location, dir) in dirs.by_wd.get(&wd).into_iter().flatten() {
                    cache.invalidate_under(*location, dir);
                    // Moved or deleted: whatever holds that name now is not watched yet.
                    if let Some(set) = dirs.watched.get_mut(location) {
                        set.remove(dir);
                    }
                }
                if ended {
                    dirs.by_wd.remove(&wd);
                }
            }
            Change::Overflow => {
                // Moves may have been lost with the events: every watch is added again.
                cache.invalidate_all();
                dirs.watched.clear();
            }
        }
    }
}
