//! Issue 11: files changed under a running server. Whatever happens to a file (truncated or
//! rewritten in place, replaced by rename, removed, re-created), every response's head
//! (status, length, ETag) describes exactly the bytes sent, on the in-memory path and the
//! sendfile path, with several workers; with inotify the change is seen by the next request,
//! without it no request later than `file_cache.valid` sees the old version.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use ramjet_testkit::Server;

use crate::{bytes, server_with};

/// Requests per check, each on a new connection, so that every worker answers some.
const ROUNDS: usize = 24;

/// Every answer for `path` is `want` (a 200 with exactly these bytes, or the status).
fn all_answer(s: &Server, path: &str, want: Result<&[u8], u16>, what: &str) -> Vec<String> {
    let mut etags = Vec::new();
    for i in 0..ROUNDS {
        let r = s.get(path);
        match want {
            Ok(data) => {
                assert_eq!(r.status, 200, "{what} (request {i})");
                assert_eq!(
                    r.header("Content-Length"),
                    Some(data.len().to_string()),
                    "{what} (request {i})"
                );
                assert!(r.body == data, "{what} (request {i}): other bytes");
                etags.push(r.header("ETag").unwrap());
            }
            Err(status) => assert_eq!(r.status, status, "{what} (request {i})"),
        }
    }
    etags
}

fn truncate(path: &Path, len: usize) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len as u64)
        .unwrap();
}

fn overwrite_in_place(path: &Path, data: &[u8]) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .write_all_at(data, 0)
        .unwrap();
}

