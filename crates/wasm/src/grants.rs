//! What a mount grants its module: named file trees (read-only, never left), journals,
//! upstreams, settings, and a key-value store shared by every worker and request of the mount.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ramjet_runtime::sys::{self, FileStat, OpenPolicy};

use crate::journal::Journal;
use crate::upstream::Upstream;

/// Files of granted trees a mount keeps open (the native SPECweb99 module keeps as many per
/// worker); past this, those opened longest ago are closed, half of them at a time.
const KEPT_MAX: usize = 8192;

/// How long a kept file is trusted before it is opened again (the static handler's
/// `file_cache.valid` default): a file replaced in a tree is seen within this.
const KEPT_VALID: Duration = Duration::from_secs(1);

/// Kept files by tree and path.
/// Hashed with foldhash (seeded per process), not SipHash: a module's every `files` call
/// looks its file up here, by borrowed names ([`Name`]), so a hit allocates nothing.
type Kept = HashMap<Named, Arc<KeptFile>, foldhash::fast::RandomState>;

/// A kept file's key: its tree and its path in the tree.
#[derive(PartialEq, Eq)]
struct Named {
    tree: String,
    path: String,
}

/// A tree and path to look a kept file up by: the owned key, or borrowed names.
trait Name {
    fn parts(&self) -> (&str, &str);
}

impl Name for Named {
    fn parts(&self) -> (&str, &str) {
        (&self.tree, &self.path)
    }
}

impl Name for (&str, &str) {
    fn parts(&self) -> (&str, &str) {
        *self
    }
}

impl<'a> Borrow<dyn Name + 'a> for Named {
    fn borrow(&self) -> &(dyn Name + 'a) {
        self
    }
}

// The owned key and the borrowed names hash and compare alike, as `Borrow` requires.
impl Hash for Named {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.parts().hash(h);
    }
}

impl Hash for dyn Name + '_ {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.parts().hash(h);
    }
}

impl PartialEq for dyn Name + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn Name + '_ {}

/// A file of a granted tree, kept open for the mount.
pub struct KeptFile {
    pub file: Arc<File>,
    pub stat: FileStat,
    opened: Instant,
    /// The last `files.find` of it: the needle, the most occurrences asked for, and where
    /// it occurs. A file is searched once per opening, not once per instance that asks
    /// (each instance has its own caches, and a burst brings many).
    found: Mutex<Option<Found>>,
}

struct Found {
    needle: Vec<u8>,
    max: u32,
    at: Vec<u64>,
}

impl KeptFile {
    /// Where `needle` occurs (at most `max` times), if this file was searched for it since
    /// it was opened and that search answers this one.
    pub fn found(&self, needle: &[u8], max: u32) -> Option<Vec<u64>> {
        let found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        let f = found.as_ref().filter(|f| f.needle == needle)?;
        // All of them (fewer than that search's limit), or no more than it found.
        let complete = f.at.len() < f.max as usize;
        (complete || max <= f.max).then(|| f.at[..f.at.len().min(max as usize)].to_vec())
    }

    /// Remember a search of this file (the last one only).
    pub fn remember(&self, needle: Vec<u8>, at: Vec<u64>, max: u32) {
        *self.found.lock().unwrap_or_else(|e| e.into_inner()) = Some(Found { needle, max, at });
    }
}

/// Limits of the key-value store.
pub const KEY_MAX: usize = 256;
pub const VALUE_MAX: usize = 64 << 10;
pub const KEYS_MAX: usize = 10_000;

/// One mount's grants.
pub struct Grants {
    /// How log lines name the module: `wasm module /w/ (hello.wasm)`.
    pub name: String,
    pub trees: BTreeMap<String, Arc<File>>,
    pub vars: BTreeMap<String, String>,
    /// Journals, by name (`crate::journal`).
    pub journals: BTreeMap<String, Arc<Journal>>,
    /// Upstreams, by name (`crate::upstream`).
    pub upstreams: BTreeMap<String, Upstream>,
    store: Mutex<HashMap<String, Vec<u8>>>,
    /// Files of the trees kept open for every instance and worker of the mount.
    kept: Mutex<Kept>,
}

/// Why a file was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NoTree,
    NotFound,
    Denied,
    Io,
}

