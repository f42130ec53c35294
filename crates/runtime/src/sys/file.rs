//! Opening files beneath a directory with the kernel's guarantee (`openat2`, Linux ≥ 5.6).

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{Mode, OFlags, ResolveFlags};

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
    let mut resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    if policy == OpenPolicy::NoSymlinks {
        resolve |= ResolveFlags::NO_SYMLINKS;
    }
    let path = std::ffi::OsStr::from_bytes(if path.is_empty() { b"." } else { path });
    let fd = rustix::fs::openat2(
        dir,
        path,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
        resolve,
    )?;
    let file = File::from(fd);
    let stat = FileStat::of(&file)?;
    Ok((file, stat))
}

/// `lstat` of `path` beneath `dir` without following a final symlink (for the owner check).
/// Intermediate components are resolved beneath `dir` as in [`open_beneath`].
pub fn stat_beneath(dir: &File, path: &[u8]) -> io::Result<FileStat> {
    let fd = rustix::fs::openat2(
        dir,
        std::ffi::OsStr::from_bytes(path),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )?;
    FileStat::of(&fd)
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
