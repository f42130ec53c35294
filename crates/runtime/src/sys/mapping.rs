//! A window of a file mapped read-only, whose bytes only the kernel reads: they are
//! handed to `writev` (HTTP/2 DATA frames on a plain socket, a frame header between each
//! two payloads), so many frames go out in one call with one copy, into the socket.
//!
//! This process never reads the mapped bytes. If the file shrinks under the mapping, a
//! read of a page past its end would raise SIGBUS in user space; the kernel's own copy
//! (inside `writev`) fails with EFAULT instead, and the caller sees an error.

use std::fs::File;
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;

/// `len` bytes of a file from `offset`, mapped (and their page-table entries filled).
pub struct Mapping {
    base: *mut libc::c_void,
    /// Bytes mapped (from the page-aligned start below `offset`).
    mapped: usize,
    /// Where `offset` falls in the mapping.
    lead: usize,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value alone; its address range stays
// valid until Drop, whichever thread drops it, and nothing in this process reads through it.
unsafe impl Send for Mapping {}
// SAFETY: shared access only hands out the range's address to the kernel (see above).
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map `[offset, offset + len)` of `file`. Call it only for cached pages (see
    /// [`super::is_resident`]): filling the page table reads pages that are not cached.
    pub fn new(file: &File, offset: u64, len: usize) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let page = 4096u64;
        let start = offset / page * page;
        let lead = (offset - start) as usize;
        let mapped = lead + len;
        // SAFETY: a fresh private address range chosen by the kernel (addr NULL), read-only,
        // of a file descriptor that is open for the call; failure is checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                file.as_raw_fd(),
                start as libc::off_t,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            base,
            mapped,
            lead,
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes `[at, at + n)` of the window, for a `writev` only: never read them here.
    /// Panics if the range is outside the window.
    pub fn io_slice(&self, at: usize, n: usize) -> IoSlice<'_> {
        assert!(at <= self.len && n <= self.len - at, "outside the mapping");
        // SAFETY: the range lies inside the live mapping (checked above), which outlives
        // the returned slice (borrowed from self). The slice is only passed to the kernel.
        let bytes =
            unsafe { std::slice::from_raw_parts((self.base as *const u8).add(self.lead + at), n) };
        IoSlice::new(bytes)
    }
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mapping({} bytes)", self.len)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: base/mapped are exactly what mmap returned, unmapped once here.
        unsafe {
            libc::munmap(self.base, self.mapped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn a_window_from_an_odd_offset_writes_its_bytes() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let m = Mapping::new(&f, 5_000, 10_001).unwrap();
        assert_eq!(m.len(), 10_001);
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let iov = [IoSlice::new(b"<"), m.io_slice(1, 9_999), IoSlice::new(b">")];
        let n = rustix::io::writev(a.as_fd(), &iov).unwrap();
        assert_eq!(n, 10_001);
        drop(a);
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut &b, &mut got).unwrap();
        assert_eq!(got[0], b'<');
        assert_eq!(&got[1..10_000], &data[5_001..15_000]);
        assert_eq!(got[10_000], b'>');
    }

    #[test]
    fn a_file_cut_short_under_the_mapping_fails_the_write_not_the_process() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![b'x'; 64 << 10]).unwrap();
        let m = Mapping::new(&f, 0, 64 << 10).unwrap();
        f.set_len(4096).unwrap();
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let r = rustix::io::writev(a.as_fd(), &[m.io_slice(8192, 4096)]);
        assert_eq!(
            r.map_err(io::Error::from).unwrap_err().raw_os_error(),
            Some(libc::EFAULT)
        );
    }

    #[test]
    #[should_panic(expected = "outside the mapping")]
    fn a_range_past_the_window_is_refused() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"hello").unwrap();
        let m = Mapping::new(&f, 0, 5).unwrap();
        let _ = m.io_slice(3, 3);
    }
}
