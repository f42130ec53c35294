//! Journals: append-only files of numbered records (lines) a mount grants its module
//! (`journals = { NAME = "/path" }`), for what must outlive the request and the process,
//! such as an order or a form posted: a record is on disk before `append` returns, and
//! numbered in one sequence shared by every worker.
//!
//! Group commit (`ramjet_runtime::group_commit`): records written while a flush runs are
//! all carried by the next flush, one `fdatasync` for them all. A record torn by a crash
//! is cut off at open. A journal file is opened once per process: a reload's new mount
//! shares the old one's journal, so the numbering carries on across it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use ramjet_runtime::group_commit::GroupCommit;

/// The longest record.
pub const RECORD_MAX: usize = 64 << 10;

/// Why a record was not appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not one line: empty, not ending with LF, an LF before the end, past
    /// [`RECORD_MAX`], or a number field that does not fit in it.
    BadRecord,
    /// Writing or flushing failed.
    Io,
}

/// One journal file.
pub struct Journal {
    inner: Mutex<Inner>,
    commit: GroupCommit,
}

struct Inner {
    file: Arc<File>,
    records: u64,
    bytes: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Journals open in this process, by path.
fn registry() -> &'static Mutex<HashMap<PathBuf, Weak<Journal>>> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, Weak<Journal>>>> = OnceLock::new();
    OPEN.get_or_init(Default::default)
}

/// The journal at `path`: the one this process has open, or opened (created) now.
pub fn open(path: &Path) -> io::Result<Arc<Journal>> {
    let key = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir
            .canonicalize()?
            .join(path.file_name().unwrap_or_default()),
        _ => path.to_path_buf(),
    };
    let mut open = lock(registry());
    open.retain(|_, j| j.strong_count() > 0);
    if let Some(j) = open.get(&key).and_then(Weak::upgrade) {
        return Ok(j);
    }
    let j = Arc::new(Journal::open(&key)?);
    open.insert(key, Arc::downgrade(&j));
    Ok(j)
}

/// Write `n` right-aligned in `field` (spaces before it); false when it does not fit.
fn stamp(field: &mut [u8], n: u64) -> bool {
    let digits = n.to_string();
    let Some(pad) = field.len().checked_sub(digits.len()) else {
        return false;
    };
    field[..pad].fill(b' ');
    field[pad..].copy_from_slice(digits.as_bytes());
    true
}

/// `record` with its number `n` written at `number_at` (offset, width), checked first.
pub fn stamped(
    mut record: Vec<u8>,
    number_at: Option<(u32, u32)>,
    n: u64,
) -> Result<Vec<u8>, Refused> {
    check(&record, number_at)?;
    if let Some((at, width)) = number_at {
        let field = &mut record[at as usize..at as usize + width as usize];
        if !stamp(field, n) {
            return Err(Refused::BadRecord);
        }
    }
    Ok(record)
}

/// Check a record: one line, not too long; where its number goes, if anywhere.
pub fn check(record: &[u8], number_at: Option<(u32, u32)>) -> Result<(), Refused> {
    let ok = !record.is_empty()
        && record.len() <= RECORD_MAX
        && record.iter().position(|&b| b == b'\n') == Some(record.len() - 1)
        && number_at.is_none_or(|(at, width)| {
            // The field ends before the record's LF.
            (at as usize)
                .checked_add(width as usize)
                .is_some_and(|end| end < record.len())
        });
    if ok {
        Ok(())
    } else {
        Err(Refused::BadRecord)
    }
}

impl Journal {
    /// Open (create) the file; its records are its whole lines (a torn last line is cut).
    fn open(path: &Path) -> io::Result<Journal> {
        let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(named)?;
        let (mut records, mut bytes, mut read) = (0u64, 0u64, 0u64);
        let mut buf = vec![0; 64 << 10];
        loop {
            let n = (&file).read(&mut buf).map_err(named)?;
            if n == 0 {
                break;
            }
            for (i, _) in buf[..n].iter().enumerate().filter(|(_, b)| **b == b'\n') {
                records += 1;
                bytes = read + i as u64 + 1;
            }
            read += n as u64;
        }
        if read != bytes {
            file.set_len(bytes).map_err(named)?;
            file.sync_data().map_err(named)?;
        }
        Ok(Journal {
            inner: Mutex::new(Inner {
                file: Arc::new(file),
                records,
                bytes,
            }),
            commit: GroupCommit::new(records),
        })
    }

