//! Read-only anonymous FTP (issue 28), built up from its pure parts: so far the control
//! connection's command parser ([`command`]: RFC 959 with RFC 2428's EPSV/EPRT, RFC 3659's
//! SIZE/MDTM/REST/MLST/MLSD and RFC 2389's FEAT/OPTS), which refuses overlong lines, NUL
//! and bare CR, and sorts the write commands out for a clear refusal. The listener, the
//! session and the data connections are not written yet.
#![forbid(unsafe_code)]

pub mod command;
