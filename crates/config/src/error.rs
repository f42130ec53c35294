use std::fmt;

/// A configuration error a person can act on: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or "<default>" for the built-in configuration).
    pub file: String,
    /// 1-based line, when the error has a place in the file.
    pub line: Option<usize>,
    /// Dotted key path, e.g. `vhost[0].location[1].root`.
    pub key: Option<String>,
    pub message: String,
    /// The other errors found in the same file, in order (each is reported, not only the
    /// first).
    pub also: Vec<ConfigError>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": key `{key}`")?;
        }
        write!(f, ": {}", self.message)?;
        for e in &self.also {
            write!(f, "\n{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// 1-based line number of byte `offset` in `src`.
pub(crate) fn line_of(src: &str, offset: usize) -> usize {
    src.as_bytes()[..offset.min(src.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}
