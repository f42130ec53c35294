//! The static file set (wafgen99): `file_set/dirNNNNN/classC_F`, 36 files per directory,
//! each exactly its nominal size, with the header line, the 4096-byte markers, a newline
//! every 64th byte and the ad tags of class 1 and 2 files (specweb99.md §1).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Files per class (`FILES_PER_CLASS`; `MAX_FILE` = 8 is the highest index).
pub const FILES_PER_CLASS: u32 = 9;
/// Classes 0..3.
pub const CLASSES: u32 = 4;
/// `CLASS_BASE`: file `n` of class `c` is `CLASS_BASE[c] * (n + 1) / 10` bytes.
pub const CLASS_BASE: [u64; 4] = [1024, 10240, 102_400, 1_024_000];
/// Bytes in one directory (all 36 files).
pub const BYTES_PER_DIR: u64 = 5_119_484;
/// A marker byte (the next character of the name) every this many body bytes.
pub const MARKER_EVERY: usize = 4096;
/// A newline ends every line of this many body bytes.
pub const LINE: usize = 64;
/// The ad tag, as the generator writes it: the placeholder is replaced when served (CAD).
pub const AD_TAG: &[u8; 63] = b"<!WEB99CAD><IMG SRC=\"/file_set/dirNNNNN/classX_Y\"><!/WEB99CAD>\n";
/// Where, in [`AD_TAG`], the 17-byte placeholder `dirNNNNN/classX_Y` starts.
pub const AD_PLACEHOLDER_AT: usize = 31;
/// The placeholder itself.
pub const AD_PLACEHOLDER: &[u8; 17] = b"dirNNNNN/classX_Y";

/// The kit's `dirs_from_load`: `int(25 + (400000/122000) * connections / 5)`.
pub fn dirs_for_connections(connections: u64) -> u64 {
    // Exact rational arithmetic: 25 + 400000*c / (122000*5) = 25 + 40c/61.
    25 + connections * 40 / 61
}

/// The size in bytes of file `n` of `class`.
pub fn file_size(class: u32, n: u32) -> u64 {
    CLASS_BASE[class as usize] * u64::from(n + 1) / 10
}

/// The path of a file relative to the document root, as its header line names it.
pub fn file_name(dir: u64, class: u32, n: u32) -> String {
    format!("file_set/dir{dir:05}/class{class}_{n}")
}

/// Ad tags in a file of `class`: one in class 1, two in class 2, none otherwise.
pub fn tags_in_class(class: u32) -> usize {
    match class {
        1 => 1,
        2 => 2,
        _ => 0,
    }
}

/// A small fast generator for the random filler bytes (xorshift64*): the kit's bytes are
/// random too, and nothing validates them; seeding it per file makes a set reproducible.
struct Filler(u64);

