//! WebAssembly modules: the example component (`wasm/hello`) mounted with `module =
//! "wasm"` answering GET, HEAD, POST, streams and granted files; the hostile one
//! (`wasm/misbehave`) failing only its own requests while the worker's other clients carry
//! on; option errors; a changed component picked up on reload; compiled code cached.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ramjet_testkit::Server;

use crate::modules::lines;

/// The guest components, built once per test run (`cargo build --release` in `wasm/`).
fn guests() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wasm");
        let target = root.join("target");
        let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--release", "--quiet", "--target-dir"])
            .arg(&target)
            .current_dir(&root)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET")
            .output()
            .expect("cargo runs");
        assert!(
            out.status.success(),
            "building the guest modules (needs `rustup target add wasm32-wasip2`): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        target.join("wasm32-wasip2/release")
    })
}

fn component(name: &str) -> String {
    guests().join(format!("{name}.wasm")).display().to_string()
}

/// `/w/`: the example (a budget that the long streams of a debug build stay within);
/// `/bad/`: the hostile module; `/` static files; one worker.
fn config(extra_bad: &str) -> String {
    format!(
        "workers = 1\n[[location]]\nroot = \"root\"\n\
         [[location]]\npath = \"/w/\"\nmodule = \"wasm\"\n[location.module_config]\n\
         component = {:?}\nfiles = {{ www = \"{{dir}}/root\" }}\nvars = {{ greeting = \"Hi\" }}\ncpu = \"60s\"\n\
         [[location]]\npath = \"/bad/\"\nmodule = \"wasm\"\n[location.module_config]\n\
         component = {:?}\nfiles = {{ www = \"{{dir}}/root\" }}\nmemory = \"16m\"\n{extra_bad}",
        component("hello"),
        component("misbehave"),
    )
}

fn server(files: &[(&str, &[u8])], extra_bad: &str) -> Server {
    crate::server_with(files, &config(extra_bad))
}

#[test]
fn the_example_module_answers_get_head_post_and_refuses_other_methods() {
    let s = server(&[("a.txt", b"static a")], "");
    let mut c = s.client();
    c.send(b"GET /w/x?y=1 HTTP/1.1\r\nHost: t\r\nCookie: a=b; name=bob\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.text(),
        "Hi, 127.0.0.1!\nmethod GET target /w/x?y=1 query y=1\ncookie name bob\nrequest 1 on this instance\n"
    );
    assert_eq!(
        r.header("content-length").unwrap(),
        r.body.len().to_string()
    );
    assert_eq!(r.header("cache-control").as_deref(), Some("no-store"));
    // The same instance answers the next request; the mount's store counts across them.
    c.send(b"GET /w/ HTTP/1.1\r\nHost: t\r\n\r\n");
    let t = c.response(false).text();
    assert!(t.contains("request 2 on this instance"), "{t}");
    assert!(
        !t.contains("bob"),
        "the last request's fields are gone: {t}"
    );
    for n in 1..=2 {
        c.send(b"GET /w/count HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(
            c.response(false).text(),
            format!("request {n} to this mount\n")
        );
    }
    // Header fields, asked for by the module.
    c.send(b"GET /w/headers HTTP/1.1\r\nHost: t\r\nUser-Agent: probe/1\r\nX-Empty:\r\n\r\n");
    assert_eq!(
        c.response(false).text(),
        "Host: t\nUser-Agent: probe/1\nX-Empty: \nagent probe/1\n"
    );
    // The next request on the same instance sees its own fields only.
    c.send(b"GET /w/headers HTTP/1.1\r\nHost: u\r\n\r\n");
    let t = c.response(false).text();
    assert!(t.starts_with("Host: u\nagent"), "{t}");
    assert!(!t.contains("probe"), "{t}");
    c.send(b"HEAD /w/ HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(true);
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());

    // POST, chunked and with a length; past the module's 1 MiB limit, 413.
    c.send(b"POST /w/ HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nline1\n\r\n3\r\nabc\r\n0\r\n\r\n");
    assert_eq!(c.response(false).text(), "9 bytes, first line \"line1\"\n");
    for len in [0usize, 1, 65_535, 65_536, 65_537, 1 << 20] {
        let body = crate::bytes(len, 7)
            .iter()
            .map(|b| b'a' + b % 26)
            .collect::<Vec<u8>>();
        c.send(format!("POST /w/ HTTP/1.1\r\nHost: t\r\nContent-Length: {len}\r\n\r\n").as_bytes());
        c.send(&body);
        let r = c.response(false);
        assert_eq!(r.status, 200, "{len}");
        assert!(
            r.text().starts_with(&format!("{len} bytes, ")),
            "{len}: {}",
            r.text()
        );
    }
    // Past the module's 1 MiB limit: 413, on a connection of its own (the server may
    // close it before the body is all sent).
    let mut big = s.client();
    big.send(
        format!(
            "POST /w/ HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
            (1 << 20) + 1
        )
        .as_bytes(),
    );
    let _ = std::io::Write::write_all(&mut big.stream, &vec![b'x'; (1 << 20) + 1]);
    assert_eq!(big.response(false).status, 413);
    c.send(b"DELETE /w/ HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow").as_deref(), Some("GET, HEAD, POST"));
    // The same connection goes on with static files.
    c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "static a");
    // HTTP/2 (h2c) through the same module.
    let (ok, body) = crate::curl(&["--http2-prior-knowledge", &s.url("/w/h2")]);
    assert!(ok && String::from_utf8_lossy(&body).contains("target /w/h2 "));
    s.assert_clean_log(&[]);
}

