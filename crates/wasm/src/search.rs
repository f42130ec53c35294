//! `files.find`: where a byte string occurs in a granted file, searched by the host, so a
//! module that fills a template's fields in place (sending the bytes around them as file
//! ranges) never copies the file into its memory nor scans it without SIMD. SPECweb99's ad
//! placeholders are the case that asked for it: scanning each class 1 and 2 file inside the
//! module was the largest part of the component's extra cost under load.

use std::fs::File;
use std::io;

use memchr::memmem::Finder;

/// Occurrences a module may ask for at once.
pub const FIND_MAX: u32 = 65_536;

/// The file is read in pieces of this size (or twice the needle, if that is more).
const PIECE: usize = 256 << 10;

/// Offsets of `needle` in the first `size` bytes that `read` gives (`read(offset, len)`:
/// up to `len` bytes at `offset`, fewer only at the end; `None` when it cannot answer),
/// left to right and not overlapping, at most `max`. An empty needle finds nothing.
/// `None` when `read` gave up.
pub fn find(
    size: u64,
    needle: &[u8],
    max: u32,
    mut read: impl FnMut(u64, usize) -> Option<Vec<u8>>,
) -> Option<Vec<u64>> {
    let mut found = Vec::new();
    if needle.is_empty() || max == 0 {
        return Some(found);
    }
    let finder = Finder::new(needle);
    let piece = PIECE.max(needle.len() * 2);
    // `window` holds the file's bytes from `start`: the tail of the last piece that could
    // begin an occurrence, then the next piece.
    let mut window: Vec<u8> = Vec::new();
    let mut start = 0u64;
    // The first offset an occurrence may begin at (after the last one found).
    let mut from = 0u64;
    let mut read_to = 0u64;
    while read_to < size {
        let len = (piece as u64).min(size - read_to) as usize;
        let bytes = read(read_to, len)?;
        if bytes.is_empty() {
            break;
        }
        read_to += bytes.len() as u64;
        window.extend_from_slice(&bytes);
        let skip = (from - start) as usize;
        let mut at = skip;
        while let Some(i) = finder.find(&window[at..]) {
            let offset = start + (at + i) as u64;
            found.push(offset);
            if found.len() as u32 >= max {
                return Some(found);
            }
            at += i + needle.len();
            from = offset + needle.len() as u64;
        }
        // Keep what could still begin an occurrence that ends in the next piece.
        let keep_from = window
            .len()
            .saturating_sub(needle.len() - 1)
            .max((from - start) as usize);
        window.drain(..keep_from.min(window.len()));
        start += keep_from as u64;
        from = from.max(start);
    }
    Some(found)
}

/// [`find`] over `file`, from the page cache alone (`RWF_NOWAIT`): `None` when some of it
/// is not cached. For the event loop.
pub fn find_cached(file: &File, size: u64, needle: &[u8], max: u32) -> Option<Vec<u64>> {
    find(size, needle, max, |offset, len| {
        ramjet_runtime::sys::read_at_cached(file, offset, len)
    })
}

/// [`find`] over `file`, waiting for the disk: for the blocking pool.
pub fn find_blocking(file: &File, size: u64, needle: &[u8], max: u32) -> io::Result<Vec<u64>> {
    let mut failed = None;
    let found = find(size, needle, max, |offset, len| {
        ramjet_runtime::sys::read_at(file, offset, len)
            .map_err(|e| failed = Some(e))
            .ok()
    });
    match (found, failed) {
        (Some(found), _) => Ok(found),
        (None, e) => Err(e.unwrap_or_else(|| io::Error::other("read failed"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every non-overlapping occurrence, left to right, the plain way.
    fn naive(hay: &[u8], needle: &[u8], max: u32) -> Vec<u64> {
        let mut found = Vec::new();
        let mut at = 0;
        while !needle.is_empty() && at + needle.len() <= hay.len() && (found.len() as u32) < max {
            if &hay[at..at + needle.len()] == needle {
                found.push(at as u64);
                at += needle.len();
            } else {
                at += 1;
            }
        }
        found
    }

    fn in_pieces(hay: &[u8], needle: &[u8], max: u32, piece: usize) -> Option<Vec<u64>> {
        // Reads shorter than asked, to cross piece boundaries everywhere.
        find(hay.len() as u64, needle, max, |offset, len| {
            let end = (offset as usize + len.min(piece)).min(hay.len());
            Some(hay[offset as usize..end].to_vec())
        })
    }

    #[test]
    fn occurrences_across_piece_boundaries_are_found_once() {
        let mut hay = Vec::new();
        for i in 0..5000u32 {
            hay.extend_from_slice(if i % 7 == 0 { b"<tag>" } else { b"xy" });
            hay.extend_from_slice(&i.to_le_bytes());
        }
        for needle in [&b"<tag>"[..], b"g>", b"<", b"xyxy", b"\x01\x00"] {
            for piece in [1, 2, 3, 5, 64, 4096, 1 << 20] {
                assert_eq!(
                    in_pieces(&hay, needle, FIND_MAX, piece).unwrap(),
                    naive(&hay, needle, FIND_MAX),
                    "{needle:?} in pieces of {piece}"
                );
            }
        }
    }

    #[test]
    fn overlapping_matches_do_not_count_twice_and_max_stops_early() {
        assert_eq!(in_pieces(b"aaaaa", b"aa", 10, 1).unwrap(), vec![0, 2]);
        assert_eq!(in_pieces(b"aaaaa", b"aa", 1, 2).unwrap(), vec![0]);
        assert_eq!(in_pieces(b"abc", b"", 10, 1).unwrap(), Vec::<u64>::new());
        assert_eq!(
            in_pieces(b"abc", b"abcd", 10, 1).unwrap(),
            Vec::<u64>::new()
        );
        assert_eq!(in_pieces(b"", b"a", 10, 1).unwrap(), Vec::<u64>::new());
        assert_eq!(in_pieces(b"abc", b"abc", 0, 1).unwrap(), Vec::<u64>::new());
    }

    #[test]
    fn a_read_that_gives_up_gives_none() {
        assert_eq!(find(10, b"a", 5, |_, _| None), None);
        // A file shorter than its size said: what was there.
        assert_eq!(
            find(10, b"a", 5, |o, _| Some(if o == 0 {
                b"bab".to_vec()
            } else {
                vec![]
            })),
            Some(vec![1])
        );
    }

    #[test]
    fn files_are_searched_cached_and_blocking_alike() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut bytes = vec![b'.'; 700_000];
        for at in [0, 262_140, 524_287, 699_990] {
            bytes[at..at + 5].copy_from_slice(b"<ad/>");
        }
        std::fs::write(&path, &bytes).unwrap();
        let f = File::open(&path).unwrap();
        let want = vec![0, 262_140, 524_287, 699_990];
        assert_eq!(find_blocking(&f, 700_000, b"<ad/>", 10).unwrap(), want);
        // Just written, so in the page cache (where the filesystem allows RWF_NOWAIT).
        if let Some(found) = find_cached(&f, 700_000, b"<ad/>", 10) {
            assert_eq!(found, want);
        }
    }
}
