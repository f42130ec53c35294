//! Opening files beneath a directory with the kernel's guarantee (`openat2`, Linux ≥ 5.6;
//! without it, a walk that follows no symlink: [`super::walk`]).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::walk;

/// How symlinks may be resolved below the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenPolicy {
    /// Symlinks are followed while they stay beneath; escaping ones fail with `EXDEV`.
    Beneath,
    /// Any symlink in the path fails with `ELOOP`.
    NoSymlinks,
}

/// Metadata of an open file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: SystemTime,
    pub is_dir: bool,
    pub is_file: bool,
    pub is_symlink: bool,
    pub uid: u32,
}

impl FileStat {
    fn from(st: &rustix::fs::Stat) -> FileStat {
        let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
        let mtime = UNIX_EPOCH
            + Duration::new(
                st.st_mtime.max(0) as u64,
                st.st_mtime_nsec.clamp(0, 999_999_999) as u32,
            );
        FileStat {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size.max(0) as u64,
            mtime,
            is_dir: kind == rustix::fs::FileType::Directory,
            is_file: kind == rustix::fs::FileType::RegularFile,
            is_symlink: kind == rustix::fs::FileType::Symlink,
            uid: st.st_uid,
        }
    }

    /// Metadata of an open file descriptor.
    pub fn of(file: &impl AsFd) -> io::Result<FileStat> {
        Ok(FileStat::from(&rustix::fs::fstat(file)?))
    }
}

/// Open `path` (relative, already sanitised) read-only beneath `dir`. `RESOLVE_BENEATH`
/// makes the kernel refuse `..`, absolute symlinks and any escape, even under a race.
/// May block on a cold dentry cache: call it from the blocking pool.
pub fn open_beneath(dir: &File, path: &[u8], policy: OpenPolicy) -> io::Result<(File, FileStat)> {
    open_resolved(dir, beneath(path), beneath_flags(policy))
}

/// [`open_beneath`] answered from the kernel's caches alone (`RESOLVE_CACHED`, Linux ≥
/// 5.12): `WouldBlock` when some path component is not in the dentry cache, so the open
/// would have to wait for the disk. Safe to call on the event loop; any other error is
/// the same answer [`open_beneath`] would give.
pub fn open_beneath_cached(
    dir: &File,
    path: &[u8],
    policy: OpenPolicy,
) -> io::Result<(File, FileStat)> {
    open_resolved(
        dir,
        beneath(path),
        beneath_flags(policy) | ResolveFlags::CACHED,
    )
}

/// Open `path` (absolute, or relative to the working directory) read-only from the
/// kernel's caches alone (`RESOLVE_CACHED`): `WouldBlock` when the lookup would wait for
/// the disk. Safe to call on the event loop.
pub fn open_cached(path: &std::path::Path) -> io::Result<(File, FileStat)> {
    open_resolved(rustix::fs::CWD, path.as_os_str(), ResolveFlags::CACHED)
}

/// Whether an error of [`open_beneath_cached`] or [`open_cached`] means "ask the blocking
/// open instead": the lookup would wait for the disk, or the kernel does not know
/// `RESOLVE_CACHED` (before 5.12: `EINVAL`; no `openat2`: `ENOSYS`).
pub fn needs_blocking_open(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
        || e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error())
        || e.raw_os_error() == Some(rustix::io::Errno::NOSYS.raw_os_error())
}

/// The path a relative one names beneath its directory (`.` for the directory itself).
fn beneath(path: &[u8]) -> &std::ffi::OsStr {
    std::ffi::OsStr::from_bytes(if path.is_empty() { b"." } else { path })
}

fn beneath_flags(policy: OpenPolicy) -> ResolveFlags {
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    match policy {
        OpenPolicy::NoSymlinks => resolve | ResolveFlags::NO_SYMLINKS,
        OpenPolicy::Beneath => resolve,
    }
}