impl Grants {
    pub fn new(
        name: String,
        trees: BTreeMap<String, File>,
        vars: BTreeMap<String, String>,
    ) -> Grants {
        Grants {
            name,
            trees: trees.into_iter().map(|(k, v)| (k, Arc::new(v))).collect(),
            vars,
            journals: BTreeMap::new(),
            upstreams: BTreeMap::new(),
            store: Mutex::new(HashMap::new()),
            kept: Mutex::new(HashMap::default()),
        }
    }

    /// With these journals and upstreams granted too.
    pub fn with(
        mut self,
        journals: BTreeMap<String, Arc<Journal>>,
        upstreams: BTreeMap<String, Upstream>,
    ) -> Grants {
        self.journals = journals;
        self.upstreams = upstreams;
        self
    }

    /// The tree `tree` and `path` made relative to it: `None` (not found) for `..`, `.`,
    /// empty components, NUL; `Denied` for a hidden name (a dot first), as the static
    /// handler hides them.
    pub fn locate(&self, tree: &str, path: &str) -> Result<(Arc<File>, Vec<u8>), Refusal> {
        let dir = self.trees.get(tree).ok_or(Refusal::NoTree)?;
        let mut rel = Vec::with_capacity(path.len());
        for part in path.split('/').filter(|p| !p.is_empty()) {
            if part == "." || part == ".." || part.contains('\0') {
                return Err(Refusal::NotFound);
            }
            if part.starts_with('.') {
                return Err(Refusal::Denied);
            }
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(part.as_bytes());
        }
        if rel.is_empty() {
            return Err(Refusal::NotFound);
        }
        Ok((dir.clone(), rel))
    }

    /// Open a regular file of a tree: from the kernel's caches on the event loop, else on
    /// the blocking pool. The kernel keeps it beneath the tree (`openat2`,
    /// `RESOLVE_BENEATH`): symlinks may point within it, never out.
    pub async fn open(&self, tree: &str, path: &str) -> Result<(Arc<File>, FileStat), Refusal> {
        let (dir, rel) = self.locate(tree, path)?;
        let opened = match sys::open_beneath_cached(&dir, &rel, OpenPolicy::Beneath) {
            Err(e) if sys::needs_blocking_open(&e) => tokio::task::spawn_blocking(move || {
                sys::open_beneath(&dir, &rel, OpenPolicy::Beneath)
            })
            .await
            .map_err(|_| Refusal::Io)?,
            other => other,
        };
        let (file, stat) = opened.map_err(|e| refusal(&e))?;
        if !stat.is_file {
            return Err(Refusal::NotFound);
        }
        Ok((Arc::new(file), stat))
    }

    /// [`Grants::open`], kept open for the mount for [`KEPT_VALID`]: a module that sends
    /// the same files request after request (or asks a size, then sends) opens each about
    /// once a second, and the descriptors held are the mount's, at most [`KEPT_MAX`],
    /// however many instances run.
    pub async fn open_kept(&self, tree: String, path: String) -> Result<Arc<KeptFile>, Refusal> {
        if let Some(k) = self.kept(&tree, &path) {
            return Ok(k);
        }
        let now = Instant::now();
        let (file, stat) = self.open(&tree, &path).await?;
        let k = Arc::new(KeptFile {
            file,
            stat,
            opened: now,
            found: Mutex::new(None),
        });
        let key = Named { tree, path };
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() >= KEPT_MAX && !kept.contains_key(&key) {
            evict_older_half(&mut kept);
        }
        kept.insert(key, k.clone());
        Ok(k)
    }

