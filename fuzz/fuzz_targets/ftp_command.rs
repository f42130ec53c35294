//! FTP control lines as a client (or an attacker) sends them: never a panic; a parsed
//! command's names carry no NUL, CR or LF (a CR could forge a reply line), and only a line
//! over the limit is refused as too long. Then the input as a session of lines: every reply
//! is whole lines, each `NNN-` / `NNN ` or inner text, and every path an action names is
//! inside the tree (from `/`, no `..`, no empty or `.` component).
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_ftp::command::{parse, Command, Refused, MAX_LINE};
use ramjet_ftp::session::{Action, Session};

fn check_path(p: &[u8]) {
    assert!(p.starts_with(b"/"), "{p:?}");
    if p != b"/" {
        for part in p[1..].split(|&b| b == b'/') {
            assert!(!part.is_empty() && part != b"." && part != b"..", "{p:?}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Ok(c) => {
            let name = match &c {
                Command::User(n) | Command::Pass(n) | Command::Cwd(n) | Command::Opts(n) => Some(n),
                Command::Host(n) | Command::Retr(n) | Command::Size(n) | Command::Mdtm(n) => {
                    Some(n)
                }
                Command::List { path, .. } | Command::Nlst { path, .. } => path.as_ref(),
                Command::Mlsd(p) | Command::Mlst(p) | Command::Stat(p) | Command::Help(p) => {
                    p.as_ref()
                }
                _ => None,
            };
            if let Some(n) = name {
                assert!(!n.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n'));
            }
        }
        Err(Refused::TooLong) => assert!(data.len() > MAX_LINE),
        Err(_) => {}
    }
    let mut session = Session::new();
    for line in data.split(|&b| b == b'\n') {
        let Ok(cmd) = parse(line) else { continue };
        let (reply, action) = session.handle(cmd);
        if let Some(r) = reply {
            let bytes = r.bytes();
            assert!(bytes.ends_with(b"\r\n"));
            for l in bytes[..bytes.len() - 2].split(|&b| b == b'\n') {
                let l = l.strip_suffix(b"\r").unwrap_or(l);
                assert!(!l.contains(&b'\r') && !l.contains(&0));
            }
        }
        match &action {
            Action::Retrieve { path, .. }
            | Action::List { path, .. }
            | Action::Facts { path, .. }
            | Action::Cwd { path }
            | Action::Size { path }
            | Action::Mdtm { path } => check_path(path),
            _ => {}
        }
        if let Action::Cwd { path } = action {
            session.entered(path);
        }
        check_path(session.cwd());
    }
});
