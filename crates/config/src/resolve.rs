//! RawConfig -> Resolved: defaults, inheritance (defaults -> location), validation.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use toml::Spanned;

use crate::error::{line_of, ConfigError};
use crate::error_pages::ErrorPages;
use crate::handler::Handler;
use crate::protect::BasicAuth;
use crate::raw::{RawConfig, RawListen, RawLocation};
use crate::resolved::{Location, Resolved, VHost};
use crate::upstream::Upstream;

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

/// Most type errors reported from one file (each costs a parse of the file).
const MAX_TYPE_ERRORS: usize = 50;

/// Resolve configuration text; relative roots are taken from `base`. Every error comes
/// back at once (the first, with the others in `also`): a value of the wrong type, an
/// unknown key, and the checks of the values that were well typed.
pub fn load_str(src: &str, name: &str, base: &Path) -> Result<Resolved, ConfigError> {
    let (raw, typed) = deserialize_all(src, name)?;
    let resolver = Resolver::new(src, name, base);
    // Upstreams and locations whose tables had type errors: what the checks would say of
    // them (a location naming an upstream "that is not defined") follows from those.
    let broken: Vec<String> = typed.iter().filter_map(|e| e.key.clone()).collect();
    for key in &broken {
        if let Some(rest) = key.strip_prefix("upstream.") {
            let name = rest.split('.').next().unwrap_or(rest);
            resolver
                .failed_upstreams
                .borrow_mut()
                .push(name.to_string());
        }
    }
    let resolved = resolver.resolve(raw);
    if typed.is_empty() {
        return resolved;
    }
    let mut all = typed;
    if let Err(first) = resolved {
        // A check's error in the table that held a type error (that table read without it).
        let within = |k: &Option<String>, b: &String| {
            let table = b.rsplit_once('.').map_or(b.as_str(), |(t, _)| t);
            k.as_deref().is_some_and(|k| under(k, table))
        };
        let more = std::iter::once(first.clone()).chain(first.also);
        all.extend(
            more.filter(|e| !broken.iter().any(|b| within(&e.key, b)))
                .map(|mut e| {
                    e.also = Vec::new();
                    e
                }),
        );
    }
    all.sort_by_key(|e| e.line.unwrap_or(0));
    let mut first = all.remove(0);
    first.also = all;
    Err(first)
}

/// Deserialize `src`, going past type errors: each error's lines are blanked (spaces, so
/// every later offset and line number stays as it was) and the text is read again, until
/// it reads or `MAX_TYPE_ERRORS` were found. What it read with the erroneous lines left
/// out, and the errors. A syntax error ends it at once (nothing after it can be trusted).
fn deserialize_all(src: &str, name: &str) -> Result<(RawConfig, Vec<ConfigError>), ConfigError> {
    let mut text = src.to_string();
    let mut errors: Vec<ConfigError> = Vec::new();
    loop {
        let de = toml::Deserializer::parse(&text).map_err(|e| toml_error(src, name, None, &e))?;
        let e = match serde_path_to_error::deserialize::<_, RawConfig>(de) {
            Ok(raw) => return Ok((raw, errors)),
            Err(e) => e,
        };
        let key = e
            .path()
            .to_string()
            .replace(".$__serde_spanned_private_value", "");
        let error = toml_error(src, name, Some(key.clone()), e.inner());
        let span = e.inner().span();
        let repeated = errors.contains(&error);
        // "missing field `x`" for a key whose own error blanked it is not news.
        let follows = e
            .inner()
            .message()
            .strip_prefix("missing field `")
            .and_then(|m| m.split('`').next())
            .is_some_and(|field| {
                let own = format!("{key}.{field}");
                errors
                    .iter()
                    .any(|e| e.key.as_deref().is_some_and(|k| under(k, &own)))
            });
        if !repeated && !follows {
            errors.push(error);
        }
        let blanked = span.is_some_and(|s| blank_lines(&mut text, s));
        if repeated || !blanked || errors.len() >= MAX_TYPE_ERRORS {
            let mut first = errors.remove(0);
            first.also = errors;
            return Err(first);
        }
    }
}

