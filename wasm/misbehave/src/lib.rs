//! A module that does what a module must not, one thing per path, so the tests can show
//! each is contained: the request fails with 500 (or a refusal) and one log line, and the
//! worker's other clients notice nothing.
//!
//! - `/panic`: panics (a trap, with the panic message on standard error)
//! - `/loop`: never returns
//! - `/oom`: allocates until its memory cap refuses
//! - `/escape`: asks for files outside its tree, by `..` and by symlink
//! - `/trap-late`: streams a line, then panics
//! - `/count`: how many calls this instance has answered (instances are reused between
//!   requests unless the mount says `reuse = false`; a failed call's instance is dropped)
//! - `/hold`: streams without end in big writes, so a client that does not read holds its
//!   instance busy while it spends next to no CPU
//! - `/head`, `/head-streamed`: answer (in one call, or head then body) with header fields
//!   that would split the response or are not fields at all, among good ones
//! - `/status`: answers with a status that is not three digits
//! - `/ok`: answers normally

use std::sync::atomic::{AtomicU64, Ordering};

use ramjet_module::{answer, files, flush, respond, write, Handler, Request};

/// Header fields a module must not get out, among two it may.
const HOSTILE: [(&str, &[u8]); 9] = [
    ("x-good", b"1"),
    ("x-split\r\nInjected", b"1"),
    ("x-value", b"a\r\nInjected: 1"),
    ("x-lf", b"a\nInjected: 2"),
    ("", b"nameless"),
    ("x-colon:", b"1"),
    ("x-nul", b"a\0b"),
    ("x space", b"1"),
    ("x-empty", b""),
];

struct Misbehave;

/// Calls this instance has answered.
static CALLS: AtomicU64 = AtomicU64::new(0);

impl Handler for Misbehave {
    fn handle(req: Request) {
        let rel = req
            .path
            .strip_prefix(req.mount().as_bytes())
            .unwrap_or(&req.path);
        let calls = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        match rel {
            b"count" => {
                respond(200, &[]);
                write(format!("{calls}\n").as_bytes());
            }
            b"panic" => panic!("asked to panic"),
            b"loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            b"oom" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            b"escape" => {
                let mut out = String::new();
                for path in [
                    "../secret",
                    "/../secret",
                    "link-out",
                    "sub/../../secret",
                    ".hidden",
                ] {
                    let r = files::send("www", path, 0, None);
                    out.push_str(&format!("{path}: {r:?}\n"));
                }
                out.push_str(&format!("other tree: {:?}\n", files::size("etc", "passwd")));
                respond(200, &[]);
                write(out.as_bytes());
            }
            b"hold" => {
                respond(200, &[]);
                flush();
                let piece = vec![b'x'; 1 << 20];
                loop {
                    write(&piece);
                }
            }
            b"trap-late" => {
                respond(200, &[]);
                write(b"a first line\n");
                flush();
                panic!("asked to fail mid-answer");
            }
            b"head" => answer(201, &HOSTILE, b"head\n"),
            b"head-streamed" => {
                respond(201, &HOSTILE);
                write(b"head\n");
            }
            b"status" => answer(7, &[], b"status\n"),
            _ => {
                respond(200, &[]);
                write(b"ok\n");
            }
        }
    }
}

ramjet_module::export!(Misbehave);
