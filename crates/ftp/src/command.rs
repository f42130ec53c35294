//! One line of the control connection as a [`Command`], or the reason it is refused.
//!
//! A line is what came before its CRLF (a bare LF is taken too, as vsftpd and pure-ftpd
//! take it). Telnet commands in it are removed (clients send `IAC IP IAC DM` before ABOR)
//! and `IAC IAC` stands for a 0xFF byte of a name (RFC 959 §4.1, Telnet escaping). The
//! verb is case-insensitive; the argument is everything after the first space, kept as
//! bytes (file names need not be UTF-8). Paths with NUL or CR are refused: no name on
//! disk has them, and a CR could forge a reply line.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};

/// The longest control line accepted, CRLF included (vsftpd reads 4 KiB, pure-ftpd 4 KiB;
/// a path here is at most `PATH_MAX`).
pub const MAX_LINE: usize = 4096;

/// `TYPE`: what the server supports (RFC 959 §3.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferType {
    /// `A` or `A N`: lines sent with CRLF.
    Ascii,
    /// `I` or `L 8`: bytes as stored.
    Image,
}

/// `EPSV`'s argument (RFC 2428 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epsv {
    /// No argument: the control connection's protocol.
    Any,
    /// `1` (IPv4) or `2` (IPv6).
    Protocol(u8),
    /// `ALL`: from now on only EPSV (no PORT, PASV, EPRT).
    All,
}

