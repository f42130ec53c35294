//! One worker's open files of the file set, each with where its ad tags' placeholders are
//! (class 1 and 2), so a CAD reply sends the untouched bytes as file ranges and only the
//! 17-byte substitutions from memory.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use ramjet_runtime::sys;
use ramjet_specweb::request::find_placeholders;
pub use ramjet_specweb::request::Object;

/// Files kept open per worker; past this the cache starts again (a file set has 36 per
/// directory, and the Zipf draw makes the first directories hot).
const MAX_OPEN: usize = 8192;

/// An open file and its placeholders.
#[derive(Debug)]
pub struct Opened {
    pub file: Arc<File>,
    pub len: u64,
    /// Offsets of each `dirNNNNN/classX_Y` placeholder in the file.
    pub placeholders: Vec<u64>,
}

/// Open `root/<object>` and, for a class 1 or 2 file, find its placeholders (blocking).
pub fn open(root: &Path, o: Object) -> std::io::Result<Opened> {
    let path = root.join(o.name());
    let file = File::open(&path)?;
    let len = file.metadata()?.len();
    let mut placeholders = Vec::new();
    if o.has_ads() {
        let mut bytes = Vec::with_capacity(len as usize);
        // From the descriptor already open (replies send ranges by offset, so its
        // position does not matter).
        std::io::Read::read_to_end(&mut &file, &mut bytes)?;
        placeholders = find_placeholders(&bytes);
    }
    Ok(Opened {
        file: Arc::new(file),
        len,
        placeholders,
    })
}

/// [`open`] from the kernel's caches alone, for the event loop: `None` when that would
/// wait for the disk (then [`open`] on the blocking pool).
pub fn open_cached(root: &Path, o: Object) -> Option<std::io::Result<Opened>> {
    let (file, stat) = match sys::open_cached(&root.join(o.name())) {
        Ok(found) => found,
        Err(e) if sys::needs_blocking_open(&e) => return None,
        Err(e) => return Some(Err(e)),
    };
    let placeholders = if o.has_ads() {
        find_placeholders(&sys::read_cached(&file, stat.size as usize)?)
    } else {
        Vec::new()
    };
    Some(Ok(Opened {
        file: Arc::new(file),
        len: stat.size,
        placeholders,
    }))
}

/// The per-worker cache.
#[derive(Default)]
pub struct Files {
    open: RefCell<HashMap<Object, Arc<Opened>>>,
}

impl Files {
    pub fn get(&self, o: Object) -> Option<Arc<Opened>> {
        self.open.borrow().get(&o).cloned()
    }

    pub fn put(&self, o: Object, f: Arc<Opened>) {
        let mut open = self.open.borrow_mut();
        if open.len() >= MAX_OPEN {
            open.clear();
        }
        open.insert(o, f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramjet_specweb::fileset::AD_PLACEHOLDER;

    #[test]
    fn placeholders_are_found_in_class_1_and_2_files() {
        let tmp = tempfile::tempdir().unwrap();
        for (class, num, tags) in [(0, 3, 0), (1, 0, 1), (2, 8, 2), (3, 0, 0)] {
            let o = Object { dir: 3, class, num };
            let path = tmp.path().join(o.name());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let bytes = ramjet_specweb::fileset::file_bytes(3, class, num);
            std::fs::write(&path, &bytes).unwrap();
            let f = open(tmp.path(), o).unwrap();
            assert_eq!(f.len, bytes.len() as u64);
            assert_eq!(f.placeholders.len(), tags, "class{class}_{num}");
            for &p in &f.placeholders {
                assert_eq!(&bytes[p as usize..p as usize + 17], AD_PLACEHOLDER);
            }
            // Just written, so in the kernel's caches: the event loop's open agrees.
            if let Some(c) = open_cached(tmp.path(), o) {
                let c = c.unwrap();
                assert_eq!((c.len, &c.placeholders), (f.len, &f.placeholders));
            }
        }
        let gone = Object {
            dir: 9,
            class: 1,
            num: 1,
        };
        assert!(open_cached(tmp.path(), gone).is_none_or(|r| r.is_err()));
    }
}