impl Filler {
    fn new(dir: u64, class: u32, n: u32) -> Filler {
        let seed = (dir << 8 | u64::from(class) << 4 | u64::from(n)) ^ 0x9E37_79B9_7F4A_7C15;
        Filler(seed.wrapping_mul(0xBF58_476D_1CE4_E5B9) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `lo..hi` (hi > lo), or `lo` for an empty range (as C#'s `Next(a, a)`).
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        if hi <= lo {
            return lo;
        }
        lo + (self.next() % (hi - lo) as u64) as usize
    }
}

/// The markers (body offsets / 4096) after which `class`'s tags go, for a body of `len`
/// bytes: the markers are split in `tags` even ranges and one is drawn in each (as
/// wafgen99 does), kept where the whole tag fits in the body.
fn tag_markers(class: u32, len: usize, filler: &mut Filler) -> Vec<usize> {
    let tags = tags_in_class(class);
    if tags == 0 {
        return Vec::new();
    }
    let markers = len / MARKER_EVERY + 1;
    let per_tag = markers / tags;
    let last_fitting = (len.saturating_sub(AD_TAG.len() + 1)) / MARKER_EVERY;
    (0..tags)
        .map(|t| {
            filler
                .range(per_tag * t, (per_tag * (t + 1)).saturating_sub(1))
                .min(last_fitting)
        })
        .collect()
}

/// Write the bytes of file `n` of `class` in directory `dir` into `out` (cleared first).
pub fn file_bytes_into(dir: u64, class: u32, n: u32, out: &mut Vec<u8>) {
    let name = file_name(dir, class, n);
    let size = file_size(class, n) as usize;
    out.clear();
    out.reserve(size);
    out.extend_from_slice(format!("{size:9} {name}\n").as_bytes());
    let start = out.len();
    let len = size.saturating_sub(start);
    let mut filler = Filler::new(dir, class, n);
    let tags = tag_markers(class, len, &mut filler);
    // Random printable bytes '!'..='|' (33..=124), eight per draw.
    out.resize(start + len, 0);
    let body = &mut out[start..];
    for chunk in body.chunks_mut(8) {
        let mut x = filler.next();
        for b in chunk {
            *b = 33 + (((x & 0xFF) * 92) >> 8) as u8;
            x >>= 8;
        }
    }
    for i in (LINE - 1..len).step_by(LINE) {
        body[i] = b'\n';
    }
    let name = name.as_bytes();
    for (k, i) in (0..len).step_by(MARKER_EVERY).enumerate() {
        body[i] = name[k % name.len()];
    }
    for m in tags {
        let at = m * MARKER_EVERY + 1;
        body[at..at + AD_TAG.len()].copy_from_slice(AD_TAG);
    }
}

/// The bytes of one file.
pub fn file_bytes(dir: u64, class: u32, n: u32) -> Vec<u8> {
    let mut out = Vec::new();
    file_bytes_into(dir, class, n, &mut out);
    out
}

/// Check one file's bytes as wafgen99's `-V` does (size, header, markers, newlines) and
/// its ad tags (how many, each right after a marker). Returns what is wrong.
pub fn check_file(dir: u64, class: u32, n: u32, bytes: &[u8]) -> Result<(), String> {
    let name = file_name(dir, class, n);
    let size = file_size(class, n) as usize;
    if bytes.len() != size {
        return Err(format!("{name}: {} bytes, expected {size}", bytes.len()));
    }
    let header = format!("{size:9} {name}\n");
    if !bytes.starts_with(header.as_bytes()) {
        return Err(format!("{name}: wrong header line"));
    }
    let body = &bytes[header.len()..];
    let name_b = name.as_bytes();
    let mut tags = 0;
    let mut i = 0;
    while i < body.len() {
        if i % MARKER_EVERY == 0 {
            let k = i / MARKER_EVERY;
            if body[i] != name_b[k % name_b.len()] {
                return Err(format!(
                    "{name}: wrong marker at offset {}",
                    header.len() + i
                ));
            }
            if body[i + 1..].starts_with(AD_TAG) {
                tags += 1;
                i += AD_TAG.len() + 1;
                continue;
            }
        } else if i % LINE == LINE - 1 && body[i] != b'\n' {
            return Err(format!(
                "{name}: missing newline at offset {}",
                header.len() + i
            ));
        }
        i += 1;
    }
    if tags != tags_in_class(class) {
        return Err(format!(
            "{name}: {tags} ad tags after markers, expected {}",
            tags_in_class(class)
        ));
    }
    Ok(())
}

/// Where file `n` of `class` in `dir` lives under `root`.
pub fn file_path(root: &Path, dir: u64, class: u32, n: u32) -> PathBuf {
    root.join(file_name(dir, class, n))
}

/// Progress of a generation or check, shared with whoever shows it.
#[derive(Debug, Default)]
pub struct Progress {
    pub bytes: AtomicU64,
    pub files: AtomicU64,
}

/// Every (class, file) pair of one directory, smallest files first.
fn files_of_dir() -> impl Iterator<Item = (u32, u32)> {
    (0..CLASSES).flat_map(|c| (0..FILES_PER_CLASS).map(move |n| (c, n)))
}

/// Run `each(dir, buffer)` for directories `0..dirs` on `threads` threads, stopping at
/// the first error.
fn per_dir(
    dirs: u64,
    threads: usize,
    each: &(dyn Fn(u64, &mut Vec<u8>) -> io::Result<()> + Sync),
) -> io::Result<()> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let error: Mutex<Option<io::Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                let mut buf = Vec::with_capacity(file_size(3, 8) as usize);
                loop {
                    let d = next.fetch_add(1, Ordering::Relaxed) as u64;
                    if d >= dirs || failed.load(Ordering::Relaxed) {
                        return;
                    }
                    if let Err(e) = each(d, &mut buf) {
                        failed.store(true, Ordering::Relaxed);
                        error
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                        return;
                    }
                }
            });
        }
    });
    match error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Write `root/file_set/dir00000 ... dir(dirs-1)` on `threads` threads, one `write` per