/// `openat2` read-only, non-blocking, close-on-exec, then `fstat`. Where the kernel has
/// no `openat2`, the path is walked instead ([`super::walk`]).
fn open_resolved(
    dir: impl AsFd,
    path: &std::ffi::OsStr,
    resolve: ResolveFlags,
) -> io::Result<(File, FileStat)> {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
    let file = File::from(open_fd(dir, path, flags, resolve)?);
    let stat = FileStat::of(&file)?;
    Ok((file, stat))
}

/// `openat2`, or the walk where the kernel has none.
fn open_fd(
    dir: impl AsFd,
    path: &std::ffi::OsStr,
    flags: OFlags,
    resolve: ResolveFlags,
) -> io::Result<OwnedFd> {
    if !walk::walking() {
        let r = rustix::fs::openat2(dir.as_fd(), path, flags, Mode::empty(), resolve);
        if !walk::missing(&r) {
            return Ok(r?);
        }
    }
    walk_instead(dir, path, flags, resolve)
}

/// The open [`open_resolved`] makes without `openat2`. A walk may wait for the disk at any
/// component, so a cached-only open says `WouldBlock` (the caller opens on the blocking
/// pool). A path not held beneath a directory (the working directory's, absolute) is a
/// plain open.
fn walk_instead(
    dir: impl AsFd,
    path: &std::ffi::OsStr,
    flags: OFlags,
    resolve: ResolveFlags,
) -> io::Result<OwnedFd> {
    if resolve.contains(ResolveFlags::CACHED) {
        return Err(io::ErrorKind::WouldBlock.into());
    }
    if !resolve.contains(ResolveFlags::BENEATH) {
        return Ok(rustix::fs::openat(dir, path, flags, Mode::empty())?);
    }
    walk::open_walking(dir, path.as_bytes(), flags)
}

/// The whole of `file`, expected to be `len` bytes, read only from the page cache
/// (`RWF_NOWAIT`): `None` when some of it is not cached (reading it would wait for the
/// disk), when its length is not `len` now, or when the filesystem cannot read without
/// waiting. Safe to call on the event loop.
pub fn read_cached(file: &File, len: usize) -> Option<Vec<u8>> {
    // One byte more than expected: a file that grew since its fstat is not taken whole.
    let mut body = vec![0u8; len + 1];
    let mut done = 0;
    while done <= len {
        let mut bufs = [io::IoSliceMut::new(&mut body[done..])];
        let flags = rustix::io::ReadWriteFlags::NOWAIT;
        match rustix::io::preadv2(file, &mut bufs, done as u64, flags) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(_) => return None,
        }
    }
    if done != len {
        return None;
    }
    body.truncate(len);
    Some(body)
}

/// Up to `len` bytes of `file` from `offset` (fewer where the file ends), read only from
/// the page cache (`RWF_NOWAIT`): `None` when some of it is not cached or the filesystem
/// cannot read without waiting. Safe to call on the event loop.
pub fn read_at_cached(file: &File, offset: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let mut bufs = [io::IoSliceMut::new(&mut buf[done..])];
        let flags = rustix::io::ReadWriteFlags::NOWAIT;
        match rustix::io::preadv2(file, &mut bufs, offset + done as u64, flags) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(_) => return None,
        }
    }
    buf.truncate(done);
    Some(buf)
}

/// Fill `bufs` in turn from `file` at `offset` in one system call where it can
/// (`preadv2`), from the page cache only (`RWF_NOWAIT`): the bytes read (fewer only where
/// the file ends), or `None` when some of them are not cached. Safe on the event loop.
pub fn read_vectored_cached(
    file: &File,
    mut bufs: &mut [io::IoSliceMut<'_>],
    offset: u64,
) -> Option<usize> {
    let mut done = 0;
    while !bufs.is_empty() {
        let flags = rustix::io::ReadWriteFlags::NOWAIT;
        match rustix::io::preadv2(file, bufs, offset + done as u64, flags) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                io::IoSliceMut::advance_slices(&mut bufs, n);
            }
            Err(_) => return None,
        }
    }
    Some(done)
}

