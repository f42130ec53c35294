//! FTP control lines as a client (or an attacker) sends them: never a panic; a parsed
//! command's names carry no NUL, CR or LF (a CR could forge a reply line), and only a line
//! over the limit is refused as too long.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ramjet_ftp::command::{parse, Command, Refused, MAX_LINE};

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
});
