//! Opening beneath a directory where the kernel has no `openat2` (Linux before 5.6, a
//! seccomp filter that does not know it, valgrind before 3.22): the path is walked one
//! component at a time with `openat(O_NOFOLLOW)`, so it can never leave the directory.
//! Stricter than `RESOLVE_BENEATH`: no symlink is followed anywhere on the path (`ELOOP`),
//! even one that would stay beneath.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

/// Set once `openat2` answered `ENOSYS`: every later open walks.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Whether opens walk the path instead of asking `openat2`.
pub fn walking() -> bool {
    NO_OPENAT2.load(Ordering::Relaxed)
}

/// Note `openat2`'s answer: `true` when it was `ENOSYS`, so the caller walks instead.
pub(super) fn missing(r: &rustix::io::Result<OwnedFd>) -> bool {
    if matches!(r, Err(Errno::NOSYS)) {
        NO_OPENAT2.store(true, Ordering::Relaxed);
        return true;
    }
    false
}

/// Whether the kernel knows `openat2`, asked once with a harmless open of `.` (for the
/// startup log).
pub fn openat2_available() -> bool {
    if walking() {
        return false;
    }
    let r = rustix::fs::openat2(
        rustix::fs::CWD,
        ".",
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        rustix::fs::ResolveFlags::BENEATH,
    );
    !missing(&r)
}

/// Open `path` beneath `dir` with `flags` for its last component. `path` is relative;
/// `..`, an absolute path and any symlink on the way are refused (`EXDEV`, `EXDEV`,
/// `ELOOP`); empty and `.` components are skipped.
pub fn open_walking(dir: impl AsFd, path: &[u8], flags: OFlags) -> io::Result<OwnedFd> {
    if path.first() == Some(&b'/') {
        return Err(Errno::XDEV.into());
    }
    let mut parts = path
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty() && *p != b".")
        .peekable();
    let mut here: Option<OwnedFd> = None;
    let nofollow = OFlags::NOFOLLOW | OFlags::CLOEXEC;
    while let Some(part) = parts.next() {
        if part == b".." {
            return Err(Errno::XDEV.into());
        }
        let name = std::ffi::OsStr::from_bytes(part);
        let at = match &here {
            Some(fd) => fd.as_fd(),
            None => dir.as_fd(),
        };
        if parts.peek().is_none() {
            return Ok(rustix::fs::openat(
                at,
                name,
                flags | nofollow,
                Mode::empty(),
            )?);
        }
        let next = rustix::fs::openat(at, name, OFlags::PATH | nofollow, Mode::empty())?;
        match FileType::from_raw_mode(rustix::fs::fstat(&next)?.st_mode) {
            FileType::Directory => here = Some(next),
            FileType::Symlink => return Err(Errno::LOOP.into()),
            _ => return Err(Errno::NOTDIR.into()),
        }
    }
    // Only empty and `.` components: the directory itself.
    Ok(rustix::fs::openat(
        dir,
        ".",
        flags | nofollow,
        Mode::empty(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        std::fs::write(t.path().join("a/b/f.txt"), b"inside").unwrap();
        std::fs::write(t.path().join("top.txt"), b"top").unwrap();
        std::os::unix::fs::symlink("b", t.path().join("a/link-dir")).unwrap();
        std::os::unix::fs::symlink("b/f.txt", t.path().join("a/link-file")).unwrap();
        std::os::unix::fs::symlink("/etc", t.path().join("out")).unwrap();
        t
    }

    fn read(dir: &std::fs::File, path: &str) -> io::Result<String> {
        let fd = open_walking(dir, path.as_bytes(), OFlags::RDONLY)?;
        let mut s = String::new();
        std::fs::File::from(fd).read_to_string(&mut s)?;
        Ok(s)
    }

    fn errno(r: io::Result<String>) -> Option<i32> {
        r.err().and_then(|e| e.raw_os_error())
    }

    #[test]
    fn a_walk_opens_what_is_beneath() {
        let t = tree();
        let dir = std::fs::File::open(t.path()).unwrap();
        assert_eq!(read(&dir, "a/b/f.txt").unwrap(), "inside");
        assert_eq!(read(&dir, "top.txt").unwrap(), "top");
        assert_eq!(read(&dir, "./a//b/./f.txt").unwrap(), "inside");
        let root = open_walking(&dir, b"", OFlags::RDONLY | OFlags::DIRECTORY).unwrap();
        assert!(rustix::fs::fstat(&root).is_ok());
    }

    #[test]
    fn a_walk_refuses_to_leave_or_follow() {
        let t = tree();
        let dir = std::fs::File::open(t.path()).unwrap();
        let xdev = Some(Errno::XDEV.raw_os_error());
        let eloop = Some(Errno::LOOP.raw_os_error());
        assert_eq!(errno(read(&dir, "../etc/passwd")), xdev);
        assert_eq!(errno(read(&dir, "a/../../etc/passwd")), xdev);
        assert_eq!(errno(read(&dir, "/etc/passwd")), xdev);
        // Symlinks, in the middle and at the end, within the tree or out of it.
        assert_eq!(errno(read(&dir, "a/link-dir/f.txt")), eloop);
        assert_eq!(errno(read(&dir, "a/link-file")), eloop);
        assert_eq!(errno(read(&dir, "out/passwd")), eloop);
        assert_eq!(errno(read(&dir, "out")), eloop);
        // A file where a directory is needed, and what is not there.
        assert_eq!(
            errno(read(&dir, "top.txt/x")),
            Some(Errno::NOTDIR.raw_os_error())
        );
        assert_eq!(
            errno(read(&dir, "a/nothing")),
            Some(Errno::NOENT.raw_os_error())
        );
    }

    #[test]
    fn only_enosys_means_walk() {
        assert!(!missing(&Err(Errno::XDEV)));
        assert!(!missing(&Err(Errno::LOOP)));
        // This kernel has openat2 (CI and this machine do); the probe says so.
        assert!(walking() || openat2_available());
    }
}