/// A parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    User(Vec<u8>),
    /// The password (anything, possibly empty: anonymous users send an address or nothing).
    Pass(Vec<u8>),
    Cwd(Vec<u8>),
    Cdup,
    Pwd,
    Quit,
    Noop,
    Syst,
    Feat,
    Abor,
    /// `OPTS UTF8 ON`, `OPTS MLST type;size;`...: the text after the verb.
    Opts(Vec<u8>),
    /// RFC 7151's virtual host name.
    Host(Vec<u8>),
    Type(TransferType),
    /// `STRU F` (the only structure served).
    StruFile,
    /// `MODE S` (the only mode served).
    ModeStream,
    /// `ALLO`: not needed here (202).
    Allo,
    Port(SocketAddrV4),
    Eprt(SocketAddr),
    Pasv,
    Epsv(Epsv),
    Rest(u64),
    Retr(Vec<u8>),
    Size(Vec<u8>),
    Mdtm(Vec<u8>),
    /// `LIST [-options] [path]`: the path, and whether `-a` asked for dot files.
    List {
        path: Option<Vec<u8>>,
        all: bool,
    },
    Nlst {
        path: Option<Vec<u8>>,
        all: bool,
    },
    Mlsd(Option<Vec<u8>>),
    Mlst(Option<Vec<u8>>),
    /// `STAT` alone (the session) or with a path (a listing on the control connection).
    Stat(Option<Vec<u8>>),
    Help(Option<Vec<u8>>),
    /// A command that would change the tree (STOR, DELE, MKD, RNFR, ...): refused, this
    /// server is read-only. The verb in upper case.
    Write(&'static str),
    /// A command known but not served (ACCT, REIN, SMNT, SITE, CCC, LANG). The verb in
    /// upper case.
    NotServed(&'static str),
    /// `AUTH TLS` (also `TLS-C` and `SSL`, RFC 4217 §6): the control connection goes TLS.
    AuthTls,
    /// `PBSZ n` (RFC 4217 §8): the buffer size, which is 0 for TLS.
    Pbsz(u64),
    /// `PROT C` (`false`: data in the clear) or `PROT P` (`true`: data over TLS).
    Prot(bool),
}

/// Why a line is refused, with the reply code RFC 959 gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Longer than [`MAX_LINE`] (500).
    TooLong,
    /// A NUL, or a CR that does not end the line (501).
    NotText,
    /// Not a command (500).
    Unknown,
    /// A command without the argument it needs, or with one it does not take (501).
    Syntax(&'static str),
    /// A parameter the server does not serve: `TYPE E`, `MODE B`, `STRU R` (504).
    Parameter(&'static str),
}

impl Refused {
    /// The reply code.
    pub fn code(&self) -> u16 {
        match self {
            Refused::TooLong | Refused::Unknown => 500,
            Refused::NotText | Refused::Syntax(_) => 501,
            Refused::Parameter(_) => 504,
        }
    }
}

const WRITES: [&str; 11] = [
    "STOR", "STOU", "APPE", "DELE", "RMD", "XRMD", "MKD", "XMKD", "RNFR", "RNTO", "MFMT",
];
const NOT_SERVED: [&str; 6] = ["ACCT", "REIN", "SMNT", "SITE", "CCC", "LANG"];

/// Telnet: IAC, and the option negotiations that take one more byte.
const IAC: u8 = 0xff;

/// The line without its Telnet commands (`IAC IAC` kept as one 0xFF).
fn without_telnet(line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        if line[i] != IAC {
            out.push(line[i]);
            i += 1;
            continue;
        }
        match line.get(i + 1) {
            Some(&IAC) => {
                out.push(IAC);
                i += 2;
            }
            // WILL, WONT, DO, DONT carry an option byte.
            Some(251..=254) => i += 3,
            _ => i += 2,
        }
    }
    out
}

/// Parse one control line (its CRLF or LF included or not).
pub fn parse(raw: &[u8]) -> Result<Command, Refused> {
    if raw.len() > MAX_LINE {
        return Err(Refused::TooLong);
    }
    let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    let line = without_telnet(raw);
    if line.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
        return Err(Refused::NotText);
    }
    let (verb, arg) = match line.iter().position(|&b| b == b' ') {
        Some(at) => (&line[..at], Some(&line[at + 1..])),
        None => (&line[..], None),
    };
    if verb.is_empty() || verb.len() > 4 || !verb.iter().all(u8::is_ascii_alphabetic) {
        return Err(Refused::Unknown);
    }
    let verb = verb.to_ascii_uppercase();
    let verb = std::str::from_utf8(&verb).map_err(|_| Refused::Unknown)?;
    // An empty argument ("CWD ") is no argument.
    let arg = arg.filter(|a| !a.is_empty());
    let need = |what: &'static str| arg.map(<[u8]>::to_vec).ok_or(Refused::Syntax(what));
    let none = |c: Command| match arg {
        None => Ok(c),
        Some(_) => Err(Refused::Syntax("takes no argument")),
    };
    if let Some(w) = WRITES.iter().find(|w| **w == verb) {
        return Ok(Command::Write(w));
    }
    if let Some(n) = NOT_SERVED.iter().find(|n| **n == verb) {
        return Ok(Command::NotServed(n));
    }
    match verb {
        "USER" => need("a user name").map(Command::User),
        "PASS" => Ok(Command::Pass(arg.map(<[u8]>::to_vec).unwrap_or_default())),
        "CWD" | "XCWD" => need("a directory").map(Command::Cwd),
        "CDUP" | "XCUP" => none(Command::Cdup),
        "PWD" | "XPWD" => none(Command::Pwd),
        "QUIT" => none(Command::Quit),
        "NOOP" => none(Command::Noop),
        "SYST" => none(Command::Syst),
        "FEAT" => none(Command::Feat),
        "ABOR" => none(Command::Abor),
        "PASV" => none(Command::Pasv),
        "ALLO" => Ok(Command::Allo),
        "OPTS" => need("an option").map(Command::Opts),
        "HOST" => need("a host name").map(Command::Host),
        "TYPE" => transfer_type(arg).map(Command::Type),
        "STRU" => match arg.map(|a| a.to_ascii_uppercase()).as_deref() {
            Some(b"F") => Ok(Command::StruFile),
            Some(b"R" | b"P") => Err(Refused::Parameter("only STRU F is served")),
            _ => Err(Refused::Syntax("F, R or P")),
        },
        "MODE" => match arg.map(|a| a.to_ascii_uppercase()).as_deref() {
            Some(b"S") => Ok(Command::ModeStream),
            Some(b"B" | b"C" | b"Z") => Err(Refused::Parameter("only MODE S is served")),
            _ => Err(Refused::Syntax("S, B or C")),
        },
        "PORT" => port(arg.ok_or(Refused::Syntax("h1,h2,h3,h4,p1,p2"))?).map(Command::Port),
        "EPRT" => eprt(arg.ok_or(Refused::Syntax("|proto|address|port|"))?).map(Command::Eprt),
        "EPSV" => match arg.map(|a| a.to_ascii_uppercase()).as_deref() {
            None => Ok(Command::Epsv(Epsv::Any)),
            Some(b"ALL") => Ok(Command::Epsv(Epsv::All)),
            Some(b"1") => Ok(Command::Epsv(Epsv::Protocol(1))),
            Some(b"2") => Ok(Command::Epsv(Epsv::Protocol(2))),
            Some(_) => Err(Refused::Parameter("EPSV 1, 2 or ALL")),
        },
        "REST" => {
            let a = arg.ok_or(Refused::Syntax("a byte offset"))?;
            decimal(a)
                .map(Command::Rest)
                .ok_or(Refused::Syntax("a byte offset"))
        }
        "RETR" => need("a file").map(Command::Retr),
        "SIZE" => need("a file").map(Command::Size),
        "MDTM" => need("a file").map(Command::Mdtm),
        "LIST" => Ok(listing(arg, |path, all| Command::List { path, all })),
        "NLST" => Ok(listing(arg, |path, all| Command::Nlst { path, all })),
        "MLSD" => Ok(Command::Mlsd(arg.map(<[u8]>::to_vec))),
        "MLST" => Ok(Command::Mlst(arg.map(<[u8]>::to_vec))),
        "STAT" => Ok(Command::Stat(arg.map(<[u8]>::to_vec))),
        "HELP" => Ok(Command::Help(arg.map(<[u8]>::to_vec))),
        "AUTH" => match arg.map(|a| a.to_ascii_uppercase()).as_deref() {
            Some(b"TLS" | b"TLS-C" | b"SSL") => Ok(Command::AuthTls),
            Some(_) => Err(Refused::Parameter("AUTH TLS")),
            None => Err(Refused::Syntax("a mechanism (TLS)")),
        },
        "PBSZ" => {
            let a = arg.ok_or(Refused::Syntax("a buffer size"))?;
            decimal(a)
                .map(Command::Pbsz)
                .ok_or(Refused::Syntax("a buffer size"))
        }
        "PROT" => match arg.map(|a| a.to_ascii_uppercase()).as_deref() {
            Some(b"C") => Ok(Command::Prot(false)),
            Some(b"P") => Ok(Command::Prot(true)),
            Some(b"S" | b"E") => Err(Refused::Parameter("PROT C or P")),
            _ => Err(Refused::Syntax("C, S, E or P")),
        },
        _ => Err(Refused::Unknown),
    }
}

