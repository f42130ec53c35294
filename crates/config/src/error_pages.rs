//! Custom error pages (`error_pages = { 404 = "errors/404.html", "5xx" = "errors/50x.html" }`,
//! nginx `error_page`, Apache `ErrorDocument`): files read at load and served from memory in
//! place of the server's own page for that status.

use std::path::Path;

use crate::error::ConfigError;
use crate::resolve::Resolver;
use bytes::Bytes;
use std::sync::Arc;
use toml::Spanned;

/// Largest error page accepted.
pub const MAX_PAGE: u64 = 1024 * 1024;

/// One page: the statuses it answers and its bytes.
#[derive(Debug, Clone)]
pub struct ErrorPage {
    /// An exact status (404), or a class (4 for "4xx", 5 for "5xx").
    pub status: u16,
    pub content_type: &'static str,
    pub body: Bytes,
    /// The file it came from (for `check-config`).
    pub file: std::path::PathBuf,
}

/// A location's (or the server's) error pages.
#[derive(Debug, Clone, Default)]
pub struct ErrorPages {
    pages: Vec<ErrorPage>,
}

impl ErrorPages {
    /// The page for `status`: an exact entry first, then its class.
    pub fn get(&self, status: u16) -> Option<&ErrorPage> {
        self.pages
            .iter()
            .find(|p| p.status == status)
            .or_else(|| self.pages.iter().find(|p| p.status == status / 100))
    }

    pub fn pages(&self) -> &[ErrorPage] {
        &self.pages
    }

    pub(crate) fn push(&mut self, page: ErrorPage) {
        self.pages.push(page);
    }
}

/// The status a key names: "404" (400..=599) or "4xx"/"5xx".
pub(crate) fn status_of(key: &str) -> Result<u16, String> {
    match key {
        "4xx" => return Ok(4),
        "5xx" => return Ok(5),
        _ => {}
    }
    key.parse::<u16>()
        .ok()
        .filter(|s| (400..=599).contains(s))
        .ok_or_else(|| format!("`{key}` is not an error status (400 to 599, \"4xx\" or \"5xx\")"))
}

/// Read one page; `Err` is the message.
pub(crate) fn load(status: u16, path: &Path) -> Result<ErrorPage, String> {
    let content_type = match path.extension().and_then(|e| e.to_str()) {
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("txt") => "text/plain; charset=utf-8",
        Some("json") => "application/json",
        Some("xml") => "application/xml",
        _ => {
            return Err(format!(
                "{}: an error page is a .html, .htm, .txt, .json or .xml file",
                path.display()
            ))
        }
    };
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    if meta.len() > MAX_PAGE {
        return Err(format!(
            "{}: {} bytes; an error page may have at most {MAX_PAGE}",
            path.display(),
            meta.len()
        ));
    }
    let body = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(ErrorPage {
        status,
        content_type,
        body: Bytes::from(body),
        file: path.to_path_buf(),
    })
}

impl Resolver<'_> {
    /// Error pages from a table (`None`: no table, the server's own pages).
    pub(crate) fn error_pages(
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
}
