//! Read-only anonymous FTP from the same tree (issue 28): real clients (lftp mirror, wget
//! -m, curl list and resume, Python ftplib with MLSD) over IPv4 and IPv6, and the protocol's
//! edges with a raw client: login order, paths that stay in the tree, refused writes and
//! active mode, bad lines, port theft, ABOR, timeouts, limits, a graceful stop that lets a
//! transfer finish.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use ramjet_testkit::Server;

use crate::{bytes, poll_until, server_with};

const FTP_LISTEN: &str =
    "listen = [\"127.0.0.1:0\", { address = \"127.0.0.1:0\", protocol = \"ftp\" }, \
     { address = \"[::1]:0\", protocol = \"ftp\" }]\n";

/// A server with HTTP and FTP listeners over `files`, `extra` added to its configuration.
fn ftp_server(files: &[(&str, &[u8])], extra: &str) -> Server {
    server_with(
        files,
        &format!("{FTP_LISTEN}[log]\naccess = \"{{dir}}/access.log\"\n{extra}\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/metrics\"\nhandlers = [\"metrics\"]\n[[location]]\npath = \"/status\"\nhandlers = [\"status\"]\n"),
    )
}

fn ftp_addr(s: &Server) -> SocketAddr {
    s.ftp_addr.expect("an FTP listener")
}

/// The IPv6 FTP listener (the second "listening on ftp://" line).
fn ftp_addr_v6(s: &Server) -> SocketAddr {
    let lines = s.stderr();
    let url = lines
        .iter()
        .filter_map(|l| l.split("listening on ftp://").nth(1))
        .find(|rest| rest.starts_with('['))
        .expect("an IPv6 FTP listener");
    url.split(' ').next().unwrap().parse().unwrap()
}

/// A raw control connection.
struct Ftp {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Ftp {
    fn connect(addr: SocketAddr) -> (Ftp, u16) {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut ftp = Ftp {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        };
        let (code, _) = ftp.reply();
        (ftp, code)
    }

    fn logged_in(addr: SocketAddr) -> Ftp {
        let (mut ftp, code) = Ftp::connect(addr);
        assert_eq!(code, 220);
        assert_eq!(ftp.cmd("USER anonymous").0, 331);
        assert_eq!(ftp.cmd("PASS guest@").0, 230);
        ftp
    }

    /// One reply (all its lines): its code and text.
    fn reply(&mut self) -> (u16, String) {
        let mut text = String::new();
        let mut first = String::new();
        self.reader.read_line(&mut first).unwrap();
        assert!(first.len() >= 4, "a reply line: {first:?}");
        text.push_str(&first);
        let code: u16 = first[..3].parse().unwrap();
        if first.as_bytes()[3] == b'-' {
            let end = format!("{code} ");
            loop {
                let mut line = String::new();
                assert!(self.reader.read_line(&mut line).unwrap() > 0, "reply cut");
                text.push_str(&line);
                if line.starts_with(&end) {
                    break;
                }
            }
        }
        (code, text)
    }

    fn send(&mut self, raw: &[u8]) {
        self.writer.write_all(raw).unwrap();
    }

    fn cmd(&mut self, line: &str) -> (u16, String) {
        self.send(format!("{line}\r\n").as_bytes());
        self.reply()
    }

    /// EPSV: the data address.
    fn epsv(&mut self) -> SocketAddr {
        let (code, text) = self.cmd("EPSV");
        assert_eq!(code, 229, "{text}");
        let port: u16 = text
            .split("|||")
            .nth(1)
            .unwrap()
            .split('|')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        SocketAddr::new(self.writer.peer_addr().unwrap().ip(), port)
    }

    /// A whole transfer of `command`: the bytes and the final reply's code.
    fn fetch(&mut self, command: &str) -> (Vec<u8>, u16) {
        let data = self.epsv();
        let (code, text) = self.cmd(command);
        if code != 150 {
            return (Vec::new(), code);
        }
        assert!(text.contains("Opening"), "{text}");
        let mut got = Vec::new();
        TcpStream::connect(data)
            .unwrap()
            .read_to_end(&mut got)
            .unwrap();
        (got, self.reply().0)
    }

