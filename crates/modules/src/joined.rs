//! A small reply's body in one block: its byte pieces and its file ranges (read from the
//! page cache) joined, so the head and the body go out in one `writev` instead of a write
//! for each byte piece and a `sendfile` for each file range. SPECweb99's dynamic GET (the
//! frame's head, the file, the frame's tail) takes two system calls instead of three, its
//! ad rotation (a file range on each side of the ad) three instead of five, and the client
//! gets one segment, not one per piece. The static handler serves files up to its
//! `small_file_max` (32 KiB by default) from memory for the same reason.

use bytes::Bytes;

use crate::api::Piece;

/// Bodies up to this size are joined.
pub const JOIN_MAX: u64 = 32 << 10;

/// The body of `pieces` in one block, if it holds a file range, is at most [`JOIN_MAX`]
/// bytes, and each range is in the page cache now (never waiting for the disk: safe on the
/// event loop) and still as long as the reply says. Otherwise `None`, and the pieces go
/// out as they are.
pub fn joined(pieces: &[Piece]) -> Option<Bytes> {
    let mut total = 0u64;
    let mut has_file = false;
    for p in pieces {
        total += match p {
            Piece::Bytes(b) => b.len() as u64,
            Piece::File { len, .. } => {
                has_file = true;
                *len
            }
        };
    }
    if !has_file || total > JOIN_MAX {
        return None;
    }
    let mut out = Vec::with_capacity(total as usize);
    for p in pieces {
        match p {
            Piece::Bytes(b) => out.extend_from_slice(b),
            Piece::File { file, offset, len } => {
                if !ramjet_runtime::sys::append_cached(file, *offset, *len as usize, &mut out) {
                    return None;
                }
            }
        }
    }
    Some(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn file(bytes: &[u8]) -> Arc<std::fs::File> {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, bytes).unwrap();
        Arc::new(f)
    }

    #[test]
    fn bytes_and_cached_file_ranges_become_one_block() {
        let f = file(b"0123456789");
        let pieces = [
            Piece::Bytes(Bytes::from_static(b"<")),
            Piece::File {
                file: f.clone(),
                offset: 0,
                len: 3,
            },
            Piece::Bytes(Bytes::from_static(b"|")),
            Piece::File {
                file: f.clone(),
                offset: 9,
                len: 1,
            },
            Piece::Bytes(Bytes::from_static(b">")),
        ];
        assert_eq!(joined(&pieces).as_deref(), Some(&b"<012|9>"[..]));
        // A file alone, and the whole file.
        let whole = [Piece::File {
            file: f,
            offset: 0,
            len: 10,
        }];
        assert_eq!(joined(&whole).as_deref(), Some(&b"0123456789"[..]));
    }

    #[test]
    fn bytes_alone_large_bodies_and_short_files_are_left_as_they_are() {
        assert!(joined(&[Piece::Bytes(Bytes::from_static(b"abc"))]).is_none());
        assert!(joined(&[]).is_none());
        let f = file(&vec![b'x'; JOIN_MAX as usize + 1]);
        let at_most = |len| {
            [Piece::File {
                file: f.clone(),
                offset: 0,
                len,
            }]
        };
        assert_eq!(
            joined(&at_most(JOIN_MAX)).map(|b| b.len()),
            Some(JOIN_MAX as usize)
        );
        assert!(joined(&at_most(JOIN_MAX + 1)).is_none());
        // A range past the file's end now (it shrank since the reply was made).
        let short = file(b"abc");
        let past = [Piece::File {
            file: short,
            offset: 1,
            len: 3,
        }];
        assert!(joined(&past).is_none());
    }
}
