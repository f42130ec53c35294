//! The configuration as written (serde). Unknown keys are errors, so a typo is never
//! silently ignored. Everything is optional; [`crate::resolve`] fills defaults.

use std::collections::BTreeMap;

use crate::statics::{Encoding, SymlinkPolicy};
use serde::Deserialize;
use toml::Spanned;

use crate::handler::Handler;
use crate::units::{Seconds, Size};
use crate::upstream::RawUpstream;

pub use crate::file_cache::RawFileCache;
pub use crate::limits::RawLimits;
pub use crate::listen::{ListenTable, RawListen};
pub use crate::log::RawLog;
pub use crate::timeouts::RawTimeouts;
pub use crate::workers::Workers;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Addresses to listen on, e.g. `["0.0.0.0:8080", "[::]:8080"]`; a table
    /// `{ address = "...", proxy_protocol = true }` expects a PROXY header first.
    pub listen: Option<Vec<Spanned<RawListen>>>,
    /// Worker threads: a number or "auto" (one per CPU).
    pub workers: Option<Spanned<Workers>>,
    /// Pin worker i to CPU i.
    pub pin_workers: Option<bool>,
    pub limits: Option<RawLimits>,
    pub timeouts: Option<RawTimeouts>,
    pub log: Option<RawLog>,
    pub file_cache: Option<RawFileCache>,
    /// Options inherited by every location.
    pub defaults: Option<RawLocation>,
    /// Locations of the default virtual host.
    pub location: Option<Vec<RawLocation>>,
    pub vhost: Option<Vec<RawVHost>>,
    /// Backends a `proxy` location forwards to, by name.
    pub upstream: Option<BTreeMap<String, RawUpstream>>,
    /// Certificates from an ACME CA for the sites with `tls = "acme"`.
    pub acme: Option<Spanned<crate::acme::RawAcme>>,
    /// Caches a `proxy` location may store its answers in, by name.
    pub cache: Option<BTreeMap<String, Spanned<crate::cache::RawCache>>>,
    /// Anonymous read-only FTP on the listeners with `protocol = "ftp"`.
    pub ftp: Option<Spanned<crate::ftp::RawFtp>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVHost {
    /// Host names; "*.example.com" matches subdomains; "*" matches anything.
    pub names: Vec<String>,
    /// Shorthand for a "/" location with this root.
    pub root: Option<Spanned<String>>,
    pub location: Option<Vec<RawLocation>>,
    /// This site's certificate on TLS listeners, chosen by SNI.
    pub tls: Option<Spanned<crate::tls::RawSiteTls>>,
}

