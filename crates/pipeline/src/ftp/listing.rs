//! What FTP sees of the served tree: a path opened beneath the root under the location's
//! symlink policy (as HTTP opens it), and listings (`LIST`'s `ls -l` lines, `NLST`'s
//! names, RFC 3659 facts for `MLSD`/`MLST`) of exactly what `RETR` can fetch: an entry
//! that cannot be opened under the policy, or a dot-file where the location hides them,
//! is not listed, and neither is a name with CR or LF, which no listing line can carry.
//! Blocking (opens and stats): run on the blocking pool.

use std::fs::File;
use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

use ramjet_config::SymlinkPolicy;
use ramjet_ftp::session::Listing;
use ramjet_runtime::sys::{self, FileStat, OpenPolicy};

/// How the location lets FTP see its tree.
#[derive(Debug, Clone, Copy)]
pub(super) struct View {
    pub(super) symlinks: SymlinkPolicy,
    pub(super) dotfiles: bool,
}

/// One listed name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) name: Vec<u8>,
    pub(super) is_dir: bool,
    pub(super) size: u64,
    /// Unix seconds.
    pub(super) mtime: i64,
}

/// `path` (from the tree's root, `/`-led) opened beneath `root` under `view`'s policy.
pub(super) fn open(root: &File, path: &[u8], view: View) -> io::Result<(File, FileStat)> {
    let rel = path.strip_prefix(b"/").unwrap_or(path);
    match view.symlinks {
        SymlinkPolicy::InsideRoot => sys::open_beneath(root, rel, OpenPolicy::Beneath),
        SymlinkPolicy::Never => sys::open_beneath(root, rel, OpenPolicy::NoSymlinks),
        SymlinkPolicy::OwnerMatch => sys::open_owner_matched(root, rel),
    }
}

/// The reply text for a failed open.
pub(super) fn refusal(e: &io::Error) -> &'static str {
    use io::ErrorKind as K;
    if sys::is_symlink_loop(e) {
        return "Permission denied.";
    }
    match e.kind() {
        K::PermissionDenied | K::CrossesDevices => "Permission denied.",
        _ => "No such file or directory.",
    }
}

