//! Read-only anonymous FTP (issue 28), built up from its pure parts so far: the control
//! connection's command parser ([`command`]: RFC 959 with RFC 2428's EPSV/EPRT, RFC 3659's
//! SIZE/MDTM/REST/MLST/MLSD and RFC 2389's FEAT/OPTS), which refuses overlong lines, NUL
//! and bare CR, and sorts the write commands out for a clear refusal; the [`session`]
//! (login, current directory never above the root, TYPE, REST, passive listener, EPSV
//! ALL: a reply and an [`session::Action`] for each command); [`reply`] formatting. The
//! listener and the data connections (the I/O side) are not written yet.
#![forbid(unsafe_code)]

pub mod command;
pub mod reply;
pub mod session;