/// file (the largest is 900 KiB), counting into `progress`.
pub fn generate(root: &Path, dirs: u64, threads: usize, progress: &Progress) -> io::Result<()> {
    per_dir(dirs, threads, &|d, buf| {
        let dir = root.join(format!("file_set/dir{d:05}"));
        fs::create_dir_all(&dir)?;
        for (c, n) in files_of_dir() {
            file_bytes_into(d, c, n, buf);
            let path = dir.join(format!("class{c}_{n}"));
            fs::write(&path, &buf[..])
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            progress
                .bytes
                .fetch_add(buf.len() as u64, Ordering::Relaxed);
            progress.files.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    })
}

/// Check every file of a set of `dirs` directories under `root`; the first problem found
/// is the error (`InvalidData` for a file whose bytes are wrong).
pub fn verify(root: &Path, dirs: u64, threads: usize, progress: &Progress) -> io::Result<()> {
    per_dir(dirs, threads, &|d, buf| {
        for (c, n) in files_of_dir() {
            let path = file_path(root, d, c, n);
            buf.clear();
            let mut f = fs::File::open(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            io::Read::read_to_end(&mut f, buf)?;
            check_file(d, c, n, buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            progress
                .bytes
                .fetch_add(buf.len() as u64, Ordering::Relaxed);
            progress.files.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_count_follows_the_load_formula() {
        // The table in specweb99.md §1.1.
        for (conns, dirs) in [
            (100, 90),
            (1000, 680),
            (1598, 1072),
            (2765, 1838),
            (3222, 2137),
            (4200, 2779),
            (10000, 6582),
        ] {
            assert_eq!(dirs_for_connections(conns), dirs, "{conns} connections");
        }
        assert_eq!(dirs_for_connections(0), 25);
    }

    #[test]
    fn sizes_per_class_and_per_directory() {
        assert_eq!(
            (0..9).map(|n| file_size(0, n)).collect::<Vec<_>>(),
            [102, 204, 307, 409, 512, 614, 716, 819, 921]
        );
        assert_eq!(file_size(1, 0), 1024);
        assert_eq!(file_size(1, 8), 9216);
        assert_eq!(file_size(2, 8), 92160);
        assert_eq!(file_size(3, 0), 102_400);
        assert_eq!(file_size(3, 8), 921_600);
        let total: u64 = files_of_dir().map(|(c, n)| file_size(c, n)).sum();
        assert_eq!(total, BYTES_PER_DIR);
    }

    #[test]
    fn the_header_line_is_the_specs_example() {
        let f = file_bytes(0, 1, 0);
        let header = b"     1024 file_set/dir00000/class1_0\n";
        assert_eq!(header.len(), 37);
        assert_eq!(&f[..37], header);
        assert_eq!(f.len(), 1024);
    }

    #[test]
    fn markers_newlines_and_filler_are_where_the_spec_puts_them() {
        let f = file_bytes(42, 3, 8);
        let name = b"file_set/dir00042/class3_8";
        let body = &f[37..];
        assert_eq!(f.len(), 921_600);
        for (k, i) in (0..body.len()).step_by(4096).enumerate() {
            assert_eq!(body[i], name[k % name.len()], "marker {k}");
        }
        for (i, &b) in body.iter().enumerate() {
            if i % 4096 == 0 {
                continue;
            }
            if i % 64 == 63 {
                assert_eq!(b, b'\n', "offset {i}");
            } else {
                assert!((33..=124).contains(&b), "offset {i}: {b}");
            }
        }
        // Class 3 has no tag; the filler uses the whole printable range.
        assert!(!f.windows(11).any(|w| w == b"<!WEB99CAD>"));
        assert!(body.contains(&b'!') && body.contains(&b'|'));
    }

    #[test]
    fn ad_tags_follow_markers_in_class_1_and_2_only() {
        assert_eq!(AD_TAG.len(), 63);
        assert_eq!(
            &AD_TAG[AD_PLACEHOLDER_AT..AD_PLACEHOLDER_AT + 17],
            AD_PLACEHOLDER
        );
        for dir in [0, 7, 12345] {
            for class in 0..4 {
                for n in 0..9 {
                    let f = file_bytes(dir, class, n);
                    let body = &f[f.iter().position(|&b| b == b'\n').unwrap() + 1..];
                    let at: Vec<usize> = body
                        .windows(AD_TAG.len())
                        .enumerate()
                        .filter(|(_, w)| *w == AD_TAG)
                        .map(|(i, _)| i)
                        .collect();
                    assert_eq!(at.len(), tags_in_class(class), "class{class}_{n}");
                    for i in &at {
                        assert_eq!(i % 4096, 1, "a tag starts right after a marker");
                    }
                    if class == 2 {
                        // One tag in each half of the markers.
                        let markers = body.len() / 4096 + 1;
                        assert!(at[0] / 4096 < markers / 2 && at[1] / 4096 >= markers / 2);
                    }
                    check_file(dir, class, n, &f).unwrap();
                }
            }
        }
    }

    #[test]
    fn check_finds_each_kind_of_damage() {
        let good = file_bytes(3, 2, 4);
        check_file(3, 2, 4, &good).unwrap();
        let mut short = good.clone();
        short.pop();
        assert!(check_file(3, 2, 4, &short).unwrap_err().contains("bytes"));
        let mut header = good.clone();
        header[0] = b'1';
        assert!(check_file(3, 2, 4, &header).unwrap_err().contains("header"));
        let mut marker = good.clone();
        marker[37 + 4096] ^= 1;
        assert!(check_file(3, 2, 4, &marker).unwrap_err().contains("marker"));
        let mut newline = good.clone();
        let i = (37..good.len())
            .find(|&i| (i - 37) % 64 == 63 && (i - 37) > 8192)
            .unwrap();
        newline[i] = b'x';
        assert!(check_file(3, 2, 4, &newline)
            .unwrap_err()
            .contains("newline"));
        let mut tag = good.clone();
        let at = good.windows(11).position(|w| w == b"<!WEB99CAD>").unwrap();
        tag[at] = b'x';
        assert!(check_file(3, 2, 4, &tag).unwrap_err().contains("ad tags"));
        // The wrong file's bytes under this name.
        assert!(check_file(3, 2, 5, &good).is_err());
    }

    #[test]
    fn generate_then_verify_a_small_set_and_find_a_damaged_file() {
        let tmp = tempfile::tempdir().unwrap();
        let progress = Progress::default();
        generate(tmp.path(), 3, 2, &progress).unwrap();
        assert_eq!(progress.files.load(Ordering::Relaxed), 3 * 36);
        assert_eq!(progress.bytes.load(Ordering::Relaxed), 3 * BYTES_PER_DIR);
        let path = file_path(tmp.path(), 2, 3, 8);
        assert_eq!(fs::metadata(&path).unwrap().len(), 921_600);
        verify(tmp.path(), 3, 2, &Progress::default()).unwrap();
        // A set generated twice is the same bytes.
        assert_eq!(fs::read(&path).unwrap(), file_bytes(2, 3, 8));

        let mut bytes = fs::read(&path).unwrap();
        bytes[37] ^= 1;
        fs::write(&path, bytes).unwrap();
        let e = verify(tmp.path(), 3, 2, &Progress::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("dir00002/class3_8"), "{e}");
        // A set smaller than asked for names the missing file.
        fs::write(&path, file_bytes(2, 3, 8)).unwrap();
        let e = verify(tmp.path(), 4, 1, &Progress::default()).unwrap_err();
        assert!(e.to_string().contains("dir00003"), "{e}");
    }
}