    /// Append `record` (blocking), its number written into it at `number_at` (offset,
    /// width) first, and return once it is on disk: its number, 1 for the first record
    /// since the journal was emptied.
    pub fn append(
        &self,
        mut record: Vec<u8>,
        number_at: Option<(u32, u32)>,
    ) -> Result<u64, Refused> {
        check(&record, number_at)?;
        let n = {
            let mut inner = lock(&self.inner);
            let n = inner.records + 1;
            if let Some((at, width)) = number_at {
                let field = &mut record[at as usize..(at + width) as usize];
                if !stamp(field, n) {
                    return Err(Refused::BadRecord);
                }
            }
            if (&*inner.file).write_all(&record).is_err() {
                // Cut what part of it got written: the next record starts clean.
                let _ = inner.file.set_len(inner.bytes);
                return Err(Refused::Io);
            }
            inner.records = n;
            inner.bytes += record.len() as u64;
            n
        };
        self.wait_durable(n).map_err(|_| Refused::Io)?;
        Ok(n)
    }

    /// Return once record `n` (written) is on disk: at once if a flush that began after it
    /// was written has ended, else after one more flush, which carries every record
    /// written before it begins.
    fn wait_durable(&self, n: u64) -> io::Result<()> {
        self.commit.wait(n, || {
            let inner = lock(&self.inner);
            (inner.file.clone(), inner.records)
        })
    }

    /// Records and bytes it holds now.
    pub fn size(&self) -> (u64, u64) {
        let inner = lock(&self.inner);
        (inner.records, inner.bytes)
    }

    /// The file and its length now, to send a range of it.
    pub fn file(&self) -> (Arc<File>, u64) {
        let inner = lock(&self.inner);
        (inner.file.clone(), inner.bytes)
    }

    /// Empty it, durably (blocking).
    pub fn clear(&self) -> io::Result<()> {
        self.commit.reset(|| {
            let mut inner = lock(&self.inner);
            inner.file.set_len(0)?;
            inner.file.sync_data()?;
            inner.records = 0;
            inner.bytes = 0;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_numbered_stamped_and_kept_across_opens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("posts");
        let j = open(&path).unwrap();
        assert_eq!(j.size(), (0, 0));
        assert_eq!(j.append(b"     x\n".to_vec(), Some((0, 5))), Ok(1));
        assert_eq!(j.append(b"plain\n".to_vec(), None), Ok(2));
        assert_eq!(j.append(b"ab  \n".to_vec(), Some((2, 2))), Ok(3));
        assert_eq!(std::fs::read(&path).unwrap(), b"    1x\nplain\nab 3\n");
        assert_eq!(j.size(), (3, 18));
        // The same file is the same journal while one is open.
        assert!(Arc::ptr_eq(&j, &open(&path).unwrap()));
        drop(j);
        // A torn last record is cut when the file is opened again.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"torn")
            .unwrap();
        let j = open(&path).unwrap();
        assert_eq!(j.size(), (3, 18));
        assert_eq!(j.append(b"....\n".to_vec(), Some((0, 4))), Ok(4));
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"    1x\nplain\nab 3\n   4\n"
        );
        j.clear().unwrap();
        assert_eq!((j.size(), std::fs::read(&path).unwrap().len()), ((0, 0), 0));
        assert_eq!(j.append(b"again\n".to_vec(), None), Ok(1));
    }

    #[test]
    fn a_record_is_one_line_with_room_for_its_number() {
        let ok = |r: &[u8], at| check(r, at).is_ok();
        assert!(ok(b"\n", None));
        assert!(ok(b"a\n", Some((0, 1))));
        assert!(!ok(b"", None));
        assert!(!ok(b"no end", None));
        assert!(!ok(b"two\nlines\n", None));
        assert!(
            !ok(b"a\n", Some((0, 2))),
            "the number would overwrite the LF"
        );
        assert!(!ok(b"a\n", Some((u32::MAX, 2))));
        assert!(ok(
            &[b'x'; RECORD_MAX - 1]
                .iter()
                .chain(b"\n")
                .copied()
                .collect::<Vec<_>>(),
            None
        ));
        assert!(!ok(
            &[b'x'; RECORD_MAX]
                .iter()
                .chain(b"\n")
                .copied()
                .collect::<Vec<_>>(),
            None
        ));
        // A number wider than its field.
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir.path().join("j")).unwrap();
        for _ in 0..9 {
            j.append(b"x\n".to_vec(), None).unwrap();
        }
        assert_eq!(
            j.append(b"x\n".to_vec(), Some((0, 1))),
            Err(Refused::BadRecord)
        );
        assert_eq!(j.size().0, 9);
    }

    #[test]
    fn concurrent_appends_are_numbered_once_each() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let j = open(&path).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let j = j.clone();
                std::thread::spawn(move || {
                    (0..50)
                        .map(|_| j.append(b"      \n".to_vec(), Some((0, 6))).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut got: Vec<u64> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        got.sort();
        assert_eq!(got, (1..=200).collect::<Vec<_>>());
        // In the file, in order.
        let text = std::fs::read_to_string(&path).unwrap();
        let numbers: Vec<u64> = text.lines().map(|l| l.trim().parse().unwrap()).collect();
        assert_eq!(numbers, (1..=200).collect::<Vec<_>>());
    }
}
