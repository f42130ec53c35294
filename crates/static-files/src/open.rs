//! Opening a path beneath the document root under a symlink policy: [`load_cached`] on the
//! event loop when the kernel's caches can answer, else [`load`] on the blocking pool
//! (open and read may wait for the disk).

use std::fs::File;
use std::io::{self, Read};

use ramjet_config::SymlinkPolicy;
use ramjet_runtime::sys::{self, FileStat, OpenPolicy};

/// What the blocking side found.
#[derive(Debug)]
pub(crate) enum Loaded {
    Found {
        file: File,
        stat: FileStat,
        /// The whole file, when it is small enough to serve from memory.
        body: Option<Vec<u8>>,
    },
    /// Same file as `prev` (device, inode, size, mtime): keep the cached entry.
    Unchanged,
    /// 403 or 404.
    Refused(u16),
}

/// Open `rel` (normalised, no leading `/`) beneath `root`.
pub(crate) fn load(
    root: &File,
    rel: &[u8],
    policy: SymlinkPolicy,
    small_max: u64,
    prev: Option<FileStat>,
) -> Loaded {
    let opened = match policy {
        SymlinkPolicy::InsideRoot => sys::open_beneath(root, rel, OpenPolicy::Beneath),
        SymlinkPolicy::Never => sys::open_beneath(root, rel, OpenPolicy::NoSymlinks),
        SymlinkPolicy::OwnerMatch => sys::open_owner_matched(root, rel),
    };
    let (mut file, stat) = match opened {
        Ok(found) => found,
        Err(e) => return Loaded::Refused(refusal(&e)),
    };
    if let Some(done) = settled(&stat, prev) {
        return done;
    }
    let body = if wants_body(&stat, small_max) {
        let mut body = Vec::with_capacity(stat.size as usize);
        match file.read_to_end(&mut body) {
            // A file that changed size while read is served by sendfile instead.
            Ok(n) if n as u64 == stat.size => Some(body),
            Ok(_) => None,
            Err(e) => {
                tracing::error!("read failed: {e}");
                return Loaded::Refused(403);
            }
        }
    } else {
        None
    };
    Loaded::Found { file, stat, body }
}

/// [`load`] from the kernel's caches alone (dentries, inodes, pages), for the event loop:
/// `None` when answering would wait for the disk (then [`load`] on the blocking pool), and
/// for `OwnerMatch`, whose symlink check takes more than one open.
pub(crate) fn load_cached(
    root: &File,
    rel: &[u8],
    policy: SymlinkPolicy,
    small_max: u64,
    prev: Option<FileStat>,
) -> Option<Loaded> {
    let open_policy = match policy {
        SymlinkPolicy::InsideRoot => OpenPolicy::Beneath,
        SymlinkPolicy::Never => OpenPolicy::NoSymlinks,
        SymlinkPolicy::OwnerMatch => return None,
    };
    let (file, stat) = match sys::open_beneath_cached(root, rel, open_policy) {
        Ok(found) => found,
        Err(e) if sys::needs_blocking_open(&e) => return None,
        Err(e) => return Some(Loaded::Refused(refusal(&e))),
    };
    if let Some(done) = settled(&stat, prev) {
        return Some(done);
    }
    let body = if wants_body(&stat, small_max) {
        // Not all in the page cache (or it changed size): the pool reads it.
        Some(sys::read_cached(&file, stat.size as usize)?)
    } else {
        None
    };
    Some(Loaded::Found { file, stat, body })
}

/// What an opened path comes to without its body, if that settles it: 403 for what is
/// neither a file nor a directory, `Unchanged` for the same file as `prev`.
fn settled(stat: &FileStat, prev: Option<FileStat>) -> Option<Loaded> {
    if !stat.is_file && !stat.is_dir {
        return Some(Loaded::Refused(403));
    }
    match prev {
        Some(p)
            if (p.dev, p.ino, p.size, p.mtime) == (stat.dev, stat.ino, stat.size, stat.mtime) =>
        {
            Some(Loaded::Unchanged)
        }
        _ => None,
    }
}

/// Whether the file is small enough to be kept in memory.
fn wants_body(stat: &FileStat, small_max: u64) -> bool {
    stat.is_file && stat.size <= small_max
}

/// Errno to status: missing is 404; denied, escaping or disallowed symlinks are 403.
fn refusal(e: &io::Error) -> u16 {
    use io::ErrorKind as K;
    if sys::is_symlink_loop(e) {
        return 403;
    }
    match e.kind() {
        K::NotFound | K::NotADirectory | K::InvalidFilename => 404,
        // EXDEV is openat2's answer to an escape beneath the root.
        K::PermissionDenied | K::CrossesDevices => 403,
        _ => {
            tracing::warn!("open failed: {e}");
            404
        }
    }
}
