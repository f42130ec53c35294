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
    match page_counts(file, offset, len) {
        Some(p) => p.cached >= p.total,
        None if NO_CACHESTAT.load(Ordering::Relaxed) => {
            nowait_byte(file, offset) && nowait_byte(file, offset + len - 1)
        }
        None => false,
    }
}

/// Where the pages of a file range are, as `cachestat(2)` counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PageCounts {
    /// Pages the range touches.
    total: u64,
    /// Of them, in the page cache now.
    cached: u64,
    /// Of them, read in once and since reclaimed under memory pressure (the kernel keeps a
    /// shadow entry for those; pages dropped with [`drop_from_page_cache`] leave none).
    evicted: u64,
}

/// The page counts of `[offset, offset+len)` (`len` > 0); `None` where cachestat is missing
/// or refused, or fails. Never blocks.
fn page_counts(file: &File, offset: u64, len: u64) -> Option<PageCounts> {
    if len == 0 || NO_CACHESTAT.load(Ordering::Relaxed) {
        return None;
    }
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
        return Some(PageCounts {
            total: last - first + 1,
            cached: stat.nr_cache,
            evicted: stat.nr_evicted,
        });
    }
    let err = io::Error::last_os_error();
    if matches!(err.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) {
        NO_CACHESTAT.store(true, Ordering::Relaxed);
    }
    None
}

/// Whether every page of `[offset, offset+len)` has been read in: cached now, or cached
/// and since reclaimed under memory pressure. What a test of read-ahead can hold on a
/// machine short of memory, where [`is_resident`] alone is a race with reclaim. Without
/// cachestat, [`is_resident`].
pub fn was_read_in(file: &File, offset: u64, len: u64) -> bool {
    match page_counts(file, offset, len) {
        Some(p) => p.cached + p.evicted >= p.total,
        None => is_resident(file, offset, len),
    }
}

fn nowait_byte(file: &File, offset: u64) -> bool {
    let mut b = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut b)];
    rustix::io::preadv2(file, &mut iov, offset, rustix::io::ReadWriteFlags::NOWAIT).is_ok()
}

/// Bring `[offset, offset+len)` into the page cache, blocking until the kernel has read it;
/// run only on the blocking pool. The pages are spliced from `file` to `/dev/null`: the
/// kernel reads them as it would for the client's `sendfile` (its own readahead on this open
/// file, which the event loop's sendfile then continues, in large folios) and throws them
/// away without a copy into user space, so the pool thread sleeps on the disk instead of
/// spending CPU the event loop needs (with pinning, the pool shares the worker's core).
/// `readahead(2)` was used before: it fills the cache one 4 KiB page at a time, which on a
/// sparse file's holes (zero pages, no I/O) cost twice the CPU of the send itself.
pub fn blocking_warm(file: &File, offset: u64, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    if let Some(null) = dev_null() {
        let mut off = offset as libc::off64_t;
        let end = offset + len;
        loop {
            let left = end - off as u64;
            if left == 0 {
                return Ok(());
            }
            // SAFETY: sendfile reads `file` and writes `null`, both open for the call;
            // `off` is a live off64_t it advances.
            let n = unsafe {
                libc::sendfile64(null.as_raw_fd(), file.as_raw_fd(), &mut off, left as usize)
            };
            match n {
                0 => return Ok(()), // end of file: the file shrank; the send will say so
                n if n > 0 => {}
                _ => {
                    let err = io::Error::last_os_error();
                    if err.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    if off as u64 == offset {
                        break; // refused before any byte (a file type splice cannot read)
                    }
                    return Err(err);
                }
            }
        }
    }
    blocking_warm_by_reading(file, offset, len)
}

/// Ask the kernel to drop `file`'s clean pages from the page cache (`posix_fadvise`
/// `DONTNEED`), as a cold file would be. Dirty pages stay: sync the file first.
pub fn drop_from_page_cache(file: &File) -> io::Result<()> {
    rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed)?;
    Ok(())
}

/// `/dev/null`, opened once; `None` where it cannot be (a chroot without it).
fn dev_null() -> Option<&'static File> {
    static NULL: std::sync::OnceLock<Option<File>> = std::sync::OnceLock::new();
    NULL.get_or_init(|| {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .ok()
    })
    .as_ref()
}

/// The fallback: `readahead(2)`, then one byte every [`WAIT_STRIDE`] read so this thread
/// waits for the I/O; where readahead is refused, reading every byte.
fn blocking_warm_by_reading(file: &File, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: readahead only reads the descriptor, which `file` keeps open for the call.
    let rc = unsafe { libc::readahead(file.as_raw_fd(), offset as libc::off64_t, len as usize) };
    if rc == 0 {
        let mut byte = [0u8; 1];
        let mut pos = offset;
        while pos < offset + len {
            file.read_at(&mut byte, pos)?;
            pos += WAIT_STRIDE;
        }
        file.read_at(&mut byte, offset + len - 1)?;
        return Ok(());
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const LEN: u64 = 3 * 1024 * 1024 + 5;

    /// A synced file of `LEN` bytes (`sparse`: a hole, no data blocks), dropped from the page
    /// cache; `None` where the file system keeps it cached anyway (tmpfs), or where memory is
    /// so short that it was reclaimed while written, said on stderr.
    fn cold_file(sparse: bool) -> Option<File> {
        let mut f = tempfile::tempfile().unwrap();
        if sparse {
            f.set_len(LEN).unwrap();
        } else {
            let data: Vec<u8> = (0..LEN).map(|i| (i * 7 % 253) as u8).collect();
            f.write_all(&data).unwrap();
        }
        f.sync_all().unwrap();
        drop_from_page_cache(&f).unwrap();
        if is_resident(&f, 0, LEN) {
            eprintln!("the temporary directory's file system keeps files cached; nothing to test");
            return None;
        }
        // Dropped pages leave no trace, so the file reads as never read in, unless memory
        // was so short that the kernel reclaimed all of it while it was being written.
        if was_read_in(&f, 0, LEN) {
            eprintln!("the file was reclaimed while it was written; nothing to test");
            return None;
        }
        Some(f)
    }

    #[test]
    fn warming_brings_the_range_in() {
        for sparse in [false, true] {
            let Some(f) = cold_file(sparse) else { return };
            let (at, len) = (1024 * 1024 + 3, 1024 * 1024);
            blocking_warm(&f, at, len).unwrap();
            assert!(
                was_read_in(&f, at, len),
                "sparse {sparse}: the window was not read in"
            );
        }
    }

    #[test]
    fn warming_past_the_end_stops_at_it() {
        let Some(f) = cold_file(false) else { return };
        blocking_warm(&f, LEN - 10, 1024 * 1024).unwrap();
        assert!(was_read_in(&f, LEN - 10, 10));
    }

    #[test]
    fn the_fallback_reads_the_range_in_too() {
        let Some(f) = cold_file(false) else { return };
        blocking_warm_by_reading(&f, 0, 512 * 1024).unwrap();
        assert!(was_read_in(&f, 0, 512 * 1024));
    }
}