/// `key` is `path` or a key inside it (`path.x`, `path[0]`).
fn under(key: &str, path: &str) -> bool {
    key.strip_prefix(path)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
}

/// Replace every line that `span` touches with spaces (a multi-byte character with as
/// many spaces as it has bytes); false when nothing changed.
fn blank_lines(text: &mut String, span: std::ops::Range<usize>) -> bool {
    let bytes = text.as_bytes();
    let start = bytes[..span.start.min(bytes.len())]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let end = span.end.max(span.start + 1).min(bytes.len());
    let end = bytes[end..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(bytes.len(), |i| end + i);
    if bytes[start..end].iter().all(|&b| b == b' ' || b == b'\n') {
        return false;
    }
    let blank: String = bytes[start..end]
        .iter()
        .map(|&b| if b == b'\n' { '\n' } else { ' ' })
        .collect();
    text.replace_range(start..end, &blank);
    true
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
    /// `[cache.NAME]` tables, and the names of those with errors.
    caches: (&'a [crate::CacheZone], &'a [String]),
    max_body: u64,
    /// `[defaults]`' error pages and authentication, loaded once and shared.
    error_pages: Option<&'a Arc<ErrorPages>>,
    auth: Option<&'a Arc<BasicAuth>>,
}

pub(crate) struct Resolver<'a> {
    src: &'a str,
    name: &'a str,
    pub(crate) base: &'a Path,
    /// Errors found so far: checking goes on past one, so a file's errors come all at once.
    errors: std::cell::RefCell<Vec<ConfigError>>,
    /// Upstreams that had errors: locations naming them add no error of their own.
    pub(crate) failed_upstreams: std::cell::RefCell<Vec<String>>,
    /// htpasswd files read so far (locations naming the same file share it).
    pub(crate) htpasswd: std::cell::RefCell<Vec<(PathBuf, Arc<ramjet_auth::Htpasswd>)>>,
    /// With `[acme]`: its state directory (the challenge answers are under it).
    pub(crate) acme_state: std::cell::RefCell<Option<PathBuf>>,
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
            acme_state: Default::default(),
        }
    }

    pub(crate) fn err(
        &self,
        span: Option<std::ops::Range<usize>>,
        key: &str,
        message: String,
    ) -> ConfigError {
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

    /// A location names a `[table.NAME]` that is not there: the error lists those that are.
    pub(crate) fn undefined<'n>(
        &self,
        name: &toml::Spanned<String>,
        key: &str,
        table: &str,
        known: impl Iterator<Item = &'n str>,
    ) -> ConfigError {
        let known: Vec<&str> = known.collect();
        let defined = if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        };
        self.err(
            Some(name.span()),
            key,
            format!("no [{table}.{}] (defined: {defined})", name.get_ref()),
        )
    }

    /// Note an error and go on checking the rest of the file (`None` in its place).
    pub(crate) fn keep<T>(&self, r: Result<T, ConfigError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.errors.borrow_mut().push(e);
                None
            }
        }
    }

    fn resolve(&self, raw: RawConfig) -> Result<Resolved, ConfigError> {
        // The server-wide sections, each resolved beside its type.
        let crate::listen::Listen {
            addrs: listen,
            proxy_protocol,
            http2,
            ftp: ftp_listeners,
        } = self.listen(raw.listen.as_deref());
        let workers = self.workers(raw.workers.as_ref());
        let (limits, send_rate) = self.limits(raw.limits.unwrap_or_default());
        let timeouts = crate::timeouts::resolve(raw.timeouts.unwrap_or_default());
        let (access_log, log_level) = self.log(raw.log.unwrap_or_default());
        let file_cache = crate::file_cache::resolve(raw.file_cache.unwrap_or_default());

        let mut limits = limits;
        let mut upstreams = Vec::new();
        for (name, u) in raw.upstream.iter().flatten() {
            match crate::upstream::resolve(name, u) {
                Ok(resolved) => upstreams.push(resolved),
                Err(errors) => {
                    for (key, message) in errors {
                        self.keep::<()>(Err(self.err(Some(u.servers.span()), &key, message)));
                    }
                    self.failed_upstreams.borrow_mut().push(name.clone());
                }
            }
        }
        let (caches, failed_caches) = self.caches(raw.cache.as_ref());
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
            caches: (&caches, &failed_caches),
            max_body: limits.max_body,
            error_pages: error_pages.as_ref(),
            auth: auth.as_ref(),
        };
        let mut warnings = Vec::new();
        let acme = self.acme(raw.acme.as_ref(), raw.vhost.as_deref().unwrap_or(&[]));
        let tls_files: Vec<Option<crate::TlsFiles>> = raw
            .listen
            .iter()
            .flatten()
            .map(|l| match l.get_ref().tls() {
                Some(crate::tls::RawSiteTls::Files(t)) => Some(self.tls_files(t)),
                _ => None,
            })
            .collect();
        let tls = self.tls(
            raw.listen.as_deref(),
            raw.vhost.as_deref().unwrap_or(&[]),
            &mut warnings,
        );
        let mut next_id = 0;
        let mut vhosts = Vec::new();
        if let Some(locs) = raw.location {
            let locations = self.locations(&inherited, None, locs, "location", &mut next_id);
            vhosts.push(VHost {
                names: vec!["*".into()],
                locations,
                tls: None,
                acme: false,
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
                tls: v.tls.as_ref().and_then(|t| match t.get_ref() {
                    crate::tls::RawSiteTls::Files(f) => Some(self.tls_files(f)),
                    _ => None,
                }),
                acme: v
                    .tls
                    .as_ref()
                    .is_some_and(|t| matches!(t.get_ref(), crate::tls::RawSiteTls::Acme)),
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
        if tls.iter().any(Option::is_some) {
            if let Some(l) = vhosts
                .iter()
                .flat_map(|v| &v.locations)
                .find(|l| l.handlers.contains(&Handler::Handoff))
            {
                self.keep::<()>(Err(self.err(
                    None,
                    "listen",
                    format!(
                        "a TLS listener cannot hand its connections over (location `{}` has \
                         handoff): a TLS session cannot move to another process; serve the \
                         hand-off from a cleartext-only configuration, or proxy that location",
                        l.prefix
                    ),
                )));
            }
        }
        let default_vhost = vhosts
            .iter()
            .position(|v| v.names.iter().any(|n| n == "*"))
            .unwrap_or(0);
        let ftp = self.ftp(
            raw.ftp.as_ref(),
            ftp_listeners.contains(&true),
            &vhosts,
            default_vhost,
        );
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
            http2,
            ftp_listeners,
            ftp,
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
            caches,
            error_pages,
            send_rate,
            tls,
            tls_files,
            warnings,
            acme,
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
        if let Some(webroot) = self.acme_webroot() {
            let here = |l: &RawLocation| {
                l.path
                    .as_ref()
                    .is_some_and(|p| p.get_ref() == crate::acme::CHALLENGE_PATH)
            };
            if !raw.iter().any(here) {
                raw.push(crate::acme::challenge_location(&webroot));
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
            caches,
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
            true => Some(self.proxy(defaults, loc, key, upstreams, caches)?),
            false => None,
        };
        if let (Some(c), None) = (loc.cache.as_ref(), &proxy) {
            if c.get_ref() != "off" {
                return Err(self.err(
                    Some(c.span()),
                    &format!("{key}.cache"),
                    "the cache stores what the proxy handler forwards: this location has no proxy"
                        .into(),
                ));
            }
        }
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
            true => Some(self.module(loc, key, upstreams)?),
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
}

#[cfg(test)]
mod tests;