/// Append exactly `len` bytes of `file` from `offset` to `out`, read only from the page
/// cache (`RWF_NOWAIT`). `false`, with `out` as it was, when some are not cached, the file
/// ends first or the filesystem cannot read without waiting. The kernel writes into `out`'s
/// spare room directly: nothing is zeroed first (for a 20 KiB module reply, zeroing cost
/// more instructions than the rest of the request). Safe on the event loop.
pub fn append_cached(file: &File, offset: u64, len: usize, out: &mut Vec<u8>) -> bool {
    use std::os::fd::AsRawFd;
    let start = out.len();
    out.reserve(len);
    let mut done = 0;
    while done < len {
        let spare = out.spare_capacity_mut();
        let iov = libc::iovec {
            iov_base: spare.as_mut_ptr().cast(),
            iov_len: len - done,
        };
        let at = (offset + done as u64) as libc::off_t;
        // SAFETY: the iovec covers `len - done` bytes of `out`'s spare capacity (reserved
        // above, and `done` of it used since), which the kernel only writes to.
        let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, at, libc::RWF_NOWAIT) };
        if n <= 0 {
            out.truncate(start);
            return false;
        }
        let n = (n as usize).min(len - done);
        // SAFETY: the kernel initialised these `n` bytes, all within the reserved capacity.
        unsafe { out.set_len(out.len() + n) };
        done += n;
    }
    true
}

/// Up to `len` bytes of `file` from `offset` (fewer where the file ends), waiting for the
/// disk: for the blocking pool.
pub fn read_at(file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        match std::os::unix::fs::FileExt::read_at(file, &mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(done);
    Ok(buf)
}

/// `lstat` of `path` beneath `dir` without following a final symlink (for the owner check).
/// Intermediate components are resolved beneath `dir` as in [`open_beneath`].
pub fn stat_beneath(dir: &File, path: &[u8]) -> io::Result<FileStat> {
    let path = std::ffi::OsStr::from_bytes(path);
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    FileStat::of(&open_fd(dir, path, flags, resolve)?)
}

/// [`open_beneath`] under Apache's `SymLinksIfOwnerMatch`: without symlinks when the path
/// has none; else every symlink on it must have the owner of what it points to
/// (`PermissionDenied` when one does not). Blocking: call from the blocking pool.
pub fn open_owner_matched(dir: &File, path: &[u8]) -> io::Result<(File, FileStat)> {
    match open_beneath(dir, path, OpenPolicy::NoSymlinks) {
        Err(e) if is_symlink_loop(&e) => {}
        other => return other,
    }
    let mut end = 0;
    while end < path.len() {
        end = path[end..]
            .iter()
            .position(|&b| b == b'/')
            .map_or(path.len(), |p| end + p);
        let prefix = &path[..end];
        end += 1;
        let link = stat_beneath(dir, prefix)?;
        if !link.is_symlink {
            continue;
        }
        let (_, target) = open_beneath(dir, prefix, OpenPolicy::Beneath)?;
        if target.uid != link.uid {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "a symlink whose owner is not its target's",
            ));
        }
    }
    open_beneath(dir, path, OpenPolicy::Beneath)
}

/// Names in an open directory, without `.` and `..`. Blocking: call from the blocking pool.
pub fn blocking_read_dir(dir: &File) -> io::Result<Vec<Vec<u8>>> {
    let mut names = Vec::new();
    let mut d = rustix::fs::Dir::read_from(dir)?;
    while let Some(entry) = d.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(name.to_vec());
        }
    }
    Ok(names)
}