/// Unix seconds of `t` (negative before 1970).
pub(super) fn unix(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

impl Entry {
    pub(super) fn of(name: Vec<u8>, st: &FileStat) -> Entry {
        Entry {
            name,
            is_dir: st.is_dir,
            size: if st.is_dir { 0 } else { st.size },
            mtime: unix(st.mtime),
        }
    }
}

/// The entries of the directory at `path` (or the one file there), sorted by name; `Err`
/// when it cannot be opened.
pub(super) fn read(root: &File, path: &[u8], view: View) -> io::Result<Vec<Entry>> {
    let (dir, st) = open(root, path, view)?;
    if !st.is_dir {
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path).to_vec();
        return Ok(vec![Entry::of(name, &st)]);
    }
    let mut out = Vec::new();
    let base = path.strip_prefix(b"/").unwrap_or(path);
    for name in sys::blocking_read_dir(&dir)? {
        if name.contains(&b'\n') || name.contains(&b'\r') || (name[0] == b'.' && !view.dotfiles) {
            continue;
        }
        let mut full = base.to_vec();
        if !full.is_empty() {
            full.push(b'/');
        }
        full.extend_from_slice(&name);
        if let Ok((_, st)) = open(root, &full, view) {
            if st.is_dir || st.is_file {
                out.push(Entry::of(name, &st));
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The facts of one name (`MLST`): `type=...;size=...;modify=...; NAME`.
pub(super) fn facts(e: &Entry, out: &mut Vec<u8>) {
    out.extend_from_slice(if e.is_dir {
        b"type=dir;"
    } else {
        b"type=file;"
    });
    if !e.is_dir {
        out.extend_from_slice(format!("size={};", e.size).as_bytes());
    }
    out.extend_from_slice(b"modify=");
    out.extend_from_slice(stamp(e.mtime).as_bytes());
    out.extend_from_slice(b"; ");
    out.extend_from_slice(&e.name);
}

/// `YYYYMMDDHHMMSS` in UTC (RFC 3659 `time-val`, MDTM's answer).
pub(super) fn stamp(unix: i64) -> String {
    let (y, mo, d, h, mi, s) = civil(unix);
    format!("{y:04}{mo:02}{d:02}{h:02}{mi:02}{s:02}")
}

/// Listing lines (CRLF each) in `form`; `now` (Unix seconds) decides whether `ls -l`
/// shows a time or a year.
pub(super) fn render(entries: &[Entry], form: Listing, now: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * 64);
    for e in entries {
        match form {
            Listing::Names { .. } => out.extend_from_slice(&e.name),
            Listing::Machine => facts(e, &mut out),
            Listing::Long { .. } => long(e, now, &mut out),
        }
        out.extend_from_slice(b"\r\n");
    }
    out
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// One `ls -l` line: read-only modes (the tree is served read-only), owner `ftp`, the time
/// within six months, else the year (as `ls` does).
fn long(e: &Entry, now: i64, out: &mut Vec<u8>) {
    let (y, mo, d, h, mi, _) = civil(e.mtime);
    let recent = (now - e.mtime).abs() < 183 * 86_400;
    let when = if recent {
        format!("{h:02}:{mi:02}")
    } else {
        format!(" {y}")
    };
    let mode = if e.is_dir { "dr-xr-xr-x" } else { "-r--r--r--" };
    out.extend_from_slice(
        format!(
            "{mode} 1 ftp ftp {:>12} {} {d:>2} {when:>5} ",
            e.size,
            MONTHS[(mo - 1) as usize]
        )
        .as_bytes(),
    );
    out.extend_from_slice(&e.name);
}

/// UTC calendar fields of a Unix time.
fn civil(t: i64) -> (i64, u32, u32, u32, u32, u32) {
    let (y, m, d) = ramjet_observe::civil_from_days(t.div_euclid(86_400));
    let secs = t.rem_euclid(86_400);
    (
        y,
        m,
        d,
        (secs / 3600) as u32,
        (secs % 3600 / 60) as u32,
        (secs % 60) as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, is_dir: bool, size: u64, mtime: i64) -> Entry {
        Entry {
            name: name.as_bytes().to_vec(),
            is_dir,
            size,
            mtime,
        }
    }

    #[test]
    fn times_in_utc() {
        assert_eq!(stamp(0), "19700101000000");
        assert_eq!(stamp(951_782_400), "20000229000000");
        assert_eq!(stamp(1_764_130_262), "20251126041102");
        assert_eq!(stamp(-1), "19691231235959");
    }

    #[test]
    fn the_three_forms() {
        let now = 1_764_130_262;
        let list = [
            entry("a dir", true, 0, now - 60),
            entry("old.iso", false, 5 << 30, 951_782_400),
        ];
        let names = render(&list, Listing::Names { all: false }, now);
        assert_eq!(names, b"a dir\r\nold.iso\r\n");
        let mlsd = String::from_utf8(render(&list, Listing::Machine, now)).unwrap();
        assert_eq!(
            mlsd,
            "type=dir;modify=20251126041002; a dir\r\n\
             type=file;size=5368709120;modify=20000229000000; old.iso\r\n"
        );
        let long = String::from_utf8(render(&list, Listing::Long { all: false }, now)).unwrap();
        assert_eq!(
            long,
            "dr-xr-xr-x 1 ftp ftp            0 Nov 26 04:10 a dir\r\n\
             -r--r--r-- 1 ftp ftp   5368709120 Feb 29  2000 old.iso\r\n"
        );
    }

    #[test]
    fn the_tree_as_ftp_sees_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::create_dir(p.join("sub")).unwrap();
        std::fs::write(p.join("sub/f"), b"12345").unwrap();
        std::fs::write(p.join(".hidden"), b"x").unwrap();
        std::fs::write(p.join("new\nline"), b"x").unwrap();
        std::os::unix::fs::symlink("sub/f", p.join("inside")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", p.join("escape")).unwrap();
        let root = File::open(p).unwrap();
        let view = View {
            symlinks: SymlinkPolicy::InsideRoot,
            dotfiles: false,
        };
        let names = |v| {
            read(&root, b"/", v)
                .unwrap()
                .into_iter()
                .map(|e| String::from_utf8(e.name).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(view), ["inside", "sub"]);
        let never = View {
            symlinks: SymlinkPolicy::Never,
            dotfiles: true,
        };
        assert_eq!(names(never), [".hidden", "sub"]);
        let one = read(&root, b"/sub/f", view).unwrap();
        assert_eq!((one[0].name.as_slice(), one[0].size), (&b"f"[..], 5));
        assert!(read(&root, b"/escape", view).is_err());
        assert!(read(&root, b"/missing", view).is_err());
    }
}
