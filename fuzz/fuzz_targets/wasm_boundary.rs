//! What a hostile WebAssembly module can hand the host, as a sequence of calls decoded from
//! the input: heads with any status and fields, writes, file ranges of any offset and
//! length, flushes, body pieces of any size. Never a panic; the reply's header lines carry
//! no CR, LF or NUL and each is `name: value`; the status is 100..=999; a file range the
//! host accepts lies inside the file; the parts handed to the connection add up to what
//! was queued, none empty and none over its limit; paths a module names never leave the
//! tree (no `..`, `.`, empty or hidden component reaches the open); a journal record the
//! host accepts is one line, and its number, written where the module asked, changes
//! nothing else in it; a request to an upstream that the host accepts is one request line,
//! field lines, the host's own `Host` and framing, and the body, nothing smuggled between;
//! `files.find` gives every occurrence of any needle, whatever the pieces a file is read in.
#![no_main]
use std::collections::BTreeMap;
use std::fs::File;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use ramjet_modules::Piece;
use ramjet_wasm::exchange::{file_range, head, BodyFailure, BodyTurn, Exchange, JOINED_MAX};
use ramjet_wasm::grants::Grants;
use ramjet_wasm::journal;
use ramjet_wasm::search;
use ramjet_wasm::upstream::{self, Upstream};

fn null() -> Arc<File> {
    static F: OnceLock<Arc<File>> = OnceLock::new();
    F.get_or_init(|| Arc::new(File::open("/dev/null").unwrap()))
        .clone()
}

fn grants() -> &'static Grants {
    static G: OnceLock<Grants> = OnceLock::new();
    G.get_or_init(|| {
        let mut trees = BTreeMap::new();
        trees.insert("www".to_string(), File::open("/").unwrap());
        Grants::new("fuzz".into(), trees, BTreeMap::new())
    })
}

fn upstream_grant() -> &'static Upstream {
    static U: OnceLock<Upstream> = OnceLock::new();
    U.get_or_init(|| {
        upstream::parse("http://127.0.0.1:9", std::time::Duration::from_secs(1)).unwrap()
    })
}

/// Reads numbers and slices off the input.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u64(&mut self) -> Option<u64> {
        let n = self.byte()? as usize % 9;
        let mut v = 0u64;
        for _ in 0..n {
            v = v << 8 | self.byte()? as u64;
        }
        Some(v)
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = (self.byte()? as usize).min(self.0.len());
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(b)
    }
}

