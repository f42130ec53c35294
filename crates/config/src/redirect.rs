//! A `redirect` location's target and status.

use crate::error::ConfigError;
use crate::raw::RawLocation;
use crate::resolve::Resolver;

/// Where a `redirect` location sends its clients.
#[derive(Debug, Clone)]
pub struct RedirectOptions {
    pub target: String,
    pub status: u16,
}

impl Resolver<'_> {
    /// A location's redirect target and status (not inherited: each says where it goes).
    pub(crate) fn redirect(
        &self,
        l: &RawLocation,
        key: &str,
    ) -> Result<RedirectOptions, ConfigError> {
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
}