fn transfer_type(arg: Option<&[u8]>) -> Result<TransferType, Refused> {
    let a = arg.ok_or(Refused::Syntax("A or I"))?.to_ascii_uppercase();
    let words: Vec<&[u8]> = a.split(|&b| b == b' ').filter(|w| !w.is_empty()).collect();
    match words[..] {
        [b"A"] | [b"A", b"N"] => Ok(TransferType::Ascii),
        [b"I"] | [b"L", b"8"] => Ok(TransferType::Image),
        [b"A" | b"E", ..] | [b"L", _] => Err(Refused::Parameter("TYPE A or I")),
        _ => Err(Refused::Syntax("A or I")),
    }
}

/// Digits only, no sign, no overflow.
fn decimal(a: &[u8]) -> Option<u64> {
    if a.is_empty() || a.len() > 20 || !a.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(a).ok()?.parse().ok()
}

/// `h1,h2,h3,h4,p1,p2` (RFC 959 §4.1.2).
fn port(a: &[u8]) -> Result<SocketAddrV4, Refused> {
    let bad = Refused::Syntax("h1,h2,h3,h4,p1,p2");
    let n: Vec<u8> = a
        .split(|&b| b == b',')
        .map(|p| decimal(p).and_then(|v| u8::try_from(v).ok()))
        .collect::<Option<_>>()
        .ok_or(bad.clone())?;
    let [a, b, c, d, hi, lo] = n[..] else {
        return Err(bad);
    };
    let port = u16::from(hi) << 8 | u16::from(lo);
    if port == 0 {
        return Err(bad);
    }
    Ok(SocketAddrV4::new(Ipv4Addr::new(a, b, c, d), port))
}