    /// Whether the server closed the control connection.
    fn closed(&mut self) -> bool {
        let mut rest = String::new();
        matches!(self.reader.read_line(&mut rest), Ok(0) | Err(_))
    }
}

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn sha256(path: &std::path::Path) -> String {
    let out = run(Command::new("sha256sum").arg(path));
    String::from_utf8_lossy(&out.stdout)
        .split(' ')
        .next()
        .unwrap()
        .to_string()
}

/// Every regular file under `dir`, relative, sorted.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                out.push(e.path().strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// Names a mirror must carry through unchanged.
const HOSTILE: [&str; 8] = [
    "with space.txt",
    " leading space",
    "-dash",
    "quote\"and'apostrophe",
    "percent%20and#hash",
    "ünïcødé ファイル",
    "semi;colon=equals",
    "back\\slash*star?",
];

fn hostile_tree(s: &Server) {
    let root = s.root();
    for (i, name) in HOSTILE.iter().enumerate() {
        std::fs::write(root.join(name), bytes(1000 + i * 37, i as u64)).unwrap();
    }
    std::fs::create_dir_all(root.join("a/b/c/d")).unwrap();
    std::fs::write(root.join("a/b/c/d/deep.bin"), bytes(300_000, 9)).unwrap();
    std::fs::create_dir_all(root.join("empty dir")).unwrap();
    std::fs::write(root.join("a/empty"), b"").unwrap();
    std::fs::write(root.join("a/b/one"), b"1").unwrap();
    // A sparse 5 GiB file with data in the middle and at the end.
    let f = std::fs::File::create(root.join("a/sparse.img")).unwrap();
    f.set_len(5 << 30).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"middle", 3 << 30).unwrap();
    f.write_all_at(b"end!", (5 << 30) - 4).unwrap();
}

/// Free bytes where `path` lives.
fn free_bytes(path: &std::path::Path) -> u64 {
    let out = run(Command::new("df").args(["-B1", "--output=avail"]).arg(path));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0)
}

/// lftp's `mirror` of a tree with hostile names, empty files and directories, nesting and
/// a sparse 5 GiB file: every file identical by sha256 (the sparse one streamed through
/// `lftp cat` instead when the disk has no room for a 5 GiB copy).
#[test]
fn lftp_mirrors_a_hostile_tree_identically() {
    let s = ftp_server(&[], "");
    hostile_tree(&s);
    let out = s.dir.path().join("mirror");
    let room = free_bytes(s.dir.path()) > 8 << 30;
    let exclude = if room {
        ""
    } else {
        "--exclude-glob sparse.img "
    };
    run(Command::new("lftp").arg("-c").arg(format!(
        "set cmd:fail-exit yes; set net:max-retries 1; set net:timeout 30; \
         open ftp://{}; mirror {exclude}/ {}",
        ftp_addr(&s),
        out.display()
    )));
    let want = files_under(&s.root());
    let mut got = files_under(&out);
    if !room {
        got.push("a/sparse.img".into());
        got.sort();
    }
    assert_eq!(got, want);
    for rel in &want {
        if rel.ends_with("sparse.img") && !room {
            let cat = run(Command::new("sh").arg("-c").arg(format!(
                "lftp -c 'open ftp://{}; cat /a/sparse.img' | sha256sum",
                ftp_addr(&s)
            )));
            let streamed = String::from_utf8_lossy(&cat.stdout);
            assert!(streamed.starts_with(&sha256(&s.root().join(rel))));
            continue;
        }
        assert_eq!(
            sha256(&out.join(rel)),
            sha256(&s.root().join(rel)),
            "{}",
            rel.display()
        );
    }
    assert!(out.join("empty dir").is_dir(), "empty directories come too");
    // One log line per transfer, with the file's path.
    let log = poll_until(|| {
        let log = std::fs::read_to_string(s.dir.path().join("access.log")).unwrap_or_default();
        log.contains("\"RETR /a/b/c/d/deep.bin\" 226 300000")
            .then_some(log)
    });
    if room {
        assert!(
            log.contains("\"RETR /a/sparse.img\" 226 5368709120"),
            "{log}"
        );
    }
}

