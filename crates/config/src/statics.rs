//! The `[[location]]` options of the static-file handler, resolved: what it reads per request.
//! Built once by the config crate; never changed afterwards (reload builds new ones).

use crate::error::ConfigError;
use crate::raw::RawLocation;
use crate::resolve::Resolver;
use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

/// When a symlink inside the document root may be followed. Whatever the policy, the kernel
/// refuses any resolution that leaves the root (`openat2` with `RESOLVE_BENEATH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SymlinkPolicy {
    /// Follow symlinks whose target stays inside the root (nginx's default, minus escapes).
    InsideRoot,
    /// Follow only when the link and its target have the same owner (Apache's
    /// `SymLinksIfOwnerMatch`).
    OwnerMatch,
    /// Never follow a symlink (nginx `disable_symlinks on`).
    Never,
}

/// A content coding whose precompressed sibling file may be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    Zstd,
    Br,
    Gzip,
}

impl Encoding {
    /// The `Content-Encoding` token (RFC 9110 §8.4.1).
    pub fn token(self) -> &'static str {
        match self {
            Encoding::Zstd => "zstd",
            Encoding::Br => "br",
            Encoding::Gzip => "gzip",
        }
    }

    /// The file-name suffix of the sibling (`.zst`, `.br`, `.gz`).
    pub fn suffix(self) -> &'static str {
        match self {
            Encoding::Zstd => ".zst",
            Encoding::Br => ".br",
            Encoding::Gzip => ".gz",
        }
    }
}

/// Options of one static location, resolved.
#[derive(Debug, Clone)]
pub struct StaticOptions {
    /// The document root as configured (for messages).
    pub root_path: PathBuf,
    /// The document root, opened once; every file open is resolved beneath it.
    pub root: Arc<File>,
    pub autoindex: bool,
    /// Listings show dot-files.
    pub autoindex_dotfiles: bool,
    pub symlinks: SymlinkPolicy,
    /// Index file names tried in order for a directory.
    pub index: Vec<String>,
    /// Precompressed siblings tried in this order of preference.
    pub precompressed: Vec<Encoding>,
    /// Extension (lower case, no dot) to media type; overrides the built-in table.
    pub types: HashMap<String, String>,
    /// Charset added to `text/*`, JavaScript and JSON types (e.g. "utf-8").
    pub charset: Option<String>,
    /// Most ranges served in one multipart response; more serves the whole file.
    pub max_ranges: usize,
}

/// Default cap on ranges per request (after coalescing).
pub const DEFAULT_MAX_RANGES: usize = 16;

impl Resolver<'_> {
    pub(crate) fn statics(
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