/// A location (or the `[defaults]` every location inherits from).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLocation {
    /// Path prefix this location serves, e.g. "/pub/". The longest matching prefix wins.
    pub path: Option<Spanned<String>>,
    pub root: Option<Spanned<String>>,
    pub autoindex: Option<bool>,
    /// Listings show names that start with a dot.
    pub autoindex_dotfiles: Option<bool>,
    pub symlinks: Option<SymlinkPolicy>,
    pub index: Option<Vec<String>>,
    pub precompressed: Option<Vec<Encoding>>,
    /// Extension to media type overrides, e.g. `{ log = "text/plain" }`.
    pub types: Option<BTreeMap<String, String>>,
    pub charset: Option<String>,
    pub max_ranges: Option<usize>,
    /// What answers, in order; `Declined` passes to the next (default: `["proxy"]` when
    /// `proxy` is set, else `["static"]`).
    pub handlers: Option<Vec<Spanned<Handler>>>,
    /// The `[upstream.NAME]` a `proxy` handler forwards to.
    pub proxy: Option<Spanned<String>>,
    /// Replaces the location's path prefix in the forwarded target.
    pub proxy_path: Option<Spanned<String>>,
    /// Host sent upstream (default: the client's).
    pub proxy_host: Option<String>,
    /// The `[cache.NAME]` a `proxy` location stores answers in (`"off"`: none).
    pub cache: Option<Spanned<String>>,
    /// Every storable answer is fresh this long, whatever the origin says.
    pub cache_ttl: Option<Seconds>,
    /// Answers with `Set-Cookie` are stored (the field is not).
    pub cache_ignore_set_cookie: Option<bool>,
    /// What the cache key is made of (default scheme, host, path, query).
    pub cache_key: Option<Spanned<Vec<String>>>,
    /// Client address prefixes that may send `PURGE`.
    pub cache_purge: Option<Spanned<Vec<String>>>,
    /// Largest request body accepted here (overrides `limits.max_body` either way, like
    /// nginx's `client_max_body_size` in a location).
    pub max_body: Option<Size>,
    /// Client address prefixes admitted (when given, only these).
    pub allow: Option<Vec<Spanned<String>>>,
    /// Client address prefixes refused (before `allow`).
    pub deny: Option<Vec<Spanned<String>>>,
    /// Header fields added to successful responses (nginx `add_header`).
    pub headers: Option<BTreeMap<String, String>>,
    /// Cache lifetime (`Cache-Control: max-age` and `Expires`) of successful responses
    /// without their own `Cache-Control`.
    pub expires: Option<Seconds>,
    /// The same by media type (`"text/html"`) or prefix (`"image/"`).
    pub expires_by_type: Option<BTreeMap<String, Seconds>>,
    /// Redirect target: the location's prefix is replaced by it, the rest of the path and
    /// the query are kept.
    pub redirect: Option<Spanned<String>>,
    /// 301 (default), 302, 303, 307 or 308.
    pub redirect_status: Option<u16>,
    /// UNIX socket (absolute path) of a backend that takes the client connections
    /// themselves (the `handoff` handler; not inherited).
    pub handoff: Option<Spanned<String>>,
    /// A module answers here (the `module` handler; not inherited).
    pub module: Option<Spanned<String>>,
    /// The module's own options (`[location.module_config]`), checked by the module.
    pub module_config: Option<Spanned<toml::Table>>,
    /// Directory of CGI programs (the `cgi` handler; not inherited): the path's first
    /// segment after the location's prefix names the program, the rest is PATH_INFO.
    pub cgi_root: Option<Spanned<String>>,
    /// Variables added to every CGI program's environment (Apache `SetEnv`).
    pub cgi_env: Option<std::collections::BTreeMap<String, String>>,
    /// The user CGI programs run as (when ramjet runs as root; Apache suEXEC's `User`).
    pub cgi_user: Option<Spanned<String>>,
    /// Pass the client's `Authorization` field to CGI programs (Apache `CGIPassAuth`).
    pub cgi_pass_auth: Option<bool>,
    /// Header fields whose names contain `_` reach CGI programs and backends (nginx
    /// `underscores_in_headers`); off, they are dropped, so `X_Forwarded_For` cannot pass
    /// for `X-Forwarded-For`.
    pub underscores_in_headers: Option<bool>,
    /// Files served in place of the server's own error page, by status (`"404"`) or class
    /// (`"5xx"`); read at load.
    pub error_pages: Option<BTreeMap<String, Spanned<String>>>,
    /// HTTP Basic authentication realm; `"off"` turns off what `[defaults]` set.
    pub auth_basic: Option<Spanned<String>>,
    /// The htpasswd file of users (bcrypt, MD5 `$apr1$`, SHA-256/512 crypt, `{SHA}`).
    pub auth_basic_user_file: Option<Spanned<String>>,
    /// Send rate per connection (bytes per second; nginx `limit_rate`).
    pub limit_rate: Option<Size>,
    /// Bytes of each response sent at full speed before `limit_rate` applies.
    pub limit_rate_after: Option<Size>,
    /// Send rate for all of one client address's connections here.
    pub limit_rate_client: Option<Size>,
    /// Send rate for every connection of this location together.
    pub limit_rate_location: Option<Size>,
    /// Requests per client address: `"10r/s"` or `"600r/m"` (nginx `limit_req`).
    pub limit_req: Option<Spanned<String>>,
    /// Requests a client may make at once above `limit_req` (nginx `burst`, `nodelay`).
    pub limit_req_burst: Option<u32>,
}