/// wget -m over FTP: the tree, hidden files left out as HTTP's listings leave them out.
#[test]
fn wget_mirrors_over_ftp() {
    let s = ftp_server(
        &[
            ("top.txt", b"top\n"),
            ("d/e/deep.txt", b"deep\n"),
            (".hidden", b"not listed\n"),
        ],
        "",
    );
    let out = s.dir.path().join("wget");
    std::fs::create_dir(&out).unwrap();
    run(Command::new("wget")
        .args([
            "-q",
            "-m",
            "-nH",
            "--no-remove-listing",
            "-t",
            "1",
            "-T",
            "20",
        ])
        .arg(format!("ftp://{}/", ftp_addr(&s)))
        .current_dir(&out));
    assert_eq!(std::fs::read(out.join("top.txt")).unwrap(), b"top\n");
    assert_eq!(std::fs::read(out.join("d/e/deep.txt")).unwrap(), b"deep\n");
    assert!(!out.join(".hidden").exists());
}

/// curl: a listing, a names-only listing, a download resumed with `-C -`, over IPv4 and
/// IPv6.
#[test]
fn curl_lists_and_resumes_over_ipv4_and_ipv6() {
    let body = bytes(2_000_000, 3);
    let s = ftp_server(&[("pub/file.bin", &body), ("pub/x.txt", b"x")], "");
    for addr in [ftp_addr(&s), ftp_addr_v6(&s)] {
        let url = format!("ftp://{}/pub/", fmt_addr(addr));
        let list = run(Command::new("curl").args(["-s", "-g", &url]));
        let list = String::from_utf8_lossy(&list.stdout);
        assert!(
            list.contains(" 2000000 ") && list.contains("file.bin"),
            "{list}"
        );
        // curl lists in ASCII mode, which turns CRLF into the local LF.
        let names = run(Command::new("curl").args(["-s", "-g", "-l", &url]));
        assert_eq!(String::from_utf8_lossy(&names.stdout), "file.bin\nx.txt\n");
        let part = s.dir.path().join("part.bin");
        std::fs::write(&part, &body[..777_777]).unwrap();
        run(Command::new("curl")
            .args(["-s", "-g", "-C", "-", "-o"])
            .arg(&part)
            .arg(format!("{url}file.bin")));
        assert!(std::fs::read(&part).unwrap() == body, "resumed whole");
    }
}

fn fmt_addr(a: SocketAddr) -> String {
    match a {
        SocketAddr::V6(v6) => format!("[{}]:{}", v6.ip(), v6.port()),
        v4 => v4.to_string(),
    }
}

/// Python's ftplib: MLSD facts, MLST, SIZE, MDTM, over IPv4 and IPv6.
#[test]
fn python_ftplib_reads_facts() {
    let s = ftp_server(&[("d/f.txt", b"12345"), ("d/sub/g", b"")], "");
    for addr in [ftp_addr(&s), ftp_addr_v6(&s)] {
        let script = format!(
            "import ftplib\n\
             f = ftplib.FTP(timeout=20)\n\
             f.connect('{}', {})\n\
             f.login()\n\
             facts = sorted((n, d['type'], d.get('size')) for n, d in f.mlsd('/d'))\n\
             print(facts)\n\
             print(f.sendcmd('MLST /d/f.txt').splitlines()[1])\n\
             print(f.size('/d/f.txt'), len(f.sendcmd('MDTM /d/f.txt')))\n\
             f.quit()\n",
            addr.ip(),
            addr.port()
        );
        let out = run(Command::new("python3").arg("-c").arg(script));
        let out = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "[('f.txt', 'file', '5'), ('sub', 'dir', None)]");
        assert!(lines[1].starts_with(" type=file;size=5;modify="), "{out}");
        assert!(lines[1].ends_with("; /d/f.txt"), "{out}");
        assert_eq!(lines[2], "5 18", "213 and a 14-digit time");
    }
}

