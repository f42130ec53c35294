//! RawConfig -> Resolved: defaults, inheritance (defaults -> location), validation.

use std::collections::HashMap;
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::statics::{StaticOptions, SymlinkPolicy, DEFAULT_MAX_RANGES};
use ramjet_observe::{AccessLogOptions, LogFormat, LogTarget};
use toml::Spanned;

use crate::error::{line_of, ConfigError};
use crate::error_pages::ErrorPages;
use crate::handler::Handler;
use crate::protect::BasicAuth;
use crate::raw::{RawConfig, RawListen, RawLocation, Workers};
use crate::resolved::{
    FileCacheOptions, Limits, Location, RedirectOptions, Resolved, Timeouts, VHost,
};
use crate::upstream::{ProxyOptions, Upstream};

/// Default listen port when no address is configured.
pub const DEFAULT_PORT: u16 = 8080;
/// Slowloris defence: the whole head must arrive within this (nginx client_header_timeout 60s;
/// shorter, because nothing legitimate needs more).
const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(20);
/// nginx keepalive_timeout is 75 s; Apache's KeepAliveTimeout 5 s. Mirrors want the middle.
const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(60);
/// nginx send_timeout.
const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(60);
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_HANDOFF_TIMEOUT: Duration = Duration::from_secs(1);
const DEFAULT_CGI_TIMEOUT: Duration = Duration::from_secs(60);
const DEFAULT_CGI_PROCESSES: u32 = 64;
/// A GET body is read and dropped up to this (nginx client_max_body_size is 1 MiB).
const DEFAULT_MAX_BODY: u64 = 1 << 20;
/// Leaves room under the 20,000-fd hard limit of this machine for cache fds and logs.
const DEFAULT_MAX_CONNECTIONS: usize = 100_000;
const DEFAULT_CACHE_ENTRIES: usize = 4096;
const DEFAULT_CACHE_MEMORY: u64 = 64 << 20;
/// Files up to this size are served from memory with one writev; larger go by sendfile with
/// the head sent MSG_MORE. Measured here (1 worker, wrk -c50, req per server-CPU-second):
/// 4 KB and 8 KB were 9-28% better from memory (two runs each), 21.5 KB 17% better by sendfile.
const DEFAULT_SMALL_FILE_MAX: u64 = 16 << 10;
/// nginx open_file_cache_valid is 60 s; one second keeps edits visible almost at once.
const DEFAULT_CACHE_VALID: Duration = Duration::from_secs(1);

/// Read and resolve a configuration file.
pub fn load_file(path: &Path) -> Result<Resolved, ConfigError> {
    let name = path.display().to_string();
    let src = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: name.clone(),
        line: None,
        key: None,
        message: format!("cannot read: {e}"),
        also: Vec::new(),
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    load_str(&src, &name, base)
}

/// Resolve configuration text; relative roots are taken from `base`.
pub fn load_str(src: &str, name: &str, base: &Path) -> Result<Resolved, ConfigError> {
    let de = toml::Deserializer::parse(src).map_err(|e| toml_error(src, name, None, &e))?;
    let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        toml_error(src, name, Some(key), e.inner())
    })?;
    Resolver::new(src, name, base).resolve(raw)
}

/// The configuration `ramjet serve DIR` uses when no file is given.
pub fn for_directory(
    dir: &Path,
    listen: &[SocketAddr],
    autoindex: bool,
) -> Result<Resolved, ConfigError> {
    check_served_dir(dir)?;
    let mut raw = RawConfig::default();
    if !listen.is_empty() {
        raw.listen = Some(
            listen
                .iter()
                .map(|a| Spanned::new(0..0, RawListen::Address(a.to_string())))
                .collect(),
        );
    }
    raw.location = Some(vec![RawLocation {
        path: None,
        root: Some(Spanned::new(0..0, dir.display().to_string())),
        autoindex: Some(autoindex),
        ..RawLocation::default()
    }]);
    Resolver::new("", "<default>", Path::new(".")).resolve(raw)
}