/// `|1|132.235.1.2|6275|` or `|2|1080::8:800:200C:417A|5282|` (RFC 2428 §2): the first
/// byte is the delimiter.
fn eprt(a: &[u8]) -> Result<SocketAddr, Refused> {
    let bad = Refused::Syntax("|proto|address|port|");
    let d = *a.first().ok_or(bad.clone())?;
    if !(33..=126).contains(&d) {
        return Err(bad);
    }
    let parts: Vec<&[u8]> = a[1..].split(|&b| b == d).collect();
    let [proto, addr, port, b""] = parts[..] else {
        return Err(bad);
    };
    if proto != b"1" && proto != b"2" {
        return Err(Refused::Parameter("EPRT 1 or 2 (RFC 2428: 522)"));
    }
    let addr: IpAddr = std::str::from_utf8(addr)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(bad.clone())?;
    let port = decimal(port)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|&p| p != 0)
        .ok_or(bad.clone())?;
    match (proto, addr) {
        (b"1", IpAddr::V4(_)) | (b"2", IpAddr::V6(_)) => Ok(SocketAddr::new(addr, port)),
        _ => Err(bad),
    }
}

/// `LIST`/`NLST` arguments: `ls`-style options first (`-a`, `-la`, as clients send them),
/// then the path. A path that starts with `-` can be given after `--`.
fn listing(arg: Option<&[u8]>, make: impl Fn(Option<Vec<u8>>, bool) -> Command) -> Command {
    let mut rest = arg.unwrap_or_default();
    let mut all = false;
    while rest.first() == Some(&b'-') {
        let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
        let option = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or_default();
        if option == b"--" {
            break;
        }
        all |= option.contains(&b'a') || option.contains(&b'A');
    }
    make((!rest.is_empty()).then(|| rest.to_vec()), all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> Command {
        parse(line.as_bytes()).unwrap_or_else(|e| panic!("{line:?}: {e:?}"))
    }

    #[test]
    fn commands_and_their_arguments() {
        assert_eq!(
            ok("USER anonymous\r\n"),
            Command::User(b"anonymous".to_vec())
        );
        assert_eq!(ok("pass \r\n"), Command::Pass(Vec::new()));
        assert_eq!(ok("PASS"), Command::Pass(Vec::new()));
        assert_eq!(
            ok("CWD  two spaces/x\n"),
            Command::Cwd(b" two spaces/x".to_vec())
        );
        assert_eq!(ok("xpwd"), Command::Pwd);
        assert_eq!(ok("TYPE I"), Command::Type(TransferType::Image));
        assert_eq!(ok("type a n"), Command::Type(TransferType::Ascii));
        assert_eq!(ok("TYPE L 8"), Command::Type(TransferType::Image));
        assert_eq!(ok("REST 5368709120"), Command::Rest(5 << 30));
        assert_eq!(ok("EPSV"), Command::Epsv(Epsv::Any));
        assert_eq!(ok("EPSV all"), Command::Epsv(Epsv::All));
        assert_eq!(
            ok("PORT 127,0,0,1,4,1"),
            Command::Port("127.0.0.1:1025".parse().unwrap())
        );
        assert_eq!(
            ok("EPRT |2|::1|5282|"),
            Command::Eprt("[::1]:5282".parse().unwrap())
        );
        assert_eq!(
            ok("EPRT !1!10.0.0.1!21!"),
            Command::Eprt("10.0.0.1:21".parse().unwrap())
        );
        assert_eq!(
            ok("LIST -la /pub"),
            Command::List {
                path: Some(b"/pub".to_vec()),
                all: true
            }
        );
        assert_eq!(
            ok("NLST"),
            Command::Nlst {
                path: None,
                all: false
            }
        );
        assert_eq!(
            ok("LIST -- -odd"),
            Command::List {
                path: Some(b"-odd".to_vec()),
                all: false
            }
        );
        assert_eq!(ok("MLSD"), Command::Mlsd(None));
        assert_eq!(ok("STOR x"), Command::Write("STOR"));
        assert_eq!(ok("rnfr a"), Command::Write("RNFR"));
        assert_eq!(ok("AUTH TLS"), Command::AuthTls);
        assert_eq!(ok("auth ssl"), Command::AuthTls);
        assert_eq!(ok("PBSZ 0"), Command::Pbsz(0));
        assert_eq!(ok("PROT P"), Command::Prot(true));
        assert_eq!(ok("PROT c"), Command::Prot(false));
        assert_eq!(parse(b"PROT S").unwrap_err().code(), 504);
        assert_eq!(parse(b"AUTH GSSAPI").unwrap_err().code(), 504);
        assert_eq!(ok("CCC"), Command::NotServed("CCC"));
        // A name that is not UTF-8 is kept as bytes.
        assert_eq!(
            parse(b"RETR caf\xe9").unwrap(),
            Command::Retr(b"caf\xe9".to_vec())
        );
    }

    #[test]
    fn telnet_commands_are_removed_and_an_escaped_iac_kept() {
        // IP, DM before ABOR (RFC 959 §4.1.3), as curl and lftp send it.
        assert_eq!(parse(b"\xff\xf4\xff\xf2ABOR\r\n").unwrap(), Command::Abor);
        assert_eq!(parse(b"\xff\xfb\x01NOOP").unwrap(), Command::Noop);
        assert_eq!(
            parse(b"RETR a\xff\xffb").unwrap(),
            Command::Retr(b"a\xffb".to_vec())
        );
    }

    #[test]
    fn bad_lines_are_refused_with_their_codes() {
        let long = format!("RETR {}\r\n", "a".repeat(MAX_LINE));
        for (line, code) in [
            (long.as_bytes(), 500),
            (b"RETR a\0b".as_slice(), 501),
            (b"RETR a\rb", 501),
            (b"CWD a\r\r\n", 501),
            (b"", 500),
            (b" RETR x", 500),
            (b"RETRIEVE x", 500),
            (b"GET / HTTP/1.1", 500),
            (b"R3TR x", 500),
            (b"RETR", 501),
            (b"CWD ", 501),
            (b"PWD x", 501),
            (b"REST -1", 501),
            (b"REST 99999999999999999999", 501),
            (b"PORT 1,2,3,4,5", 501),
            (b"PORT 1,2,3,4,0,0", 501),
            (b"PORT 256,0,0,1,4,1", 501),
            (b"EPRT |1|::1|21|", 501),
            (b"EPRT |3|x|21|", 504),
            (b"EPRT |1|10.0.0.1|21", 501),
            (b"TYPE E", 504),
            (b"TYPE X", 501),
            (b"MODE B", 504),
            (b"STRU R", 504),
            (b"EPSV 3", 504),
        ] {
            match parse(line) {
                Err(e) => assert_eq!(e.code(), code, "{:?}", String::from_utf8_lossy(line)),
                Ok(c) => panic!("{:?} parsed as {c:?}", String::from_utf8_lossy(line)),
            }
        }
    }

    #[test]
    fn the_longest_line_is_taken_and_one_more_byte_refused() {
        let path = "a".repeat(MAX_LINE - "RETR \r\n".len());
        let line = format!("RETR {path}\r\n");
        assert_eq!(line.len(), MAX_LINE);
        assert_eq!(
            parse(line.as_bytes()).unwrap(),
            Command::Retr(path.into_bytes())
        );
        let over = format!("RETR a{}\r\n", "a".repeat(MAX_LINE - "RETR \r\n".len()));
        assert_eq!(parse(over.as_bytes()), Err(Refused::TooLong));
    }
}
