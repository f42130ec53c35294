//! A control connection's state, as pure logic: the login (anonymous only), the current
//! directory (a path in the served tree, never above its root), TYPE, REST, whether a
//! passive data listener is open, EPSV ALL; what to answer to each [`Command`], and what
//! the I/O side has to do for it ([`Action`]: open a passive listener, send a file or a
//! listing, look a name up). The I/O side answers those with the file system's word.

use crate::command::{Command, Epsv, TransferType};
use crate::reply::Reply;

/// What the I/O side does after the reply (if any) is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    None,
    /// Close the control connection (after the reply).
    Quit,
    /// Open a passive data listener and answer 227 (`PASV`) or 229 (`EPSV`).
    Passive {
        extended: bool,
    },
    /// Active mode (`PORT`, `EPRT`, when allowed): the next transfer connects to `addr`,
    /// if the I/O side finds it is the client's own address (200), else it refuses it.
    Active {
        addr: std::net::SocketAddr,
    },
    /// Send the file at `path` (a path in the tree) from `offset` over the data connection.
    Retrieve {
        path: Vec<u8>,
        offset: u64,
    },
    /// A listing of `path` over the data connection.
    List {
        path: Vec<u8>,
        form: Listing,
    },
    /// The facts of one name on the control connection (`MLST`), or a listing there
    /// (`STAT path`).
    Facts {
        path: Vec<u8>,
        form: Listing,
    },
    /// Change to `path` if it is a directory (250), else 550.
    Cwd {
        path: Vec<u8>,
    },
    /// SIZE (213 with the size) or MDTM (213 with the time) of the file at `path`.
    Size {
        path: Vec<u8>,
    },
    Mdtm {
        path: Vec<u8>,
    },
    /// Stop the transfer in progress (426 for it, then 226).
    Abort,
    /// `AUTH TLS` was accepted (234 sent): a TLS handshake on the control connection next.
    StartTls,
}

/// The form of a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// `ls -l` lines (LIST), with dot files when `all`.
    Long { all: bool },
    /// Names only (NLST).
    Names { all: bool },
    /// RFC 3659 facts (MLSD, MLST).
    Machine,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Login {
    Waiting,
    /// USER anonymous given, PASS due.
    User,
    In,
}

/// One control connection's state.
#[derive(Debug, Clone)]
pub struct Session {
    login: Login,
    cwd: Vec<u8>,
    transfer: TransferType,
    rest: u64,
    /// A data connection is arranged (a passive listener, or an active address).
    passive: bool,
    epsv_all: bool,
    /// PORT and EPRT are served.
    active: bool,
    /// AUTH TLS is served; with `tls_required`, nothing but it before the login.
    tls: bool,
    tls_required: bool,
    /// The control connection is under TLS (AUTH TLS done); PBSZ was sent; data
    /// connections go over TLS (PROT P).
    secured: bool,
    pbsz: bool,
    protect: bool,
}

impl Default for Session {
    fn default() -> Self {
        Session::new()
    }
}

/// The user names taken as anonymous (vsftpd's and RFC 1635's).
fn anonymous(user: &[u8]) -> bool {
    user.eq_ignore_ascii_case(b"anonymous") || user.eq_ignore_ascii_case(b"ftp")
}