/// The directory given on the command line (`ramjet serve DIR`) exists, is a directory
/// and can be listed; errors say it was the command line's, in a new user's terms.
fn check_served_dir(dir: &Path) -> Result<(), ConfigError> {
    let shown = dir.display();
    let err = |message: String| ConfigError {
        file: "command line".to_string(),
        line: None,
        key: None,
        message,
        also: Vec::new(),
    };
    let denied = || {
        err(format!(
            "the directory to serve, `{shown}`, cannot be read: permission denied (check its permissions and its parents'; ramjet runs as the user who started it)"
        ))
    };
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(err(format!(
            "the directory to serve, `{shown}`, does not exist"
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(denied()),
        Err(e) => Err(err(format!("the directory to serve, `{shown}`: {e}"))),
        Ok(m) if !m.is_dir() => {
            let parent = dir
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            Err(err(format!(
                "`{shown}` is a file, not a directory: serve the directory that holds it (`ramjet serve {}`)",
                parent.display()
            )))
        }
        Ok(_) => match std::fs::read_dir(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(denied()),
            Err(e) => Err(err(format!("the directory to serve, `{shown}`: {e}"))),
            Ok(_) => Ok(()),
        },
    }
}

fn toml_error(src: &str, name: &str, key: Option<String>, e: &toml::de::Error) -> ConfigError {
    let key = key.filter(|k| !k.is_empty() && k != ".");
    ConfigError {
        file: name.to_string(),
        line: e.span().map(|s| line_of(src, s.start)),
        key,
        message: did_you_mean(e.message().trim()),
        also: Vec::new(),
    }
}

/// serde's "unknown field `x`, expected one of `a`, `b`" with the nearest known key named
/// first, when one is near (a typo): "unknown key `roott`; did you mean `root`? (...)".
fn did_you_mean(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_string();
    };
    let Some((unknown, expected)) = rest.split_once('`') else {
        return message.to_string();
    };
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let best = known
        .iter()
        .map(|k| (edit_distance(unknown, k), *k))
        .min()
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .or_else(|| {
            // A known key inside the unknown one, or the other way round
            // (`keepalive_timeout` for `keepalive`): the longest such.
            known
                .iter()
                .filter(|k| k.len() >= 3 && (unknown.contains(**k) || k.contains(unknown)))
                .max_by_key(|k| k.len())
                .map(|k| (0, *k))
        });
    match best {
        Some((_, k)) => format!(
            "unknown key `{unknown}`; did you mean `{k}`? (known here: {})",
            known.join(", ")
        ),
        None => format!("unknown key `{unknown}` (known here: {})", known.join(", ")),
    }
}

/// Levenshtein distance (keys are short: a full table is fine).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// What every location inherits: `[defaults]`, the upstreams it may name, the global body
/// limit.
#[derive(Clone, Copy)]
struct Inherited<'a> {
    defaults: &'a RawLocation,
    upstreams: &'a [Upstream],
    max_body: u64,
    /// `[defaults]`' error pages and authentication, loaded once and shared.
    error_pages: Option<&'a Arc<ErrorPages>>,
    auth: Option<&'a Arc<BasicAuth>>,
}

struct Resolver<'a> {
    src: &'a str,
    name: &'a str,
    base: &'a Path,
    /// Errors found so far: checking goes on past one, so a file's errors come all at once.
    errors: std::cell::RefCell<Vec<ConfigError>>,
    /// Upstreams that had errors: locations naming them add no error of their own.
    failed_upstreams: std::cell::RefCell<Vec<String>>,
    /// htpasswd files read so far (locations naming the same file share it).
    htpasswd: std::cell::RefCell<Vec<(PathBuf, Arc<ramjet_auth::Htpasswd>)>>,
}