/// Whether `e` is `ELOOP`: a symlink where [`OpenPolicy::NoSymlinks`] forbids one (std has
/// no stable `ErrorKind` for it).
pub fn is_symlink_loop(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ramjet-file-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        dir
    }

    #[test]
    fn cached_open_and_read_give_what_a_blocking_one_gives_or_nothing() {
        let dir = scratch("cached");
        std::fs::write(dir.join("sub/f"), b"hello").unwrap();
        let root = File::open(&dir).unwrap();
        // Just written: dentries and pages are cached.
        let (file, stat) = open_beneath_cached(&root, b"sub/f", OpenPolicy::Beneath).unwrap();
        assert_eq!(stat.size, 5);
        assert_eq!(read_cached(&file, 5).as_deref(), Some(&b"hello"[..]));
        // Not the length it was said to be (shorter or longer now): not taken.
        assert_eq!(read_cached(&file, 4), None);
        assert_eq!(read_cached(&file, 6), None);
        assert_eq!(read_cached(&File::open(dir.join("sub")).unwrap(), 0), None);
        let empty = dir.join("sub/empty");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(
            read_cached(&File::open(&empty).unwrap(), 0),
            Some(Vec::new())
        );
        // The same refusals as the blocking open (a cached negative dentry, or WouldBlock).
        for (path, kind) in [
            (&b"../x"[..], io::ErrorKind::CrossesDevices),
            (b"/etc/passwd", io::ErrorKind::CrossesDevices),
        ] {
            let e = open_beneath_cached(&root, path, OpenPolicy::Beneath).unwrap_err();
            assert!(
                e.kind() == kind || e.kind() == io::ErrorKind::WouldBlock,
                "{path:?}: {e}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_openat2_a_cached_open_goes_to_the_pool_and_a_blocking_one_walks() {
        let dir = scratch("walk-instead");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/f"), b"x").unwrap();
        std::os::unix::fs::symlink("sub", dir.join("link")).unwrap();
        let d = File::open(&dir).unwrap();
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        let path = std::ffi::OsStr::new("sub/f");
        for policy in [OpenPolicy::Beneath, OpenPolicy::NoSymlinks] {
            let resolve = beneath_flags(policy);
            let cached = walk_instead(&d, path, flags, resolve | ResolveFlags::CACHED);
            assert!(needs_blocking_open(&cached.unwrap_err()));
            assert!(walk_instead(&d, path, flags, resolve).is_ok());
            let linked = walk_instead(&d, std::ffi::OsStr::new("link/f"), flags, resolve);
            assert!(is_symlink_loop(&linked.unwrap_err()));
            let up = walk_instead(&d, std::ffi::OsStr::new("../x"), flags, resolve);
            assert_eq!(
                up.unwrap_err().raw_os_error(),
                Some(rustix::io::Errno::XDEV.raw_os_error())
            );
        }
        // Not beneath a directory (a configured absolute path): a plain open.
        let whole = dir.join("sub/f");
        assert!(walk_instead(
            rustix::fs::CWD,
            whole.as_os_str(),
            flags,
            ResolveFlags::empty()
        )
        .is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn appending_from_the_page_cache_takes_exactly_the_range_or_leaves_the_vec_alone() {
        let dir = scratch("append");
        let path = dir.join("f");
        let bytes: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let f = File::open(&path).unwrap();
        let _ = read_at(&f, 0, bytes.len()); // now in the page cache
        let mut out = b"head".to_vec();
        assert!(append_cached(&f, 4097, 60_000, &mut out));
        assert_eq!(&out[..4], b"head");
        assert_eq!(&out[4..], &bytes[4097..64_097]);
        // Zero bytes, the last byte, and past the end (the Vec is left as it was).
        assert!(append_cached(&f, 0, 0, &mut out));
        assert_eq!(out.len(), 60_004);
        assert!(append_cached(&f, 69_999, 1, &mut out));
        assert_eq!(out.last(), Some(&bytes[69_999]));
        let before = out.clone();
        assert!(!append_cached(&f, 69_999, 2, &mut out));
        assert!(!append_cached(&f, 80_000, 1, &mut out));
        assert_eq!(out, before);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_kernel_without_resolve_cached_sends_opens_to_the_blocking_pool() {
        use rustix::io::Errno;
        for (errno, blocking) in [
            (Errno::AGAIN, true),
            (Errno::INVAL, true),
            (Errno::NOSYS, true),
            (Errno::NOENT, false),
            (Errno::ACCESS, false),
            (Errno::XDEV, false),
        ] {
            let e = io::Error::from_raw_os_error(errno.raw_os_error());
            assert_eq!(needs_blocking_open(&e), blocking, "{e}");
        }
    }
}