fn check_reply(reply: &ramjet_modules::Reply) {
    assert!((100..=999).contains(&reply.status), "{}", reply.status);
    let lines = reply.header_lines();
    assert!(!lines.contains(&0));
    for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let line = line.strip_suffix(b"\r").expect("CRLF line ends");
        assert!(!line.contains(&b'\r'));
        let colon = line.iter().position(|&b| b == b':').expect("name: value");
        assert!(colon > 0);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let mut x = Exchange::default();
    let mut handed = 0u64;
    let mut accepted = 0u64;
    while let Some(op) = input.byte() {
        match op % 12 {
            0 => {
                let status = input.u64().unwrap_or(0) as u16;
                let mut fields = Vec::new();
                while let (Some(n), Some(v)) = (input.bytes(), input.bytes()) {
                    fields.push((String::from_utf8_lossy(n).into_owned(), v.to_vec()));
                    if input.byte().unwrap_or(0) % 2 == 0 {
                        break;
                    }
                }
                x.respond(head(status, fields.iter().map(|(n, v)| (&n[..], &v[..]))));
            }
            1 => {
                let b = input.bytes().unwrap_or_default();
                accepted += b.len() as u64;
                x.write(Bytes::copy_from_slice(b));
            }
            2 => {
                let (offset, size) = (input.u64().unwrap_or(0), input.u64().unwrap_or(0));
                let len = input.u64().filter(|_| input.byte().unwrap_or(0) % 2 == 0);
                if let Some(n) = file_range(offset, len, size) {
                    assert!(offset.checked_add(n).is_some_and(|end| end <= size));
                    let n = n.min(1 << 40);
                    accepted += n;
                    x.send_file(null(), offset, n);
                }
            }
            3 => x.start_streaming(),
            4 => {
                let max = input.u64().unwrap_or(1).max(1);
                if let Some(part) = x.take_part(max) {
                    let n = match part {
                        Piece::Bytes(b) => {
                            assert!(!b.is_empty() && b.len() <= JOINED_MAX.max(256));
                            b.len() as u64
                        }
                        Piece::File { len, .. } => {
                            assert!(len > 0 && len <= max);
                            len
                        }
                    };
                    handed += n;
                }
            }
            5 => {
                x.body = BodyTurn::Wanted(input.u64().unwrap_or(0) as u32);
                let piece = match input.byte().unwrap_or(0) % 3 {
                    0 => Ok(Some(Bytes::copy_from_slice(
                        input.bytes().unwrap_or_default(),
                    ))),
                    1 => Ok(None),
                    _ => Err(BodyFailure::Aborted),
                };
                let asked = x.wants_body().unwrap_or(0) as usize;
                let sent = match &piece {
                    Ok(Some(b)) => b.len(),
                    _ => 0,
                };
                x.give_body(piece);
                if let BodyTurn::Given(Ok(Some(b))) = &x.body {
                    // The module gets at most what it asked for; the rest waits.
                    assert!(b.len() <= asked);
                    assert_eq!(b.len() + x.leftover.len(), sent);
                }
                x.body = BodyTurn::Idle;
                x.leftover = Bytes::new();
            }
            6 => check_reply(&x.head_reply()),
            7 => {
                let path = String::from_utf8_lossy(input.bytes().unwrap_or_default()).into_owned();
                if let Ok((_, rel)) = grants().locate("www", &path) {
                    assert!(!rel.is_empty() && !rel.starts_with(b"/"));
                    for part in rel.split(|&b| b == b'/') {
                        assert!(!part.is_empty() && part[0] != b'.' && !part.contains(&0));
                    }
                }
            }
            8 => {
                let record = input.bytes().unwrap_or_default().to_vec();
                let at = input
                    .u64()
                    .filter(|_| input.byte().unwrap_or(0) % 2 == 0)
                    .map(|v| (v as u32, (v >> 32) as u32 % 24));
                let n = input.u64().unwrap_or(1);
                if let Ok(out) = journal::stamped(record.clone(), at, n) {
                    assert_eq!(out.len(), record.len());
                    assert_eq!(out.iter().position(|&b| b == b'\n'), Some(out.len() - 1));
                    let (from, to) = at.map_or((0, 0), |(a, w)| (a as usize, (a + w) as usize));
                    assert_eq!(out[..from], record[..from]);
                    assert_eq!(out[to..], record[to..]);
                    if to > from {
                        let field = std::str::from_utf8(&out[from..to]).unwrap();
                        assert_eq!(field.trim_start().parse::<u64>().ok(), Some(n));
                    }
                }
            }
            9 => {
                let text = |i: &mut Input| {
                    String::from_utf8_lossy(i.bytes().unwrap_or_default()).into_owned()
                };
                let (method, path) = (text(&mut input), text(&mut input));
                let mut fields = Vec::new();
                while input.byte().unwrap_or(0) % 2 == 1 {
                    fields.push((text(&mut input), input.bytes().unwrap_or_default().to_vec()));
                }
                let body = input.bytes().unwrap_or_default();
                if let Ok(req) =
                    upstream::request_bytes(upstream_grant(), &method, &path, &fields, body)
                {
                    let end = req.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    assert_eq!(&req[end..], body);
                    let head = &req[..end - 2];
                    let lines: Vec<&[u8]> = head
                        .split(|&b| b == b'\n')
                        .filter(|l| !l.is_empty())
                        .collect();
                    for l in &lines {
                        let l = l.strip_suffix(b"\r").expect("CRLF line ends");
                        assert!(!l.contains(&b'\r') && !l.contains(&0));
                    }
                    assert_eq!(lines[0].iter().filter(|&&b| b == b' ').count(), 2);
                    let count = |name: &[u8]| {
                        lines[1..]
                            .iter()
                            .filter(|l| {
                                l.len() > name.len() && l[..name.len()].eq_ignore_ascii_case(name)
                            })
                            .count()
                    };
                    assert_eq!(count(b"host:"), 1);
                    assert_eq!(count(b"connection:"), 1);
                    assert_eq!(count(b"transfer-encoding:"), 0);
                    assert!(count(b"content-length:") <= 1);
                }
            }
            10 => {
                // files.find: any needle, any limit, a file read back in pieces of any
                // size: every occurrence, left to right, none overlapping, at most `max`.
                let hay = input.bytes().unwrap_or_default();
                let needle = input.bytes().unwrap_or_default();
                let max = input.u64().unwrap_or(0) as u32 % 70_000;
                let piece = 1 + input.byte().unwrap_or(0) as usize;
                let found = search::find(hay.len() as u64, needle, max, |offset, len| {
                    let end = (offset as usize + len.min(piece)).min(hay.len());
                    Some(hay[offset as usize..end].to_vec())
                })
                .unwrap();
                let mut want = Vec::new();
                let mut at = 0;
                while !needle.is_empty()
                    && at + needle.len() <= hay.len()
                    && (want.len() as u32) < max
                {
                    if &hay[at..at + needle.len()] == needle {
                        want.push(at as u64);
                        at += needle.len();
                    } else {
                        at += 1;
                    }
                }
                assert_eq!(found, want);
            }
            _ => {
                assert_eq!(x.queued + handed, accepted, "queued and handed add up");
                let reply = x.whole();
                check_reply(&reply);
                handed += reply.len();
                assert_eq!(handed, accepted);
            }
        }
    }
    assert_eq!(x.queued + handed, accepted);
});