impl<'a> Resolver<'a> {
    fn new(src: &'a str, name: &'a str, base: &'a Path) -> Resolver<'a> {
        Resolver {
            src,
            name,
            base,
            errors: Default::default(),
            failed_upstreams: Default::default(),
            htpasswd: Default::default(),
        }
    }

    fn err(&self, span: Option<std::ops::Range<usize>>, key: &str, message: String) -> ConfigError {
        ConfigError {
            file: self.name.to_string(),
            line: span
                .filter(|s| s.end > 0)
                .map(|s| line_of(self.src, s.start)),
            key: Some(key.to_string()),
            message,
            also: Vec::new(),
        }
    }

    /// Note an error and go on checking the rest of the file (`None` in its place).
    fn keep<T>(&self, r: Result<T, ConfigError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.errors.borrow_mut().push(e);
                None
            }
        }
    }

    fn resolve(&self, raw: RawConfig) -> Result<Resolved, ConfigError> {
        let mut proxy_protocol = Vec::new();
        let listen = match &raw.listen {
            None => vec![
                SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)),
                SocketAddr::from(([0u16; 8], DEFAULT_PORT)),
            ],
            Some(list) => {
                let mut out = Vec::new();
                for (i, a) in list.iter().enumerate() {
                    let text = a.get_ref().address();
                    let Some(addr) = self.keep(text.parse::<SocketAddr>().map_err(|_| {
                        self.err(
                            Some(a.span()),
                            &format!("listen[{i}]"),
                            format!("`{text}` is not an address:port (e.g. \"0.0.0.0:8080\" or \"[::]:8080\")"),
                        )
                    })) else {
                        continue;
                    };
                    out.push(addr);
                    proxy_protocol.push(a.get_ref().proxy_protocol());
                }
                if list.is_empty() {
                    self.keep::<()>(Err(self.err(
                        None,
                        "listen",
                        "needs at least one address".into(),
                    )));
                }
                out
            }
        };
        let workers = match raw.workers {
            None => 0,
            Some(Workers::Count(0)) => {
                self.keep::<()>(Err(self.err(
                    None,
                    "workers",
                    "must be at least 1 (or \"auto\")".into(),
                )));
                1
            }
            Some(Workers::Count(n)) => n,
            Some(Workers::Auto(s)) if s == "auto" => 0,
            Some(Workers::Auto(s)) => {
                self.keep::<()>(Err(self.err(
                    None,
                    "workers",
                    format!("`{s}` is not a number or \"auto\""),
                )));
                1
            }
        };
        let workers = if workers == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            workers
        };
        let l = raw.limits.unwrap_or_default();
        let defaults = ramjet_http1::Limits::default();
        let limits = Limits {
            http1: ramjet_http1::Limits {
                max_target: l.max_target.map_or(defaults.max_target, |s| s.0 as usize),
                max_head: l.max_head.map_or(defaults.max_head, |s| s.0 as usize),
            },
            max_body: l.max_body.map_or(DEFAULT_MAX_BODY, |s| s.0),
            max_body_any: 0,
            max_connections: l.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS),
            send_buffer: l.send_buffer.map(|s| s.0 as usize),
            max_connections_per_client: l.max_connections_per_client,
            handoff_batch: l
                .handoff_batch
                .map_or(ramjet_handoff::MAX_BATCH, |n| n as usize),
            cgi_processes: l.cgi_processes.unwrap_or(DEFAULT_CGI_PROCESSES) as usize,
        };
        if l.cgi_processes == Some(0) {
            self.keep::<()>(Err(self.err(
                None,
                "limits.cgi_processes",
                "must be at least 1".into(),
            )));
        }
        if !(1..=ramjet_handoff::MAX_BATCH).contains(&limits.handoff_batch) {
            self.keep::<()>(Err(self.err(
                None,
                "limits.handoff_batch",
                format!("from 1 to {}", ramjet_handoff::MAX_BATCH),
            )));
        }
        if l.max_connections_per_client == Some(0) {
            self.keep::<()>(Err(self.err(
                None,
                "limits.max_connections_per_client",
                "must be at least 1".into(),
            )));
        }
        let send_rate = match l.send_rate.map(|s| s.0) {
            Some(r) if r < crate::shaping::MIN_RATE => {
                self.keep::<()>(Err(self.err(
                    None,
                    "limits.send_rate",
                    format!("at least {} bytes per second", crate::shaping::MIN_RATE),
                )));
                None
            }
            r => r.map(|r| Arc::new(ramjet_shaping::SharedBucket::new(r))),
        };
        if limits
            .send_buffer
            .is_some_and(|b| !(4096..=1 << 30).contains(&b))
        {
            self.keep::<()>(Err(self.err(
                None,
                "limits.send_buffer",
                "must be between 4 KiB and 1 GiB".into(),
            )));
        }
        if limits.http1.max_head < 1024 {
            self.keep::<()>(Err(self.err(
                None,
                "limits.max_head",
                "must be at least 1k".into(),
            )));
        }
        let t = raw.timeouts.unwrap_or_default();
        let timeouts = Timeouts {
            header: t.header.map_or(DEFAULT_HEADER_TIMEOUT, |s| s.0),
            keepalive: t.keepalive.map_or(DEFAULT_KEEPALIVE_TIMEOUT, |s| s.0),
            send: t.send.map_or(DEFAULT_SEND_TIMEOUT, |s| s.0),
            shutdown: t.shutdown.map_or(DEFAULT_SHUTDOWN_TIMEOUT, |s| s.0),
            handoff: t.handoff.map_or(DEFAULT_HANDOFF_TIMEOUT, |s| s.0),
            cgi: t.cgi.map_or(DEFAULT_CGI_TIMEOUT, |s| s.0),
        };
        let log = raw.log.unwrap_or_default();
        let access_log = AccessLogOptions {
            // Like nginx, log requests unless told not to; stdout needs no path to exist.
            target: log.access.unwrap_or(LogTarget::Stdout),
            format: log.format.unwrap_or(LogFormat::Combined),
        };
        let access_log = match access_log.target {
            LogTarget::File(ref p) if p.is_relative() => AccessLogOptions {
                target: LogTarget::File(self.base.join(p)),
                ..access_log
            },
            _ => access_log,
        };
        let log_level = log.level.unwrap_or_else(|| "info".into());
        if !matches!(
            log_level.as_str(),
            "error" | "warn" | "info" | "debug" | "trace"
        ) {
            self.keep::<()>(Err(self.err(
                None,
                "log.level",
                format!("`{log_level}` is not one of error, warn, info, debug, trace"),
            )));
        }
        let c = raw.file_cache.unwrap_or_default();
        let file_cache = FileCacheOptions {
            entries: c.entries.unwrap_or(DEFAULT_CACHE_ENTRIES).max(1),
            memory: c.memory.map_or(DEFAULT_CACHE_MEMORY, |s| s.0),
            small_file_max: c.small_file_max.map_or(DEFAULT_SMALL_FILE_MAX, |s| s.0),
            valid: c.valid.map_or(DEFAULT_CACHE_VALID, |s| s.0),
            watch: c.watch.unwrap_or(true),
        };

        let mut limits = limits;
        let mut upstreams = Vec::new();
        for (name, u) in raw.upstream.iter().flatten() {
            match self.keep(
                crate::upstream::resolve(name, u)
                    .map_err(|(key, message)| self.err(Some(u.servers.span()), &key, message)),
            ) {
                Some(resolved) => upstreams.push(resolved),
                None => self.failed_upstreams.borrow_mut().push(name.clone()),
            }
        }
        let defaults = raw.defaults.unwrap_or_default();
        let error_pages = self
            .keep(self.error_pages(defaults.error_pages.as_ref(), "defaults"))
            .flatten();
        let auth = self
            .keep(self.auth(&defaults, &RawLocation::default(), "defaults", None))
            .flatten();
        let inherited = Inherited {
            defaults: &defaults,
            upstreams: &upstreams,
            max_body: limits.max_body,
            error_pages: error_pages.as_ref(),
            auth: auth.as_ref(),
        };
        let mut next_id = 0;
        let mut vhosts = Vec::new();
        if let Some(locs) = raw.location {
            let locations = self.locations(&inherited, None, locs, "location", &mut next_id);
            vhosts.push(VHost {
                names: vec!["*".into()],
                locations,
            });
        }
        for (i, v) in raw.vhost.unwrap_or_default().into_iter().enumerate() {
            if v.names.is_empty() {
                self.keep::<()>(Err(self.err(
                    None,
                    &format!("vhost[{i}].names"),
                    "needs at least one name".into(),
                )));
            }
            let key = format!("vhost[{i}].location");
            let locations = self.locations(
                &inherited,
                v.root,
                v.location.unwrap_or_default(),
                &key,
                &mut next_id,
            );
            vhosts.push(VHost {
                names: v.names.iter().map(|n| n.to_ascii_lowercase()).collect(),
                locations,
            });
        }
        if vhosts.is_empty() && self.errors.borrow().is_empty() {
            self.keep::<()>(Err(self.err(
                None,
                "location",
                "nothing to serve: add a [[location]] with a root, or a [[vhost]]".into(),
            )));
        }
        limits.max_body_any = vhosts
            .iter()
            .flat_map(|v| v.locations.iter().map(|l| l.max_body))
            .fold(limits.max_body, u64::max);
        for v in &mut vhosts {
            let host = v.names.first().map_or("*", String::as_str);
            for l in &mut v.locations {
                l.metrics = ramjet_observe::stats::location_slot(host, &l.prefix);
            }
        }
        let default_vhost = vhosts
            .iter()
            .position(|v| v.names.iter().any(|n| n == "*"))
            .unwrap_or(0);
        let mut errors = self.errors.take();
        if !errors.is_empty() {
            let mut first = errors.remove(0);
            first.also = errors;
            return Err(first);
        }
        Ok(Resolved {
            source: self.name.to_string(),
            listen,
            proxy_protocol,
            workers,
            pin_workers: raw.pin_workers.unwrap_or(false),
            limits,
            timeouts,
            access_log,
            log_level,
            file_cache,
            vhosts,
            default_vhost,
            upstreams,
            error_pages,
            send_rate,
        })
    }

    /// A host's locations, longest prefix first. An erroneous location is noted and left
    /// out, so the rest of the file is still checked.
    fn locations(
        &self,
        inherited: &Inherited<'_>,
        vhost_root: Option<Spanned<String>>,
        mut raw: Vec<RawLocation>,
        key: &str,
        next_id: &mut usize,
    ) -> Vec<Location> {
        if let Some(root) = vhost_root {
            if !raw
                .iter()
                .any(|l| l.path.as_ref().is_none_or(|p| p.get_ref() == "/"))
            {
                raw.push(RawLocation {
                    root: Some(root),
                    ..RawLocation::default()
                });
            }
        }
        let mut out: Vec<Location> = Vec::new();
        let mut failed = false;
        for (i, loc) in raw.into_iter().enumerate() {
            let key = format!("{key}[{i}]");
            match self.keep(self.location(inherited, &loc, &key, &out, *next_id)) {
                Some(l) => {
                    out.push(l);
                    *next_id += 1;
                }
                None => failed = true,
            }
        }
        if out.is_empty() && !failed {
            self.keep::<()>(Err(self.err(
                None,
                key,
                "a virtual host needs a root or at least one location".into(),
            )));
        }
        out.sort_by_key(|l| std::cmp::Reverse(l.prefix.len()));
        out
    }

    fn location(
        &self,
        inherited: &Inherited<'_>,
        loc: &RawLocation,
        key: &str,
        earlier: &[Location],
        id: usize,
    ) -> Result<Location, ConfigError> {
        let Inherited {
            defaults,
            upstreams,
            max_body,
            ..
        } = *inherited;
        let prefix = loc
            .path
            .as_ref()
            .map_or("/".to_string(), |p| p.get_ref().clone());
        if !prefix.starts_with('/') {
            return Err(self.err(
                loc.path.as_ref().map(|p| p.span()),
                &format!("{key}.path"),
                format!("`{prefix}` must start with /"),
            ));
        }
        if earlier.iter().any(|l| l.prefix == prefix) {
            return Err(self.err(
                loc.path.as_ref().map(|p| p.span()),
                &format!("{key}.path"),
                format!("`{prefix}` is already a location of this host"),
            ));
        }
        let handlers = self.handlers(defaults, loc, key)?;
        let statics = match handlers.contains(&Handler::Static) {
            true => Some(self.statics(defaults, loc, key)?),
            false => None,
        };
        let proxy = match handlers.contains(&Handler::Proxy) {
            true => Some(self.proxy(defaults, loc, key, upstreams)?),
            false => None,
        };
        let access = self.access(defaults, loc, key)?;
        let redirect = match handlers.contains(&Handler::Redirect) {
            true => Some(self.redirect(loc, key)?),
            false => None,
        };
        let handoff = match handlers.contains(&Handler::Handoff) {
            true => Some(self.handoff(loc, key)?),
            false => None,
        };
        let module = match handlers.contains(&Handler::Module) {
            true => Some(self.module(loc, key)?),
            false => None,
        };
        let cgi = match handlers.contains(&Handler::Cgi) {
            true => Some(self.cgi(defaults, loc, key)?),
            false => None,
        };
        let by_type: Option<std::collections::BTreeMap<String, Duration>> = loc
            .expires_by_type
            .as_ref()
            .or(defaults.expires_by_type.as_ref())
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.0)).collect());
        let response_headers = crate::headers::resolve(
            loc.headers.as_ref().or(defaults.headers.as_ref()),
            loc.expires.or(defaults.expires).map(|s| s.0),
            by_type.as_ref(),
        )
        .map_err(|(k, m)| {
            self.err(
                loc.path.as_ref().map(|p| p.span()),
                &format!("{key}.{k}"),
                m,
            )
        })?
        .map(Box::new);
        let error_pages = match loc.error_pages.is_some() {
            true => self.error_pages(loc.error_pages.as_ref(), key),
            false => Ok(inherited.error_pages.cloned()),
        };
        let auth = match loc.auth_basic.is_some() || loc.auth_basic_user_file.is_some() {
            true => self.auth(defaults, loc, key, loc.path.as_ref().map(|p| p.span())),
            false => Ok(inherited.auth.cloned()),
        };
        // Both are reported when both are wrong.
        let (error_pages, auth) = match (error_pages, auth) {
            (Err(a), Err(b)) => {
                self.keep::<()>(Err(a));
                return Err(b);
            }
            (e, a) => (e?, a?),
        };
        Ok(Location {
            id,
            prefix,
            handlers,
            statics,
            proxy,
            // A handed-off request's body is the backend's to read and to limit (Apache's
            // LimitRequestBody): ramjet refuses none unless the location says so.
            max_body: match (loc.max_body.or(defaults.max_body), &handoff) {
                (Some(s), _) => s.0,
                (None, Some(_)) => u64::MAX,
                (None, None) => max_body,
            },
            access,
            response_headers,
            redirect,
            handoff,
            module,
            cgi,
            error_pages,
            auth,
            metrics: 0,
            shaping: self.shaping(defaults, loc, key)?,
        })
    }

    /// Send and request rates (each key inherited from `[defaults]` when the location has
    /// none); `None` when there are none.
    fn shaping(
        &self,
        d: &RawLocation,
        l: &RawLocation,
        key: &str,
    ) -> Result<Option<Box<crate::Shaping>>, ConfigError> {
        let span = l.path.as_ref().map(|p| p.span());
        let rate = |v: Option<crate::units::Size>, name: &str| match v.map(|s| s.0) {
            Some(r) if r < crate::shaping::MIN_RATE => Err(self.err(
                span.clone(),
                &format!("{key}.{name}"),
                format!("at least {} bytes per second", crate::shaping::MIN_RATE),
            )),
            r => Ok(r),
        };
        let per_conn = rate(l.limit_rate.or(d.limit_rate), "limit_rate")?;
        let client = rate(
            l.limit_rate_client.or(d.limit_rate_client),
            "limit_rate_client",
        )?;
        let location = rate(
            l.limit_rate_location.or(d.limit_rate_location),
            "limit_rate_location",
        )?;
        let after = l.limit_rate_after.or(d.limit_rate_after).map_or(0, |s| s.0);
        let req = l.limit_req.as_ref().or(d.limit_req.as_ref());
        let burst = l.limit_req_burst.or(d.limit_req_burst).unwrap_or(0);
        let requests = match req {
            None => None,
            Some(text) => {
                let per_second = crate::shaping::request_rate(text.get_ref())
                    .map_err(|m| self.err(Some(text.span()), &format!("{key}.limit_req"), m))?;
                Some((
                    per_second,
                    burst,
                    Arc::new(ramjet_shaping::RequestRate::new(per_second, burst)),
                ))
            }
        };
        if per_conn.is_none() && client.is_none() && location.is_none() && requests.is_none() {
            return Ok(None);
        }
        Ok(Some(Box::new(crate::Shaping {
            rate: per_conn,
            rate_after: after,
            client_rate: client,
            clients: client.map(|_| Arc::new(ramjet_shaping::ClientTable::new())),
            location: location.map(|r| Arc::new(ramjet_shaping::SharedBucket::new(r))),
            requests_text: req.map(|t| t.get_ref().trim().to_string()),
            requests,
        })))
    }

    /// Error pages from a table (`None`: no table, the server's own pages).
    fn error_pages(
        &self,
        table: Option<&std::collections::BTreeMap<String, Spanned<String>>>,
        key: &str,
    ) -> Result<Option<Arc<ErrorPages>>, ConfigError> {
        let Some(table) = table else {
            return Ok(None);
        };
        let mut pages = ErrorPages::default();
        for (status, file) in table {
            let k = format!("{key}.error_pages.{status}");
            let status = crate::error_pages::status_of(status)
                .map_err(|m| self.err(Some(file.span()), &k, m))?;
            let path = self.base.join(file.get_ref());
            let page = crate::error_pages::load(status, &path)
                .map_err(|m| self.err(Some(file.span()), &k, m))?;
            pages.push(page);
        }
        Ok(Some(Arc::new(pages)))
    }

    /// Basic authentication from a location's keys over `[defaults]`' (a realm of "off"
    /// turns it off); `None`: not protected.
    fn auth(
        &self,
        d: &RawLocation,
        l: &RawLocation,
        key: &str,
        at: Option<std::ops::Range<usize>>,
    ) -> Result<Option<Arc<BasicAuth>>, ConfigError> {
        let realm = l.auth_basic.as_ref().or(d.auth_basic.as_ref());
        let file = l
            .auth_basic_user_file
            .as_ref()
            .or(d.auth_basic_user_file.as_ref());
        let (realm, file) = match (realm, file) {
            (None, None) => return Ok(None),
            (Some(r), _) if r.get_ref() == "off" => return Ok(None),
            (Some(r), None) => {
                return Err(self.err(
                    Some(r.span()),
                    &format!("{key}.auth_basic_user_file"),
                    "missing: auth_basic needs the htpasswd file of its users".into(),
                ))
            }
            (None, Some(f)) => {
                return Err(self.err(
                    Some(f.span()).or(at),
                    &format!("{key}.auth_basic"),
                    "missing: auth_basic_user_file needs a realm (auth_basic = \"Restricted\")"
                        .into(),
                ))
            }
            (Some(r), Some(f)) => (r, f),
        };
        let path = self.base.join(file.get_ref());
        let cached = self
            .htpasswd
            .borrow()
            .iter()
            .find(|(p, _)| *p == path)
            .map(|(_, h)| h.clone());
        let users = match cached {
            Some(h) => h,
            None => {
                let h = ramjet_auth::Htpasswd::load(&path).map_err(|e| {
                    let at = e.line.map_or(String::new(), |n| format!(" (line {n})"));
                    self.err(
                        Some(file.span()),
                        &format!("{key}.auth_basic_user_file"),
                        format!("{}{at}", e.message),
                    )
                })?;
                if h.is_empty() {
                    return Err(self.err(
                        Some(file.span()),
                        &format!("{key}.auth_basic_user_file"),
                        format!("{}: no users: nobody could log in", path.display()),
                    ));
                }
                let h = Arc::new(h);
                self.htpasswd.borrow_mut().push((path.clone(), h.clone()));
                h
            }
        };
        crate::protect::basic_auth(realm.get_ref(), &path, users)
            .map(|a| Some(Arc::new(a)))
            .map_err(|m| self.err(Some(realm.span()), &format!("{key}.auth_basic"), m))
    }

    /// A location's hand-off socket: an absolute path (the backend may start later, so it
    /// need not exist yet).
    fn handoff(
        &self,
        l: &RawLocation,
        key: &str,
    ) -> Result<std::sync::Arc<std::path::PathBuf>, ConfigError> {
        let Some(path) = l.handoff.as_ref() else {
            return Err(self.err(
                l.path.as_ref().map(|p| p.span()),
                &format!("{key}.handoff"),
                "missing: a location with the handoff handler names the backend's socket".into(),
            ));
        };
        let p = std::path::PathBuf::from(path.get_ref());
        if !p.is_absolute() {
            return Err(self.err(
                Some(path.span()),
                &format!("{key}.handoff"),
                format!("`{}` is not an absolute path", path.get_ref()),
            ));
        }
        Ok(std::sync::Arc::new(p))
    }

    /// A CGI location's program directory (absolute, existing), extra environment, the
    /// account its programs run as, and which request fields they see.
    fn cgi(
        &self,
        d: &RawLocation,
        l: &RawLocation,
        key: &str,
    ) -> Result<std::sync::Arc<crate::CgiOptions>, ConfigError> {
        let Some(root) = l.cgi_root.as_ref() else {
            return Err(self.err(
                l.path.as_ref().map(|p| p.span()),
                &format!("{key}.cgi_root"),
                "missing: a location with the cgi handler names its programs' directory".into(),
            ));
        };
        let path = std::path::PathBuf::from(root.get_ref());
        if !path.is_absolute() || !path.is_dir() {
            return Err(self.err(
                Some(root.span()),
                &format!("{key}.cgi_root"),
                format!(
                    "`{}` is not an absolute path to a directory",
                    root.get_ref()
                ),
            ));
        }
        let env = l
            .cgi_env
            .as_ref()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let document_root = match l.root.as_ref().or(d.root.as_ref()) {
            Some(r) if Path::new(r.get_ref()).is_relative() => self.base.join(r.get_ref()),
            Some(r) => PathBuf::from(r.get_ref()),
            None => path.clone(),
        };
        let user = match l.cgi_user.as_ref().or(d.cgi_user.as_ref()) {
            None => None,
            Some(name) => {
                let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
                match crate::resolved::find_user(&passwd, name.get_ref()) {
                    Some(u) if u.uid != process_uid() && process_uid() != 0 => {
                        return Err(self.err(
                            Some(name.span()),
                            &format!("{key}.cgi_user"),
                            format!(
                                "running programs as `{}` needs ramjet to start as root",
                                name.get_ref()
                            ),
                        ))
                    }
                    Some(u) => Some(u),
                    None => {
                        return Err(self.err(
                            Some(name.span()),
                            &format!("{key}.cgi_user"),
                            format!("no user `{}` in /etc/passwd", name.get_ref()),
                        ))
                    }
                }
            }
        };
        Ok(std::sync::Arc::new(crate::CgiOptions {
            root: path,
            env,
            document_root,
            user,
            pass_auth: l.cgi_pass_auth.or(d.cgi_pass_auth).unwrap_or(false),
            underscores: l
                .underscores_in_headers
                .or(d.underscores_in_headers)
                .unwrap_or(false),
        }))
    }

    /// A location's module, started from its `module_config` table (a wrong table is
    /// this file's error, at the table's line).
    fn module(
        &self,
        l: &RawLocation,
        key: &str,
    ) -> Result<std::sync::Arc<crate::ModuleMount>, ConfigError> {
        let Some(name) = l.module.as_ref() else {
            return Err(self.err(
                l.path.as_ref().map(|p| p.span()),
                &format!("{key}.module"),
                "missing: a location with the module handler names its module".into(),
            ));
        };
        let config = l
            .module_config
            .as_ref()
            .map(|t| t.get_ref().clone())
            .unwrap_or_default();
        match crate::module::start(name.get_ref(), &config) {
            Ok(instance) => Ok(std::sync::Arc::new(crate::ModuleMount {
                name: name.get_ref().clone(),
                config,
                instance,
            })),
            Err(e) => {
                let (span, k) = match (&e.key, &l.module_config) {
                    (Some(k), Some(t)) => (t.span(), format!("{key}.module_config.{k}")),
                    (Some(k), None) => (name.span(), format!("{key}.module_config.{k}")),
                    (None, _) => (name.span(), format!("{key}.module")),
                };
                Err(self.err(Some(span), &k, e.message))
            }
        }
    }

    /// A location's redirect target and status (not inherited: each says where it goes).
    fn redirect(&self, l: &RawLocation, key: &str) -> Result<RedirectOptions, ConfigError> {
        let Some(target) = l.redirect.as_ref() else {
            return Err(self.err(
                l.path.as_ref().map(|p| p.span()),
                &format!("{key}.redirect"),
                "missing: a location with the redirect handler says where to".into(),
            ));
        };
        let t = target.get_ref();
        if t.is_empty() || t.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(self.err(
                Some(target.span()),
                &format!("{key}.redirect"),
                format!("`{t}` is not a URL or path (no spaces or control characters)"),
            ));
        }
        let status = l.redirect_status.unwrap_or(301);
        if ![301, 302, 303, 307, 308].contains(&status) {
            return Err(self.err(
                Some(target.span()),
                &format!("{key}.redirect_status"),
                format!("{status} is not a redirect status (301, 302, 303, 307, 308)"),
            ));
        }
        Ok(RedirectOptions {
            target: t.clone(),
            status,
        })
    }

    /// `allow` and `deny` (each inherited from `[defaults]` when the location has none).
    fn access(
        &self,
        d: &RawLocation,
        l: &RawLocation,
        key: &str,
    ) -> Result<Option<Box<crate::access::AccessRules>>, ConfigError> {
        let parse = |list: Option<&Vec<Spanned<String>>>, name: &str| {
            let mut out = Vec::new();
            for (i, rule) in list.into_iter().flatten().enumerate() {
                let cidr = crate::access::Cidr::parse(rule.get_ref())
                    .map_err(|m| self.err(Some(rule.span()), &format!("{key}.{name}[{i}]"), m))?;
                out.push(cidr);
            }
            Ok::<_, ConfigError>(out)
        };
        let allow = parse(l.allow.as_ref().or(d.allow.as_ref()), "allow")?;
        let deny = parse(l.deny.as_ref().or(d.deny.as_ref()), "deny")?;
        if allow.is_empty() && deny.is_empty() {
            return Ok(None);
        }
        Ok(Some(Box::new(crate::access::AccessRules { allow, deny })))
    }

    /// The location's handler chain: as written, or `["proxy"]` when it names an upstream,
    /// else `["static"]`.
    fn handlers(
        &self,
        d: &RawLocation,
        l: &RawLocation,
        key: &str,
    ) -> Result<Vec<Handler>, ConfigError> {
        let key = format!("{key}.handlers");
        let Some(list) = l.handlers.as_ref().or(d.handlers.as_ref()) else {
            let proxied = l.proxy.is_some() || d.proxy.is_some();
            return Ok(vec![if l.redirect.is_some() {
                Handler::Redirect
            } else if l.handoff.is_some() {
                Handler::Handoff
            } else if l.module.is_some() {
                Handler::Module
            } else if l.cgi_root.is_some() {
                Handler::Cgi
            } else if proxied {
                Handler::Proxy
            } else {
                Handler::Static
            }]);
        };
        let mut out = Vec::new();
        for h in list {
            if out.contains(h.get_ref()) {
                return Err(self.err(
                    Some(h.span()),
                    &key,
                    format!("`{}` is listed twice", h.get_ref().name()),
                ));
            }
            out.push(*h.get_ref());
        }
        if out.is_empty() {
            return Err(self.err(None, &key, "needs at least one handler".into()));
        }
        Ok(out)
    }

    fn proxy(
        &self,
        d: &RawLocation,
        l: &RawLocation,
        key: &str,
        upstreams: &[Upstream],
    ) -> Result<ProxyOptions, ConfigError> {
        let Some(name) = l.proxy.as_ref().or(d.proxy.as_ref()) else {
            return Err(self.err(
                l.path.as_ref().map(|p| p.span()),
                &format!("{key}.proxy"),
                "missing: a location with the proxy handler names an [upstream.NAME]".into(),
            ));
        };
        if self.failed_upstreams.borrow().contains(name.get_ref()) {
            // Its own errors are reported; naming it is not another one.
            return Ok(ProxyOptions {
                upstream: 0,
                path: None,
                host: None,
                underscores: false,
            });
        }
        let Some(upstream) = upstreams.iter().position(|u| u.name == *name.get_ref()) else {
            let known: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
            return Err(self.err(
                Some(name.span()),
                &format!("{key}.proxy"),
                format!(
                    "no [upstream.{}] (defined: {})",
                    name.get_ref(),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        };
        let path = l.proxy_path.as_ref().or(d.proxy_path.as_ref());
        if let Some(p) = path {
            if !p.get_ref().starts_with('/') {
                return Err(self.err(
                    Some(p.span()),
                    &format!("{key}.proxy_path"),
                    format!("`{}` must start with /", p.get_ref()),
                ));
            }
        }
        let host = l.proxy_host.clone().or_else(|| d.proxy_host.clone());
        if let Some(h) = &host {
            if h.is_empty() || h.bytes().any(|b| b <= b' ' || b == 0x7f) {
                return Err(self.err(
                    None,
                    &format!("{key}.proxy_host"),
                    format!("`{h}` is not a host name"),
                ));
            }
        }
        Ok(ProxyOptions {
            upstream,
            path: path.map(|p| p.get_ref().clone()),
            host,
            underscores: l
                .underscores_in_headers
                .or(d.underscores_in_headers)
                .unwrap_or(false),
        })
    }

    fn statics(
        &self,
        d: &RawLocation,
        l: &RawLocation,
        key: &str,
    ) -> Result<StaticOptions, ConfigError> {
        let Some(root) = l.root.as_ref().or(d.root.as_ref()) else {
            return Err(self.err(
                l.path.as_ref().map(|p| p.span()),
                &format!("{key}.root"),
                "missing: every location needs a document root".into(),
            ));
        };
        let mut root_path = PathBuf::from(root.get_ref());
        if root_path.is_relative() {
            root_path = self.base.join(root_path);
        }
        let dir = File::open(&root_path)
            .and_then(|f| {
                if f.metadata()?.is_dir() {
                    Ok(f)
                } else {
                    Err(std::io::Error::other("not a directory"))
                }
            })
            .map_err(|e| {
                self.err(
                    Some(root.span()),
                    &format!("{key}.root"),
                    format!("{}: {e}", root_path.display()),
                )
            })?;
        let types: HashMap<String, String> = d
            .types
            .iter()
            .chain(l.types.iter())
            .flat_map(|m| m.iter())
            .map(|(k, v)| (k.trim_start_matches('.').to_ascii_lowercase(), v.clone()))
            .collect();
        Ok(StaticOptions {
            root_path,
            root: Arc::new(dir),
            autoindex: l.autoindex.or(d.autoindex).unwrap_or(false),
            autoindex_dotfiles: l
                .autoindex_dotfiles
                .or(d.autoindex_dotfiles)
                .unwrap_or(false),
            symlinks: l
                .symlinks
                .or(d.symlinks)
                .unwrap_or(SymlinkPolicy::InsideRoot),
            index: l
                .index
                .clone()
                .or_else(|| d.index.clone())
                .unwrap_or_else(|| vec!["index.html".into()]),
            precompressed: l
                .precompressed
                .clone()
                .or_else(|| d.precompressed.clone())
                .unwrap_or_default(),
            types,
            charset: l
                .charset
                .clone()
                .or_else(|| d.charset.clone())
                .or_else(|| Some("utf-8".into()))
                .filter(|c| !c.is_empty()),
            max_ranges: l
                .max_ranges
                .or(d.max_ranges)
                .unwrap_or(DEFAULT_MAX_RANGES)
                .max(1),
        })
    }
}

#[cfg(test)]
mod tests;

/// The uid this process runs as (the owner of its `/proc` entry).
fn process_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(0, |m| m.uid())
}
