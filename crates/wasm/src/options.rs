//! `[location.module_config]` of a `module = "wasm"` mount.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ramjet_config::{ModuleError, MountContext, Seconds, Size};
use ramjet_modules::{option_error, options};
use serde::Deserialize;

use crate::journal::{self, Journal};
use crate::upstream::{self, Upstream};

/// As written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    component: String,
    memory: Option<Size>,
    cpu: Option<Seconds>,
    #[serde(default)]
    files: BTreeMap<String, String>,
    #[serde(default)]
    vars: BTreeMap<String, String>,
    #[serde(default)]
    journals: BTreeMap<String, String>,
    #[serde(default)]
    upstreams: BTreeMap<String, String>,
    upstream_timeout: Option<Seconds>,
    reuse: Option<bool>,
}

/// The default memory cap of one request's instance.
pub const DEFAULT_MEMORY: u64 = 64 << 20;
/// The default CPU time one request may use.
pub const DEFAULT_CPU: Duration = Duration::from_secs(1);
/// How long an upstream has for a whole exchange by default (nginx's
/// `proxy_read_timeout` is 60 s between reads; this bounds the whole answer).
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest memory cap the engine's pool is sized for.
pub const MAX_MEMORY: u64 = 4 << 30;

/// Checked options.
pub struct Options {
    /// The component file.
    pub component: PathBuf,
    /// The memory cap of one request's instance, in bytes.
    pub memory: u64,
    /// The CPU time one request may use.
    pub cpu: Duration,
    /// Granted file trees, by name: each directory open, read-only.
    pub files: BTreeMap<String, File>,
    /// Settings the module reads with `var`.
    pub vars: BTreeMap<String, String>,
    /// Granted journals, by name, open.
    pub journals: BTreeMap<String, Arc<Journal>>,
    /// Granted upstreams, by name, resolved.
    pub upstreams: BTreeMap<String, Upstream>,
    /// An instance serves request after request on its worker (default); false: a fresh
    /// instance per request.
    pub reuse: bool,
}

/// Check the table: every error names its key.
pub fn parse(table: &toml::Table, context: &MountContext<'_>) -> Result<Options, ModuleError> {
    let raw: Raw = options(table)?;
    let component = PathBuf::from(&raw.component);
    if !component.is_file() {
        return Err(option_error(
            "component",
            format!("{}: no such file", raw.component),
        ));
    }
    let memory = raw.memory.map_or(DEFAULT_MEMORY, |s| s.0);
    if !(64 << 10..=MAX_MEMORY).contains(&memory) {
        return Err(option_error(
            "memory",
            format!("{memory} bytes: use 64k to 4g"),
        ));
    }
    let cpu = raw.cpu.map_or(DEFAULT_CPU, |s| s.0);
    if cpu.is_zero() {
        return Err(option_error(
            "cpu",
            "a module needs some CPU time (e.g. \"100ms\")",
        ));
    }
    let mut files = BTreeMap::new();
    for (name, dir) in raw.files {
        let opened = File::open(&dir)
            .and_then(|f| f.metadata().map(|m| (f, m.is_dir())))
            .map_err(|e| option_error(&format!("files.{name}"), format!("{dir}: {e}")))?;
        if !opened.1 {
            return Err(option_error(
                &format!("files.{name}"),
                format!("{dir}: not a directory"),
            ));
        }
        files.insert(name, opened.0);
    }
    let mut journals = BTreeMap::new();
    for (name, path) in raw.journals {
        let p = PathBuf::from(&path);
        if !p.is_absolute() {
            return Err(option_error(
                &format!("journals.{name}"),
                format!("{path}: not an absolute path"),
            ));
        }
        let j = journal::open(&p)
            .map_err(|e| option_error(&format!("journals.{name}"), format!("{path}: {e}")))?;
        journals.insert(name, j);
    }
    let timeout = raw
        .upstream_timeout
        .map_or(DEFAULT_UPSTREAM_TIMEOUT, |s| s.0);
    if timeout.is_zero() {
        return Err(option_error(
            "upstream_timeout",
            "an upstream needs some time to answer (e.g. \"10s\")",
        ));
    }
    let mut upstreams = BTreeMap::new();
    for (name, url) in raw.upstreams {
        let up = upstream::grant(&url, timeout, context)
            .map_err(|e| option_error(&format!("upstreams.{name}"), e))?;
        upstreams.insert(name, up);
    }
    Ok(Options {
        component,
        memory,
        cpu,
        files,
        vars: raw.vars,
        journals,
        upstreams,
        reuse: raw.reuse.unwrap_or(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<Options, ModuleError> {
        parse(&toml::from_str(s).unwrap(), &MountContext::EMPTY)
    }

    #[test]
    fn options_are_checked_and_errors_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = dir.path().join("m.wasm");
        std::fs::write(&wasm, b"\0asm").unwrap();
        let c = format!("component = {:?}\n", wasm.to_str().unwrap());
        let o = parse_str(&c).unwrap();
        assert_eq!((o.memory, o.cpu), (DEFAULT_MEMORY, DEFAULT_CPU));
        let o = parse_str(&format!(
            "{c}memory = \"1m\"\ncpu = \"5ms\"\nfiles = {{ www = {:?} }}\nvars = {{ a = \"b\" }}",
            dir.path().to_str().unwrap()
        ))
        .unwrap();
        assert_eq!((o.memory, o.cpu), (1 << 20, Duration::from_millis(5)));
        assert!(o.files.contains_key("www"));
        assert_eq!(o.vars["a"], "b");

        let key = |s: &str| parse_str(s).err().unwrap().key;
        assert_eq!(
            key("component = \"/nope.wasm\"").as_deref(),
            Some("component")
        );
        assert_eq!(key(&format!("{c}memory = 10")).as_deref(), Some("memory"));
        assert_eq!(
            key(&format!("{c}memory = \"8g\"")).as_deref(),
            Some("memory")
        );
        assert_eq!(key(&format!("{c}cpu = 0")).as_deref(), Some("cpu"));
        assert_eq!(
            key(&format!("{c}files = {{ www = \"/nope\" }}")).as_deref(),
            Some("files.www")
        );
        assert_eq!(
            key(&format!(
                "{c}files = {{ www = {:?} }}",
                wasm.to_str().unwrap()
            ))
            .as_deref(),
            Some("files.www")
        );
        assert_eq!(key(&format!("{c}colour = 1")).as_deref(), Some("colour"));
        let o = parse_str(&format!(
            "{c}journals = {{ posts = {:?} }}",
            dir.path().join("posts").to_str().unwrap()
        ))
        .unwrap();
        assert_eq!(o.journals["posts"].size(), (0, 0));
        let o = parse_str(&format!(
            "{c}upstreams = {{ api = \"http://127.0.0.1:9000\" }}\nupstream_timeout = \"2s\""
        ))
        .unwrap();
        assert_eq!(o.upstreams["api"].timeout, Duration::from_secs(2));
        assert_eq!(
            key(&format!("{c}upstreams = {{ api = \"https://x:1\" }}")).as_deref(),
            Some("upstreams.api")
        );
        assert_eq!(
            key(&format!("{c}upstream_timeout = 0")).as_deref(),
            Some("upstream_timeout")
        );
        assert_eq!(
            key(&format!("{c}journals = {{ posts = \"rel/posts\" }}")).as_deref(),
            Some("journals.posts")
        );
        assert_eq!(
            key(&format!("{c}journals = {{ posts = \"/nope/posts\" }}")).as_deref(),
            Some("journals.posts")
        );
    }
}
