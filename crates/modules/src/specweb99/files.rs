//! One worker's open files of the file set, each with where its ad tags' placeholders are
//! (class 1 and 2), so a CAD reply sends the untouched bytes as file ranges and only the
//! 17-byte substitutions from memory.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use ramjet_runtime::sys;
use ramjet_specweb::fileset::{AD_PLACEHOLDER, AD_PLACEHOLDER_AT, AD_TAG};

/// Files kept open per worker; past this the cache starts again (a file set has 36 per
/// directory, and the Zipf draw makes the first directories hot).
const MAX_OPEN: usize = 8192;

/// An object of the file set: `file_set/dirNNNNN/classC_F`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Object {
    pub dir: u32,
    pub class: u32,
    pub num: u32,
}

impl Object {
    /// Parse `/file_set/dir%05d/class%d_%d` (the leading `/` optional). Nothing else is
    /// accepted, so a query cannot name a path outside the file set.
    pub fn parse(s: &str) -> Option<Object> {
        let s = s.strip_prefix('/').unwrap_or(s);
        let rest = s.strip_prefix("file_set/dir")?;
        let (dir, rest) = rest.split_once("/class")?;
        let (class, num) = rest.split_once('_')?;
        let digits = |t: &str, n: usize| t.len() == n && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(dir, 5) || !digits(class, 1) || !digits(num, 1) {
            return None;
        }
        let o = Object {
            dir: dir.parse().ok()?,
            class: class.parse().ok()?,
            num: num.parse().ok()?,
        };
        (o.class < 4).then_some(o)
    }

    /// `file_set/dirNNNNN/classC_F`.
    pub fn name(&self) -> String {
        ramjet_specweb::fileset::file_name(u64::from(self.dir), self.class, self.num)
    }
}

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
    if has_ads(o) {
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
    let placeholders = if has_ads(o) {
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

/// Class 1 and 2 files carry ad tags.
fn has_ads(o: Object) -> bool {
    o.class == 1 || o.class == 2
}

/// Offsets of the ad tags' placeholders in a file's bytes.
fn find_placeholders(bytes: &[u8]) -> Vec<u64> {
    let mut placeholders = Vec::new();
    let mut at = 0;
    while let Some(i) = memchr::memmem::find(&bytes[at..], &AD_TAG[..AD_PLACEHOLDER_AT]) {
        let p = at + i + AD_PLACEHOLDER_AT;
        if bytes[p..].starts_with(AD_PLACEHOLDER) {
            placeholders.push(p as u64);
        }
        at = p;
    }
    placeholders
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

    #[test]
    fn only_file_set_objects_parse() {
        assert_eq!(
            Object::parse("/file_set/dir00012/class1_4"),
            Some(Object {
                dir: 12,
                class: 1,
                num: 4
            })
        );
        assert!(Object::parse("file_set/dir00012/class3_8").is_some());
        for bad in [
            "/file_set/dir0012/class1_4",
            "/file_set/dir00012/class4_4",
            "/file_set/dir00012/class1_44",
            "/file_set/dir00012/class1_4/../../x",
            "/etc/passwd",
            "/file_set/dir+0012/class1_4",
            "",
        ] {
            assert_eq!(Object::parse(bad), None, "{bad}");
        }
    }

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
