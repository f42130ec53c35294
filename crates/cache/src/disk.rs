//! The disk tier's files, each call blocking (the store runs them on the blocking pool, or
//! at start before serving). An object is two files under `DIR/hh/` (`hh` the first two
//! hex digits of its hash): `HASH.body` and `HASH.meta`. A body is written under `DIR/tmp/`
//! and renamed into place whole; its meta file is written (also through `tmp/` and a
//! rename) only after that, and removed before a body is replaced. So a meta file always
//! describes a complete body of its recorded length: a fill cut short by `kill -9` leaves a
//! file in `tmp/` (removed at start) or a body with no meta (removed at start), never an
//! object that looks whole.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::meta::{Meta, MAX_META};

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

    fn tmp(&self, hash: u128, ext: &str) -> PathBuf {
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.dir
            .join("tmp")
            .join(format!("{hash:032x}.{}.{n}.{ext}", std::process::id()))
    }

    /// A new body file in `tmp/`, open for writing and reading.
    pub fn create_body(&self, hash: u128) -> io::Result<(Arc<File>, PathBuf)> {
        let path = self.tmp(hash, "body");
        fs::create_dir_all(self.dir.join("tmp"))?;
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok((Arc::new(f), path))
    }

    /// Append `data` at `at`.
    pub fn write(file: &File, at: u64, data: &[u8]) -> io::Result<()> {
        file.write_all_at(data, at)
    }

    /// A complete body goes into place with its meta.
    pub fn commit(&self, hash: u128, tmp_body: &Path, meta: &Meta) -> io::Result<()> {
        let body = self.path(hash, "body");
        if let Some(parent) = body.parent() {
            fs::create_dir_all(parent)?;
        }
        remove_if_there(&self.path(hash, "meta"))?;
        fs::rename(tmp_body, &body)?;
        self.write_meta(hash, meta)
    }

    /// Write (or replace) an object's meta file.
    pub fn write_meta(&self, hash: u128, meta: &Meta) -> io::Result<()> {
        let tmp = self.tmp(hash, "meta");
        fs::create_dir_all(self.dir.join("tmp"))?;
        let mut f = File::create(&tmp)?;
        f.write_all(&meta.encode())?;
        drop(f);
        let path = self.path(hash, "meta");
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::rename(&tmp, &path)
    }

    /// Remove an object (meta first).
    pub fn remove(&self, hash: u128) {
        let _ = remove_if_there(&self.path(hash, "meta"));
        let _ = remove_if_there(&self.path(hash, "body"));
    }

    /// Every complete object; everything else (partial fills, bodies without meta, meta
    /// files that do not describe their body) is removed.
    pub fn scan(&self) -> io::Result<Vec<Found>> {
        let tmp = self.dir.join("tmp");
        if tmp.is_dir() {
            for e in fs::read_dir(&tmp)? {
                let path = e?.path();
                // A fill of another live process (the old one during a USR2 upgrade) is
                // its own to finish or remove.
                if filler(&path).is_some_and(|pid| pid != std::process::id() && alive(pid)) {
                    continue;
                }
                let _ = fs::remove_file(path);
            }
        }
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
                let Some(hex) = file.strip_suffix(".meta") else {
                    if let Some(hex) = file.strip_suffix(".body") {
                        if !path.with_file_name(format!("{hex}.meta")).exists() {
                            let _ = fs::remove_file(&path);
                        }
                    }
                    continue;
                };
                let Ok(hash) = u128::from_str_radix(hex, 16) else {
                    continue;
                };
                match self.load(hash) {
                    Some(f) => found.push(f),
                    None => self.remove(hash),
                }
            }
        }
        Ok(found)
    }

    fn load(&self, hash: u128) -> Option<Found> {
        let meta = fs::read(self.path(hash, "meta")).ok()?;
        if meta.len() > MAX_META {
            return None;
        }
        let meta = Meta::decode(&meta)?;
        let body = File::open(self.path(hash, "body")).ok()?;
        (body.metadata().ok()?.len() == meta.length).then(|| Found {
            hash,
            meta,
            body: Arc::new(body),
        })
    }
}

/// The process that made a file in `tmp/` (`HASH.PID.N.EXT`).
fn filler(path: &Path) -> Option<u32> {
    path.file_name()?.to_str()?.split('.').nth(1)?.parse().ok()
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
        // Complete.
        let (f, tmp) = d.create_body(1).unwrap();
        Disk::write(&f, 0, b"hello").unwrap();
        d.commit(1, &tmp, &meta(5)).unwrap();
        // Cut short mid-fill: still in tmp/.
        let (f, _) = d.create_body(2).unwrap();
        Disk::write(&f, 0, b"hel").unwrap();
        // A body whose meta says another length.
        let (f, tmp) = d.create_body(3).unwrap();
        Disk::write(&f, 0, b"hel").unwrap();
        d.commit(3, &tmp, &meta(5)).unwrap();
        let found = d.scan().unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].hash, 1);
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
        assert!(!d.path(3, "body").exists());
    }

    #[test]
    fn a_live_process_keeps_its_fills_at_a_scan() {
        let dir = tempfile::tempdir().unwrap();
        let d = Disk {
            dir: dir.path().to_path_buf(),
        };
        let tmp = dir.path().join("tmp");
        fs::create_dir_all(&tmp).unwrap();
        // pid 1 is alive; a pid past the kernel's limit never is.
        fs::write(tmp.join("ab.1.0.body"), b"x").unwrap();
        fs::write(tmp.join("ab.99999999.0.body"), b"x").unwrap();
        fs::write(tmp.join(format!("ab.{}.0.body", std::process::id())), b"x").unwrap();
        d.scan().unwrap();
        let left: Vec<_> = fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["ab.1.0.body"]);
    }
}