fn replace_by_rename(path: &Path, data: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The issue's sequence on one file: truncate, overwrite larger, rename over, remove,
/// re-create. `valid = "1h"`: only the change watcher and the fstat check can notice.
fn changes_are_seen_at_once(size: usize) {
    let data = bytes(size, 1);
    let s = server_with(
        &[("f.bin", &data), ("index.html", b"<p>index</p>")],
        "workers = 2\n[file_cache]\nvalid = \"1h\"\nsmall_file_max = \"16k\"\n",
    );
    let path = s.root().join("f.bin");
    let first = all_answer(&s, "/f.bin", Ok(&data), "unchanged");

    truncate(&path, size / 2);
    let half = &data[..size / 2];
    let after = all_answer(&s, "/f.bin", Ok(half), "truncated in place");
    assert_ne!(first[0], after[0], "a truncated file keeps its ETag");
    // curl sees a whole, consistent response (it exited 18 on a short body before).
    let (ok, out) = crate::curl(&[&s.url("/f.bin")]);
    assert!(ok && out == half, "curl after truncation");

    let bigger = bytes(size * 2, 2);
    overwrite_in_place(&path, &bigger);
    let etags = all_answer(&s, "/f.bin", Ok(&bigger), "overwritten in place");
    assert!(!after.contains(&etags[0]), "new bytes under an old ETag");

    let renamed = bytes(size, 3);
    replace_by_rename(&path, &renamed);
    all_answer(&s, "/f.bin", Ok(&renamed), "replaced by rename");

    std::fs::remove_file(&path).unwrap();
    all_answer(&s, "/f.bin", Err(404), "removed");

    let again = bytes(size / 3 + 1, 4);
    std::fs::write(&path, &again).unwrap();
    all_answer(&s, "/f.bin", Ok(&again), "re-created");

    all_answer(&s, "/", Ok(b"<p>index</p>"), "index");
    std::fs::remove_file(s.root().join("index.html")).unwrap();
    all_answer(&s, "/", Err(403), "index.html removed");
    s.assert_clean_log(&[]);
}

#[test]
fn issue11_changes_seen_at_once_in_memory() {
    changes_are_seen_at_once(10_000);
}

#[test]
fn issue11_changes_seen_at_once_by_sendfile() {
    changes_are_seen_at_once(100_000);
}

/// Without the watcher (`watch = false`), the timer alone: requests sent more than `valid`
/// after a change never see the old version; a sendfile file changed in place is seen at
/// once all the same (the fstat check before the head).
#[test]
fn issue11_without_inotify_nothing_older_than_valid() {
    let small = bytes(10_000, 5);
    let big = bytes(100_000, 6);
    let valid = Duration::from_millis(1000);
    let s = server_with(
        &[("s.bin", &small), ("b.bin", &big)],
        "workers = 2\n[file_cache]\nvalid = \"1s\"\nwatch = false\n",
    );
    all_answer(&s, "/s.bin", Ok(&small), "unchanged small");
    all_answer(&s, "/b.bin", Ok(&big), "unchanged big");

    truncate(&s.root().join("b.bin"), 50_000);
    all_answer(&s, "/b.bin", Ok(&big[..50_000]), "big truncated in place");

    let new_small = bytes(10_000, 7);
    replace_by_rename(&s.root().join("s.bin"), &new_small);
    let changed = Instant::now();
    let mut after_valid = 0;
    while changed.elapsed() < valid + Duration::from_secs(2) {
        let sent = Instant::now();
        let r = s.get("/s.bin");
        assert_eq!(r.header("Content-Length"), Some(r.body.len().to_string()));
        assert!(r.body == small || r.body == new_small, "neither version");
        if sent > changed + valid {
            after_valid += 1;
            assert!(
                r.body == new_small,
                "the old version {:?} after the change",
                sent - changed
            );
        }
    }
    assert!(after_valid > 0);
    s.assert_clean_log(&[]);
}

/// A file that shrinks while it is being sent ends that connection (the head promised more
/// than there is); the worker stays healthy.
#[test]
fn issue11_a_file_shrinking_mid_send_ends_the_connection() {
    let dir = Server::dir();
    let path = dir.path().join("root/big.bin");
    let size: u64 = 64 << 20;
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(size).unwrap();
    drop(f);
    std::fs::write(dir.path().join("root/ok.txt"), b"ok").unwrap();
    let s = Server::start(crate::BIN, dir, "workers = 1\n");
    let mut t = TcpStream::connect(s.addr).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    t.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut got = vec![0u8; 100_000];
    t.read_exact(&mut got).unwrap();
    truncate(&path, 1 << 20);
    // Reads to the end: EOF well short of the promised 64 MiB, not a hang.
    let mut rest = Vec::new();
    t.read_to_end(&mut rest).expect("the connection ends");
    assert!(
        (got.len() + rest.len()) < size as usize,
        "all {size} bytes arrived although the file shrank"
    );
    assert_eq!(s.get("/ok.txt").text(), "ok");
    s.assert_idle();
    s.assert_clean_log(&[]);
}

/// Jobs the blocking pool has been given, from `/metrics`.
fn blocking_jobs(s: &Server) -> u64 {
    let text = s.get("/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix("ramjet_blocking_jobs_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ramjet_blocking_jobs_total in\n{text}"))
}

/// A file whose directory is watched already, with its dentries and pages in the kernel's
/// caches (just written), is opened and read on the event loop: the blocking pool sees only
/// the first file of the directory (whose load adds the watch), not one job per file.
#[test]
fn cached_files_in_a_watched_directory_load_without_the_blocking_pool() {
    let names: Vec<String> = (0..20).map(|i| format!("d/f{i}.txt")).collect();
    let files: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), n.as_bytes())).collect();
    let s = server_with(
        &files,
        "workers = 1\n[file_cache]\nvalid = \"1h\"\n\
         [[location]]\nroot = \"root\"\n\
         [[location]]\npath = \"/metrics\"\nhandlers = [\"metrics\"]\n",
    );
    let before = blocking_jobs(&s);
    for n in &names {
        let r = s.get(&format!("/{n}"));
        assert_eq!((r.status, r.text()), (200, n.clone()));
    }
    let jobs = blocking_jobs(&s) - before;
    // One for the directory's watch; a few more if the kernel dropped a dentry meanwhile.
    assert!(
        jobs <= 5,
        "{jobs} blocking jobs for 20 cached files in one directory"
    );
    // Still watched: a change is seen at once (valid is an hour).
    overwrite_in_place(&s.root().join("d/f3.txt"), b"D/F3");
    assert_eq!(s.get("/d/f3.txt").text(), "D/F3.txt");
    s.assert_clean_log(&[]);
}

/// A directory renamed away and replaced by a new one of the same name: the old watch
/// follows the old directory, so the new one is watched afresh and its changes are seen at
/// once too.
#[test]
fn a_replaced_directory_is_watched_again() {
    let s = server_with(
        &[("d/a.txt", b"one"), ("d/b.txt", b"bee")],
        "workers = 1\n[file_cache]\nvalid = \"1h\"\n",
    );
    all_answer(&s, "/d/a.txt", Ok(b"one"), "first");
    let root = s.root();
    std::fs::rename(root.join("d"), root.join("old")).unwrap();
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::write(root.join("d/a.txt"), b"two").unwrap();
    std::fs::write(root.join("d/b.txt"), b"BEE").unwrap();
    all_answer(&s, "/d/a.txt", Ok(b"two"), "in the new directory");
    all_answer(
        &s,
        "/d/b.txt",
        Ok(b"BEE"),
        "another file of the new directory",
    );
    overwrite_in_place(&root.join("d/a.txt"), b"TWO");
    all_answer(&s, "/d/a.txt", Ok(b"TWO"), "changed in the new directory");
    overwrite_in_place(&root.join("d/b.txt"), b"bEE");
    all_answer(
        &s,
        "/d/b.txt",
        Ok(b"bEE"),
        "the other changed in the new directory",
    );
    s.assert_clean_log(&[]);
}
