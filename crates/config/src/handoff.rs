//! A `handoff` location's backend socket.

use crate::error::ConfigError;
use crate::raw::RawLocation;
use crate::resolve::Resolver;

impl Resolver<'_> {
    /// A location's hand-off socket: an absolute path (the backend may start later, so it
    /// need not exist yet).
    pub(crate) fn handoff(
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
}