    /// The file kept open for `tree` and `path`, if it was opened less than [`KEPT_VALID`]
    /// ago: no allocation and no wait (the borrowed-import path, `crate::borrowing`).
    pub fn kept(&self, tree: &str, path: &str) -> Option<Arc<KeptFile>> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let k = kept.get(&(tree, path) as &dyn Name)?;
        (k.opened.elapsed() < KEPT_VALID).then(|| k.clone())
    }

    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// Store `value` under `key`: false past the limits.
    pub fn set(&self, key: &str, value: Vec<u8>) -> bool {
        if key.len() > KEY_MAX || value.len() > VALUE_MAX {
            return false;
        }
        let mut store = self.store.lock().unwrap_or_else(|e| e.into_inner());
        if store.len() >= KEYS_MAX && !store.contains_key(key) {
            return false;
        }
        store.insert(key.to_string(), value);
        true
    }

    pub fn delete(&self, key: &str) {
        self.store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

/// Close the half of the kept files opened longest ago (those past [`KEPT_VALID`] among
/// them). Clearing all at once would reopen a large working set's every file each time
/// the map fills.
fn evict_older_half(kept: &mut Kept) {
    let mut opened: Vec<Instant> = kept.values().map(|k| k.opened).collect();
    let middle = opened.len() / 2;
    let (_, cut, _) = opened.select_nth_unstable(middle);
    let cut = *cut;
    kept.retain(|_, k| k.opened > cut);
}

fn refusal(e: &io::Error) -> Refusal {
    use io::ErrorKind as K;
    if sys::is_symlink_loop(e) {
        return Refusal::Denied;
    }
    match e.kind() {
        K::NotFound | K::NotADirectory => Refusal::NotFound,
        // EXDEV: a symlink out of the tree.
        K::PermissionDenied | K::CrossesDevices => Refusal::Denied,
        _ => Refusal::Io,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(dir: &std::path::Path) -> Grants {
        let mut trees = BTreeMap::new();
        trees.insert("www".to_string(), File::open(dir).unwrap());
        Grants::new("t".into(), trees, BTreeMap::new())
    }

    #[test]
    fn paths_never_leave_their_tree() {
        let dir = tempfile::tempdir().unwrap();
        let g = grants(dir.path());
        assert_eq!(g.locate("www", "/a/b.txt").unwrap().1, b"a/b.txt");
        assert_eq!(g.locate("www", "a//b").unwrap().1, b"a/b");
        assert_eq!(g.locate("nope", "a").unwrap_err(), Refusal::NoTree);
        for bad in ["", "/", "../x", "a/../../x", "./a", "a\0b"] {
            assert_eq!(
                g.locate("www", bad).unwrap_err(),
                Refusal::NotFound,
                "{bad:?}"
            );
        }
        assert_eq!(
            g.locate("www", "a/.git/config").unwrap_err(),
            Refusal::Denied
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn symlinks_out_of_the_tree_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s").unwrap();
        std::fs::write(dir.path().join("f"), b"hello").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("out")).unwrap();
        std::os::unix::fs::symlink("f", dir.path().join("in")).unwrap();
        let g = grants(dir.path());
        assert_eq!(g.open("www", "f").await.unwrap().1.size, 5);
        assert_eq!(g.open("www", "in").await.unwrap().1.size, 5);
        assert_eq!(g.open("www", "out").await.unwrap_err(), Refusal::Denied);
        assert_eq!(g.open("www", "d").await.unwrap_err(), Refusal::NotFound);
        assert_eq!(g.open("www", "nope").await.unwrap_err(), Refusal::NotFound);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_kept_file_answers_a_search_again_only_when_that_search_covers_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"hello").unwrap();
        let g = grants(dir.path());
        assert!(g.kept("www", "f").is_none(), "not opened yet");
        let k = g.open_kept("www".into(), "f".into()).await.unwrap();
        assert!(Arc::ptr_eq(
            &k,
            &g.open_kept("www".into(), "f".into()).await.unwrap()
        ));
        // Found by borrowed names, and only by its own.
        assert!(Arc::ptr_eq(&k, &g.kept("www", "f").unwrap()));
        for (tree, path) in [("www", "g"), ("ww", "wf"), ("wwwf", ""), ("", "wwwf")] {
            assert!(g.kept(tree, path).is_none(), "{tree:?} {path:?}");
        }
        assert_eq!(k.found(b"l", 10), None);
        // Cut short at its limit: it answers smaller limits only.
        k.remember(b"l".to_vec(), vec![2, 3], 2);
        assert_eq!(k.found(b"l", 1), Some(vec![2]));
        assert_eq!(k.found(b"l", 2), Some(vec![2, 3]));
        assert_eq!(k.found(b"l", 3), None);
        assert_eq!(k.found(b"x", 1), None);
        // Complete: it answers any limit.
        k.remember(b"o".to_vec(), vec![4], 64);
        assert_eq!(k.found(b"o", 65_536), Some(vec![4]));
        assert_eq!(k.found(b"o", 0), Some(vec![]));
    }

    #[test]
    fn the_store_keeps_its_limits() {
        let g = grants(std::path::Path::new("/"));
        assert!(g.set("k", b"v".to_vec()));
        assert_eq!(g.get("k").as_deref(), Some(&b"v"[..]));
        assert!(!g.set(&"k".repeat(KEY_MAX + 1), Vec::new()));
        assert!(!g.set("big", vec![0; VALUE_MAX + 1]));
        g.delete("k");
        assert_eq!(g.get("k"), None);
    }
}
