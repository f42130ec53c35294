//! The disk tier's files, each call blocking (the store runs them on the blocking pool, or
//! at start before serving). An object is one file, `DIR/hh/HASH.obj` (`hh` the first two
//! hex digits of its hash, the 256 folders made at start): the body from offset 0 (sent
//! with sendfile as it is), then its meta record (`meta::Meta`), then a trailer with the
//! record's length (`meta::TRAILER`). It is written as `HASH.PID.N.obj.part` beside its
//! place, the record and trailer appended once the body is whole, and renamed into place.
//! So a file at its place always holds a complete body of the length its record says: a
//! fill cut short by `kill -9` leaves a `.part` file (removed at start), never an object
//! that looks whole. A 304 rewrites the record in place, through the object's own
//! descriptor (never a newer object's file at the same place); a crash in between leaves a
//! file whose trailer does not check, removed at start.
//!
//! One file per object, not a body and a meta file: a cold fill's cost is mostly the file
//! system allocating inodes, and two files made it twice nginx's (`perf`, 600 objects of
//! 1 to 64 KiB). Working files sit in their object's folder, not one shared folder: a
//! rename within a folder locks that folder only (one across folders takes the file
//! system's rename lock), and creations spread over 256 folder locks (with one `tmp/`
//! folder, a quarter of the disk work waited on those locks).

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::meta::{Meta, TRAILER};

pub struct Disk {
    pub dir: PathBuf,
}

/// An object found at start.
pub struct Found {
    pub hash: u128,
    pub meta: Meta,
    pub body: Arc<File>,
}

impl Disk {
    fn path(&self, hash: u128, ext: &str) -> PathBuf {
        let name = format!("{hash:032x}");
        self.dir.join(&name[..2]).join(format!("{name}.{ext}"))
    }

    /// A working file's name beside the object's (`HASH.PID.N.EXT.part`).
    fn part(&self, hash: u128, ext: &str) -> PathBuf {
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{hash:032x}");
        self.dir
            .join(&name[..2])
            .join(format!("{name}.{}.{n}.{ext}.part", std::process::id()))
    }

    /// The 256 object folders (at start; a folder found missing later is made again).
    pub fn prepare(&self) -> io::Result<()> {
        for i in 0..256 {
            fs::create_dir_all(self.dir.join(format!("{i:02x}")))?;
        }
        Ok(())
    }

    /// Create `path` for writing (and reading), making its folder if it went missing.
    fn create(path: &Path) -> io::Result<File> {
        let open = || {
            fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path)
        };
        match open() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent)?;
                }
                open()
            }
            other => other,
        }
    }

    /// A new object file beside its place, open for writing and reading.
    pub fn create_body(&self, hash: u128) -> io::Result<(Arc<File>, PathBuf)> {
        let path = self.part(hash, "obj");
        let f = Self::create(&path)?;
        Ok((Arc::new(f), path))
    }

    /// Append `data` at `at`.
    pub fn write(file: &File, at: u64, data: &[u8]) -> io::Result<()> {
        file.write_all_at(data, at)
    }

    /// A complete body (`meta.length` bytes in `file`, the working file at `part`) gets
    /// its record and goes into place, replacing the object there.
    pub fn commit(&self, hash: u128, file: &File, part: &Path, meta: &Meta) -> io::Result<()> {
        file.write_all_at(&meta.encode_with_trailer(), meta.length)?;
        fs::rename(part, self.path(hash, "obj"))
    }

    /// Replace a stored object's record (a 304 refreshed its head), through its own
    /// descriptor: an object that replaced it at the same place is not touched.
    pub fn write_meta(file: &File, meta: &Meta) -> io::Result<()> {
        file.set_len(meta.length)?;
        file.write_all_at(&meta.encode_with_trailer(), meta.length)
    }

    /// Remove an object.
    pub fn remove(&self, hash: u128) {
        let _ = remove_if_there(&self.path(hash, "obj"));
    }

    /// Every complete object; everything else (partial fills, bodies without meta, meta
    /// files that do not describe their body) is removed.
    pub fn scan(&self) -> io::Result<Vec<Found>> {
        // Earlier versions kept working files in one `tmp/` folder.
        let tmp = self.dir.join("tmp");
        if tmp.is_dir() {
            for e in fs::read_dir(&tmp)? {
                leftover(&e?.path());
            }
            let _ = fs::remove_dir(&tmp);
        }
        self.prepare()?;
        let mut found = Vec::new();
        for sub in fs::read_dir(&self.dir)? {
            let sub = sub?;
            let name = sub.file_name();
            let name = name.to_string_lossy();
            if name.len() != 2 || !sub.file_type()?.is_dir() {
                continue;
            }
            for e in fs::read_dir(sub.path())? {
                let path = e?.path();
                let Some(file) = path.file_name().and_then(|n| n.to_str()) else {
                    continue;
                };
                if file.ends_with(".part") {
                    leftover(&path);
                    continue;
                }
                let hash = file
                    .strip_suffix(".obj")
                    .and_then(|hex| u128::from_str_radix(hex, 16).ok());
                match hash.and_then(|h| load(&path, h)) {
                    Some(f) => found.push(f),
                    // Not a whole object (or an earlier version's .body/.meta files).
                    None => {
                        let _ = fs::remove_file(&path);
                    }
                }
            }
        }
        Ok(found)
    }
}