/// Login order, paths, refused writes and active mode, bad lines, RETR's refusals, REST.
#[test]
fn the_control_connection_edges() {
    let body = bytes(10_000, 4);
    let s = ftp_server(
        &[("d/f.bin", &body), ("empty", b""), (".dot", b"dot\n")],
        "",
    );
    std::os::unix::fs::symlink("/etc/passwd", s.root().join("escape")).unwrap();
    let (mut c, code) = Ftp::connect(ftp_addr(&s));
    assert_eq!(code, 220);
    assert_eq!(c.cmd("PWD").0, 530, "nothing before login");
    assert_eq!(c.cmd("PASS x").0, 503, "PASS before USER");
    assert_eq!(c.cmd("USER bob").0, 530, "anonymous only");
    assert_eq!(c.cmd("USER ftp").0, 331);
    assert_eq!(c.cmd("PASS x").0, 230);
    assert_eq!(c.cmd("CWD ../../../etc").0, 550, "no /etc in the tree");
    assert_eq!(c.cmd("CWD ../../..").0, 250);
    assert_eq!(c.cmd("PWD").1, "257 \"/\" is the current directory.\r\n");
    for write in ["STOR x", "DELE empty", "MKD new", "RNFR empty", "APPE x"] {
        assert_eq!(c.cmd(write).0, 550, "{write}");
    }
    assert_eq!(c.cmd("PORT 127,0,0,1,4,1").0, 502, "FTP bounce");
    assert_eq!(c.cmd("EPRT |1|127.0.0.1|1025|").0, 502);
    assert_eq!(c.cmd("RETR d/f.bin").0, 425, "no passive listener yet");
    let mut long = vec![b'N'; 5000];
    long.extend_from_slice(b"\r\n");
    c.send(&long);
    assert_eq!(c.reply().0, 500, "overlong");
    c.send(b"RETR a\0b\r\n");
    assert_eq!(c.reply().0, 501, "a NUL");
    assert_eq!(c.cmd("XYZZY").0, 500);
    assert_eq!(c.cmd("TYPE E").0, 504);
    assert_eq!(c.cmd("TYPE I").0, 200);
    assert_eq!(c.cmd("NOOP").0, 200, "the connection goes on");
    assert_eq!(c.fetch("RETR d/f.bin"), (body.clone(), 226));
    assert_eq!(c.fetch("RETR empty"), (Vec::new(), 226));
    assert_eq!(
        c.fetch("RETR .dot"),
        (b"dot\n".to_vec(), 226),
        "served, not listed"
    );
    assert_eq!(c.fetch("RETR missing").1, 550);
    assert_eq!(c.fetch("RETR d").1, 550, "a directory");
    assert_eq!(c.fetch("RETR escape").1, 550, "a symlink out of the tree");
    assert_eq!(c.cmd("REST 9990").0, 350);
    assert_eq!(c.fetch("RETR d/f.bin"), (body[9990..].to_vec(), 226));
    assert_eq!(c.cmd("REST 20000").0, 350);
    assert_eq!(c.fetch("RETR d/f.bin"), (Vec::new(), 226), "past the end");
    let (names, code) = c.fetch("NLST");
    assert_eq!(
        (String::from_utf8(names).unwrap().as_str(), code),
        ("d\r\nempty\r\n", 226)
    );
    assert_eq!(c.cmd("SIZE d/f.bin").1, "213 10000\r\n");
    assert_eq!(c.cmd("SIZE d").0, 550);
    let (code, text) = c.cmd("MLST d");
    assert_eq!(code, 250);
    assert!(text.contains("\r\n type=dir;modify="), "{text}");
    assert!(text.ends_with("250 End.\r\n"));
    assert_eq!(c.cmd("PASV").0, 227);
    assert_eq!(c.cmd("QUIT").0, 221);
    assert!(c.closed());
}

