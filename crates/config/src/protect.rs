//! A location's Basic authentication (`auth_basic`, `auth_basic_user_file`, as nginx names
//! them): the htpasswd file is read and checked at load, and the challenge header is
//! rendered once.

use std::path::Path;
use std::sync::Arc;

use crate::error::ConfigError;
use crate::raw::RawLocation;
use crate::resolve::Resolver;
use ramjet_auth::Htpasswd;

/// What protects a location.
#[derive(Debug)]
pub struct BasicAuth {
    /// `WWW-Authenticate: Basic realm="...", charset="UTF-8"\r\n`, sent with every 401.
    pub challenge: Vec<u8>,
    pub users: Arc<Htpasswd>,
    /// The file, for `check-config`'s printout.
    pub file: std::path::PathBuf,
    pub realm: String,
}

/// Build from a realm and a loaded file; `Err` is the message about the realm.
pub(crate) fn basic_auth(
    realm: &str,
    file: &Path,
    users: Arc<Htpasswd>,
) -> Result<BasicAuth, String> {
    if realm
        .bytes()
        .any(|b| b < b' ' || b == 0x7f || b == b'"' || b == b'\\')
    {
        return Err("the realm may not hold quotes, backslashes or control characters".into());
    }
    Ok(BasicAuth {
        challenge: format!("WWW-Authenticate: Basic realm=\"{realm}\", charset=\"UTF-8\"\r\n")
            .into_bytes(),
        users,
        file: file.to_path_buf(),
        realm: realm.to_string(),
    })
}

impl Resolver<'_> {
    /// Basic authentication from a location's keys over `[defaults]`' (a realm of "off"
    /// turns it off); `None`: not protected.
    pub(crate) fn auth(
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
}