#[test]
fn a_module_streams_and_sends_granted_files_zero_copy() {
    let sizes = [0usize, 1, 4095, 4096, 4097, 300_000, 1 << 20];
    let files: Vec<(String, Vec<u8>)> = sizes
        .iter()
        .map(|&n| (format!("f{n}.bin"), crate::bytes(n, n as u64)))
        .collect();
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    let s = server(&refs, "");
    for (name, data) in &files {
        let (ok, body) = crate::curl(&[&s.url(&format!("/w/file/{name}"))]);
        assert!(ok, "{name}");
        let mut want = b"--- file ---\n".to_vec();
        want.extend_from_slice(data);
        want.extend_from_slice(b"--- end ---\n");
        assert!(body == want, "{name}: {} bytes", body.len());
    }
    assert_eq!(s.get("/w/file/nope").status, 404);
    // An instance keeps the files it sent open for a second: a file replaced in the tree
    // (a new inode) is sent anew within that, as the static handler's cache does.
    let path = s.dir.path().join("root/f1.bin");
    let tmp = s.dir.path().join("root/f1.new");
    std::fs::write(&tmp, b"replaced").unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body = s.get("/w/file/f1.bin").body;
        if body.windows(8).any(|w| w == b"replaced") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replaced file was never sent"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Streamed: chunked to HTTP/1.1, closed for HTTP/1.0, whole over h2c.
    let mut c = s.client();
    for n in [0u64, 1, 1000] {
        c.send(format!("GET /w/?lines={n} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        let r = c.response(false);
        assert_eq!(
            r.header("transfer-encoding").as_deref(),
            Some("chunked"),
            "{n}"
        );
        assert_eq!(r.text(), lines("Hi", n));
    }
    let mut c = s.client();
    c.send(b"GET /w/?lines=5 HTTP/1.0\r\n\r\n");
    assert_eq!(c.response(false).text(), lines("Hi", 5));
    let (ok, body) = crate::curl(&["--http2-prior-knowledge", &s.url("/w/?lines=20000")]);
    assert!(ok && body == lines("Hi", 20_000).into_bytes());

    // A client that stops reading holds the module back: memory stays flat.
    let before = s.status_kb("VmRSS").unwrap();
    let mut stalled = s.client();
    stalled.send(b"GET /w/?lines=5000000 HTTP/1.1\r\nHost: t\r\n\r\n");
    for _ in 0..20 {
        assert_eq!(s.get("/f1.bin").status, 200);
    }
    let after = s.status_kb("VmRSS").unwrap();
    assert!(after < before + 48 * 1024, "{before} KB, then {after} KB");
    drop(stalled);
    assert_eq!(s.get("/w/?lines=1").text(), lines("Hi", 1));
    s.assert_clean_log(&[]);
}

#[test]
fn misbehaving_modules_fail_their_own_request_and_nothing_else() {
    let s = server(
        &[("a.txt", b"static a"), (".hidden", b"h")],
        "cpu = \"300ms\"\n",
    );
    std::fs::write(s.dir.path().join("secret"), b"secret").unwrap();
    std::os::unix::fs::symlink(s.dir.path().join("secret"), s.root().join("link-out")).unwrap();
    let expect = [
        ("/bad/panic", "trapped: wasm trap: wasm `unreachable` instruction executed (it said: thread '<unnamed>'"),
        ("/bad/loop", "ran past its CPU budget (300 ms)"),
        ("/bad/oom", "reached its memory cap (16 MiB)"),
    ];
    let mut c = s.client();
    for (path, log) in expect {
        c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        let r = c.response(false);
        assert_eq!(r.status, 500, "{path}");
        assert!(
            s.wait_for_log(
                &format!("wasm module misbehave.wasm: {log}"),
                Duration::from_secs(10)
            ),
            "{path}: {:?}",
            s.stderr()
        );
        // The connection and the worker carry on.
        c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(c.response(false).text(), "static a");
        assert_eq!(s.get("/bad/ok").text(), "ok\n");
    }
    // Header fields that would split the response, or are not fields, never go out; the
    // rest do, in one call or head then body; a status that is not three digits is a 500.
    for path in ["/bad/head", "/bad/head-streamed"] {
        let r = s.get(path);
        assert_eq!((r.status, r.text().as_str()), (201, "head\n"), "{path}");
        assert_eq!(r.header("x-good").as_deref(), Some("1"), "{path}");
        assert_eq!(r.header("x-empty").as_deref(), Some(""), "{path}");
        let fields: Vec<&str> = r.head.lines().skip(1).collect();
        for gone in [
            "Injected", "nameless", "x-split", "x-value", "x-lf", "x-colon", "x-nul", "x space",
        ] {
            assert!(!r.head.contains(gone), "{gone} in {path}: {fields:?}");
        }
    }
    let r = s.get("/bad/status");
    assert_eq!((r.status, r.text().as_str()), (500, "status\n"));
    // Files outside the grant are refused, whatever the path.
    let t = s.get("/bad/escape").text();
    for line in [
        "../secret: Err(FileError { code: 1, name: \"not-found\"",
        "/../secret: Err(FileError { code: 1, name: \"not-found\"",
        "link-out: Err(FileError { code: 2, name: \"denied\"",
        "sub/../../secret: Err(FileError { code: 1, name: \"not-found\"",
        ".hidden: Err(FileError { code: 2, name: \"denied\"",
        "other tree: Err(FileError { code: 0, name: \"no-tree\"",
    ] {
        assert!(t.contains(line), "{line} in {t}");
    }
    assert!(!t.contains("secret\n--"));
    // A module failing after its answer began: the body ends without its last chunk.
    let mut c = s.client();
    c.send(b"GET /bad/trap-late HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut all = Vec::new();
    let _ = std::io::Read::read_to_end(&mut c.stream, &mut all);
    let text = String::from_utf8_lossy(&all);
    assert!(text.contains("a first line\n"), "{text}");
    assert!(!text.ends_with("0\r\n\r\n"), "no end of body: {text}");
    assert!(s.wait_for_log("after its answer began", Duration::from_secs(10)));
    assert_eq!(s.get("/w/").status, 200);
    s.assert_clean_log(&["wasm module misbehave.wasm"]);
}

#[test]
fn instances_are_reused_until_one_fails_or_the_mount_says_not_to() {
    let s = server(&[], "");
    // One connection, one request at a time: the worker's one idle instance each time.
    let mut c = s.client();
    let count = |c: &mut ramjet_testkit::Client| {
        c.send(b"GET /bad/count HTTP/1.1\r\nHost: t\r\n\r\n");
        c.response(false).text()
    };
    assert_eq!(count(&mut c), "1\n");
    assert_eq!(count(&mut c), "2\n");
    c.send(b"GET /bad/panic HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).status, 500);
    // The instance that trapped is gone: a fresh one counts from 1 (the panic's call was
    // that instance's third).
    assert_eq!(count(&mut c), "1\n");
    assert_eq!(count(&mut c), "2\n");

    let s = server(&[], "reuse = false\n");
    let mut c = s.client();
    for _ in 0..3 {
        assert_eq!(count(&mut c), "1\n");
    }
}

/// A server whose process may have two instances alive at once.
fn two_instances() -> Server {
    Server::start_with_env(
        crate::BIN,
        Server::dir(),
        &config(""),
        &[("RAMJET_WASM_INSTANCES", "2")],
    )
}

/// `/bad/hold` writes 1 MiB pieces without end. A client that stops reading holds the
/// module back (its `write` waits while more than 64 KiB is queued, and a parked module
/// is not run until the client takes what is queued), not the server's memory; reading
/// again, the module goes on.
#[test]
fn a_streaming_module_waits_for_a_client_that_stops_reading() {
    use std::io::{Read, Write};
    let s = server(&[("a.txt", b"static a")], "");
    let before = s.status_kb("VmRSS").unwrap();
    let mut stalled = std::net::TcpStream::connect(s.addr).unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stalled
        .write_all(b"GET /bad/hold HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut head = [0u8; 12];
    stalled.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    // Unread, the stream stays parked while the worker answers others.
    for _ in 0..20 {
        assert_eq!(s.get("/a.txt").text(), "static a");
        assert_eq!(s.get("/w/").status, 200);
    }
    let after = s.status_kb("VmRSS").unwrap();
    assert!(
        after < before + 64 * 1024,
        "resident {before} KB before, {after} KB with a stalled stream"
    );
    // Read again: 32 MiB more come (the module was waiting, not stopped).
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0;
    while got < 32 << 20 {
        let n = stalled.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended after {got} bytes");
        got += n;
    }
    drop(stalled);
    assert_eq!(s.get("/bad/ok").text(), "ok\n");
}

/// A `GET /w/` sent while every instance is busy: not answered (with a 503) within 300 ms,
/// it waits for room. Its stream is given back to read the answer from.
fn waiting_for_room(s: &Server) -> std::net::TcpStream {
    let mut waiting = std::net::TcpStream::connect(s.addr).unwrap();
    std::io::Write::write_all(&mut waiting, b"GET /w/ HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    waiting
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let early = waiting.peek(&mut [0u8; 1]);
    assert!(
        early.as_ref().is_err_and(|e| matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )),
        "answered while every instance was busy: {early:?}"
    );
    waiting
}

/// With every instance the process may have busy (`RAMJET_WASM_INSTANCES=2`, two clients
/// holding endless streamed answers they do not read), another request waits for room rather than
/// failing, and is answered once one of them lets go.
#[test]
fn a_burst_past_the_instance_limit_waits_for_room_instead_of_failing() {
    let s = two_instances();
    let mut stalled: Vec<_> = (0..2)
        .map(|_| {
            let mut c = s.client();
            c.send(b"GET /bad/hold HTTP/1.1\r\nHost: t\r\n\r\n");
            // The head came: its instance is busy streaming, and stays so unread.
            assert_eq!(c.response(true).status, 200);
            c
        })
        .collect();
    let waiting = waiting_for_room(&s);
    drop(stalled.pop());
    let r = ramjet_testkit::Client::from_stream(waiting).response(false);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().starts_with("Hi, 127.0.0.1!"), "{}", r.text());
    // And again, on the instance it left idle.
    assert_eq!(s.get("/w/").status, 200);
    drop(stalled);
    // A client gone mid-answer is logged as such; nothing else.
    s.assert_clean_log(&["misbehave.wasm"]);
}

#[test]
fn an_instance_let_go_while_a_request_waits_for_room_goes_to_that_request() {
    // Two instances in all (one may be kept idle). One streams to a client that does not
    // read; one waits for the rest of a POST body. A GET of the same mount finds no room
    // and waits; when the POST ends, its instance is kept idle, holding its room: the
    // waiting GET must take it (before, it waited out the 10 s and was answered 503).
    let s = two_instances();
    let mut stalled = s.client();
    stalled.send(
        b"GET /bad/hold HTTP/1.1
Host: t

",
    );
    assert_eq!(stalled.response(true).status, 200);
    let mut posting = s.client();
    posting.send(
        b"POST /w/ HTTP/1.1
Host: t
Content-Length: 6

fir",
    );
    let waiting = waiting_for_room(&s);
    posting.send(b"st\n");
    let posted = posting.response(false);
    assert_eq!(posted.status, 200, "{}", posted.text());
    waiting
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let r = ramjet_testkit::Client::from_stream(waiting).response(false);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().starts_with("Hi, 127.0.0.1!"), "{}", r.text());
    drop(stalled);
    s.assert_clean_log(&["misbehave.wasm"]);
}

/// The context switches of the server's epoch clock thread so far.
fn clock_switches(s: &Server) -> u64 {
    let tasks = format!("/proc/{}/task", s.pid());
    for t in std::fs::read_dir(&tasks).unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() == "wasm-epoch" {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap();
            return status
                .lines()
                .filter(|l| l.contains("ctxt_switches"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum();
        }
    }
    panic!("no wasm-epoch thread");
}

/// The epoch clock ticks (every 2 ms) only while a module runs: an idle server's clock
/// thread sleeps, and wakes for the next module that runs (which still yields and keeps
/// its budget: the looping module's test).
#[test]
fn the_epoch_clock_sleeps_while_no_module_runs() {
    let s = server(&[], "");
    assert_eq!(s.get("/w/").status, 200);
    // It keeps ticking a while after the last module (IDLE_TICKS, 200 ms), then parks: a
    // window in which a clock that never slept would tick about 150 times sees at most 3
    // wake-ups, within a deadline.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut before, mut idle);
    loop {
        before = clock_switches(&s);
        std::thread::sleep(Duration::from_millis(300));
        idle = clock_switches(&s) - before;
        if idle <= 3 || Instant::now() > deadline {
            break;
        }
    }
    assert!(idle <= 3, "{idle} wake-ups of an idle clock in 300 ms");
    let parked = clock_switches(&s);
    assert_eq!(s.get("/w/").status, 200);
    // Woken by the next module: it ticks again (its deadlines need it).
    let deadline = Instant::now() + Duration::from_secs(5);
    while clock_switches(&s) < parked + 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        clock_switches(&s) >= parked + 10,
        "the clock did not wake for a module"
    );
}

#[test]
fn a_module_that_loops_does_not_stall_the_worker() {
    // One worker, a module looping for its whole 3 s budget; meanwhile another client
    // fetches static files on the same worker. Without the module yielding every epoch
    // tick, each of those would wait for the full budget.
    let s = server(&[("a.txt", b"static a")], "cpu = \"3s\"\n");
    let addr = s.addr;
    let looping = std::thread::spawn(move || {
        let mut c = ramjet_testkit::Client::connect(addr);
        c.send(b"GET /bad/loop HTTP/1.1\r\nHost: t\r\n\r\n");
        c.response(false).status
    });
    let start = Instant::now();
    let mut worst = Duration::ZERO;
    let mut times = Vec::new();
    while !looping.is_finished() && start.elapsed() < Duration::from_secs(20) {
        let t = Instant::now();
        assert_eq!(s.get("/a.txt").text(), "static a");
        let took = t.elapsed();
        worst = worst.max(took);
        times.push(took);
    }
    assert_eq!(looping.join().unwrap(), 500);
    times.sort();
    let p99 = times[(times.len() * 99 / 100).min(times.len() - 1)];
    eprintln!(
        "{} static requests during a 3 s loop: p99 {p99:?}, worst {worst:?}",
        times.len()
    );
    assert!(times.len() > 10, "only {} requests answered", times.len());
    assert!(
        worst < Duration::from_millis(1500),
        "a request waited {worst:?}"
    );
    assert!(s.wait_for_log("ran past its CPU budget (3000 ms)", Duration::from_secs(5)));
}

#[test]
fn wasm_options_are_checked_at_load_with_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"not wasm at all").unwrap();
    // A valid core module, not a component.
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let check = |module_config: &str| {
        let f = dir.path().join("m.toml");
        let text = format!(
            "listen = [\"127.0.0.1:0\"]\n[[location]]\nroot = \"www\"\n[[location]]\npath = \"/m/\"\nmodule = \"wasm\"\n[location.module_config]\n{module_config}"
        );
        std::fs::write(&f, text).unwrap();
        let out = Command::new(crate::BIN)
            .arg("check-config")
            .arg(&f)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let hello = component("hello");
    let (code, err) = check(&format!("component = {hello:?}\n"));
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = check("component = \"/nope.wasm\"\n");
    assert_eq!(code, Some(2));
    assert!(
        err.contains("m.toml:7")
            && err.contains("module_config.component")
            && err.contains("/nope.wasm: no such file"),
        "{err}"
    );
    let (_, err) = check(&format!(
        "component = {:?}\n",
        garbage.display().to_string()
    ));
    assert!(
        err.contains("module_config.component") && err.contains("garbage.wasm"),
        "{err}"
    );
    let (_, err) = check(&format!("component = {:?}\n", core.display().to_string()));
    assert!(
        err.contains("module_config.component") && err.contains("core.wasm"),
        "{err}"
    );
    let (_, err) = check(&format!("component = {hello:?}\nmemory = \"1k\"\n"));
    assert!(
        err.contains("module_config.memory") && err.contains("64k to 4g"),
        "{err}"
    );
    let (_, err) = check(&format!(
        "component = {hello:?}\nfiles = {{ www = \"/nonexistent\" }}\n"
    ));
    assert!(err.contains("module_config.files.www"), "{err}");
    let (_, err) = check(&format!("component = {hello:?}\ncolour = 3\n"));
    assert!(
        err.contains("module_config.colour") && err.contains("unknown field"),
        "{err}"
    );
}

#[test]
fn a_changed_module_is_picked_up_on_reload_and_compiled_code_is_cached() {
    let dir = Server::dir();
    let cache = dir.path().join("cache");
    let wasm = dir.path().join("m.wasm");
    std::fs::copy(component("hello"), &wasm).unwrap();
    let text = format!(
        "workers = 1\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/m/\"\nmodule = \"wasm\"\n[location.module_config]\ncomponent = {:?}\n",
        wasm.display().to_string()
    );
    let cache_env = cache.display().to_string();
    let s = Server::start_with_env(crate::BIN, dir, &text, &[("RAMJET_WASM_CACHE", &cache_env)]);
    assert!(s.get("/m/ok").text().starts_with("Hello, "));
    let cached = crate::poll_until(|| {
        let n = files_under(&cache).len();
        (n > 0).then_some(n)
    });
    assert!(cached > 0);
    // Replace the file under the running server, then reload: the new module answers, and
    // the connection kept open across the reload goes on.
    let mut c = s.client();
    c.send(b"GET /m/ok HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(c.response(false).text().starts_with("Hello, "));
    std::fs::copy(component("misbehave"), &wasm).unwrap();
    s.signal(libc::SIGHUP);
    assert!(s.wait_for_log("configuration reloaded", Duration::from_secs(20)));
    crate::poll_until(|| (s.get("/m/ok").text() == "ok\n").then_some(()));
    c.send(b"GET /m/ok HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "ok\n");
    s.assert_clean_log(&[]);
}

/// wasmtime's cache would recompress an entry at zstd level 20 on a thread of the server
/// once it had been loaded 256 times: CPU spent beside the workers at some start. The
/// cache's single worker thread handles the two mounts' loads one after the other, so once
/// both entries' use counts have moved, the first one's recompression (if any) is over.
#[test]
fn cached_modules_loaded_many_times_are_not_recompressed_by_the_server() {
    let dir = Server::dir();
    let cache = dir.path().join("cache");
    let cache_env = cache.display().to_string();
    let text = format!(
        "workers = 1\n[[location]]\nroot = \"root\"\n\
         [[location]]\npath = \"/a/\"\nmodule = \"wasm\"\n[location.module_config]\ncomponent = {:?}\n\
         [[location]]\npath = \"/b/\"\nmodule = \"wasm\"\n[location.module_config]\ncomponent = {:?}\n",
        component("hello"),
        component("misbehave"),
    );
    let mut s =
        Server::start_with_env(crate::BIN, dir, &text, &[("RAMJET_WASM_CACHE", &cache_env)]);
    assert!(s.get("/a/ok").text().starts_with("Hello, "));
    let stats = crate::poll_until(|| {
        let found: Vec<PathBuf> = files_under(&cache)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|x| x == "stats"))
            .collect();
        (found.len() == 2).then_some(found)
    });
    s.stop();
    // Both entries as if loaded 100,000 times at the baseline level.
    for path in &stats {
        std::fs::write(path, "usages = 100000\noptimized-compression = 3\n").unwrap();
    }
    let entries: Vec<Vec<u8>> = stats
        .iter()
        .map(|p| std::fs::read(p.with_extension("")).unwrap())
        .collect();
    let again = Server::start_with_env(
        crate::BIN,
        Server::dir(),
        &text,
        &[("RAMJET_WASM_CACHE", &cache_env)],
    );
    assert!(again.get("/a/ok").text().starts_with("Hello, "));
    let seen = crate::poll_until(|| {
        let seen: Vec<String> = stats
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect();
        seen.iter()
            .all(|t| t.contains("usages = 100001"))
            .then_some(seen)
    });
    for (t, (path, before)) in seen.iter().zip(stats.iter().zip(&entries)) {
        assert!(
            t.contains("optimized-compression = 3"),
            "{}: {t}",
            path.display()
        );
        let after = std::fs::read(path.with_extension("")).unwrap();
        assert!(after == *before, "{} was rewritten", path.display());
    }
}

/// Files under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = e.path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// The example mounted on a server started under `ulimit -v KB`.
fn serve_limited(kb: u64) -> Server {
    let config = format!(
        "workers = 1\n[[location]]\npath = \"/w/\"\nmodule = \"wasm\"\n[location.module_config]\ncomponent = {:?}\n",
        component("hello")
    );
    let limit = format!("ulimit -v {kb} && exec \"$@\"");
    Server::start_under(
        &["sh", "-c", &limit, "sh"],
        crate::BIN,
        Server::dir(),
        &config,
        &[],
    )
}

#[test]
fn without_room_for_the_pool_instances_are_mapped_on_demand_and_without_any_503() {
    // 16 GiB of address space: no room for the pool (terabytes reserved), room for an
    // instance made on demand.
    let s = serve_limited(16 << 20);
    assert!(
        s.wait_for_log("no pooling allocator", Duration::from_secs(10)),
        "{:?}",
        s.stderr()
    );
    let mut c = s.client();
    c.send(b"GET /w/ HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).status, 200);
    drop(s);
    // Under 4 GiB not even one instance's memory fits: 503 with Retry-After, not a 500
    // that blames the module.
    let s = serve_limited(4_000_000);
    let mut c = s.client();
    c.send(b"GET /w/ HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after").as_deref(), Some("1"));
}

/// The native SPECweb99 module on `/specweb99` and the WebAssembly one
/// (`wasm/specweb99`) on `/wasm99`, over the same file set, each with its own post log;
/// two workers, so the journal's numbering is shared across them.
fn specweb_pair() -> Server {
    let set = crate::specweb::shared_file_set().display().to_string();
    let dir = Server::dir();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    Server::start(
        crate::BIN,
        dir,
        &format!(
            "workers = 2\n[[location]]\nroot = {set:?}\n\
             [[location]]\npath = \"/specweb99\"\nmodule = \"specweb99\"\n[location.module_config]\n\
             root = {set:?}\ndata_dir = \"{{dir}}/data\"\n\
             [[location]]\npath = \"/wasm99\"\nmodule = \"wasm\"\n[location.module_config]\n\
             component = {:?}\nfiles = {{ set = {set:?} }}\n\
             journals = {{ posts = \"{{dir}}/posts\" }}\nvars = {{ server_software = \"ramjet\" }}\n",
            component("specweb99"),
        ),
    )
}

/// The WebAssembly SPECweb99 module answers every kind of request byte for byte as the
/// native one does (but the script name): standard GETs of each class, CADs for known,
/// unknown and edge users, POSTs, objects outside the set, commands; and both post logs
/// hold the same records.
#[test]
fn the_specweb99_component_answers_as_the_native_module() {
    use crate::specweb::ask;
    use ramjet_specweb::fileset::file_name;
    use ramjet_specweb::postlog;

    let s = specweb_pair();
    let (native, wasm) = ("/specweb99", "/wasm99");
    // Before any Reset, a CAD finds no tables in either.
    let early = "GET {}?/file_set/dir00001/class1_1 HTTP/1.1\r\nCookie: my_cookie=user_id=10003&last_ad=5\r\n";
    let (m, w) = (
        ask(&s, &early.replace("{}", native), ""),
        ask(&s, &early.replace("{}", wasm), ""),
    );
    assert_eq!((m.0, &m.1), (w.0, &w.1));
    let reset = "?command/Reset&maxload=40&pttime=100&maxthread=30&exp=5,105&urlroot=/file_set/";
    for script in [native, wasm] {
        let (status, _, _) = ask(&s, &format!("GET {script}{reset} HTTP/1.1\r\n"), "");
        assert_eq!(status, 200, "{script}");
    }
    let mut heads = crate::specweb::object_requests("a=b; ");
    for (head, body) in [
        ("GET {}?/file_set/dir99999/class0_0 HTTP/1.1\r\n", ""),
        ("GET {}?/etc/passwd HTTP/1.1\r\n", ""),
        ("GET {}?command/Finish HTTP/1.1\r\n", ""),
        ("GET {}?command/Nope HTTP/1.1\r\n", ""),
        ("POST {} HTTP/1.1\r\n", "dir=1"),
        (
            "POST {} HTTP/1.1\r\n",
            "num=1&client=4&urlroot=/x/&class=1&dir=00001",
        ),
        ("DELETE {} HTTP/1.1\r\n", ""),
    ] {
        heads.push((head.to_string(), body.to_string()));
    }
    for (head, body) in &heads {
        let m = ask(&s, &head.replace("{}", native), body);
        let w = ask(&s, &head.replace("{}", wasm), body);
        assert_eq!(m.0, w.0, "{head}");
        if m.0 == 200 {
            assert_eq!(m.1, w.1, "{head}");
            assert!(m.2 == w.2, "{head}: bodies differ");
        }
    }
    // HEAD: the same head, no body (the length differs by the script names' lengths).
    let q = format!("/{}", file_name(3, 1, 4));
    let head = |script: &str| {
        let mut c = s.client();
        c.send(format!("HEAD {script}?{q} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        let r = c.response(true);
        assert!(r.body.is_empty());
        let len: usize = r.header("content-length").unwrap().parse().unwrap();
        (r.status, len - script.len())
    };
    assert_eq!(head(native), head(wasm));
    let fetch = |script: &str| crate::specweb::post_log(&s, script);
    let (m, w) = (fetch(native), fetch(wasm));
    assert_eq!(w.0, "4");
    assert_eq!(m, w);
    // The records are on disk, numbered from 1, in the journal.
    let journal = std::fs::read_to_string(s.path("posts")).unwrap();
    let numbers: Vec<u64> = journal
        .lines()
        .map(|l| postlog::parse_record(l.as_bytes()).unwrap().recno)
        .collect();
    assert_eq!(numbers, [1, 2, 3, 4]);
    // A Reset empties it.
    let (status, _, _) = ask(&s, &format!("GET {wasm}{reset} HTTP/1.1\r\n"), "");
    assert_eq!(status, 200);
    assert_eq!(fetch(wasm).0, "0");
    assert!(std::fs::read(s.path("posts")).unwrap().is_empty());
}

/// `ramjet specweb run` gives a valid run against the WebAssembly module, every POST in
/// its post log.
#[test]
fn the_specweb_client_gives_a_valid_run_against_the_component() {
    let s = specweb_pair();
    let r = crate::specweb::run_client(&s, &["-c", "4", "--run", "6s", "--dynamic", "/wasm99"]);
    let m = &r["median"];
    assert_eq!(r["valid"], true, "{:#}", m);
    for row in m["ops_by_type"].as_array().unwrap() {
        assert_eq!(row["errors"], 0, "{:#}", m);
    }
    assert_eq!(m["posts_sent"], m["post_log_records"]);
    assert!(m["posts_sent"].as_u64().unwrap() > 0, "{:#}", m);
}

/// A module's HTTP requests go only to the upstreams its location grants, by name: an
/// answer by length or chunked comes back whole, with the host's `Host` and framing on the
/// request whatever the module put there; a backend that is down, cuts its answer, answers
/// with ambiguous framing, is too slow or sends too much is a named error the module turns
/// into its own 502, and the worker carries on.
#[test]
fn a_module_asks_only_its_granted_upstreams_and_each_failure_is_named() {
    use ramjet_testkit::{Backend, Flow};
    let backend = Backend::start(|x| {
        match x.target() {
            "/hi?x=1" => {
                let host = x.header("host").unwrap_or_default();
                let agent = x.header("user-agent").unwrap_or_default();
                x.ok(format!("hi via {host} for {agent}").as_bytes());
            }
            "/chunked" => x.write(
                b"HTTP/1.1 201 Created\r\nContent-Type: text/x-test\r\nTransfer-Encoding: chunked\r\n\r\n\
                  3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n",
            ),
            "/ambiguous" => x.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc",
            ),
            "/cut" => x.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"),
            "/big" => x.ok(&vec![b'x'; (1 << 20) + 1]),
            "/slow" => {
                std::thread::sleep(Duration::from_secs(3));
                x.ok(b"late");
            }
            _ => x.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"),
        }
        Flow::Close
    });
    // A port nothing listens on.
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let s = crate::server_with(
        &[],
        &format!(
            "workers = 1\n\
             [[location]]\npath = \"/w/\"\nmodule = \"wasm\"\n[location.module_config]\n\
             component = {c:?}\nupstreams = {{ api = \"http://{}\" }}\nupstream_timeout = \"1s\"\n\
             [[location]]\npath = \"/down/\"\nmodule = \"wasm\"\n[location.module_config]\n\
             component = {c:?}\nupstreams = {{ api = \"{down}\" }}\n\
             [[location]]\npath = \"/none/\"\nmodule = \"wasm\"\n[location.module_config]\n\
             component = {c:?}\n",
            backend.addr,
            c = component("hello"),
        ),
    );
    let mut c = s.client();
    c.send(b"GET /w/upstream/hi?x=1 HTTP/1.1\r\nHost: t\r\nUser-Agent: probe\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), format!("hi via {} for probe", backend.addr));
    let r = s.get("/w/upstream/chunked");
    assert_eq!((r.status, r.text().as_str()), (201, "abcdefg"));
    assert_eq!(r.header("content-type").as_deref(), Some("text/x-test"));
    assert_eq!(s.get("/w/upstream/nope").status, 404);
    for (path, error) in [
        ("/w/upstream/ambiguous", "bad-response"),
        ("/w/upstream/cut", "unreachable"),
        ("/w/upstream/big", "too-large"),
        ("/w/upstream/slow", "timeout"),
        ("/down/upstream/hi", "unreachable"),
        ("/none/upstream/hi", "no-upstream"),
    ] {
        let r = s.get(path);
        assert_eq!(
            (r.status, r.text()),
            (502, format!("upstream: {error}\n")),
            "{path}"
        );
    }
    // Every request the backend saw came from the host's own request line and fields.
    for head in backend.heads() {
        assert!(head.contains("\r\nConnection: close\r\n"), "{head}");
        assert_eq!(head.matches("Host:").count(), 1, "{head}");
    }
    assert_eq!(s.get("/w/").status, 200);
}

/// A granted upstream may name one of the configuration's `[upstream.NAME]` groups, as
/// nginx's `proxy_pass http://app` names an upstream block: the module's requests go to its
/// servers in turn, over TCP or a Unix socket, on to the next past one that is down, with
/// `Host: app`.
#[test]
fn a_module_may_ask_a_configured_upstream_group_in_turn_past_a_server_that_is_down() {
    use ramjet_testkit::{Backend, Flow};
    use std::io::{Read, Write};
    let backend = Backend::start(|x| {
        let host = x.header("host").unwrap_or_default();
        x.ok(format!("tcp {host}").as_bytes());
        Flow::Close
    });
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("app.sock");
    let unix = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        for mut c in unix.incoming().flatten() {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && c.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let host = String::from_utf8_lossy(&head)
                .lines()
                .find_map(|l| l.strip_prefix("Host: ").map(str::to_string))
                .unwrap_or_default();
            let body = format!("unix {host}");
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let s = crate::server_with(
        &[],
        &format!(
            "workers = 1\n\
             [upstream.app]\nservers = [\"{down}\", \"{}\", \"unix:{}\"]\n\
             [[location]]\npath = \"/w/\"\nmodule = \"wasm\"\n[location.module_config]\n\
             component = {c:?}\nupstreams = {{ api = \"app\" }}\nupstream_timeout = \"5s\"\n",
            backend.addr,
            sock.display(),
            c = component("hello"),
        ),
    );
    // In turn: the server that is down (on to the next), the TCP one, the Unix one.
    let answers: Vec<String> = (0..6)
        .map(|_| {
            let r = s.get("/w/upstream/hi");
            assert_eq!(r.status, 200, "{}", r.text());
            r.text()
        })
        .collect();
    assert_eq!(
        answers,
        ["tcp app", "tcp app", "unix app", "tcp app", "tcp app", "unix app"]
    );
}