/// A data connection from another address than the control connection's is refused (port
/// theft) and counted; the client's own then gets the file.
#[test]
fn a_data_connection_from_another_address_is_refused() {
    let s = ftp_server(&[("f", b"the file")], "");
    let mut c = Ftp::logged_in(ftp_addr(&s));
    let data = c.epsv();
    let thief = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    thief
        .bind(&"127.0.0.2:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    thief.connect(&data.into()).unwrap();
    let mut thief: TcpStream = thief.into();
    thief
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    assert_eq!(c.cmd("RETR f").0, 150);
    let mut stolen = Vec::new();
    let _ = thief.read_to_end(&mut stolen);
    assert!(stolen.is_empty(), "the thief got nothing");
    let mut got = Vec::new();
    TcpStream::connect(data)
        .unwrap()
        .read_to_end(&mut got)
        .unwrap();
    assert_eq!((got.as_slice(), c.reply().0), (&b"the file"[..], 226));
    let metrics = s.get("/metrics").text();
    assert!(
        metrics.contains("ramjet_ftp_data_refused_total 1\n"),
        "{metrics}"
    );
    assert!(metrics.contains("ramjet_ftp_files_total 1\n"));
    assert!(metrics.contains("ramjet_ftp_sessions 1\n"));
    assert!(metrics.contains("ramjet_ftp_logins_total 1\n"));
    let status: serde_json::Value = serde_json::from_str(&s.get("/status?json").text()).unwrap();
    assert_eq!(status["ftp"]["sessions"], 1, "{status}");
    assert_eq!(status["ftp"]["files"], 1);
    assert_eq!(status["ftp"]["refused"], 1);
    let page = s.get("/status").text();
    assert!(page.contains("FTP sessions now / logins"), "{page}");
}

/// ABOR in the middle of a (rate-limited) transfer: 426 for it, then 226, and the session
/// goes on.
#[test]
fn abor_stops_a_transfer() {
    let s = server_with(
        &[("big", &bytes(4_000_000, 5))],
        &format!("{FTP_LISTEN}[[location]]\nroot = \"root\"\nlimit_rate = \"64k\"\n"),
    );
    let mut c = Ftp::logged_in(ftp_addr(&s));
    let data = c.epsv();
    assert_eq!(c.cmd("RETR big").0, 150);
    let mut d = TcpStream::connect(data).unwrap();
    let mut first = [0u8; 1000];
    d.read_exact(&mut first).unwrap();
    // Telnet IP and Synch before ABOR, as RFC 959 clients send it.
    c.send(b"\xff\xf4\xff\xf2ABOR\r\n");
    assert_eq!(c.reply().0, 426);
    assert_eq!(c.reply().0, 226);
    let mut rest = Vec::new();
    let _ = d.read_to_end(&mut rest);
    assert!(rest.len() < 3_000_000, "the transfer stopped");
    assert_eq!(c.cmd("NOOP").0, 200);
    assert_eq!(c.cmd("ABOR").0, 225, "nothing left to abort");
}

/// `idle_timeout` closes a silent control connection with 421; `data_timeout` gives up on
/// a data connection that never comes (425).
#[test]
fn idle_and_data_timeouts() {
    let s = ftp_server(
        &[("f", b"x")],
        "[ftp]\nidle_timeout = \"1s\"\ndata_timeout = \"1s\"\n",
    );
    let mut c = Ftp::logged_in(ftp_addr(&s));
    let _unused = c.epsv();
    assert_eq!(c.cmd("RETR f").0, 150);
    assert_eq!(c.reply().0, 425);
    let start = Instant::now();
    let (code, _) = c.reply();
    assert_eq!(code, 421);
    assert!(start.elapsed() >= Duration::from_millis(900));
    assert!(c.closed());
}

/// `max_connections_per_client` holds for FTP: the connection past it gets 421.
#[test]
fn the_per_client_connection_limit() {
    let s = ftp_server(&[], "[limits]\nmax_connections_per_client = 2\n");
    let (_a, ca) = Ftp::connect(ftp_addr(&s));
    let (_b, cb) = Ftp::connect(ftp_addr(&s));
    let (mut third, cc) = Ftp::connect(ftp_addr(&s));
    assert_eq!((ca, cb, cc), (220, 220, 421));
    assert!(third.closed());
}

/// TERM: an idle session is told 421 at once; a running transfer finishes whole, then 421.
#[test]
fn a_graceful_stop_finishes_running_transfers() {
    let body = bytes(600_000, 6);
    let mut s = server_with(
        &[("big", &body)],
        &format!("{FTP_LISTEN}[timeouts]\nshutdown = \"60s\"\n[[location]]\nroot = \"root\"\nlimit_rate = \"200k\"\n"),
    );
    let mut idle = Ftp::logged_in(ftp_addr(&s));
    let mut busy = Ftp::logged_in(ftp_addr(&s));
    let data = busy.epsv();
    assert_eq!(busy.cmd("RETR big").0, 150);
    let mut d = TcpStream::connect(data).unwrap();
    let mut first = [0u8; 1000];
    d.read_exact(&mut first).unwrap();
    s.signal(libc::SIGTERM);
    assert_eq!(idle.reply().0, 421);
    let mut got = first.to_vec();
    d.read_to_end(&mut got).unwrap();
    assert!(got == body, "the transfer finished whole");
    assert_eq!(busy.reply().0, 226);
    assert_eq!(busy.reply().0, 421);
    assert!(s.wait_exit(Duration::from_secs(30)).success());
}

/// Configuration mistakes name file, line and key.
#[test]
fn ftp_configuration_errors() {
    let dir = Server::dir();
    let check = |text: &str| -> String {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, text).unwrap();
        let out = Command::new(crate::BIN)
            .arg("check-config")
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let root = dir.path().join("root");
    let loc = format!("[[location]]\nroot = \"{}\"\n", root.display());
    let e = check(&format!(
        "listen = [{{ address = \"127.0.0.1:2121\", protocol = \"ftp\", http2 = false }}]\n{loc}"
    ));
    assert!(
        e.contains("bad.toml:1") && e.contains("listen[0].http2"),
        "{e}"
    );
    let e = check(&format!(
        "listen = [\"127.0.0.1:8080\"]\n[ftp]\nidle_timeout = 5\n{loc}"
    ));
    assert!(e.contains("bad.toml:2") && e.contains("key `ftp`"), "{e}");
    let e = check(&format!(
        "listen = [{{ address = \"127.0.0.1:2121\", protocol = \"ftp\" }}]\n[ftp]\n\
         location = \"/nope\"\npassive_ports = \"2000-1000\"\npassive_address = \"::1\"\n{loc}"
    ));
    for (line, key) in [
        (3, "ftp.location"),
        (4, "ftp.passive_ports"),
        (5, "ftp.passive_address"),
    ] {
        assert!(
            e.contains(&format!("bad.toml:{line}")) && e.contains(key),
            "{e}"
        );
    }
    let e = check(&format!(
        "listen = [{{ address = \"127.0.0.1:2121\", protocol = \"gopher\" }}]\n{loc}"
    ));
    assert!(e.contains("protocol") && e.contains("gopher"), "{e}");
}

/// A reload applies to each command from then on; a transfer running across it finishes.
#[test]
fn a_reload_applies_to_the_next_command_and_a_transfer_finishes() {
    let body = bytes(400_000, 7);
    let config = |dotfiles: bool| {
        format!(
            "{FTP_LISTEN}[[location]]\nroot = \"root\"\nlimit_rate = \"200k\"\nautoindex_dotfiles = {dotfiles}\n"
        )
    };
    let s = server_with(&[("big", &body), (".dot", b"x")], &config(false));
    let mut c = Ftp::logged_in(ftp_addr(&s));
    assert_eq!(c.fetch("NLST").0, b"big\r\n");
    let data = c.epsv();
    assert_eq!(c.cmd("RETR big").0, 150);
    let mut d = TcpStream::connect(data).unwrap();
    let mut got = vec![0u8; 1000];
    d.read_exact(&mut got).unwrap();
    s.rewrite_config(&config(true));
    s.signal(libc::SIGHUP);
    assert!(s.wait_for_log("reloaded", Duration::from_secs(20)));
    d.read_to_end(&mut got).unwrap();
    assert!(got == body, "the transfer finished across the reload");
    assert_eq!(c.reply().0, 226);
    assert_eq!(
        c.fetch("NLST").0,
        b".dot\r\nbig\r\n",
        "the new configuration"
    );
}

/// `limit_req` counts transfers: past it, 450 and a log line; CR inside a path is 501.
#[test]
fn the_request_rate_counts_transfers() {
    let s = server_with(
        &[("f", b"x")],
        &format!("{FTP_LISTEN}[[location]]\nroot = \"root\"\nlimit_req = \"1r/m\"\n"),
    );
    let mut c = Ftp::logged_in(ftp_addr(&s));
    assert_eq!(c.fetch("RETR f"), (b"x".to_vec(), 226));
    let _data = c.epsv();
    let (code, text) = c.cmd("RETR f");
    assert_eq!(code, 450, "{text}");
    assert!(text.contains("try again in"), "{text}");
    c.send(b"RETR a\rb\r\n");
    assert_eq!(c.reply().0, 501, "a CR inside the line");
    assert_eq!(c.cmd("NOOP").0, 200);
}

/// `passive_address` is what PASV announces (behind NAT); `passive_ports` where the data
/// listener is; PASV over IPv6 is refused (EPSV works there).
#[test]
fn passive_address_and_ports() {
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let s = ftp_server(
        &[],
        &format!("[ftp]\npassive_address = \"192.0.2.7\"\npassive_ports = \"{port}-{port}\"\n"),
    );
    let mut c = Ftp::logged_in(ftp_addr(&s));
    let (code, text) = c.cmd("PASV");
    assert_eq!(code, 227);
    assert!(
        text.contains(&format!("(192,0,2,7,{},{})", port >> 8, port & 0xff)),
        "{text}"
    );
    assert_eq!(c.epsv().port(), port, "the one port of the range");
    let mut v6 = Ftp::logged_in(ftp_addr_v6(&s));
    assert_eq!(v6.cmd("PASV").0, 425, "PASV is IPv4 only");
    let data = v6.epsv();
    assert!(data.is_ipv6());
}

/// `active = true`: curl's active mode (PORT/EPRT) gets the file; PORT to another address
/// or a privileged port is refused (FTP bounce).
#[test]
fn active_mode_when_configured() {
    let body = bytes(300_000, 8);
    let s = ftp_server(&[("f.bin", &body)], "[ftp]\nactive = true\n");
    for addr in [ftp_addr(&s), ftp_addr_v6(&s)] {
        let out = run(Command::new("curl")
            .args(["-s", "-g", "-P", "-"])
            .arg(format!("ftp://{}/f.bin", fmt_addr(addr))));
        assert!(out.stdout == body, "active mode over {addr}");
    }
    let mut c = Ftp::logged_in(ftp_addr(&s));
    assert_eq!(c.cmd("PORT 10,1,2,3,20,0").0, 501, "a third party");
    assert_eq!(c.cmd("PORT 127,0,0,1,0,80").0, 501, "a privileged port");
    assert_eq!(c.cmd("RETR f.bin").0, 425, "nothing arranged");
    let log = poll_until(|| {
        let log = std::fs::read_to_string(s.dir.path().join("access.log")).unwrap_or_default();
        (log.matches("\"RETR /f.bin\" 226 300000").count() == 2).then_some(log)
    });
    assert!(!log.is_empty());
}

/// A server with FTPS (`[ftp] tls`, a certificate for localhost and 127.0.0.1) over
/// `files`; `extra` goes into `[ftp]`.
fn ftps_server(files: &[(&str, &[u8])], extra: &str) -> Server {
    let dir = Server::dir();
    crate::tls::certificate(dir.path(), "ftp", &["localhost", "127.0.0.1"]);
    for (path, data) in files {
        let p = dir.path().join("root").join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
    }
    Server::start(
        crate::BIN,
        dir,
        &format!(
            "{FTP_LISTEN}[log]\naccess = \"{{dir}}/access.log\"\n\
             [ftp]\ntls = {{ certificate = \"ftp.pem\", key = \"ftp.key\" }}\n{extra}\n\
             [[location]]\nroot = \"root\"\n"
        ),
    )
}

/// FTPS (RFC 4217, AUTH TLS): curl with `--ssl-reqd` (control and data over TLS) lists,
/// fetches and resumes; Python's `FTP_TLS` with PROT P and with PROT C; lftp mirrors with
/// its data protected. With `tls_required`, USER before AUTH TLS is refused.
#[test]
fn ftps_with_curl_python_and_lftp() {
    let body = bytes(1_500_000, 9);
    let s = ftps_server(
        &[("d/f.bin", &body), ("d/g.txt", b"g\n")],
        "tls_required = true",
    );
    let url = format!("ftp://{}/d/", ftp_addr(&s));
    let list = run(Command::new("curl").args(["-s", "-k", "--ssl-reqd", &url]));
    assert!(
        String::from_utf8_lossy(&list.stdout).contains(" 1500000 "),
        "a listing over TLS"
    );
    let got = run(Command::new("curl")
        .args(["-s", "-k", "--ssl-reqd"])
        .arg(format!("{url}f.bin")));
    assert!(got.stdout == body, "the file over TLS");
    let part = s.dir.path().join("part.bin");
    std::fs::write(&part, &body[..600_000]).unwrap();
    run(Command::new("curl")
        .args(["-s", "-k", "--ssl-reqd", "-C", "-", "-o"])
        .arg(&part)
        .arg(format!("{url}f.bin")));
    assert!(std::fs::read(&part).unwrap() == body, "resumed over TLS");
    let script = format!(
        "import ftplib, ssl, hashlib\n\
         ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE\n\
         f = ftplib.FTP_TLS(context=ctx, timeout=20)\n\
         f.connect('{}', {})\n\
         f.login()\n\
         for prot in (f.prot_p, f.prot_c):\n\
         \x20   prot()\n\
         \x20   data = []\n\
         \x20   f.retrbinary('RETR d/f.bin', data.append)\n\
         \x20   print(hashlib.sha256(b''.join(data)).hexdigest())\n\
         print(sorted(n for n, _ in f.mlsd('d')))\n\
         f.quit()\n",
        ftp_addr(&s).ip(),
        ftp_addr(&s).port()
    );
    let out = run(Command::new("python3").arg("-c").arg(script));
    let out = String::from_utf8_lossy(&out.stdout);
    let want = {
        let p = s.root().join("d/f.bin");
        sha256(&p)
    };
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..2],
        [want.as_str(), want.as_str()],
        "PROT P, then PROT C"
    );
    assert_eq!(lines[2], "['f.bin', 'g.txt']");
    let mirror = s.dir.path().join("mirror");
    run(Command::new("lftp").arg("-c").arg(format!(
        "set cmd:fail-exit yes; set net:max-retries 1; set ftp:ssl-force true; \
         set ftp:ssl-allow-anonymous true; set ftp:ssl-protect-data true; set ssl:verify-certificate no; \
         open ftp://{}; mirror /d {}",
        ftp_addr(&s),
        mirror.display()
    )));
    assert!(
        std::fs::read(mirror.join("f.bin")).unwrap() == body,
        "lftp over TLS"
    );
    let (mut c, _) = Ftp::connect(ftp_addr(&s));
    let (code, text) = c.cmd("USER anonymous");
    assert_eq!(code, 530, "{text}");
    assert!(text.contains("AUTH TLS"));
    let (_, feat) = c.cmd("FEAT");
    assert!(
        feat.contains(" AUTH TLS\r\n") && feat.contains(" PROT\r\n"),
        "{feat}"
    );
}

/// Without `[ftp] tls`, AUTH TLS is 502 and FEAT offers none of it; a TLS handshake that
/// goes wrong after 234 closes only that connection.
#[test]
fn auth_tls_without_tls_and_a_broken_handshake() {
    let s = ftp_server(&[], "");
    let mut c = Ftp::logged_in(ftp_addr(&s));
    assert_eq!(c.cmd("AUTH TLS").0, 502);
    assert!(!c.cmd("FEAT").1.contains("AUTH"));
    let t = ftps_server(&[("f", b"x")], "");
    let (mut bad, _) = Ftp::connect(ftp_addr(&t));
    assert_eq!(bad.cmd("AUTH TLS").0, 234);
    bad.send(b"this is not a ClientHello\r\n");
    let mut rest = Vec::new();
    assert!(
        bad.reader.read_to_end(&mut rest).is_ok(),
        "closed (after a TLS alert, if any), not left waiting"
    );
    let mut good = Ftp::logged_in(ftp_addr(&t));
    assert_eq!(
        good.fetch("RETR f"),
        (b"x".to_vec(), 226),
        "in the clear (no AUTH TLS)"
    );
}