/// `cwd` and `arg` as one path from the root: `.` and empty parts dropped, `..` going up
/// but never above the root. Always starts with `/`.
pub fn resolve(cwd: &[u8], arg: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    let start: &[u8] = if arg.first() == Some(&b'/') { b"" } else { cwd };
    for part in start.split(|&b| b == b'/').chain(arg.split(|&b| b == b'/')) {
        match part {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    let mut out = Vec::with_capacity(arg.len() + cwd.len() + 1);
    for p in parts {
        out.push(b'/');
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

impl Session {
    pub fn new() -> Session {
        Session {
            login: Login::Waiting,
            cwd: b"/".to_vec(),
            transfer: TransferType::Image,
            rest: 0,
            passive: false,
            epsv_all: false,
            active: false,
            tls: false,
            tls_required: false,
            secured: false,
            pbsz: false,
            protect: false,
        }
    }

    /// A session that serves PORT and EPRT (active mode; off by default: FTP bounce).
    pub fn with_active_mode(mut self) -> Session {
        self.active = true;
        self
    }

    /// A session that serves AUTH TLS, PBSZ and PROT (RFC 4217); with `required`, USER is
    /// refused until the control connection is under TLS.
    pub fn with_tls(mut self, required: bool) -> Session {
        self.tls = true;
        self.tls_required = required;
        self
    }

    /// Data connections are to go over TLS (PROT P on a TLS control connection).
    pub fn data_protected(&self) -> bool {
        self.secured && self.protect
    }

    /// The current directory (from the tree's root).
    pub fn cwd(&self) -> &[u8] {
        &self.cwd
    }

    /// The I/O side changed directory (`Action::Cwd` found one).
    pub fn entered(&mut self, path: Vec<u8>) {
        self.cwd = path;
    }

    /// The passive listener was used (a transfer took it) or closed.
    pub fn data_used(&mut self) {
        self.passive = false;
    }

    /// The reply and action for `cmd` (a reply of `None`: the action's outcome answers).
    pub fn handle(&mut self, cmd: Command) -> (Option<Reply>, Action) {
        let say = |code, text: &str| (Some(Reply::new(code, text.as_bytes())), Action::None);
        // Before login only these (and refusals) are answered.
        let before_login = matches!(
            cmd,
            Command::User(_)
                | Command::Pass(_)
                | Command::Quit
                | Command::Noop
                | Command::Feat
                | Command::Syst
                | Command::Help(_)
                | Command::Opts(_)
                | Command::Host(_)
                | Command::NotServed(_)
                | Command::AuthTls
                | Command::Pbsz(_)
                | Command::Prot(_)
        );
        if self.login != Login::In && !before_login {
            return say(530, "Please log in with USER and PASS.");
        }
        let path = |a: &[u8]| resolve(&self.cwd, a);
        // A listing of the named directory (the current one when none is named).
        let list = |p: Option<Vec<u8>>, form| {
            let path = path(p.as_deref().unwrap_or_default());
            (None, Action::List { path, form })
        };
        match cmd {
            Command::User(_) if self.tls_required && !self.secured => say(
                530,
                "TLS is required here: send AUTH TLS first (ftps:// in most clients).",
            ),
            Command::User(u) if anonymous(&u) => {
                self.login = Login::User;
                say(331, "Anonymous login: send any password.")
            }
            Command::User(_) => {
                self.login = Login::Waiting;
                say(
                    530,
                    "This server is anonymous only (user anonymous or ftp).",
                )
            }
            Command::Pass(_) => match self.login {
                Login::User => {
                    self.login = Login::In;
                    say(230, "Logged in; read-only.")
                }
                Login::In => say(230, "Already logged in."),
                Login::Waiting => say(503, "Log in with USER first."),
            },
            Command::Quit => (Some(Reply::new(221, b"Goodbye.")), Action::Quit),
            Command::Noop | Command::Allo => say(200, "OK."),
            Command::Syst => say(215, "UNIX Type: L8"),
            Command::Feat => (Some(Reply::features(self.tls)), Action::None),
            Command::AuthTls if !self.tls => say(502, "TLS is not configured here."),
            Command::AuthTls if self.secured => say(503, "Already under TLS."),
            Command::AuthTls => {
                self.secured = true;
                (
                    Some(Reply::new(234, b"AUTH TLS ok: start the handshake.")),
                    Action::StartTls,
                )
            }
            Command::Pbsz(_) if !self.secured => say(503, "AUTH TLS first."),
            Command::Pbsz(_) => {
                self.pbsz = true;
                say(200, "PBSZ=0")
            }
            Command::Prot(_) if !self.secured => say(503, "AUTH TLS first."),
            Command::Prot(true) if !self.pbsz => say(503, "PBSZ first."),
            Command::Prot(p) => {
                self.protect = p;
                say(
                    200,
                    if p {
                        "Data over TLS."
                    } else {
                        "Data in the clear."
                    },
                )
            }
            Command::Help(_) => say(214, "See RFC 959; FEAT lists the extensions."),
            Command::Opts(o) if o.eq_ignore_ascii_case(b"UTF8 ON") => {
                say(200, "Always in UTF8 mode.")
            }
            Command::Opts(o) if o.len() >= 4 && o[..4].eq_ignore_ascii_case(b"MLST") => {
                say(200, "MLST OPTS type;size;modify;")
            }
            Command::Opts(_) => say(501, "Option not understood."),
            Command::Host(_) => say(220, "Host accepted."),
            Command::NotServed(verb) => say(502, &format!("{verb} is not served here.")),
            Command::Write(verb) => say(550, &format!("{verb}: this server is read-only.")),
            Command::Pwd => {
                let mut text = b"\"".to_vec();
                // RFC 959 Appendix II: a quote in the name is doubled.
                for &b in &self.cwd {
                    text.push(b);
                    if b == b'"' {
                        text.push(b'"');
                    }
                }
                text.extend_from_slice(b"\" is the current directory.");
                (Some(Reply::new(257, &text)), Action::None)
            }
            Command::Cwd(a) => (None, Action::Cwd { path: path(&a) }),
            Command::Cdup => (None, Action::Cwd { path: path(b"..") }),
            Command::Type(t) => {
                self.transfer = t;
                match t {
                    TransferType::Image => say(200, "Type set to I."),
                    // As vsftpd by default: files are sent as stored.
                    TransferType::Ascii => say(200, "Type set to A (files are sent as stored)."),
                }
            }
            Command::StruFile => say(200, "Structure set to F."),
            Command::ModeStream => say(200, "Mode set to S."),
            Command::Port(_) | Command::Eprt(_) if !self.active => {
                say(502, "Active mode (PORT, EPRT) is off: use PASV or EPSV.")
            }
            Command::Port(_) | Command::Eprt(_) if self.epsv_all => {
                say(503, "EPSV ALL was sent: use EPSV.")
            }
            Command::Port(a) => {
                self.passive = true;
                (None, Action::Active { addr: a.into() })
            }
            Command::Eprt(addr) => {
                self.passive = true;
                (None, Action::Active { addr })
            }
            Command::Pasv if self.epsv_all => say(503, "EPSV ALL was sent: use EPSV."),
            Command::Pasv => {
                self.passive = true;
                (None, Action::Passive { extended: false })
            }
            Command::Epsv(Epsv::All) => {
                self.epsv_all = true;
                say(200, "EPSV ALL ok.")
            }
            Command::Epsv(_) => {
                self.passive = true;
                (None, Action::Passive { extended: true })
            }
            Command::Rest(n) => {
                self.rest = n;
                say(350, &format!("Restarting at {n}. Send RETR."))
            }
            Command::Retr(_) if !self.passive => say(425, "Use PASV or EPSV first."),
            Command::Retr(a) => {
                let offset = std::mem::take(&mut self.rest);
                (
                    None,
                    Action::Retrieve {
                        path: path(&a),
                        offset,
                    },
                )
            }
            Command::List { .. } | Command::Nlst { .. } | Command::Mlsd(_) if !self.passive => {
                say(425, "Use PASV or EPSV first.")
            }
            Command::List { path: p, all } => list(p, Listing::Long { all }),
            Command::Nlst { path: p, all } => list(p, Listing::Names { all }),
            Command::Mlsd(p) => list(p, Listing::Machine),
            Command::Mlst(p) => {
                let p = path(p.as_deref().unwrap_or_default());
                (
                    None,
                    Action::Facts {
                        path: p,
                        form: Listing::Machine,
                    },
                )
            }
            Command::Stat(None) => {
                let text = format!(
                    "ramjet FTP: logged in anonymously; TYPE {}; {}",
                    if self.transfer == TransferType::Ascii {
                        "A"
                    } else {
                        "I"
                    },
                    if self.passive {
                        "a passive listener is open"
                    } else {
                        "no data connection"
                    }
                );
                say(211, &text)
            }
            Command::Stat(Some(p)) => {
                let p = path(&p);
                (
                    None,
                    Action::Facts {
                        path: p,
                        form: Listing::Long { all: false },
                    },
                )
            }
            Command::Size(a) => (None, Action::Size { path: path(&a) }),
            Command::Mdtm(a) => (None, Action::Mdtm { path: path(&a) }),
            Command::Abor => (None, Action::Abort),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::parse;

    fn run(s: &mut Session, line: &str) -> (u16, Action) {
        let (reply, action) = s.handle(parse(line.as_bytes()).unwrap());
        (reply.map_or(0, |r| r.code()), action)
    }

    #[test]
    fn paths_never_go_above_the_root() {
        for (cwd, arg, want) in [
            ("/", "pub", "/pub"),
            ("/pub", "../../../etc/passwd", "/etc/passwd"),
            ("/pub/debian", "..", "/pub"),
            ("/pub", "/a//b/./c/", "/a/b/c"),
            ("/pub", "", "/pub"),
            ("/", "..", "/"),
            ("/a", "b/../../..", "/"),
        ] {
            assert_eq!(
                resolve(cwd.as_bytes(), arg.as_bytes()),
                want.as_bytes(),
                "{cwd} {arg}"
            );
        }
    }

    #[test]
    fn anonymous_login_in_order() {
        let mut s = Session::new();
        assert_eq!(run(&mut s, "RETR x").0, 530, "nothing before login");
        assert_eq!(run(&mut s, "PASS x").0, 503, "PASS before USER");
        assert_eq!(run(&mut s, "USER root").0, 530);
        assert_eq!(run(&mut s, "PASS x").0, 503);
        assert_eq!(
            run(&mut s, "FEAT").0,
            211,
            "FEAT before login (clients ask first)"
        );
        assert_eq!(run(&mut s, "USER anonymous").0, 331);
        assert_eq!(run(&mut s, "PASS me@example.org").0, 230);
        assert_eq!(run(&mut s, "PWD").0, 257);
    }

    #[test]
    fn auth_tls_pbsz_and_prot_in_order() {
        let mut plain = Session::new();
        assert_eq!(run(&mut plain, "AUTH TLS").0, 502, "no TLS configured");
        let mut s = Session::new().with_tls(true);
        assert_eq!(run(&mut s, "USER ftp").0, 530, "TLS required first");
        assert_eq!(run(&mut s, "PBSZ 0").0, 503);
        assert_eq!(run(&mut s, "PROT P").0, 503);
        assert_eq!(run(&mut s, "AUTH TLS"), (234, Action::StartTls));
        assert_eq!(run(&mut s, "AUTH TLS").0, 503, "once");
        assert_eq!(run(&mut s, "PROT P").0, 503, "PBSZ first");
        assert_eq!(run(&mut s, "PBSZ 0").0, 200);
        assert!(!s.data_protected());
        assert_eq!(run(&mut s, "PROT P").0, 200);
        assert!(s.data_protected());
        assert_eq!(run(&mut s, "USER ftp").0, 331);
        assert_eq!(run(&mut s, "PASS x").0, 230);
        assert_eq!(run(&mut s, "PROT C").0, 200);
        assert!(!s.data_protected());
    }

    #[test]
    fn active_mode_when_allowed() {
        let mut s = Session::new().with_active_mode();
        run(&mut s, "USER ftp");
        run(&mut s, "PASS");
        assert_eq!(
            run(&mut s, "PORT 127,0,0,1,4,1"),
            (
                0,
                Action::Active {
                    addr: "127.0.0.1:1025".parse().unwrap()
                }
            )
        );
        assert!(matches!(run(&mut s, "RETR a").1, Action::Retrieve { .. }));
        s.data_used();
        assert_eq!(run(&mut s, "RETR a").0, 425, "one transfer per PORT");
        assert_eq!(
            run(&mut s, "EPRT |2|::1|5282|").1,
            Action::Active {
                addr: "[::1]:5282".parse().unwrap()
            }
        );
        assert_eq!(run(&mut s, "EPSV ALL").0, 200);
        assert_eq!(run(&mut s, "PORT 127,0,0,1,4,1").0, 503, "EPSV ALL holds");
    }

    #[test]
    fn transfers_need_a_passive_listener_and_take_rest_once() {
        let mut s = Session::new();
        run(&mut s, "USER ftp");
        run(&mut s, "PASS");
        assert_eq!(run(&mut s, "RETR a").0, 425);
        assert_eq!(run(&mut s, "LIST").0, 425);
        assert_eq!(
            run(&mut s, "PORT 127,0,0,1,4,1").0,
            502,
            "active mode is off"
        );
        assert_eq!(run(&mut s, "STOR a").0, 550, "read-only");
        assert_eq!(run(&mut s, "EPSV"), (0, Action::Passive { extended: true }));
        assert_eq!(run(&mut s, "REST 100").0, 350);
        s.entered(b"/pub".to_vec());
        assert_eq!(
            run(&mut s, "RETR f.iso"),
            (
                0,
                Action::Retrieve {
                    path: b"/pub/f.iso".to_vec(),
                    offset: 100
                }
            )
        );
        s.data_used();
        run(&mut s, "PASV");
        assert_eq!(
            run(&mut s, "RETR ../g"),
            (
                0,
                Action::Retrieve {
                    path: b"/g".to_vec(),
                    offset: 0
                }
            )
        );
        assert_eq!(run(&mut s, "EPSV ALL").0, 200);
        assert_eq!(run(&mut s, "PASV").0, 503, "only EPSV after EPSV ALL");
        assert_eq!(run(&mut s, "QUIT"), (221, Action::Quit));
    }

    #[test]
    fn pwd_doubles_quotes() {
        let mut s = Session::new();
        run(&mut s, "USER anonymous");
        run(&mut s, "PASS x");
        s.entered(b"/say \"hi\"".to_vec());
        let (reply, _) = s.handle(Command::Pwd);
        assert_eq!(
            reply.unwrap().bytes(),
            b"257 \"/say \"\"hi\"\"\" is the current directory.\r\n"
        );
    }
}
