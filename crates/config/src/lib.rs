//! Configuration: the TOML file as written ([`raw`]) and the validated, compiled form the
//! server reads ([`Resolved`]).
//!
//! Brief overview: [`load_file`] reads and resolves a file; [`for_directory`] builds the
//! no-config default (`ramjet serve DIR`). Every error is a [`ConfigError`] naming the file,
//! line and key. The request path only ever sees an `Arc<Resolved>`; reload builds a new one.
#![forbid(unsafe_code)]

mod access;
mod acme;
mod cache;
mod cgi;
mod either_form;
mod error;
mod error_pages;
mod file_cache;
mod ftp;
mod handler;
mod handoff;
mod headers;
mod limits;
mod listen;
mod log;
mod module;
mod print;
mod protect;
pub mod raw;
mod redirect;
mod resolve;
mod resolved;
mod shaping;
mod statics;
mod timeouts;
mod tls;
mod units;
mod upstream;
mod workers;

pub use access::{AccessRules, Cidr};
pub use acme::{AcmeOptions, AcmeSite};
pub use cache::{CacheRule, CacheZone, KeyPart};
pub use cgi::{find_user, CgiOptions, CgiUser};
pub use error::ConfigError;
pub use error_pages::{ErrorPage, ErrorPages};
pub use ftp::FtpOptions;
pub use handler::Handler;
pub use headers::ResponseHeaders;
pub use listen::Protocol;
pub use module::{
    set_module_starter, ModuleError, ModuleInstance, ModuleMount, ModuleStarter, MountContext,
};
pub use protect::BasicAuth;
pub use redirect::RedirectOptions;
pub use resolve::{for_directory, load_file, load_str};
pub use resolved::{strip_port, FileCacheOptions, Limits, Location, Resolved, Timeouts, VHost};
pub use shaping::Shaping;
pub use statics::{Encoding, StaticOptions, SymlinkPolicy, DEFAULT_MAX_RANGES};
pub use tls::TlsFiles;
pub use units::{Seconds, Size};
pub use upstream::{Balance, ProxyOptions, Upstream, UpstreamAddr, UpstreamServer};
