//! Is a file range in the page cache? (so that sendfile/read will not block on disk)

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};

/// `cachestat(2)` syscall number on x86_64 and aarch64 (Linux ≥ 6.5).
const SYS_CACHESTAT: libc::c_long = 451;

/// After readahead, one byte per this many is read to wait for the I/O to complete.
const WAIT_STRIDE: u64 = 64 * 1024;

/// Set when the kernel lacks cachestat (ENOSYS) or a filter refuses it (EPERM).
static NO_CACHESTAT: AtomicBool = AtomicBool::new(false);

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Whether every page of `[offset, offset+len)` is cached. Never blocks. Without
/// cachestat it falls back to a 1-byte `preadv2(RWF_NOWAIT)` at both ends of the range.
pub fn is_resident(file: &File, offset: u64, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    if !NO_CACHESTAT.load(Ordering::Relaxed) {
        let page = 4096u64;
        let first = offset / page;
        let last = (offset + len - 1) / page;
        let range = CachestatRange {
            off: first * page,
            len: (last - first + 1) * page,
        };
        let mut stat = Cachestat::default();
        // SAFETY: cachestat reads `range` and writes `stat`, both live, correctly laid out
        // (#[repr(C)] mirrors struct cachestat_range / cachestat), flags must be 0.
        let rc = unsafe {
            libc::syscall(
                SYS_CACHESTAT,
                file.as_raw_fd(),
                &range as *const CachestatRange,
                &mut stat as *mut Cachestat,
                0u32,
            )
        };
        if rc == 0 {
            return stat.nr_cache > last - first;
        }
        let err = io::Error::last_os_error();
        if matches!(err.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) {
            NO_CACHESTAT.store(true, Ordering::Relaxed);
        } else {
            return false;
        }
    }
    nowait_byte(file, offset) && nowait_byte(file, offset + len - 1)
}

fn nowait_byte(file: &File, offset: u64) -> bool {
    let mut b = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut b)];
    rustix::io::preadv2(file, &mut iov, offset, rustix::io::ReadWriteFlags::NOWAIT).is_ok()
}

/// Bring `[offset, offset+len)` into the page cache, blocking until the kernel has read it;
/// run only on the blocking pool. `readahead(2)` fills the page cache without copying into
/// user space, so the pool thread sleeps on the disk instead of spending CPU the event loop
/// needs (with pinning, the pool shares the worker's core).
pub fn blocking_warm(file: &File, offset: u64, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: readahead only reads the descriptor, which `file` keeps open for the call.
    let rc = unsafe { libc::readahead(file.as_raw_fd(), offset as libc::off64_t, len as usize) };
    if rc == 0 {
        // readahead only starts the I/O. Touch one byte every WAIT_STRIDE so this thread
        // sleeps until the pages are in; otherwise the event loop's sendfile would wait.
        let mut byte = [0u8; 1];
        let mut pos = offset;
        while pos < offset + len {
            file.read_at(&mut byte, pos)?;
            pos += WAIT_STRIDE;
        }
        file.read_at(&mut byte, offset + len - 1)?;
        return Ok(());
    }
    // readahead is refused for some file types (EINVAL): fall back to reading.
    let mut buf = vec![0u8; 64 * 1024];
    let mut pos = offset;
    let end = offset + len;
    while pos < end {
        let want = ((end - pos) as usize).min(buf.len());
        let n = file.read_at(&mut buf[..want], pos)?;
        if n == 0 {
            break;
        }
        pos += n as u64;
    }
    Ok(())
}