/// The object in the file at `path`, if its trailer and record check.
fn load(path: &Path, hash: u128) -> Option<Found> {
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .ok()?;
    let size = file.metadata().ok()?.len();
    let mut tail = [0u8; TRAILER];
    file.read_exact_at(&mut tail, size.checked_sub(TRAILER as u64)?)
        .ok()?;
    let len = crate::meta::meta_len(size, &tail)?;
    let mut record = vec![0u8; len];
    let at = size - (TRAILER + len) as u64;
    file.read_exact_at(&mut record, at).ok()?;
    let meta = Meta::decode(&record)?;
    (meta.length == at).then(|| Found {
        hash,
        meta,
        body: Arc::new(file),
    })
}

/// The process that made a working file (`HASH.PID.N.EXT.part`).
fn filler(path: &Path) -> Option<u32> {
    path.file_name()?.to_str()?.split('.').nth(1)?.parse().ok()
}

/// A working file found at start: removed, unless it is a fill of another live process
/// (the old one during a USR2 upgrade), which is its own to finish or remove.
fn leftover(path: &Path) {
    if filler(path).is_some_and(|pid| pid != std::process::id() && alive(pid)) {
        return;
    }
    let _ = fs::remove_file(path);
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn remove_if_there(p: &Path) -> io::Result<()> {
    match fs::remove_file(p) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Freshness;
    use bytes::Bytes;
    use std::os::unix::fs::FileExt;

    fn meta(len: u64) -> Meta {
        Meta {
            key: b"k".to_vec().into(),
            status: 200,
            fields: Bytes::new(),
            vary: Vec::new(),
            freshness: Freshness::default(),
            length: len,
        }
    }

    #[test]
    fn only_whole_objects_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let d = Disk {
            dir: dir.path().to_path_buf(),
        };
        d.prepare().unwrap();
        // Complete, then its record replaced (a 304) through its descriptor.
        let (f, part) = d.create_body(1).unwrap();
        Disk::write(&f, 0, b"hello").unwrap();
        d.commit(1, &f, &part, &meta(5)).unwrap();
        let mut fresher = meta(5);
        fresher.fields = Bytes::from_static(b"ETag: \"v2\"\r\n");
        Disk::write_meta(&f, &fresher).unwrap();
        // Cut short mid-fill: still a working file.
        let (f, _) = d.create_body(2).unwrap();
        Disk::write(&f, 0, b"hel").unwrap();
        // Torn: its trailer cut off by a crash.
        let (f, part) = d.create_body(3).unwrap();
        Disk::write(&f, 0, b"hello").unwrap();
        d.commit(3, &f, &part, &meta(5)).unwrap();
        let torn = d.path(3, "obj");
        let size = fs::metadata(&torn).unwrap().len();
        f.set_len(size - 1).unwrap();
        // An earlier version's pair of files.
        let old = d.path(4, "body");
        fs::write(&old, b"hello").unwrap();
        fs::write(d.path(4, "meta"), meta(5).encode()).unwrap();
        let found = d.scan().unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].hash, found[0].meta.length), (1, 5));
        assert_eq!(&found[0].meta.fields[..], b"ETag: \"v2\"\r\n");
        let mut body = [0u8; 5];
        found[0].body.read_exact_at(&mut body, 0).unwrap();
        assert_eq!(&body, b"hello");
        // Objects 1 to 4 share folder 00: the object left there, nothing else.
        let folder = d.path(2, "obj").parent().unwrap().to_path_buf();
        let names: Vec<_> = fs::read_dir(folder)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            names,
            [format!("{:032x}.obj", 1)],
            "the cut fill's working file is gone"
        );
        assert!(!torn.exists());
        assert!(!old.exists() && !d.path(4, "meta").exists());
    }

    #[test]
    fn a_live_process_keeps_its_fills_at_a_scan() {
        let dir = tempfile::tempdir().unwrap();
        let d = Disk {
            dir: dir.path().to_path_buf(),
        };
        let folder = dir.path().join("ab");
        fs::create_dir_all(&folder).unwrap();
        // pid 1 is alive; a pid past the kernel's limit never is.
        fs::write(folder.join("ab.1.0.obj.part"), b"x").unwrap();
        fs::write(folder.join("ab.99999999.0.obj.part"), b"x").unwrap();
        let mine = format!("ab.{}.0.obj.part", std::process::id());
        fs::write(folder.join(mine), b"x").unwrap();
        // An earlier version's working folder is emptied and removed.
        let tmp = dir.path().join("tmp");
        fs::create_dir_all(&tmp).unwrap();
        fs::write(tmp.join("ab.99999999.0.body"), b"x").unwrap();
        fs::write(tmp.join("ab.1.0.body"), b"x").unwrap();
        d.scan().unwrap();
        let left: Vec<_> = fs::read_dir(&folder)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["ab.1.0.obj.part"]);
        assert!(tmp.join("ab.1.0.body").exists(), "a live process's, still");
    }
}
